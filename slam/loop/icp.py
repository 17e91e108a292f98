"""Projective point-to-plane ICP between two depth images (the loop stage's: every keyframe's
bridge to the one before it, every candidate's verification and measurement).

``icp`` runs the host kernel ``rasterizer.icp.icp_point_to_plane`` (rasterizer/csrc/icp_cpu.cpp):
one call for every iteration, without the interpreter lock. The NumPy formulation
(``icp_reference``, with ``DepthSurface``, ``point_map`` and ``normal_map``) is the model and the
tests' oracle (tests/test_loop_icp_kernel.py): its ~40 numpy calls an iteration each take the
lock, and the loop thread running them for every keyframe held the tracking and mapping threads
up at every one of their own lock hand-overs (H200: a thread queueing 20 tiny CUDA ops and a
synchronise took 0.18 ms alone, 0.33-0.39 ms beside the NumPy ICP). The ``reference`` raster
backend runs the oracle.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from rasterizer.icp import icp_point_to_plane
from slam.geometry import orthonormalize, pivot_increment

# Pairs farther apart than ICP_MAX_PAIR x the depth tolerance are wrong associations and left out.
# Fixed: it bounds the basin, it tunes nothing.
ICP_MAX_PAIR = 3.0
# ICP stops once a step moves the pose by less than this (rad and m, each component): far below
# what any test downstream resolves (depth tolerances of centimetres, loop sigmas of millimetres).
# On exact depth (the sample) 5 of 7 keyframe pairs stop after 3-6 steps; on Kinect depth the
# association's rounding keeps steps at 1e-5-1e-4 and all 10 run.
ICP_CONVERGED = 1e-7


def point_map(depth: np.ndarray, K: np.ndarray, stride: int = 1) -> np.ndarray:
    """depth (H, W) metres -> camera points (H, W, 3) (0 where depth is 0); with ``stride`` those
    of every stride-th pixel in both directions only (``[::stride, ::stride]`` of the full map)."""
    h, w = depth.shape
    u, v = np.meshgrid(np.arange(0, w, stride), np.arange(0, h, stride))
    z = depth[::stride, ::stride].astype(np.float64)
    return np.stack([(u - K[0, 2]) / K[0, 0] * z, (v - K[1, 2]) / K[1, 1] * z, z], axis=-1)


def normal_map(points: np.ndarray) -> np.ndarray:
    """(H, W, 3) camera points -> unit normals (H, W, 3) from central differences (0 where undefined).
    The whole-image formulation: ICP reads ``DepthSurface`` (the same normals at chosen pixels), and
    the tests check it against this one."""
    dx = np.zeros_like(points)
    dy = np.zeros_like(points)
    dx[:, 1:-1] = points[:, 2:] - points[:, :-2]
    dy[1:-1] = points[2:] - points[:-2]
    n = np.cross(dx, dy)
    norm = np.linalg.norm(n, axis=-1, keepdims=True)
    ok = (norm > 1e-12) & (points[..., 2:3] > 0)
    return np.where(ok, n / np.maximum(norm, 1e-12), 0.0)


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a x b over the last axis (3); np.cross's arithmetic without its axis juggling."""
    out = np.empty(np.broadcast_shapes(a.shape, b.shape), dtype=np.result_type(a, b))
    out[..., 0] = a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1]
    out[..., 1] = a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2]
    out[..., 2] = a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
    return out


