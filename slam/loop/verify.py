"""Geometric verification of a loop candidate, three tests in turn, each able to reject:

1. ORB + PnP (``slam.tracking.features``): the new keyframe's pose in the old keyframe's camera
   from feature matches lifted with the old keyframe's depth (enough RANSAC inliers);
2. ICP with depth: projective point-to-plane ICP of the new keyframe's depth points onto the old
   keyframe's depth from the PnP pose; the views must overlap and agree in depth after it
   (similar-looking places with different geometry fail here);
3. render-and-compare with the sphere map: the tracker (``slam.tracking.tracker``, the same LM
   and absolute quality test as every frame) aligns the new keyframe with the map as built
   around the old visit (``MapSnapshot.up_to``) from the ICP pose; it must pass the quality
   test, and the map rendered at the aligned pose must agree with the keyframe's depth.

The loop's measurement comes from the two keyframes themselves, which nothing after their
capture has touched: ICP's pose, or, where ICP is degenerate (a flat view: the pose can slide
along the plane; ICP_DEGENERATE), RGB-D odometry between them (open3d's, colour and depth terms,
from the ICP pose; an odometry that does not converge rejects the candidate). ICP is the more
accurate of the two where the geometry fixes the pose (the odometry's photometric term has no
exposure model). The map around the old visit is not used for the measurement: the mapping
windows near the revisit refine the old spheres too, so aligning with it pulls the loop towards
the current, drifted estimate. Figures: docs/benchmarks.md#why-the-defaults-are-what-they-are.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np
import torch

from slam.config import LoopConfig, QualityConfig, TrackingConfig
from slam.geometry import orthonormalize, pivot_increment
from slam.loop.information import measurement_information
from slam.loop.pose_graph import config_sigmas
from slam.map.keyframes import Keyframe, KeyframeView
from slam.tracking.features import OrbFeatures, pnp_pose
from slam.tracking.tracker import Tracker

# Projective ICP samples every ICP_STRIDE-th pixel of the new keyframe (a few thousand points at
# the tracking resolution) and ignores pairs farther apart than ICP_MAX_PAIR x the depth
# tolerance (wrong associations). Fixed: they bound the cost and the basin, they tune nothing.
ICP_STRIDE = 4
ICP_MAX_PAIR = 3.0
# ICP stops once a step moves the pose by less than this (rad and m, each component): far below
# what any test downstream resolves (depth tolerances of centimetres, loop sigmas of millimetres).
# On exact depth (the sample) 5 of 7 keyframe pairs stop after 3-6 steps; on Kinect depth the
# association's rounding keeps steps at 1e-5-1e-4 and all 10 run.
ICP_CONVERGED = 1e-7
# ICP's normal equations, rotation columns scaled by the median depth (both in metres at the
# scene), are degenerate when their smallest eigenvalue is below ICP_DEGENERATE x their largest:
# a flat view lets the pose slide along the plane. Measured: flat views 1e-18 to 4e-5, views with
# relief 1.4e-2 to 2.5e-2 (generated loop, bundled sample, 7-Scenes;
# docs/benchmarks.md#why-the-defaults-are-what-they-are). A numerical rank test, not a tuning value.
ICP_DEGENERATE = 1e-3
RENDER_ALPHA = 0.5      # pixels the map covers: rendered alpha above this
# The depth noise's standard deviation per unit of quality.depth_noise_quad z^2: that tolerance is
# ~3.5 sigma of structured-light noise (slam/config/schema.py, QualityConfig). A measurement's
# residual variance is taken as at least this noise's (exact synthetic depth has none).
DEPTH_SIGMA_PER_QUAD = 1.0 / 3.5


@dataclass
class Verification:
    """T_ab: (4, 4) pose of the new keyframe (b) in the old keyframe's camera (a) (after all
    tests: the loop's measurement, ICP's or on a flat view the RGB-D odometry's), None if PnP
    failed; reason: None when every test passed, else the first failed test and its figures;
    information: (6, 6) the measurement's own (``slam.loop.information``), None when not known."""

    T_ab: Optional[np.ndarray]
    reason: Optional[str]
    pnp_inliers: int = 0
    overlap: float = 0.0
    depth_inliers: float = 0.0
    render_agreement: float = 0.0
    information: Optional[np.ndarray] = None


class Measurement(NamedTuple):
    """A relative pose measured from two keyframes: T_ab (4, 4), new (b) in old (a)'s camera;
    information (6, 6, gtsam order, body frame of T_ab) or None; method 'icp' or 'rgbd'."""

    T_ab: np.ndarray
    information: Optional[np.ndarray]
    method: str


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
    with the rotation columns scaled by the median depth (below ICP_DEGENERATE the geometry does
    not fix the pose; 0 when no step was taken); H: those normal equations (6, 6; rows rotation,
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
        tol: float, quad: float) -> IcpResult:
    """Projective point-to-plane ICP. src: (N, 3) points in the source camera (metres); dst_depth
    (H, W) metres with intrinsics dst_K; T_init (4, 4) source camera -> destination camera.
    At most ``iters`` steps (fewer once a step is below ICP_CONVERGED), then the normal equations
    and residuals at the final pose (``IcpResult``)."""
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
    return IcpResult(T, overlap, inliers, _conditioning(H, depths), H, var, z_median)


