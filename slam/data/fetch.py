"""Download, verify and extract registry sequences into the data cache (pooch + requests).

Cache: ``$SPHERE_SLAM_DATA``, by default the user's cache directory (``pooch.os_cache``:
``~/.cache/sphere-slam`` on Linux). An entry lives in ``<cache>/<entry.name>/``: the archive is
downloaded there (``<archive>.part`` while incomplete), extracted into a hidden temporary folder,
checked (``slam.data.registry`` layout checks) and only then renamed to ``<entry.root>``, so a
folder under its real name is always complete. The archive is deleted after a good extraction.

Mirror: ``$SPHERE_SLAM_MIRROR`` (a base URL) replaces every official location by
``<mirror>/<dataset>/<archive>`` (``<mirror>/tum/rgbd_dataset_freiburg1_desk.tgz``): an offline site
serves a folder of archives with any web server (``python -m http.server``).

Verification: the entry's published SHA-256 when there is one; otherwise the layout check, and the
SHA-256 of the first good download is recorded in ``<cache>/hashes.json``: a later download of the
same entry must match it. An archive placed by hand at ``<cache>/<entry.name>/<archive>`` is used as
it is (extracted and checked, no download).

Errors (no traceback for the user): ``DownloadError`` (network) starts with "cannot download",
names the URL, the target folder and the commands to fetch the archive by hand, and leaves nothing
on disk that was not there before (no empty folders; the ``.part`` file of a transfer broken midway
stays, to be resumed); ``ArchiveError`` names the archive and the problem and leaves nothing
half-extracted. Nothing is printed before the server has answered: then one line says what is
downloaded where, and the progress bar follows.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import shutil
import sys
import tarfile
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional

from slam.data.errors import ArchiveError, DataNotFoundError, DownloadError
from slam.data.registry import LAYOUT_CHECKS, RegistryEntry

log = logging.getLogger("slam.data")

ENV_CACHE = "SPHERE_SLAM_DATA"
ENV_MIRROR = "SPHERE_SLAM_MIRROR"
HASHES_FILE = "hashes.json"
CHUNK = 1 << 16           # bytes per read while downloading (an interruption loses < 1 chunk)
TIMEOUT_S = 30.0          # connect / read timeout of one HTTP request
RESUME_ATTEMPTS = 3       # an interrupted transfer is resumed this many times within one fetch


def data_root() -> Path:
    """The data cache: ``$SPHERE_SLAM_DATA`` or the user's cache directory."""
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env).expanduser()
    # the download stack (pooch, requests, tqdm) is imported where used: a run never loads it
    import pooch

    return Path(pooch.os_cache("sphere-slam"))


def source_url(entry: RegistryEntry, mirror: Optional[str] = None) -> str:
    """The archive's URL: ``<mirror>/<dataset>/<archive>`` if a mirror is set, else the official one."""
    mirror = os.environ.get(ENV_MIRROR) if mirror is None else mirror
    if mirror:
        return f"{mirror.rstrip('/')}/{entry.name.split('/')[0]}/{entry.archive}"
    return entry.url


def entry_dir(entry: RegistryEntry, root: Optional[Path] = None) -> Path:
    """``<cache>/<entry.name>``: where the archive is downloaded and extracted."""
    return (data_root() if root is None else Path(root)) / entry.name


def manual_commands(entry: RegistryEntry, url: str, target: Path) -> str:
    """Shell commands that fetch ``entry`` by hand (resumable) and extract it the checked way."""
    return (f"  mkdir -p {target}\n"
            f"  curl -L -C - -o {target / entry.archive} {url}\n"
            f"  slam_data download {entry.name}     # checks and extracts the archive found there")