class DepthSurface:
    """A depth image's points and normals, as ``point_map`` and ``normal_map`` give them, computed
    only at the pixels asked for (projective ICP reads a few thousand of an image's pixels), as
    (3, M) arrays: one row per axis (numpy's row gathers of (M, 3) arrays cost far more)."""

    def __init__(self, depth: np.ndarray, K: np.ndarray) -> None:
        """depth: (H, W) metres (0 = none); K: (3, 3) intrinsics."""
        self.h, self.w = depth.shape
        self.z = np.asarray(depth, dtype=np.float64).ravel()
        self.rx = (np.arange(self.w) - K[0, 2]) / K[0, 0]    # point_map's x = rx[u] z, y = ry[v] z
        self.ry = (np.arange(self.h) - K[1, 2]) / K[1, 1]

    def _point(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        z = self.z[v * self.w + u]
        return np.stack([self.rx[u] * z, self.ry[v] * z, z])

    def at(self, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Pixels (u, v): (N,) int64 inside the image -> (points (3, M), unit normals (3, M),
        keep (N,) bool): the M pixels kept have depth and a normal (``normal_map``'s rule)."""
        w, h = self.w, self.h
        dx = self._point(np.minimum(u + 1, w - 1), v) - self._point(np.maximum(u - 1, 0), v)
        dy = self._point(u, np.minimum(v + 1, h - 1)) - self._point(u, np.maximum(v - 1, 0))
        dx[:, (u == 0) | (u == w - 1)] = 0.0       # normal_map's central differences: none at the border
        dy[:, (v == 0) | (v == h - 1)] = 0.0
        n = _cross(dx.T, dy.T).T
        norm = np.sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2])
        points = self._point(u, v)
        keep = (norm > 1e-12) & (points[2] > 0)
        return points[:, keep], n[:, keep] / norm[keep], keep


def _tolerance(z: np.ndarray, tol: float, quad: float) -> np.ndarray:
    return tol + quad * z * z


class IcpResult(NamedTuple):
    """T: (4, 4) source camera -> destination camera; overlap: share of the source points landing
    on valid destination depth; inliers: share of those within ``tol + quad z^2`` of the
    destination surface; conditioning: smallest / largest eigenvalue of the last normal equations
    with the rotation columns scaled by the median depth (below ``slam.loop.verify.ICP_DEGENERATE``
    the geometry does not fix the pose; 0 when no step was taken); H: those normal equations (6, 6; rows rotation,
    translation; a step on the left of T, unit weights) or None; residual_var: mean squared
    point-to-plane residual of the pairs used (m^2), with 6 degrees of freedom taken off;
    z_median: their median depth (m)."""

    T: np.ndarray
    overlap: float
    inliers: float
    conditioning: float
    H: Optional[np.ndarray] = None
    residual_var: float = 0.0
    z_median: float = 0.0


def icp(src: np.ndarray, dst_depth: np.ndarray, dst_K: np.ndarray, T_init: np.ndarray, iters: int,
        tol: float, quad: float, backend: str = "cpu") -> IcpResult:
    """Projective point-to-plane ICP. src: (N, 3) points in the source camera (metres); dst_depth
    (H, W) metres with intrinsics dst_K; T_init (4, 4) source camera -> destination camera.
    At most ``iters`` steps (fewer once a step is below ICP_CONVERGED), then the normal equations
    and residuals at the final pose (``IcpResult``). ``backend``: 'reference' runs the NumPy
    oracle (``icp_reference``), any other the host kernel (the keyframes live on the host)."""
    if backend == "reference":
        return icp_reference(src, dst_depth, dst_K, T_init, iters, tol, quad)
    T, overlap, inliers, var, z_median, H = icp_point_to_plane(src, dst_depth, dst_K, T_init, iters, tol, quad,
                                                               ICP_MAX_PAIR, ICP_CONVERGED)
    return IcpResult(T, overlap, inliers, _conditioning(H, z_median), H, var, z_median)


def icp_reference(src: np.ndarray, dst_depth: np.ndarray, dst_K: np.ndarray, T_init: np.ndarray, iters: int,
                  tol: float, quad: float) -> IcpResult:
    """``icp`` in NumPy: the model the host kernel follows and the tests' oracle."""
    surface = DepthSurface(dst_depth, dst_K)
    h, w = dst_depth.shape
    fx, fy, cx, cy = dst_K[0, 0], dst_K[1, 1], dst_K[0, 2], dst_K[1, 2]
    sx, sy, sz = np.array(src, dtype=np.float64).T        # (3, N) rows: see DepthSurface
    T = np.array(T_init, dtype=np.float64)
    overlap, inliers = 0.0, 0.0
    H, depths, var = None, None, 0.0   # the last normal equations, their points' depths, residual variance
    converged = False
    for it in range(iters + 1):
        R, t0 = T[:3, :3], T[:3, 3]
        p = np.stack([R[i, 0] * sx + R[i, 1] * sy + R[i, 2] * sz + t0[i] for i in range(3)])
        front = p[2] > 1e-3
        zs = np.where(front, p[2], 1.0)
        u = np.round(fx * p[0] / zs + cx).astype(np.int64)
        v = np.round(fy * p[1] / zs + cy).astype(np.int64)
        inside = np.flatnonzero(front & (u >= 0) & (u < w) & (v >= 0) & (v < h))
        q, n, keep = surface.at(u[inside], v[inside])
        p = p[:, inside[keep]]
        overlap = float(p.shape[1]) / max(len(sx), 1)
        if p.shape[1] < 6:
            return IcpResult(T, overlap, 0.0, 0.0)
        d = p - q
        r = n[0] * d[0] + n[1] * d[1] + n[2] * d[2]
        t = _tolerance(q[2], tol, quad)
        inliers = float(np.count_nonzero(np.abs(r) < t)) / len(r)
        use = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]) < (ICP_MAX_PAIR * t) ** 2
        if np.count_nonzero(use) < 6:
            break
        pu, nu, ru = p[:, use], n[:, use], r[use]
        J = np.concatenate([_cross(pu.T, nu.T).T, nu])      # (6, M): d r / d (omega, v)
        H, depths = J @ J.T, pu[2]
        var = float(ru @ ru) / max(len(ru) - 6, 1)
        if it == iters or converged:
            break
        step = -np.linalg.solve(H + 1e-9 * np.eye(6), J @ ru)
        T = orthonormalize(pivot_increment(step, 0.0) @ T)
        converged = float(np.abs(step).max()) < ICP_CONVERGED
    z_median = float(np.median(depths)) if depths is not None else 0.0
    return IcpResult(T, overlap, inliers, _conditioning(H, z_median), H, var, z_median)


def _conditioning(H: Optional[np.ndarray], z_median: float) -> float:
    """Smallest / largest eigenvalue of ICP's (6, 6) normal equations ``H`` (rotation, then
    translation) with the rotation rows and columns divided by ``z_median`` (the median depth of
    its points, metres: both blocks in metres at the scene); 0 when there is none."""
    if H is None:
        return 0.0
    scale = np.r_[np.full(3, 1.0 / max(float(z_median), 1e-6)), np.ones(3)]
    eig = np.linalg.eigvalsh(H * np.outer(scale, scale))
    return float(eig[0] / eig[-1]) if eig[-1] > 0 else 0.0
