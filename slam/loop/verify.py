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
import math
from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np
import torch

from slam.config import LoopConfig, QualityConfig, TrackingConfig
from slam.loop.icp import IcpResult, icp, point_map
from slam.loop.information import measurement_information
from slam.loop.pose_graph import config_sigmas
from slam.map.keyframes import Keyframe, KeyframeView
from slam.tracking.features import OrbFeatures, pnp_pose
from slam.tracking.tracker import Tracker

# Projective ICP samples the new keyframe on a grid of about ICP_POINTS points (``icp_stride``),
# whatever the keyframes' resolution: a fixed stride of 4 left 1,200 points of a 160x120 keyframe,
# and on 7-Scenes tracked at 160x120 a bridge so measured flagged a snap where the tracker was
# right (docs/benchmarks.md#why-the-defaults-are-what-they-are). Keyframes of 320x240 and larger
# keep every ICP_MAX_STRIDE-th pixel as before. It bounds the cost; it tunes nothing.
ICP_POINTS = 4800
ICP_MAX_STRIDE = 4
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


def icp_stride(height: int, width: int) -> int:
    """Pixel stride of ICP's samples of a ``height`` x ``width`` keyframe: about ICP_POINTS
    samples, 1 to ICP_MAX_STRIDE (320x240: 4, 160x120: 2, 120x90: 2)."""
    return int(min(ICP_MAX_STRIDE, max(1, round(math.sqrt(height * width / ICP_POINTS)))))


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
        pts = point_map(depth, new.K, icp_stride(*depth.shape)).reshape(-1, 3)
        pts = pts[pts[:, 2] > 0]
        iters = self.cfg.icp_iters if iters is None else iters
        return icp(pts, old.depth.astype(np.float32), old.K, T_init, iters, self.cfg.depth_tol, self.quad,
                   backend=self.backend)

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
        try:
            T = rgbd_odometry(new, old, fit.T)
        except ImportError:     # open3d is a core dependency, but an install may lack it: no crash
            return None, "measurement: flat view, and open3d (the RGB-D odometry) is not installed"
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
        agrees with ``kf``'s depth (within loop.depth_tol + quality.depth_noise_quad z^2). The
        render runs on the map's device, the comparison on the host (the rendered depth and alpha
        copied down: on a GPU its kernels would load into host memory for this use alone)."""
        h, w = kf.depth.shape
        out = snap.render(kf.K, w, h, T_wc=T_wc, backend=self.backend, max_anchor=max_anchor)
        rendered, alpha = out.depth.cpu().numpy(), out.alpha.cpu().numpy()
        depth = kf.depth.astype(np.float32)
        covered = (alpha > np.float32(RENDER_ALPHA)) & (depth > 0)
        n = int(covered.sum())
        if n == 0:
            return 0.0
        tol = np.float32(self.cfg.depth_tol) + np.float32(self.quad) * depth * depth
        agree = covered & (np.abs(rendered - depth) < tol)
        return float(agree.sum()) / n