class ResumingDownloader:
    """A pooch downloader that resumes a partial download with an HTTP Range request.

    pooch's ``HTTPDownloader`` streams into a fresh temporary file that pooch deletes when the
    transfer fails, so a multi-GB download would restart from zero. This one keeps the bytes in
    ``part`` (which survives failures and restarts of the program), asks the server for the rest
    (``Range: bytes=<size>-``; a server that answers 200 instead of 206 gets a fresh start), and
    hands the complete file to pooch, which checks the hash and moves it into place.
    A refused or unreachable server raises ``DownloadError`` at once; an interrupted transfer is
    resumed up to ``attempts`` times (the bytes of the chunk being read when it broke are fetched
    again).
    """

    def __init__(self, part: Path, progress: bool = True, timeout: float = TIMEOUT_S,
                 attempts: int = RESUME_ATTEMPTS) -> None:
        self.part = Path(part)
        self.progress = progress
        self.timeout = timeout
        self.attempts = attempts

    def __call__(self, url: str, output_file: str, pooch_obj=None, check_only: bool = False):
        import requests
        for attempt in range(self.attempts + 1):
            try:
                if self._transfer(url):
                    break
            except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ReadTimeout,
                    requests.exceptions.ConnectionError) as exc:
                midway = not isinstance(exc, requests.exceptions.ConnectionError) or self._has_bytes()
                if attempt == self.attempts or not midway:   # refused / unreachable: fail at once
                    raise DownloadError(f"{type(exc).__name__}: {exc}") from None
                log.warning("%s: transfer interrupted at %d bytes (%s); resuming", url,
                            self.part.stat().st_size, type(exc).__name__)
            except requests.exceptions.RequestException as exc:   # bad URL, too many redirects, ...
                raise DownloadError(f"{type(exc).__name__}: {exc}") from None
        else:
            raise DownloadError(f"transfer did not complete after {self.attempts + 1} attempts")
        os.replace(self.part, output_file)

    def _has_bytes(self) -> bool:
        return self.part.is_file() and self.part.stat().st_size > 0

    def _transfer(self, url: str) -> bool:
        """One request for the missing bytes; True when ``part`` is complete."""
        import requests
        from tqdm import tqdm
        have = self.part.stat().st_size if self.part.is_file() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        with requests.get(url, headers=headers, stream=True, timeout=self.timeout) as resp:
            if resp.status_code == 416:          # nothing left to send: the part is complete
                return True
            if resp.status_code >= 400:
                raise DownloadError(f"HTTP {resp.status_code} {resp.reason}")
            if have and resp.status_code != 206:
                have = 0                          # the server ignored the range: start again
            length = resp.headers.get("Content-Length")
            total = have + int(length) if length is not None else None
            if self.progress:
                size = f" ({total / 1e6:.0f} MB)" if total is not None else ""
                print(f"{'resuming' if have else 'downloading'} {url}{size} into {self.part.parent}",
                      file=sys.stderr, flush=True)
            with open(self.part, "ab" if have else "wb") as fh, \
                    tqdm(total=total, initial=have, unit="B", unit_scale=True, file=sys.stderr,
                         desc=self.part.name[:-5], disable=None if self.progress else True) as bar:
                for chunk in resp.iter_content(CHUNK):
                    fh.write(chunk)
                    bar.update(len(chunk))
        if total is not None and self.part.stat().st_size != total:
            raise requests.exceptions.ChunkedEncodingError(
                f"got {self.part.stat().st_size} of {total} bytes")
        return True


# --------------------------------------------------------------------------- recorded hashes
def _hashes(root: Path) -> dict:
    path = root / HASHES_FILE
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        log.warning("%s: unreadable, recorded hashes ignored", path)
        return {}


def recorded_hash(entry: RegistryEntry, root: Path) -> Optional[str]:
    """SHA-256 recorded at the first good download of ``entry``, if any."""
    return _hashes(root).get(entry.name, {}).get("sha256")


def _record_hash(entry: RegistryEntry, root: Path, sha256: str, url: str) -> None:
    data = _hashes(root)
    data[entry.name] = {"sha256": sha256, "archive": entry.archive, "url": url,
                        "recorded": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    tmp = root / f".{HASHES_FILE}.tmp"
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, root / HASHES_FILE)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------- extraction
def _unpack(archive: Path, dest: Path) -> None:
    """Extract a .tgz/.tar/.zip into ``dest``; members may not leave it."""
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                bad = zf.testzip()
                if bad is not None:
                    raise ArchiveError(f"{archive}: member {bad} is corrupt (CRC mismatch)")
                zf.extractall(dest)              # zipfile drops absolute paths and '..'
        elif tarfile.is_tarfile(archive):
            with tarfile.open(archive) as tf:
                if hasattr(tarfile, "data_filter"):
                    tf.extractall(dest, filter="data")
                else:  # Python without extraction filters: refuse members that leave dest
                    for m in tf.getmembers():
                        if m.name.startswith("/") or ".." in Path(m.name).parts:
                            raise ArchiveError(f"{archive}: member {m.name} points outside the archive folder")
                    tf.extractall(dest)
        else:
            raise ArchiveError(f"{archive}: not a tar or zip archive (corrupt or an error page?)")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
        raise ArchiveError(f"{archive}: cannot extract ({type(exc).__name__}: {exc}); corrupt or truncated") from None


