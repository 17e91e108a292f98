"""Camera tracking: render-and-compare pose optimisation against the latest published map.

Per frame: a constant-velocity guess, then Levenberg-Marquardt on a 6-DoF pose increment
(rotation vector about a pivot at the median scene depth + translation, applied on the left of
the world-to-camera pose) and a per-frame affine exposure (gain, bias), minimising robust (Huber)
colour + lambda * depth residuals over the pixels the map already explains (rendered alpha above a
threshold, valid depth away from depth edges). Gauss-Newton needs the pose Jacobian per pixel,
so a handful of iterations converge where a first-order optimiser needs dozens. The default
solver (``tracking.solver: fused``, ``slam.tracking.fused``) gets the normal equations from one
rasterizer pass per evaluation (the render's exact pose derivative blended with the observed
frame's image gradients), with the LM state on the device. The reference solver here
(``renders``) gets the Jacobian two ways, with no backward pass: the first ``analytic_iters``
iterations linearise the render itself (its image gradients times the pixel motion of its
back-projected depth: no extra render), the rest use finite differences (six extra forward renders
per iteration: exact for the render, including footprint changes and disocclusions, so the final iterations settle where the true
cost is lowest). Every step is accepted only if a real render lowers the cost. Coarse-to-fine
over an image pyramid; stops when the step is negligible or no step lowers the cost. The tracker
only renders detached snapshots under ``no_grad``: nothing reaches the map. The LM math
(residuals, Jacobian rows, normal equations) is in ``slam.tracking.lm``.

The tracker works at the resolution of the observation it is given (the system uploads frames at
``tracking.downscale``); the pyramid halves it per coarser level.

Failure detection: the absolute quality test of ``slam.tracking.quality`` (coverage, depth and
colour inliers at the final pose: evidence of this frame alone), and a final residual far above
the recent median. A failure triggers a recovery attempt (more iterations from the last good
pose); frames that stay failed are reported so the system makes no keyframe from them.
"""
from __future__ import annotations

import math
from functools import partial
from typing import Callable, Optional

import numpy as np
import torch

from rasterizer import depth_edge_mask
from slam.config import QualityConfig, TrackingConfig
from slam.geometry import (
    constant_velocity_guess,
    invert,
    orthonormalize,
    pivot_increment,
    pivot_information_to_body,
    relative_motion,
)
from slam.map.snapshot import MapSnapshot
from slam.observation import Observation
from slam.tracking import lm
from slam.tracking.fused import FusedSolver
from slam.tracking.quality import RELATIVE, RecentLevel, TrackQuality, conditioning, judge, pixel_counts
from slam.tracking.result import TrackResult, not_finite, rank

# The motion prior extrapolates the last good motion by the time elapsed since the last good
# frame, at most this much longer than the interval the motion was measured over: a hand-held or
# robot camera's velocity says little about where it is after a longer dropout (the
# re-initialisation's gap test takes over there). (A cap on the elapsed time itself predicted half
# the motion of every frame of a sequence at 2 Hz: 7-Scenes at stride 16 lost 25 of 32 frames.) Not a tuning value of
# the tracker's accuracy: it only bounds how far a stale velocity is trusted.
MAX_EXTRAPOLATION_S = 0.25


class Levels:
    """The frame being tracked (``obs``, the finest level) and its coarse-to-fine pyramid
    (``lm.pyramid``), built on first use and then shared by the frame's LM runs. The fused solver's
    CUDA graph builds its own pyramid inside the graph from ``obs``."""

    def __init__(self, obs: Observation, levels: int) -> None:
        self.obs, self.count = obs, levels
        self._pyramid: Optional[list] = None

    def pyramid(self) -> list:
        """[(Observation, (H, W) bool valid mask)] coarse to fine."""
        if self._pyramid is None:
            self._pyramid = lm.pyramid(self.obs, self.count)
        return self._pyramid


