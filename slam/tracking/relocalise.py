"""Relocalisation against a saved map: find the pose of a frame with no prior (render-and-compare).

1. Render-and-compare: render the frozen map at every saved keyframe pose at low resolution
   (about ``coarse_width`` px wide) and score it against the frame downsampled the same way: mean
   over valid-depth pixels of the colour L1 (0..1) plus the relative depth error (capped at 1);
   pixels the map does not cover (alpha < 0.5) score the maximum (2). Around the best ``top_k``
   poses, small perturbations (camera-frame shifts and pan/tilt) are scored too; the best
   ``refine_k`` distinct candidates go on.
2. Features (OpenCV): ORB matches against the images of the ``pnp_k`` best-scoring keyframes,
   lifted to 3D with their depth and pose, PnP + RANSAC; the ``pnp_refine`` poses with the most
   RANSAC inliers go on too. They reach starts far from every saved pose, and are judged on their
   geometric evidence, not on the coarse score (a true pose at the map's edge scores worse than a
   wrong pose facing a well-mapped wall).
3. Refinement and verification: each candidate is refined with the ordinary tracker (3-level
   pyramid, Levenberg-Marquardt, fresh motion history). A refined pose is accepted when the map
   covers at least ``min_coverage`` of the frame's valid-depth pixels and at least
   ``min_agreement`` of the covered ones agree (depth within max(3 cm, 3 % z), colour within
   0.15 after a least-squares exposure gain/bias); the best accepted pose wins. Otherwise the
   frame is reported as not relocalised and the next frame tries again. ``SlamSystem`` also
   relocalises again after several consecutive tracking failures on a saved map.
All rendering is under ``no_grad`` from an immutable ``MapSnapshot``: the map is never touched.
"""
from __future__ import annotations

import dataclasses
import math
import threading
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from slam.config import QualityConfig, RelocaliseConfig, TrackingConfig
from slam.geometry import orthonormalize
from slam.map.keyframes import Keyframe
from slam.map.snapshot import MapSnapshot
from slam.observation import Observation
from slam.tracking.features import orb_features, pnp_pose
from slam.tracking.tracker import Tracker

# Verification renders at most this wide (px): agreement is a coverage statistic, not a detail one.
VERIFY_WIDTH = 160


@dataclass
class RelocResult:
    """T_wc: (4, 4) float64 best pose; ok: verified; inliers: share of the frame's valid pixels
    the map covers and explains at that pose, in [0, 1];
    loss: the tracker's final residual (inf if not refined); keyframe: index of the saved keyframe
    the winning candidate came from; candidates: poses scored; ms: wall time; frame: index of the
    frame it was run on (set by the caller)."""

    T_wc: np.ndarray
    ok: bool
    inliers: float
    loss: float
    keyframe: int
    candidates: int
    ms: float
    frame: int = -1


def _perturbations(shift: float, angle_deg: float) -> list[np.ndarray]:
    """Camera-frame deltas (4, 4): identity, +-shift along x/y/z, +-angle about x/y (pan/tilt)."""
    out = [np.eye(4)]
    for axis in range(3):
        for s in (-shift, shift):
            d = np.eye(4)
            d[axis, 3] = s
            out.append(d)
    a = math.radians(angle_deg)
    for axis in (0, 1):
        for s in (-a, a):
            c, si = math.cos(s), math.sin(s)
            d = np.eye(4)
            i, j = [(1, 2), (0, 2)][axis]
            d[i, i], d[i, j], d[j, i], d[j, j] = c, -si, si, c
            out.append(d)
    return out