def extract(entry: RegistryEntry, archive: Path, target: Path) -> Path:
    """Extract ``archive`` into ``target/<entry.root>`` through a temporary folder, checked; returns it.

    On any problem the temporary folder is removed and ``ArchiveError`` raised: nothing is left
    under ``entry.root``.
    """
    final = target / entry.root
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=target))
    try:
        _unpack(archive, tmp)
        root = tmp / entry.root
        if not root.is_dir():
            found = ", ".join(sorted(p.name for p in tmp.iterdir())[:5]) or "nothing"
            raise ArchiveError(f"{archive}: expected a top-level folder '{entry.root}', found {found}")
        if entry.nested:
            for inner in sorted(root.glob(entry.nested)):
                _unpack(inner, inner.parent)
                inner.unlink()
        try:
            LAYOUT_CHECKS[entry.dataset](root)
        except ArchiveError as exc:   # name the file inside the archive, not the temporary folder
            raise ArchiveError(f"{archive}: {str(exc).replace(str(root), entry.root)}") from None
        os.replace(root, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


# --------------------------------------------------------------------------- nothing left behind
def _missing_dirs(target: Path) -> List[Path]:
    """``target`` and those of its parents that do not exist yet, deepest first."""
    missing = []
    for d in (target, *target.parents):
        if d.exists():
            break
        missing.append(d)
    return missing


def _remove_empty(dirs: List[Path]) -> None:
    """Remove the folders of ``dirs`` (deepest first) that are still empty."""
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            return                                # not empty (a .part to resume) or gone


@contextmanager
def _quiet_pooch() -> Iterator[None]:
    """pooch logs "Downloading file ..." before it tries; the downloader says it once the server answers."""
    import pooch
    logger = pooch.get_logger()
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


# --------------------------------------------------------------------------- the entry point
def fetch(entry: RegistryEntry, *, root: Optional[Path] = None, mirror: Optional[str] = None,
          progress: bool = True, download: bool = True, keep_archive: bool = False) -> Path:
    """Make ``entry`` present in the cache and return ``<cache>/<entry.name>/<entry.root>``.

    Already present: returned at once (no network). Otherwise the archive (downloaded unless it
    was placed there by hand; resumed if a ``.part`` exists) is verified and extracted.
    ``download=False`` raises ``DownloadError`` with the manual commands instead of downloading.
    """
    root = data_root() if root is None else Path(root)
    target = entry_dir(entry, root)
    final = target / entry.root
    if final.is_dir():
        return final
    url = source_url(entry, mirror)
    archive = target / entry.archive
    if not download and not archive.is_file():
        raise DownloadError(f"{entry.name} is not in the data cache and data.download is false\n"
                            f"  URL:    {url}\n  target: {target}\nTo fetch it by hand:\n"
                            f"{manual_commands(entry, url, target)}")
    created = _missing_dirs(target)
    target.mkdir(parents=True, exist_ok=True)
    known = entry.sha256 or recorded_hash(entry, root)
    import pooch
    getter = pooch.create(path=target, base_url=url.rsplit("/", 1)[0] + "/",
                          registry={entry.archive: f"sha256:{known}" if known else None},
                          urls={entry.archive: url})
    try:
        with _quiet_pooch():
            getter.fetch(entry.archive, downloader=ResumingDownloader(target / f"{entry.archive}.part", progress))
    except DownloadError as exc:
        _remove_empty(created)
        raise DownloadError(
            f"cannot download {entry.name}: {exc}\n  URL:    {url}\n  target: {target}\n"
            f"Without network, fetch the archive on another machine and copy it there, or by hand:\n"
            f"{manual_commands(entry, url, target)}\n"
            f"A mirror: set {ENV_MIRROR} to a base URL that serves <base>/{entry.name.split('/')[0]}/{entry.archive}"
        ) from None
    except ValueError as exc:   # pooch: hash mismatch (the downloaded file is already removed)
        _remove_empty(created)
        source = "published" if entry.sha256 else f"recorded at the first download ({root / HASHES_FILE})"
        raise ArchiveError(f"{url}: the archive does not match the SHA-256 {source}: {exc}") from None
    sha = _sha256(archive)
    try:
        extract(entry, archive, target)
    except ArchiveError as exc:
        archive.unlink(missing_ok=True)
        raise ArchiveError(f"{exc}\n(the archive was removed; nothing was left under {final}; "
                           f"run again to download it again)") from None
    if not known:
        _record_hash(entry, root, sha, url)
        log.warning("%s: no published checksum; recorded the SHA-256 of this download (%s) in %s",
                    entry.name, sha, root / HASHES_FILE)
    if not keep_archive:
        archive.unlink(missing_ok=True)
    return final


def sequence_folder(entry: RegistryEntry, sequence: str, **kw) -> Path:
    """``fetch(entry)`` and return the sequence folder below its root; ``DataNotFoundError`` if absent."""
    base = fetch(entry, **kw)
    folder = base / sequence if sequence else base
    if not folder.is_dir():
        found = ", ".join(sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))[:20])
        raise DataNotFoundError(f"{folder}: no sequence '{sequence}' in {entry.name} (found: {found})")
    return folder
