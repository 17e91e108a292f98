"""What the players publish, middleware-free: frames of a TUM-layout folder as ROS image data.

Both players (``ros1_player``, ``ros2_player``) and the tests' bag writers use ``ros_frames`` so
that a live stream and a bag of the same frames carry the same bytes: colour rgb8, depth 16UC1 in
millimetres (rounded, clipped to 0..65535), header stamps in whole microseconds (the TUM files'
resolution) as integer nanoseconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from slam.data.tum import TumSource
from slam.resources import resolve_data_path


@dataclass(frozen=True)
class RosFrame:
    """One frame as image-message payloads: ``color`` (H, W, 3) uint8 RGB, ``depth_mm`` (H, W)
    little-endian uint16 millimetres (0 = invalid), ``K`` (3, 3) pixels, ``stamp_ns`` integer ns."""

    stamp_ns: int
    color: np.ndarray
    depth_mm: np.ndarray
    K: np.ndarray

    @property
    def width(self) -> int:
        return int(self.color.shape[1])

    @property
    def height(self) -> int:
        return int(self.color.shape[0])


def depth_to_mm(depth_m: np.ndarray) -> np.ndarray:
    """(H, W) float metres -> (H, W) '<u2' millimetres, rounded and clipped (0 stays invalid)."""
    return np.clip(np.rint(np.asarray(depth_m, dtype=np.float64) * 1000.0), 0, 65535).astype("<u2")


def ros_frames(path: str, first: int = 0, last: Optional[int] = None) -> Iterator[RosFrame]:
    """Frames [first, last) of a TUM folder ('sample' = the bundled sample) as ``RosFrame``s."""
    for f in TumSource(resolve_data_path(path), first=first, last=last):
        ns = int(round(f.timestamp * 1e6)) * 1000
        yield RosFrame(ns, np.ascontiguousarray(f.color), depth_to_mm(f.depth), np.asarray(f.K, dtype=np.float64))


def projection(K: np.ndarray) -> np.ndarray:
    """CameraInfo's P (3, 4) of an undistorted, unrectified camera: [K | 0]."""
    return np.hstack([np.asarray(K, dtype=np.float64), np.zeros((3, 1))])
