"""Reading colour and depth image files into the frame contract's arrays.

Policy (see the loaders' docstrings): a *missing* or *undecodable* file (including a truncated
JPEG/PNG, and a JPEG whose data libjpeg reports corrupt while decoding it) is a per-frame problem
and raises ``SkipFrame`` (the source warns and skips); a file that decodes but has the wrong
*kind* of content (an 8-bit depth PNG, a float image where uint16 millimetres are expected) means
the dataset is not what the loader thinks, and raises ``FrameError`` naming the file: silently
rescaling it would deliver wrong depth. (The folder loaders make that fatal on a sequence's first
frame and a counted skip after it: ``slam.data.sequence``.)
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path

import cv2
import numpy as np

from slam.data.errors import SkipFrame
from slam.data.frame import FrameError

_PNG_END = b"IEND\xaeB`\x82"


def _read_bytes(path: Path) -> np.ndarray:
    try:
        data = np.fromfile(str(path), dtype=np.uint8)
    except FileNotFoundError:
        raise SkipFrame(f"{path}: file is missing") from None
    except OSError as exc:
        raise SkipFrame(f"{path}: cannot read ({exc.strerror or exc})") from None
    if data.size == 0:
        raise SkipFrame(f"{path}: file is empty")
    return data


def _check_complete(path: Path, data: np.ndarray) -> None:
    """Detect truncated JPEG/PNG files, which OpenCV would otherwise decode partially."""
    head = data[:8].tobytes()
    tail = data[-16:].tobytes()
    if head.startswith(b"\xff\xd8"):
        if b"\xff\xd9" not in tail:
            raise SkipFrame(f"{path}: truncated JPEG (no end-of-image marker)")
    elif head.startswith(b"\x89PNG"):
        if _PNG_END not in tail:
            raise SkipFrame(f"{path}: truncated PNG (no IEND chunk)")


# libjpeg's warnings that mean the entropy-coded data is damaged: OpenCV's decoder prints them on
# the process's stderr and returns the image anyway, partly grey or garbled.
_JPEG_CORRUPT = ("Corrupt JPEG data", "Premature end of JPEG file")
_stderr_lock = threading.Lock()
_stderr_sink = None


def _imdecode_watching_stderr(data: np.ndarray, flags: int) -> tuple:
    """``cv2.imdecode`` with the process's stderr (fd 2) sent to a scratch file while it runs ->
    (image or None, libjpeg's corruption warnings: list of str). Anything else written there
    meanwhile (another thread's log line) is written back to stderr, in order. Without an fd 2
    (closed) the image is decoded unwatched."""
    global _stderr_sink
    with _stderr_lock:
        try:
            if _stderr_sink is None:
                _stderr_sink = tempfile.TemporaryFile()
            _stderr_sink.seek(0)
            _stderr_sink.truncate()
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError):
            return cv2.imdecode(data, flags), []
        try:
            os.dup2(_stderr_sink.fileno(), 2)
            img = cv2.imdecode(data, flags)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        _stderr_sink.seek(0)
        text = _stderr_sink.read()
    corrupt, other = [], []
    for line in text.decode(errors="replace").splitlines(keepends=True):
        (corrupt if line.startswith(_JPEG_CORRUPT) else other).append(line)
    if other:
        os.write(2, "".join(other).encode())
    return img, [line.strip() for line in corrupt]


def _decode(path: Path, flags: int) -> np.ndarray:
    data = _read_bytes(path)
    _check_complete(path, data)
    try:
        if data[:2].tobytes() == b"\xff\xd8":
            img, corrupt = _imdecode_watching_stderr(data, flags)
            if corrupt:
                raise SkipFrame(f"{path}: corrupt JPEG ({corrupt[0]})")
        else:
            img = cv2.imdecode(data, flags)
    except cv2.error as exc:
        raise SkipFrame(f"{path}: cannot decode image ({str(exc).strip().splitlines()[-1]})") from None
    if img is None:
        raise SkipFrame(f"{path}: not a readable image")
    return img


def read_color(path: str | Path) -> np.ndarray:
    """Read a colour image (PNG/JPEG, 8-bit; grey images are expanded) -> (H, W, 3) uint8 RGB."""
    path = Path(path)
    img = _decode(path, cv2.IMREAD_UNCHANGED)
    if img.dtype == np.uint16:
        img = (img >> 8).astype(np.uint8)
    elif img.dtype != np.uint8:
        raise FrameError(f"{path}: colour image must be 8-bit, got {img.dtype}")
    if img.ndim == 2:
        return np.ascontiguousarray(np.repeat(img[:, :, None], 3, axis=2))
    if img.shape[2] == 4:
        return cv2.cvtColor(img, cv2.COLOR_BGRA2RGB)
    if img.shape[2] == 3:
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    raise FrameError(f"{path}: colour image has {img.shape[2]} channels, expected 1, 3 or 4")


def read_depth(path: str | Path, units_per_metre: float) -> np.ndarray:
    """Read a single-channel uint16 depth PNG -> (H, W) float32 metres (0 = invalid).

    units_per_metre: raw value of one metre (TUM 5000, 7-Scenes 1000, Replica 6553.5).
    A 65535 raw value is treated as invalid (the 7-Scenes/Kinect convention for "no reading").
    """
    path = Path(path)
    raw = _decode(path, cv2.IMREAD_UNCHANGED)
    if raw.ndim != 2:
        raise FrameError(
            f"{path}: depth image must be single-channel, got {raw.shape[2]} channels "
            "(is this a colour image?)"
        )
    if raw.dtype != np.uint16:
        raise FrameError(
            f"{path}: depth image must be 16-bit (uint16 raw units), got {raw.dtype}; an 8-bit "
            "depth image has lost its range and cannot be converted to metres"
        )
    depth = raw.astype(np.float32) * np.float32(1.0 / units_per_metre)
    depth[raw == 65535] = 0.0
    return depth
