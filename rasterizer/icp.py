"""Projective point-to-plane ICP between two depth images, on the host: the wrapper of the
host-only op ``icp_point_to_plane`` (csrc/icp_cpu.cpp; ``_ext.HOST_ONLY``: the depths it aligns
live on the host, so it has no CUDA kernel). The model and its NumPy oracle are the loop stage's
(slam/loop/icp.py ``icp_reference``; tests/test_loop_icp_kernel.py compares the two). One call runs
every iteration without the interpreter lock."""
from __future__ import annotations

import numpy as np
import torch

from . import _ext


def icp_point_to_plane(src: np.ndarray, dst_depth: np.ndarray, K: np.ndarray, T_init: np.ndarray, iters: int,
                       tol: float, quad: float, max_pair: float, converged: float):
    """src: (N, 3) source-camera points, metres; dst_depth: (H, W) metres (0 or NaN = none) with
    intrinsics K (3, 3); T_init: (4, 4) source -> destination camera; at most ``iters`` steps,
    fewer once every component of a step is below ``converged`` (rad, m); pairs count as inliers
    within tol + quad z^2 (m) and are used within max_pair times that.
    Returns (T (4, 4) float64, overlap, inliers, residual variance m^2, median depth m of the pairs
    used, H (6, 6) float64 normal equations or None)."""
    K = np.asarray(K, dtype=np.float64)
    T, stats, H = _ext.ops("cpu").icp_point_to_plane(
        torch.from_numpy(np.ascontiguousarray(src, dtype=np.float64).reshape(-1, 3)),
        torch.from_numpy(np.ascontiguousarray(dst_depth, dtype=np.float32)),
        torch.from_numpy(np.ascontiguousarray(T_init, dtype=np.float64)),
        [K[0, 0], K[1, 1], K[0, 2], K[1, 2], tol, quad, max_pair, converged], int(iters))
    overlap, inliers, var, z_median, has_H = stats.tolist()
    return T.numpy(), overlap, inliers, var, z_median, (H.numpy() if has_H else None)
