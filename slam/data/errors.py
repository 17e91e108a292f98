"""Error types of the data layer (all subclasses of ``slam.data.frame.FrameError``).

``FrameError``            bad data that cannot be used: the message names the file and the problem.
``DataNotFoundError``     a folder, index file or bag that must exist does not (also a
                          ``FileNotFoundError``, so ``except FileNotFoundError`` catches it).
``CalibrationError``      intrinsics missing or malformed.
``DownloadError``         a registry sequence is missing and could not be downloaded (a
                          ``DataNotFoundError``): the message names the URL, the target folder
                          and the commands to fetch it by hand.
``ArchiveError``          a downloaded archive is corrupt, fails its checksum or lacks files the
                          layout needs; nothing is left under the sequence's name.
``SkipFrame``             internal signal (not an error the caller sees): one frame cannot be
                          used, the source warns, counts it in ``stats`` and moves on.
"""
from __future__ import annotations

from slam.data.frame import FrameError


class DataNotFoundError(FrameError, FileNotFoundError):
    """A folder, index file or bag that the loader needs does not exist."""

    def __str__(self) -> str:  # FileNotFoundError would otherwise format errno-style tuples
        return str(self.args[0]) if self.args else ""


class CalibrationError(FrameError):
    """Intrinsics/distortion are missing or malformed."""


class DownloadError(DataNotFoundError):
    """A registry sequence is not in the data cache and downloading it failed."""


class ArchiveError(FrameError):
    """A downloaded archive is corrupt, fails its checksum or does not have the expected layout."""


class SkipFrame(Exception):
    """Raised inside a loader for a per-frame problem; the source skips that frame with a warning."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