class Relocaliser:
    """Finds a frame's pose in a saved map from the saved keyframes (see module doc)."""

    def __init__(self, keyframes: list[Keyframe], cfg: RelocaliseConfig, tracking: TrackingConfig,
                 quality: QualityConfig, backend: str = "auto") -> None:
        if not keyframes:
            raise ValueError("relocalisation needs at least one saved keyframe")
        self.keyframes = keyframes
        self.cfg = cfg
        self.poses = [np.asarray(kf.T_wc, dtype=np.float64) for kf in keyframes]
        self.backend = backend
        self.deltas = _perturbations(cfg.shift, cfg.angle_deg)
        # Candidates start far from the truth: the tracker refines them with its recovery budget
        # and at least three pyramid levels, judged by verification (a fresh tracker has no recent
        # level to compare with). Its trackers live for one attempt: no CUDA graphs (a capture
        # synchronises the device).
        self.track_cfg = dataclasses.replace(tracking, iters=max(tracking.recovery_iters, tracking.iters),
                                             pyramid_levels=max(3, tracking.pyramid_levels), cuda_graph=False)
        self.quality_cfg = quality
        self.attempts = 0

    # ------------------------------------------------------------------ public
    @torch.no_grad()
    def relocalise(self, obs: Observation, snap: MapSnapshot, stop: Optional[threading.Event] = None) -> RelocResult:
        """Estimate the pose of ``obs`` (at the tracking resolution) in ``snap``'s map. ``stop``:
        once set (the stream has ended), the attempt gives up before its next costly step and
        returns a result that is not ok."""
        t0 = time.perf_counter()
        stop = stop if stop is not None else threading.Event()   # None: never told to stop
        self.attempts += 1
        factor = max(1, obs.width // self.cfg.coarse_width)
        coarse = obs.downsampled(factor)
        scores = [self._score(coarse, snap, T) for T in self.poses]
        ranked = [int(i) for i in np.argsort(scores)]
        # Render-and-compare candidates: the best keyframe poses and perturbations around them.
        cands: list[tuple[float, np.ndarray, int]] = []
        for i in ranked[: self.cfg.top_k]:
            for k, d in enumerate(self.deltas):
                T = self.poses[i] @ d
                cands.append((scores[i] if k == 0 else self._score(coarse, snap, T), T, i))
        cands.sort(key=lambda c: c[0])
        picked = _distinct(cands, self.cfg.refine_k)
        # Feature candidates: ORB + PnP against the best-looking keyframes, refined on their own
        # merit (geometric evidence), not on the coarse score (a true pose near the map's edge
        # scores worse than a wrong pose looking at a well-mapped wall).
        n_scored = len(cands) + len(self.poses)

        def given_up() -> RelocResult:
            return RelocResult(self.poses[ranked[0]], False, 0.0, math.inf, ranked[0], n_scored,
                               (time.perf_counter() - t0) * 1e3)

        if stop.is_set():
            return given_up()
        if self.cfg.use_features:
            query = orb_features(obs.color_uint8())
            pnp = []
            for i in ranked[: self.cfg.pnp_k]:
                if stop.is_set():
                    return given_up()
                found = pnp_pose(query, obs.K.cpu().numpy(), self.keyframes[i], orb_features(self.keyframes[i].color))
                if found is not None:
                    pnp.append((-float(found[1]), found[0], i))
            pnp.sort(key=lambda c: c[0])
            picked += _distinct(pnp, self.cfg.pnp_refine, picked)
            n_scored += len(pnp)
        verify_obs = obs.downsampled(max(1, obs.width // VERIFY_WIDTH))
        best: Optional[RelocResult] = None
        for _, T0, kf in picked:
            if stop.is_set():
                return given_up()
            tracker = Tracker(self.track_cfg, self.quality_cfg, self.backend)
            tracker.initialise(T0)
            res = tracker.track(obs, snap)
            T = res.T_wc if np.all(np.isfinite(res.T_wc)) else T0
            coverage, agreement = self._verify(verify_obs, snap, T)
            r = RelocResult(T, self._accepted(coverage, agreement),
                            coverage * agreement, res.loss, kf, n_scored, 0.0)
            if best is None or (r.ok, r.inliers) > (best.ok, best.inliers):
                best = r
        assert best is not None
        best.ms = (time.perf_counter() - t0) * 1e3
        return best

    @torch.no_grad()
    def verify(self, obs: Observation, snap: MapSnapshot, T_wc: np.ndarray) -> bool:
        """Does the map agree with ``obs`` at ``T_wc`` (the acceptance test of step 3, at <= 160 px)?
        Used on tracked poses too: a tracker drifting off the saved map fails it."""
        coverage, agreement = self._verify(obs.downsampled(max(1, obs.width // VERIFY_WIDTH)), snap, T_wc)
        return self._accepted(coverage, agreement)

    # ------------------------------------------------------------------ scoring
    def _accepted(self, coverage: float, agreement: float) -> bool:
        return coverage >= self.cfg.min_coverage and agreement >= self.cfg.min_agreement

    def _render(self, obs: Observation, snap: MapSnapshot, T_wc: np.ndarray):
        return snap.render(obs.K, obs.width, obs.height, T_wc=orthonormalize(T_wc), backend=self.backend)

    def _score(self, obs: Observation, snap: MapSnapshot, T_wc: np.ndarray) -> float:
        """Mean per-pixel disagreement in [0, 2] over valid-depth pixels (lower is better)."""
        out = self._render(obs, snap, T_wc)
        valid = obs.depth > 0
        if not bool(valid.any()):
            return 2.0
        col = (out.color - obs.color).abs().mean(-1).clamp_max(1.0)
        dep = ((out.depth - obs.depth).abs() / obs.depth.clamp_min(1e-3)).clamp_max(1.0)
        per = torch.where(out.alpha > 0.5, col + dep, torch.full_like(col, 2.0))
        return float(per[valid].mean())

    def _verify(self, obs: Observation, snap: MapSnapshot, T_wc: np.ndarray) -> tuple[float, float]:
        """(coverage, agreement): share of valid-depth pixels the map covers (alpha > 0.5), and
        share of those where depth (max(3 cm, 3 %)) and colour (mean abs <= 0.15 after an affine
        exposure fit) agree."""
        out = self._render(obs, snap, T_wc)
        valid = obs.depth > 0
        n = int(valid.sum())
        if n == 0:
            return 0.0, 0.0
        covered = valid & (out.alpha > 0.5)
        m = int(covered.sum())
        if m < 10:
            return m / n, 0.0
        d_ok = (out.depth - obs.depth).abs() <= torch.clamp(0.03 * obs.depth, min=0.03)
        # Exposure: a least-squares gain and bias from rendered to observed colour over the covered
        # pixels (auto-exposure differs between the mapping and the localising sequence).
        x, y = out.color[covered].reshape(-1), obs.color[covered].reshape(-1)
        vx = x.var(unbiased=False)
        gain = (((x - x.mean()) * (y - y.mean())).mean() / vx).clamp(0.5, 2.0) if float(vx) > 1e-8 else torch.ones(())
        bias = y.mean() - gain * x.mean()
        c_ok = (out.color * gain + bias - obs.color).abs().mean(-1) <= 0.15
        return m / n, float((covered & d_ok & c_ok).sum()) / m


def _distinct(cands: list, k: int, taken: Optional[list] = None) -> list:
    """The first ``k`` candidates (score, T_wc, keyframe) at least 2 cm / ~1 deg from each other
    and from ``taken``."""
    out: list = []
    for c in cands:
        if len(out) == k:
            break
        if all(np.linalg.norm(c[1][:3, 3] - p[1][:3, 3]) > 0.02 or np.linalg.norm(c[1][:3, :3] - p[1][:3, :3]) > 0.02
               for p in out + list(taken or [])):
            out.append(c)
    return out


def summarise(results: list[RelocResult], mode: str) -> dict:
    """metrics.json entry: how (and how fast) the start pose was found, and how often tracking
    had to be relocalised again; what the attempts cost (ms per attempt: in SLAM mode they run off
    the tracking thread). ``frames_to_relocalise`` counts frames from the run's first frame to the
    first verified pose, that one included."""
    found = next((i for i, r in enumerate(results) if r.ok), None)
    first = results[0].frame if results else 0
    return {
        "mode": mode,
        "method": "render-and-compare over saved keyframe poses (+ perturbations) and ORB+PnP, tracker refinement, "
                  "coverage/agreement verification",
        "found": found is not None,
        "attempts": len(results),
        "frames_to_relocalise": None if found is None else results[found].frame - first + 1,
        "ms_to_relocalise": None if found is None else float(sum(r.ms for r in results[: found + 1])),
        "succeeded": sum(1 for r in results if r.ok),
        "ms_total": float(sum(r.ms for r in results)),
        "ms_mean": float(np.mean([r.ms for r in results])) if results else None,
        "ms_max": float(max(r.ms for r in results)) if results else None,
        "inliers": None if found is None else float(results[found].inliers),
        "keyframe": None if found is None else int(results[found].keyframe),
        "relocalisations_later": max(0, sum(1 for r in results if r.ok) - 1),
    }
