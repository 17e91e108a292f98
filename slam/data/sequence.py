"""``SequenceSource``: the shared streaming loop of the on-disk datasets (TUM, 7-Scenes, Replica).

A loader builds a list of ``Entry`` (file names, timestamps, pose) from its index files, which is
cheap; ``first``/``last``/``stride`` slice that list, so unselected frames are never read. Images
are read, decoded and preprocessed (colour registration, undistortion, downscale: ``Preprocessor``)
ahead on ``read_threads`` worker threads (``data.read_threads``; the decoders and OpenCV release the
interpreter lock), a few frames ahead of the consumer; every check and rule below runs in the
consumer's thread in frame order, on the images as read, and an error of the preprocessing is
raised there only where the checks let the frame through, so the frames, skips and errors are
those of reading one frame at a time (``read_threads`` 0).

Per-frame policy (warn on logger ``slam.data``, count in ``stats``, continue):
- a missing, empty, truncated or undecodable colour/depth file;
- a depth image with no valid pixel (all 0, 65535 or NaN) - the tracker cannot use it;
- after the first delivered frame: a frame whose size differs from the frames delivered so far,
  whose colour and depth differ in size, or an image of the wrong kind (8-bit or 3-channel depth):
  one odd frame, the intrinsics and units are for the others.
Fatal policy (``FrameError`` naming the file):
- on the first frame: colour and depth of different sizes, images that contradict the
  calibration's stated size, depth of the wrong dtype - the data is not what the loader thinks,
  every frame would be wrong;
- a source that ends without delivering a single frame (everything was skipped), or a selection
  (``first`` past the last frame) that leaves none to read: the latter at open.

``Frame.index`` is the frame's position in the selected (sliced) list: a skipped frame leaves a
gap, so indices stay tied to the files on disk. ``Frame.source_id`` names the colour file.
"""
from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Tuple

import numpy as np

from slam.config import DataConfig
from slam.data.errors import SkipFrame
from slam.data.frame import Frame, FrameError, FrameSource, validate_frame
from slam.data.imageio import read_color, read_depth
from slam.data.preprocess import Preprocessor
from slam.data.registration import ColorRegistration

log = logging.getLogger("slam.data")


@dataclass
class Entry:
    """One frame of an on-disk sequence before reading: files, time (s), optional T_wc pose."""

    timestamp: float
    color: Path
    depth: Path
    pose: Optional[np.ndarray] = None      # (4, 4) T_wc if known
    depth_timestamp: Optional[float] = None  # s, when the depth was taken, if not at ``timestamp``


@dataclass
class Decoded:
    """A frame as a read thread leaves it: the shapes of its colour and depth as read, whether
    any depth is valid, and ``images`` = ``Preprocessor``'s (colour, depth, K) of the delivered
    frame, or ``error``: what the preprocessing raised (None both when it was not tried: the
    consumer's checks reject such a frame)."""

    color_shape: tuple
    depth_shape: tuple
    valid_depth: bool
    images: Optional[tuple] = None
    error: Optional[BaseException] = None


def select(n: int, first: int = 0, last: Optional[int] = None, stride: int = 1) -> range:
    """Indices kept by first/last (exclusive, before stride)/stride out of ``n`` frames."""
    if stride < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    if first < 0:
        raise ValueError(f"first must be >= 0, got {first}")
    stop = n if last is None else min(int(last), n)
    return range(int(first), max(stop, int(first)), int(stride))


def skip_frame(stats, reason: str) -> None:
    """Warn on logger ``slam.data`` and count the skip in ``stats``."""
    log.warning("skipping frame: %s", reason)
    stats.skip(reason)


# Frames decoded ahead per read thread: enough to keep each thread busy while the consumer takes
# the last one; not a tuning value (memory: a decoded 640x480 frame is 2.1 MB).
AHEAD_PER_THREAD = 2


