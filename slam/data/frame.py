"""The one frame contract every source (dataset loader, bag, ROS topic, camera) produces.

A ``Frame`` is plain numpy so that loaders stay free of torch and device concerns; the SLAM
system uploads it to its device once, at the start of the tracking step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional

import numpy as np


class FrameError(ValueError):
    """Bad input data: the message names the file (or message) and the problem."""


@dataclass(frozen=True)
class Frame:
    """One RGB-D observation.

    index:      int, position in the source stream after stride/first/last (0, 1, 2, ...)
    timestamp:  float, seconds
    color:      (H, W, 3) uint8, RGB
    depth:      (H, W) float32, metres; 0 = invalid (never NaN/inf after validation)
    K:          (3, 3) float64 pinhole intrinsics of the (possibly downscaled) images
    distortion: optional (k,) float64 OpenCV distortion coefficients still present in the
                images (None when the images are undistorted)
    gt_pose:    optional (4, 4) float64 ground-truth camera-to-world pose T_wc
    source_id:  free text naming where the frame came from (file name, bag stamp)
    depth_timestamp: optional float, seconds: when the depth image was taken, where the source
                knows it apart from the colour's (TUM's depth.txt; None: at ``timestamp``)
    """

    index: int
    timestamp: float
    color: np.ndarray
    depth: np.ndarray
    K: np.ndarray
    distortion: Optional[np.ndarray] = None
    gt_pose: Optional[np.ndarray] = None
    source_id: str = ""
    depth_timestamp: Optional[float] = None

    @property
    def depth_offset_s(self) -> float:
        """Seconds from the colour to the depth image (0.0 when the source gives one time)."""
        return 0.0 if self.depth_timestamp is None else float(self.depth_timestamp) - float(self.timestamp)

    @property
    def height(self) -> int:
        return int(self.depth.shape[0])

    @property
    def width(self) -> int:
        return int(self.depth.shape[1])


def validate_frame(frame: Frame) -> Frame:
    """Check a frame against the contract; raise ``FrameError`` naming ``frame.source_id``.

    Non-finite depth values are replaced by 0 (invalid); everything else that is wrong raises.
    Returns the (possibly cleaned) frame.
    """
    where = frame.source_id or f"frame {frame.index}"
    color, depth, K = frame.color, frame.depth, frame.K
    if not isinstance(color, np.ndarray) or color.ndim != 3 or color.shape[2] != 3:
        raise FrameError(f"{where}: colour must be (H, W, 3), got {getattr(color, 'shape', type(color))}")
    if color.dtype != np.uint8:
        raise FrameError(f"{where}: colour must be uint8, got {color.dtype}")
    if not isinstance(depth, np.ndarray) or depth.ndim != 2:
        raise FrameError(f"{where}: depth must be (H, W), got {getattr(depth, 'shape', type(depth))}")
    if depth.dtype != np.float32:
        raise FrameError(f"{where}: depth must be float32 metres, got {depth.dtype}")
    if color.shape[:2] != depth.shape:
        raise FrameError(
            f"{where}: colour {color.shape[1]}x{color.shape[0]} and depth "
            f"{depth.shape[1]}x{depth.shape[0]} differ in size"
        )
    K = np.asarray(K, dtype=np.float64)
    if K.shape != (3, 3) or not np.all(np.isfinite(K)) or K[0, 0] <= 0 or K[1, 1] <= 0:
        raise FrameError(f"{where}: intrinsics must be a finite 3x3 matrix with fx, fy > 0, got {K.tolist()}")
    if frame.gt_pose is not None:
        pose = np.asarray(frame.gt_pose)
        if pose.shape != (4, 4) or not np.all(np.isfinite(pose)):
            raise FrameError(f"{where}: ground-truth pose must be a finite 4x4 matrix")
    if frame.depth_timestamp is not None and not np.isfinite(frame.depth_timestamp):
        raise FrameError(f"{where}: depth timestamp must be finite, got {frame.depth_timestamp}")
    bad = ~np.isfinite(depth) | (depth < 0)
    if bad.any():
        depth = np.where(bad, np.float32(0), depth).astype(np.float32)
        object.__setattr__(frame, "depth", depth)
    object.__setattr__(frame, "K", K)
    return frame


@dataclass
class SourceStats:
    """Counts a source keeps while streaming, reported in the run summary."""

    delivered: int = 0
    skipped: int = 0
    dropped: int = 0    # good frames a live source dropped to keep up (SLAM slower than the camera)
    skip_reasons: list = field(default_factory=list)

    def skip(self, reason: str, max_kept: int = 50) -> None:
        self.skipped += 1
        if len(self.skip_reasons) < max_kept:
            self.skip_reasons.append(reason)


class FrameSource:
    """Base class of every frame source: an iterable of ``Frame`` that streams lazily.

    Subclasses implement ``_frames()``; this class applies nothing else, so stride/first/last
    and downscale are handled by each loader where it is cheapest (skip reading the files).
    ``stats`` counts delivered and skipped frames (a corrupt frame in a long sequence is skipped
    with a warning, not fatal).
    """

    name: str = "source"

    def __init__(self) -> None:
        self.stats = SourceStats()

    def __iter__(self) -> Iterator[Frame]:
        for frame in self._frames():
            self.stats.delivered += 1
            yield frame

    def _frames(self) -> Iterator[Frame]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __len__(self) -> int:
        """Number of frames the source will try to deliver (before skips); may be an estimate."""
        raise TypeError(f"{type(self).__name__} has no known length")

    def close(self) -> None:
        """Release files/handles; safe to call twice."""
