"""An occupancy grid's per-keyframe work on the host: the wrappers of the host-only ops
``grid_scan`` (a keyframe's scan) and ``grid_cast`` (its voxels) (csrc/grid_cpu.cpp;
``_ext.HOST_ONLY``: keyframes and scans live on the host). The models and their NumPy oracles are
the grid's (slam/grid/scan.py ``make_scan_reference``, slam/grid/raycast.py ``cast_reference``;
tests/test_grid_kernel.py compares them value for value). One call each without the interpreter
lock."""
from __future__ import annotations

import numpy as np
import torch

from . import _ext


def grid_cast(pts: np.ndarray, cam: np.ndarray, resolution: float, min_height: float, max_height: float,
              max_range: float, layers: int, step_cells: float) -> tuple[np.ndarray, np.ndarray]:
    """pts: (N, 3) surface points and cam: (3,) the camera, floor frame (x, y, height above the
    floor; metres); resolution: m per cell and layer; the band [min_height, max_height] (m) in
    ``layers`` layers; rays cut at max_range (m); free segments sampled every ``step_cells`` cells.
    Returns (occupied (M, 3), free (F, 3)) int32 voxels (cell x, cell y, layer), distinct, ordered
    by (layer, y, x), disjoint."""
    cam = np.asarray(cam, dtype=np.float64)
    occupied, free = _ext.ops("cpu").grid_cast(
        torch.from_numpy(np.ascontiguousarray(pts, dtype=np.float64).reshape(-1, 3)),
        [cam[0], cam[1], cam[2], resolution, min_height, max_height, max_range, float(layers), step_cells])
    return occupied.numpy(), free.numpy()


def grid_scan(depth: np.ndarray, K: np.ndarray, step: int, min_range: float, edge_share: float,
              normal_every: int) -> tuple[np.ndarray, np.ndarray]:
    """depth: (H, W) metres (0 or NaN = none) with intrinsics K (3, 3); every ``step``-th pixel
    from step // 2 in both directions; points nearer than ``min_range`` (m) dropped; a normal where
    the right and lower neighbours have depth within ``edge_share`` of this one's, facing the
    camera. Returns (points (N, 3), the normals (M, 3) of every ``normal_every``-th point, (0, 0, 0)
    where there is none) float64, camera frame, metres."""
    K = np.asarray(K, dtype=np.float64)
    points, normals = _ext.ops("cpu").grid_scan(
        torch.from_numpy(np.ascontiguousarray(depth, dtype=np.float32)),
        [K[0, 0], K[1, 1], K[0, 2], K[1, 2], float(step), min_range, edge_share, float(normal_every)])
    return points.numpy(), normals.numpy()