def _conditioning(H: Optional[np.ndarray], depths: Optional[np.ndarray]) -> float:
    """Smallest / largest eigenvalue of ICP's (6, 6) normal equations ``H`` (rotation, then
    translation) with the rotation rows and columns divided by the median of ``depths`` (its
    points' depths, metres: both blocks in metres at the scene); 0 when there is none."""
    if H is None:
        return 0.0
    scale = np.r_[np.full(3, 1.0 / max(float(np.median(depths)), 1e-6)), np.ones(3)]
    eig = np.linalg.eigvalsh(H * np.outer(scale, scale))
    return float(eig[0] / eig[-1]) if eig[-1] > 0 else 0.0


def rgbd_odometry(new: Keyframe, old: Keyframe, T_init: np.ndarray) -> Optional[np.ndarray]:
    """Pose (4, 4) of ``new``'s camera in ``old``'s by dense RGB-D odometry between the two
    keyframes (open3d: photometric and geometric terms, coarse to fine, from T_init (4, 4)); None
    when it does not converge. One camera: ``new`` is resampled to ``old``'s image size when
    they differ (a saved map's keyframes are stored at most 320 wide), with ``old.K``."""
    import cv2
    import open3d as o3d

    h, w = old.depth.shape
    color, depth = new.color, np.asarray(new.depth, dtype=np.float32)
    if depth.shape != (h, w):
        color = cv2.resize(color, (w, h), interpolation=cv2.INTER_AREA)
        depth = cv2.resize(depth, (w, h), interpolation=cv2.INTER_NEAREST)

    def rgbd(c: np.ndarray, d: np.ndarray):
        return o3d.geometry.RGBDImage.create_from_color_and_depth(
            o3d.geometry.Image(np.ascontiguousarray(c)), o3d.geometry.Image(np.ascontiguousarray(d, dtype=np.float32)),
            depth_scale=1.0, depth_trunc=float(np.finfo(np.float32).max), convert_rgb_to_intensity=True)

    K = old.K
    intrinsic = o3d.camera.PinholeCameraIntrinsic(w, h, K[0, 0], K[1, 1], K[0, 2], K[1, 2])
    # open3d's option defaults (20/10/5 iterations per pyramid level, 3 cm depth association),
    # but every depth the keyframes hold (its default stops at 4 m)
    valid = old.depth[old.depth > 0]
    option = o3d.pipelines.odometry.OdometryOption()
    option.depth_max = float(max(valid.max() if valid.size else 0.0, option.depth_max)) + 1.0
    ok, T, _ = o3d.pipelines.odometry.compute_rgbd_odometry(
        rgbd(color, depth), rgbd(old.color, old.depth), intrinsic, np.asarray(T_init, dtype=np.float64),
        o3d.pipelines.odometry.RGBDOdometryJacobianFromHybridTerm(), option)
    return np.asarray(T, dtype=np.float64) if ok else None


