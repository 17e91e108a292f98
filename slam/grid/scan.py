"""A keyframe's depth as the grid keeps it: an even sub-grid of its pixels back-projected into
the camera frame, with a surface normal each (for the floor estimate). Computed once per keyframe
on the grid thread; the grid re-projects it whenever the keyframe's pose moves, so the keyframe
store may drop the keyframe meanwhile."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rasterizer.grid import grid_scan

# Neighbours whose depths differ by more than this share of the depth span a depth edge: no normal.
EDGE_SHARE = 0.05
NORMAL_EVERY = 2          # a normal is kept for every 2nd point (the floor estimate)


@dataclass(frozen=True)
class Scan:
    """points_c: (N, 3) float16, metres, camera frame (OpenCV axes), valid depth only;
    normals_c: (M, 3) float16, unit, camera frame, facing the camera, of the points
    ``points_c[normal_rows]`` (every ``NORMAL_EVERY``-th point: the floor estimate needs fewer),
    (0, 0, 0) where there is none (a depth edge or a missing neighbour)."""

    kf_id: int
    points_c: np.ndarray
    normals_c: np.ndarray

    @property
    def normal_rows(self) -> slice:
        return slice(None, None, NORMAL_EVERY)

    def nbytes(self) -> int:
        return self.points_c.nbytes + self.normals_c.nbytes


def sub_grid_step(width: int, height: int, points: int) -> int:
    """Pixel step of an even sub-grid of about ``points`` pixels (at least 1)."""
    return max(1, int(round(math.sqrt(width * height / max(points, 1)))))


def make_scan(kf_id: int, depth: np.ndarray, K: np.ndarray, points: int, min_range: float) -> Scan:
    """depth: (H, W) metres (float16 or float32; 0 = invalid); K: (3, 3) intrinsics of that size;
    points: about how many pixels to take. Pixels nearer than ``min_range`` (m) are dropped. The
    host kernel ``rasterizer.grid.grid_scan`` (one call without the interpreter lock);
    ``make_scan_reference`` is its NumPy model."""
    h, w = depth.shape
    P, N = grid_scan(depth, K, sub_grid_step(w, h, points), min_range, EDGE_SHARE, NORMAL_EVERY)
    return Scan(kf_id, P.astype(np.float16), N.astype(np.float16))


def make_scan_reference(kf_id: int, depth: np.ndarray, K: np.ndarray, points: int, min_range: float) -> Scan:
    """``make_scan`` in NumPy: the model the host kernel follows and the tests' oracle."""
    h, w = depth.shape
    s = sub_grid_step(w, h, points)
    vs = np.arange(s // 2, h, s)
    us = np.arange(s // 2, w, s)
    z = np.asarray(depth, dtype=np.float32)[np.ix_(vs, us)]
    fx, fy, cx, cy = float(K[0, 0]), float(K[1, 1]), float(K[0, 2]), float(K[1, 2])
    x = (us[None, :] - cx) / fx * z
    y = (vs[:, None] - cy) / fy * z
    P = np.stack([x, y, z], axis=-1)                          # (h', w', 3)
    valid = np.isfinite(z) & (z > 0)
    N = np.zeros_like(P)
    # Normal from the right and lower neighbours of the sub-grid (one-sided differences).
    dx, dy = P[:-1, 1:] - P[:-1, :-1], P[1:, :-1] - P[:-1, :-1]
    n = np.cross(dy, dx)
    z0 = z[:-1, :-1]
    ok = valid[:-1, :-1] & valid[:-1, 1:] & valid[1:, :-1]
    ok &= (np.abs(z[:-1, 1:] - z0) < EDGE_SHARE * z0) & (np.abs(z[1:, :-1] - z0) < EDGE_SHARE * z0)
    norm = np.linalg.norm(n, axis=-1)
    ok &= norm > 0
    n = np.where(ok[..., None], n / np.where(norm > 0, norm, 1.0)[..., None], 0.0)
    facing = np.sum(n * P[:-1, :-1], axis=-1) > 0            # make every normal face the camera
    n[facing] *= -1.0
    N[:-1, :-1] = n
    keep = valid & (np.linalg.norm(P, axis=-1) >= min_range)
    return Scan(kf_id, P[keep].astype(np.float16), N[keep][::NORMAL_EVERY].astype(np.float16))