class SequenceSource(FrameSource):
    """Streams the selected ``Entry`` list of an on-disk dataset (see module docstring).
    ``read_threads``: threads that read and decode images ahead (0: in the consumer's thread)."""

    name = "sequence"

    def __init__(self, entries: List[Entry], K: np.ndarray, distortion: Optional[np.ndarray],
                 depth_units: float, *, first: int = 0, last: Optional[int] = None, stride: int = 1,
                 downscale: int = 1, expected_size: Optional[Tuple[int, int]] = None,
                 where: str = "", color_camera: Optional[tuple] = None,
                 read_threads: int = DataConfig.read_threads) -> None:
        super().__init__()
        self.read_threads = read_threads
        self.where = where
        self.all_entries = entries
        self.entries = [entries[i] for i in select(len(entries), first, last, stride)]
        if entries and not self.entries:
            raise FrameError(f"{where}: data.first={first} selects no frame: the sequence has {len(entries)} "
                             f"frames (0..{len(entries) - 1})")
        self.depth_units = float(depth_units)
        self.expected_size = expected_size  # (width, height) the calibration was made for
        self.size: Optional[Tuple[int, int]] = None  # (width, height) of the frames delivered so far
        # color_camera = (data.color_intrinsics, data.color_translation) for unregistered sensors
        registration = ColorRegistration.from_config(K, *color_camera) if color_camera else None
        self.pre = Preprocessor(K, distortion, downscale, registration)
        self.K = self.pre.K_out

    def __len__(self) -> int:
        return len(self.entries)

    # ------------------------------------------------------------------ per-frame loading
    def _decode(self, entry: Entry) -> Decoded:
        """``entry``'s files read (``SkipFrame`` or ``FrameError`` as ``read_color`` / ``read_depth``
        raise them), non-finite depth set to 0, and, where colour and depth agree in size and some
        depth is valid, preprocessed (``Decoded``). Reads no state of the source that changes:
        runs on the read threads."""
        color, depth = read_color(entry.color), read_depth(entry.depth, self.depth_units)
        bad = ~np.isfinite(depth)
        if bad.any():
            depth[bad] = 0.0
        out = Decoded(color.shape, depth.shape, bool(np.any(depth > 0)))
        if out.color_shape[:2] == out.depth_shape and out.valid_depth:
            try:
                out.images = self.pre(color, depth)
            except Exception as exc:   # raised by the consumer, and only if the checks pass
                out.error = exc
        return out

    def _images(self, entry: Entry, decoded: Callable[[], Decoded]) -> Decoded:
        """``entry``'s ``Decoded`` (``decoded()``: ``_decode(entry)``'s result, its errors raised
        here); ``FrameError`` naming the file when an image is of the wrong kind or its size
        disagrees with the other image, the frames delivered so far or the calibration."""
        d = decoded()
        (ch, cw), (h, w) = d.color_shape[:2], d.depth_shape
        if (ch, cw) != (h, w):
            raise FrameError(
                f"{entry.color} is {cw}x{ch} but {entry.depth} is {w}x{h}: colour and depth must have the same size"
            )
        size = (w, h)
        if self.size is not None and size != self.size:
            raise FrameError(f"{entry.depth}: image is {size[0]}x{size[1]} but the sequence's frames are "
                             f"{self.size[0]}x{self.size[1]}")
        if self.expected_size is not None and size != tuple(self.expected_size):
            raise FrameError(
                f"{entry.depth}: image is {size[0]}x{size[1]} but the calibration is "
                f"for {self.expected_size[0]}x{self.expected_size[1]}"
            )
        return d

    def _load(self, index: int, entry: Entry, decoded: Callable[[], Decoded]) -> Frame:
        # Images of the wrong kind or size: fatal on the first frame (the data is not what the loader
        # thinks), a counted skip once frames of the sequence's kind and size were delivered (one odd frame).
        try:
            d = self._images(entry, decoded)
        except FrameError as exc:
            if self.size is None:
                raise
            raise SkipFrame(str(exc)) from None
        size = (d.depth_shape[1], d.depth_shape[0])
        if not d.valid_depth:
            raise SkipFrame(f"{entry.depth}: depth has no valid pixel (all 0/65535/NaN)")
        if d.error is not None:
            raise d.error
        color, depth, K = d.images
        frame = Frame(index=index, timestamp=float(entry.timestamp), color=color, depth=depth, K=K,
                      distortion=None, gt_pose=entry.pose, source_id=str(entry.color),
                      depth_timestamp=entry.depth_timestamp)
        frame = validate_frame(frame)
        self.size = size
        return frame

    def _decoded(self) -> Iterator[Tuple[int, Entry, Callable[[], Decoded]]]:
        """(index, entry, a call that returns its ``_decode``) in order: decoded up to
        ``AHEAD_PER_THREAD * read_threads`` frames ahead on the read threads (the call waits for
        the result), or at the call with no read threads. The threads end (queued decodes
        cancelled) when the consumer stops."""
        if self.read_threads <= 0:
            for index, entry in enumerate(self.entries):
                yield index, entry, partial(self._decode, entry)
            return
        pool = ThreadPoolExecutor(self.read_threads, thread_name_prefix="frame-reader")
        try:
            pending: deque = deque()
            for index, entry in enumerate(self.entries):
                pending.append((index, entry, pool.submit(self._decode, entry).result))
                if len(pending) >= AHEAD_PER_THREAD * self.read_threads:
                    yield pending.popleft()
            while pending:
                yield pending.popleft()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _frames(self) -> Iterator[Frame]:
        delivered = 0
        for index, entry, decoded in self._decoded():
            try:
                frame = self._load(index, entry, decoded)
            except SkipFrame as skip:
                skip_frame(self.stats, skip.reason)
                continue
            delivered += 1
            yield frame
        if delivered == 0 and self.entries:
            reasons = "; ".join(self.stats.skip_reasons[:3])
            raise FrameError(f"{self.where}: no usable frame among {len(self.entries)} selected ({reasons})")

    # ------------------------------------------------------------------ ground truth
    def ground_truth(self) -> Tuple[np.ndarray, np.ndarray]:
        """Ground truth of the whole sequence (ignores first/last/stride).

        Returns (timestamps (N,) float64 s, poses (N, 4, 4) float64 T_wc) of the frames that have
        a pose; reads no images.
        """
        stamps, poses = [], []
        for entry in self.all_entries:
            pose = entry.pose
            if pose is not None:
                stamps.append(entry.timestamp)
                poses.append(pose)
        return np.asarray(stamps, dtype=np.float64), np.asarray(poses, dtype=np.float64).reshape(-1, 4, 4)
