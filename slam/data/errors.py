"""Error types of the data layer (all subclasses of ``slam.data.frame.FrameError``).

``FrameError``            bad data that cannot be used: the message names the file and the problem.
``DataNotFoundError``     a folder, index file or bag that must exist does not (also a
                          ``FileNotFoundError``, so ``except FileNotFoundError`` catches it).
``CalibrationError``      intrinsics missing or malformed.
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


class SkipFrame(Exception):
    """Raised inside a loader for a per-frame problem; the source skips that frame with a warning."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