class LoopVerifier:
    """The three tests with their thresholds (``loop.*``; the tracker's and quality's configs
    for the dense alignment)."""

    def __init__(self, cfg: LoopConfig, tracking: TrackingConfig, quality: QualityConfig, backend: str = "auto") -> None:
        self.cfg = cfg
        # The alignment is the tracker's LM; its trackers live for one candidate: no CUDA graphs
        # (a capture synchronises the device).
        self.tracking_cfg = dataclasses.replace(tracking, cuda_graph=False)
        self.quality_cfg = dataclasses.replace(quality, min_depth_inliers=cfg.min_depth_inliers,
                                               min_color_inliers=cfg.min_color_inliers)
        self.quad = quality.depth_noise_quad
        self.backend = backend

    def verify(self, new: Keyframe, new_feat: OrbFeatures, old: Keyframe, old_feat: OrbFeatures,
               T_w_old: np.ndarray, snap, max_anchor: int) -> Verification:
        """Is ``new`` seeing the place ``old`` saw? T_w_old: the old keyframe's current pose;
        ``snap``: the published map; ``max_anchor``: the newest keyframe id whose spheres count
        as the map of the old visit."""
        cfg = self.cfg
        at_origin = dataclasses.replace(old, T_wc=np.eye(4))
        pnp = pnp_pose(new_feat, new.K, at_origin, old_feat, min_inliers=cfg.min_pnp_inliers)
        if pnp is None:
            return Verification(None, f"features: fewer than {cfg.min_pnp_inliers} PnP inliers")
        T_ab, n_inl = pnp
        fit = self._icp(new, old, T_ab)
        res = Verification(fit.T, self._depth_reason(fit.overlap, fit.inliers), n_inl, fit.overlap, fit.inliers)
        if res.reason is not None:
            return res
        res.reason, res.render_agreement = self.map_test(new, old, T_w_old @ fit.T, snap, max_anchor)
        if res.reason is not None:
            return res
        measured, res.reason = self._measurement(new, old, fit)
        if measured is not None:
            res.T_ab, res.information = measured.T_ab, measured.information
        return res

    def map_test(self, new: Keyframe, old: Keyframe, T_wc: np.ndarray, snap, max_anchor: int) -> tuple[Optional[str], float]:
        """The tracker aligns ``new`` with the map of the old visit (``snap.up_to(max_anchor)``)
        from ``T_wc`` (4, 4); (why it fails or None, the rendered depth's agreement)."""
        cfg = self.cfg
        old_map = snap.up_to(max_anchor)
        tracker = Tracker(self.tracking_cfg, self.quality_cfg, self.backend)
        tracker.initialise(T_wc)
        aligned = tracker.track(KeyframeView.upload(new, old_map.device).observation(), old_map)
        if not aligned.ok:
            return f"map: dense alignment with the old map fails the quality test ({aligned.reason})", 0.0
        agreement = self.render_agreement(new, aligned.T_wc, old_map, None)
        if agreement < cfg.min_render_agreement:
            return f"map: rendered depth agrees on {agreement:.2f} < {cfg.min_render_agreement}", agreement
        return None, agreement

    def measure(self, new: Keyframe, old: Keyframe, T_init: np.ndarray) -> tuple[Optional[Measurement], Optional[str]]:
        """The relative pose of ``new``'s camera in ``old``'s from the two keyframes alone (ICP
        from ``T_init`` (4, 4), RGB-D odometry on a flat view) with its information, or (None,
        why) when the views do not overlap and agree as a loop's must (``loop.min_overlap``,
        ``loop.min_inliers``)."""
        fit = self._icp(new, old, T_init)
        reason = self._depth_reason(fit.overlap, fit.inliers)
        if reason is not None:
            return None, reason
        return self._measurement(new, old, fit)

    # ------------------------------------------------------------------ the measurement's steps
    def _icp(self, new: Keyframe, old: Keyframe, T_init: np.ndarray, iters: Optional[int] = None) -> IcpResult:
        depth = new.depth.astype(np.float32)
        pts = point_map(depth, new.K, ICP_STRIDE).reshape(-1, 3)
        pts = pts[pts[:, 2] > 0]
        iters = self.cfg.icp_iters if iters is None else iters
        return icp(pts, old.depth.astype(np.float32), old.K, T_init, iters, self.cfg.depth_tol, self.quad)

    def _depth_reason(self, overlap: float, inliers: float) -> Optional[str]:
        if overlap < self.cfg.min_overlap:
            return f"depth: views overlap {overlap:.2f} < {self.cfg.min_overlap}"
        if inliers < self.cfg.min_inliers:
            return f"depth: {inliers:.2f} of the overlap agrees after ICP < {self.cfg.min_inliers}"
        return None

    def _measurement(self, new: Keyframe, old: Keyframe, fit: IcpResult) -> tuple[Optional[Measurement], Optional[str]]:
        """ICP's pose where the geometry fixes it, else the RGB-D odometry's from ICP's pose;
        the information at the pose (``_information``)."""
        if fit.conditioning >= ICP_DEGENERATE:
            return Measurement(fit.T, self._information(fit), "icp"), None
        T = rgbd_odometry(new, old, fit.T)
        if T is None:
            return None, "measurement: flat view and RGB-D odometry between the two keyframes did not converge"
        return Measurement(T, self._information(self._icp(new, old, T, iters=0)), "rgbd"), None

    def _information(self, fit: IcpResult) -> Optional[np.ndarray]:
        """The information of a measurement at ``fit.T``: ICP's normal equations there over its
        residual variance (at least the sensor's depth noise at the points' median depth), raised
        to the configured loop sigmas' in the directions the depth does not fix (on a flat view
        the RGB-D odometry's colour term measures those; open3d's own information counts every
        pixel's point-to-point pair as independent, hundreds of times what its error is on the
        generated loop)."""
        if fit.H is None:
            return None
        floor = (self.quad * DEPTH_SIGMA_PER_QUAD * fit.z_median ** 2) ** 2
        return measurement_information(fit.H, max(fit.residual_var, floor), fit.T,
                                       config_sigmas(self.cfg.loop_sigma_trans, self.cfg.loop_sigma_rot_deg))

    @torch.no_grad()
    def render_agreement(self, kf: Keyframe, T_wc: np.ndarray, snap, max_anchor: Optional[int]) -> float:
        """Share of the pixels the map covers (valid depth) where the map rendered at ``T_wc``
        agrees with ``kf``'s depth (within loop.depth_tol + quality.depth_noise_quad z^2)."""
        h, w = kf.depth.shape
        out = snap.render(kf.K, w, h, T_wc=T_wc, backend=self.backend, max_anchor=max_anchor)
        depth = torch.from_numpy(kf.depth.astype(np.float32)).to(out.depth.device)
        covered = (out.alpha > RENDER_ALPHA) & (depth > 0)
        n = int(covered.sum())
        if n == 0:
            return 0.0
        tol = self.cfg.depth_tol + self.quad * depth * depth
        agree = covered & ((out.depth - depth).abs() < tol)
        return float(agree.sum()) / n