class Tracker:
    """Estimates each frame's pose; keeps the pose history for the motion model."""

    def __init__(self, cfg: TrackingConfig, quality: QualityConfig, backend: str = "auto") -> None:
        self.cfg = cfg
        self.quality_cfg = quality
        self.backend = backend
        # The last two good poses (T_wc) and their timestamps (s; None when not known): the motion
        # model. A failed frame leaves them as they are, so its successor is predicted from the
        # last good motion and the time elapsed since (``guess``).
        self.prev: Optional[np.ndarray] = None
        self.prev2: Optional[np.ndarray] = None
        self.prev_t: Optional[float] = None
        self.prev2_t: Optional[float] = None
        self.last_good: Optional[np.ndarray] = None
        self.level = RecentLevel()     # the loss of the recent frames that passed the floors
        self.failures = 0
        self.recoveries = 0
        self._huber: dict = {}   # device -> (4,) Huber thresholds of the residual channels
        self._renders = 0        # renders of the frame being tracked
        self._fused = FusedSolver(cfg, quality, backend) if cfg.solver == "fused" else None

    # ------------------------------------------------------------------ public
    def initialise(self, T_wc: np.ndarray, timestamp: Optional[float] = None) -> None:
        """Set the pose of the first frame (the map is built around it), or a relocalised pose,
        at ``timestamp`` (s; None: not known). The velocity is unknown from here."""
        self.prev, self.prev2, self.last_good = T_wc.copy(), None, T_wc.copy()
        self.prev_t, self.prev2_t = timestamp, None

    def rebase(self, C: np.ndarray) -> None:
        """Move the pose history by a world-frame correction C (4, 4) (T <- C @ T): the map's
        estimate of the reference keyframe changed (refinement, loop closure); the motion model's
        velocity is kept."""
        for name in ("prev", "prev2", "last_good"):
            T = getattr(self, name)
            if T is not None:
                setattr(self, name, orthonormalize(C @ T))

    def last_good_or_identity(self) -> np.ndarray:
        """The last pose that passed the checks (identity before any)."""
        return self.last_good.copy() if self.last_good is not None else np.eye(4)

    def guess(self, timestamp: Optional[float] = None) -> np.ndarray:
        """The constant-velocity prediction T_wc (4, 4) for the frame at ``timestamp`` (s): the last
        good motion scaled by the time elapsed since the last good frame (dropped or failed frames
        in between included; at most ``MAX_EXTRAPOLATION_S`` beyond the motion's own interval);
        without timestamps, one interval."""
        return constant_velocity_guess(self.prev2, self.prev, self._elapsed_intervals(timestamp))

    def _elapsed_intervals(self, timestamp: Optional[float]) -> float:
        if None in (timestamp, self.prev_t, self.prev2_t) or self.prev_t <= self.prev2_t:
            return 1.0
        interval = self.prev_t - self.prev2_t
        elapsed = min(max(timestamp - self.prev_t, 0.0), interval + MAX_EXTRAPOLATION_S)
        return elapsed / interval

    def track(self, obs: Observation, snapshot: MapSnapshot, coarse: Optional[list[np.ndarray]] = None,
              prior: Optional[np.ndarray] = None, timestamp: Optional[float] = None,
              fallback: Optional[Callable[[], list[np.ndarray]]] = None) -> TrackResult:
        """Estimate the pose of ``obs`` (at the tracking resolution, taken at ``timestamp`` s)
        against ``snapshot``; updates the motion history. ``coarse``: given when the motion prior
        is not trusted (after a gap): extra starting poses T_wc (4, 4); every start is then refined
        with ``recovery_iters`` and the result the quality test likes best is kept. ``fallback``:
        makes extra starting poses only when the refinement from the prior fails the quality test
        (a large predicted motion: the search costs more than the refinement). ``prior``:
        ``guess(timestamp)`` when the caller already has it."""
        self._renders = 0
        levels = Levels(obs, self.cfg.pyramid_levels)
        prior = self.guess(timestamp) if prior is None else prior
        iters = self.cfg.iters if coarse is None else self.cfg.recovery_iters
        result = self._optimise(levels, snapshot, prior, iters)
        result.reason = self._failure(result)
        starts = list(coarse or ())
        if result.reason is not None and fallback is not None:
            starts += fallback()
        for start in starts:
            cand = self._optimise(levels, snapshot, start, self.cfg.recovery_iters)
            cand.reason = self._failure(cand)
            if rank(cand) > rank(result):
                result = cand
        if result.reason is not None:
            start = self.last_good if self.last_good is not None else prior
            retry = self._optimise(levels, snapshot, start, self.cfg.recovery_iters)
            retry.reason = self._failure(retry)
            if retry.reason is None:
                retry.recovered = True
                self.recoveries += 1
                result = retry
            elif retry.loss < result.loss or not math.isfinite(result.loss):
                result = retry
        result.ok = result.reason is None
        result.renders = self._renders
        shift, turn = relative_motion(prior, result.T_wc)
        result.quality.prior_shift_m, result.quality.prior_turn_deg = shift, math.degrees(turn)
        self._update_history(result, timestamp)
        return result

    # ------------------------------------------------------------------ internals
    def _failure(self, r: TrackResult) -> Optional[str]:
        """None when ``r`` passes the quality test (``slam.tracking.quality.judge``, against the
        recent level of this tracker's frames), else why not."""
        if r.reason is not None:
            return r.reason   # the solver's own: a result that is not finite (``_optimise``)
        return judge(r.quality, r.loss, self.cfg.min_known_fraction, self.quality_cfg, self.level)

    def _update_history(self, r: TrackResult, timestamp: Optional[float]) -> None:
        if r.ok or (r.reason or "").startswith(RELATIVE):
            self.level.add(r.loss)
        if r.ok:
            self.prev2, self.prev = self.prev, r.T_wc
            self.prev2_t, self.prev_t = self.prev_t, timestamp
            self.last_good = r.T_wc
        else:
            # The motion model keeps the last good motion: the next frame is predicted from the
            # last good pose by the time elapsed since it (a camera turning at 65 deg/s keeps
            # turning while a frame is flagged; holding the last pose would put the next start
            # two frames' motion away).
            self.failures += 1

    def _thresholds(self, device) -> torch.Tensor:
        k = self._huber.get(device)
        if k is None:
            c = self.cfg
            k = self._huber[device] = lm.huber_thresholds(c.huber_color, c.huber_depth, c.depth_weight, device)
        return k

    def _optimise(self, levels: "Levels", snapshot: MapSnapshot, T_wc_init: np.ndarray, iters: int) -> TrackResult:
        """LM from ``T_wc_init`` with the configured solver (``tracking.solver``). A start or a
        result that is not finite (NaN / inf data, a diverged solve) is a failed result at a finite
        pose (the start, else the last good pose) with its reason, never an exception."""
        if not np.all(np.isfinite(T_wc_init)):
            return TrackResult(self.last_good_or_identity(), float("inf"), 0.0, False, False, 0,
                               reason="not finite: the start pose")
        if self._fused is not None:
            result, passes = self._fused.optimise(levels, snapshot, T_wc_init, iters)
            self._renders += passes
        else:
            result = self._optimise_renders(levels.pyramid(), snapshot, T_wc_init, iters)
        bad = not_finite(result)
        if bad:
            return TrackResult(np.array(T_wc_init, dtype=np.float64), float("inf"), 0.0, False, False, result.iters,
                               reason=f"not finite: {', '.join(bad)} (bad input data or a diverged solve)")
        return result

    @torch.no_grad()
    def _optimise_renders(self, pyramid, snapshot: MapSnapshot, T_wc_init: np.ndarray, iters: int) -> TrackResult:
        """The render-difference solver (``tracking.solver: renders``).
        Levenberg-Marquardt on (pose increment, exposure log-gain/bias) with Huber weights
        (IRLS); the pose Jacobian is analytic for the first ``analytic_iters`` iterations, by
        finite differences after. The pose and exposure live on the host (float64); the device
        only renders and reduces. Returns the estimate and its L1 residual on the finest level."""
        cfg = self.cfg
        device = snapshot.device
        k = self._thresholds(device)
        T_cw = invert(np.asarray(T_wc_init, dtype=np.float64))
        exposure = (0.0, 0.0)   # (log gain, bias)
        finest = pyramid[-1][0].depth
        ok_depth = finest > 0
        z_pivot = float(finest[ok_depth].median()) if bool(ok_depth.any()) else 1.0
        fd_steps = [cfg.fd_rot] * 3 + [cfg.fd_trans] * 3

        def moved(T, delta6):
            # Rotation about a pivot at the median scene depth on the optical axis: decouples
            # rotation from translation far better than rotating about the camera centre.
            return pivot_increment(delta6, z_pivot) @ T

        loss_val, known, done, first_it = float("inf"), 0.0, 0, 0
        quality, Hd = TrackQuality(), None
        schedule = lm.level_iters(iters, len(pyramid), cfg.coarse_share)
        for level, ((obs, valid), n_iter) in enumerate(zip(pyramid, schedule)):
            n_valid = int(valid.sum())
            if n_valid == 0:
                return TrackResult(T_wc_init.copy(), float("inf"), 0.0, False, False, done)

            def render(T, obs=obs):
                self._renders += 1
                return snapshot.render(obs.K, obs.width, obs.height, T_cw=T, backend=self.backend)

            damping = cfg.damping
            target = lm.target(obs, cfg.depth_weight)
            affine = lm.affine(exposure, cfg.depth_weight, device)
            out = render(T_cw)
            for it in range(n_iter):
                # The first analytic_iters iterations of the schedule (not of those run).
                analytic = first_it + it < cfg.analytic_iters
                mask = valid & (out.alpha > cfg.alpha_threshold)
                if analytic:
                    # Image gradients are meaningless across rendered depth edges.
                    mask = mask & depth_edge_mask(out.depth)
                m = mask.unsqueeze(-1).to(target.dtype)
                r = lm.residual(out, target, m, affine)
                cols = None
                if analytic:
                    pose_rows = partial(lm.analytic_pose_rows, out, obs, mask, affine, z_pivot)
                else:
                    cols = lm.fd_pose_columns(render, target, m, affine, r, T_cw, moved, fd_steps)
                    pose_rows = partial(lm.copy_rows, cols)
                Hd, gd, cost = lm.normal_equations(r, out, m, exposure, pose_rows, k, cfg.exposure)
                del r, pose_rows, cols   # image-sized: free before the trial renders
                if cost == 0.0 or not math.isfinite(cost):
                    break  # nothing known in view, or NaN / inf data: no step to take
                # LM: try the step, accept if the robust cost drops, else damp harder.
                for _attempt in range(cfg.lm_attempts):
                    step = lm.damped_step(Hd, gd, damping)
                    T_new = moved(T_cw, step[:6])
                    exp_new = lm.clamp_exposure(exposure[0] + step[6], exposure[1] + step[7]) if cfg.exposure else exposure
                    aff_new = lm.affine(exp_new, cfg.depth_weight, device) if cfg.exposure else affine
                    out_new = render(T_new)
                    cost_new = float(lm.robust_cost(lm.residual(out_new, target, m, aff_new), k))
                    done += 1
                    if cost_new <= cost:
                        T_cw, exposure, affine, out = T_new, exp_new, aff_new, out_new
                        damping = max(damping * cfg.damping_down, lm.MIN_DAMPING)
                        break
                    damping *= cfg.damping_up
                else:
                    break  # no improving step: converged (or stuck)
                if float(np.abs(step[:6]).max()) < cfg.converged_step:
                    break
            first_it += n_iter
            if level < len(pyramid) - 1:
                continue   # the loss and the quality figures are those of the finest level
            mask = valid & (out.alpha > cfg.alpha_threshold)
            r = lm.residual(out, target, mask.unsqueeze(-1).to(target.dtype), affine)
            a = r.abs().sum(dim=(0, 1))
            l1 = a[:3].sum() + a[3]                      # L1 colour (3 channels) + lambda * L1 depth
            counts = pixel_counts(out, obs, valid, mask, r, self.quality_cfg)
            l1, covered, depth_in, color_in = torch.cat([l1.reshape(1), counts]).tolist()   # one sync
            cnt = max(int(covered), 1)
            loss_val = l1 / cnt
            known = cnt / max(float(n_valid), 1.0)
            quality = TrackQuality(known, depth_in / cnt, color_in / cnt, conditioning(Hd))
        T_wc = invert(T_cw)
        T_wc = orthonormalize(T_wc) if np.all(np.isfinite(T_wc)) else T_wc   # NaN: failed by _optimise
        information = None if Hd is None else pivot_information_to_body(Hd.cpu().numpy(), z_pivot)
        return TrackResult(T_wc, loss_val, known, True, False, done, quality, information=information)
