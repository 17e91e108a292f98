"""Camera tracking: pose optimisation against the latest published map.

Per frame: a constant-velocity guess, then Levenberg-Marquardt on a 6-DoF pose increment
(rotation vector about a pivot at the median scene depth + translation, applied on the left of
the world-to-camera pose) and a per-frame affine exposure (gain, bias), minimising robust (Huber)
colour + lambda * depth residuals over the pixels the map already explains (rendered alpha above a
threshold, valid depth away from depth edges), coarse to fine over an image pyramid. Gauss-Newton
needs the pose Jacobian per pixel, so a handful of iterations converge where a first-order
optimiser needs dozens. The solver (``slam.tracking.fused``) gets the normal equations from one
rasterizer pass per evaluation, with the LM state on the device; this class only decides where
to start, judges the result and keeps the motion history. The tracker reads detached snapshots
only: nothing reaches the map.

The tracker works at the resolution of the observation it is given (the system uploads frames at
``tracking.downscale``); the pyramid halves it per coarser level.

Failure detection: the absolute quality test of ``slam.tracking.quality`` (coverage, depth and
colour inliers at the final pose: evidence of this frame alone), and a final residual far above
the recent median. A failure triggers a recovery attempt (more iterations from the last good
pose); frames that stay failed are reported so the system makes no keyframe from them.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Callable, Optional

import numpy as np

from slam.config import QualityConfig, TrackingConfig
from slam.geometry import constant_velocity_guess, orthonormalize, relative_motion
from slam.map.snapshot import MapSnapshot
from slam.observation import Observation
from slam.tracking import lm
from slam.tracking.fused import FusedSolver
from slam.tracking.quality import RELATIVE, RecentLevel, colour_agrees, judge
from slam.tracking.result import TrackResult, not_finite, rank
from slam.tracking.rolling_shutter import body_rate

# The motion prior extrapolates the last motion by the time elapsed since the motion model's last
# frame, at most this much longer than the interval the motion was measured over: a hand-held or
# robot camera's velocity says little about where it is after a longer dropout (the
# re-initialisation's gap test takes over there). (A cap on the elapsed time itself predicted half
# the motion of every frame of a sequence at 2 Hz: 7-Scenes at stride 16 lost 25 of 32 frames.) Not a tuning value of
# the tracker's accuracy: it only bounds how far a stale velocity is trusted.
MAX_EXTRAPOLATION_S = 0.25
# Motions whose turn rates ``Tracker.turn_rate`` averages for the rolling shutter's unroll.
RATE_MOTIONS = 2


class Levels:
    """The frame being tracked (``obs``, the finest level) and its coarse-to-fine pyramid
    (``lm.pyramid``), built on first use and then shared by the frame's LM runs. The solver's CUDA
    graph builds its own pyramid inside the graph from ``obs``."""

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
        """``backend``: the raster backend the solver runs on (``raster.backend``)."""
        self.cfg = cfg
        self.quality_cfg = quality
        # The last two poses the motion model followed (T_wc) and their timestamps (s; None when
        # not known): good frames, and flagged frames whose colour agrees with the map
        # (``quality.colour_agrees``). Any other failed frame leaves them as they are, so its
        # successor is predicted from the last motion and the time elapsed since (``guess``).
        self.prev: Optional[np.ndarray] = None
        self.prev2: Optional[np.ndarray] = None
        self.prev_t: Optional[float] = None
        self.prev2_t: Optional[float] = None
        self.last_good: Optional[np.ndarray] = None
        self.tracked_in_history = 0    # how many of prev2, prev were tracked (not set by initialise)
        # The turn rates (3,) rad/s, camera frame, of the motion model's last two motions between
        # tracked poses (``turn_rate``); cleared by ``initialise``.
        self._rates: deque = deque(maxlen=RATE_MOTIONS)
        self.level = RecentLevel()     # the loss of the recent frames that passed the floors
        self.failures = 0
        self.recoveries = 0
        self._renders = 0        # the solver's passes (renders) for the frame being tracked
        self._solver = FusedSolver(cfg, quality, backend)

    # ------------------------------------------------------------------ public
    def initialise(self, T_wc: np.ndarray, timestamp: Optional[float] = None) -> None:
        """Set the pose of the first frame (the map is built around it), or a relocalised pose,
        at ``timestamp`` (s; None: not known). The velocity is unknown from here."""
        self.prev, self.prev2, self.last_good = T_wc.copy(), None, T_wc.copy()
        self.prev_t, self.prev2_t = timestamp, None
        self.tracked_in_history = 0
        self._rates.clear()

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
        motion scaled by the time elapsed since the motion model's last frame (dropped or failed frames
        in between included; at most ``MAX_EXTRAPOLATION_S`` beyond the motion's own interval);
        without timestamps, one interval."""
        return constant_velocity_guess(self.prev2, self.prev, self._elapsed_intervals(timestamp))

    @property
    def has_velocity(self) -> bool:
        """Whether ``guess`` extrapolates a motion (False from ``initialise`` until a frame was
        tracked after it: the guess is then the last pose)."""
        return self.prev2 is not None

    def turn_rate(self) -> Optional[np.ndarray]:
        """Angular velocity (3,) rad/s, camera frame, for the rolling shutter's unroll: the mean
        rate of the motion model's last ``RATE_MOTIONS`` motions (one until a second is known); None
        until two frames were tracked since ``initialise``: the first frame's pose is set, not
        tracked, and the next one's, tracked from a prior without velocity, made the rate that
        unrolled frame 2 wrong in every TUM run (a silent failure). Why a mean: the rate feeds
        the next frame's unroll, whose pose feeds the next rate; from one motion alone the loop
        oscillated and diverged on TUM fr1/rpy played backwards (docs/benchmarks.md#kinect-v1-facts)."""
        if not self._rates:        # filled only from motions between two tracked poses
            return None
        return np.mean(np.stack(self._rates), axis=0)

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
        if r.ok or colour_agrees(r.reason, r.quality, self.quality_cfg):
            # The motion model (and the rolling shutter's turn rate) follows good frames and
            # flagged frames whose colour agrees with the map: a streak of such frames at a fast
            # turn (TUM fr1/rpy) otherwise left the prior extrapolating one stale velocity further
            # each frame, until the tracker lost the camera.
            self.prev2, self.prev = self.prev, r.T_wc
            self.prev2_t, self.prev_t = self.prev_t, timestamp
            self.tracked_in_history = min(self.tracked_in_history + 1, 2)
            rate = (body_rate(self.prev2, self.prev, self.prev_t - self.prev2_t)
                    if self.tracked_in_history >= 2 and None not in (self.prev_t, self.prev2_t) else None)
            if rate is not None:
                self._rates.append(rate)
        if r.ok:
            self.last_good = r.T_wc
        else:
            # A flagged frame the motion model did not follow leaves it as it was: the next frame
            # is predicted from its last pose by the time elapsed since it (a camera turning at
            # 65 deg/s keeps turning while a frame is flagged; holding the last pose would put the
            # next start two frames' motion away).
            self.failures += 1

    def _optimise(self, levels: "Levels", snapshot: MapSnapshot, T_wc_init: np.ndarray, iters: int) -> TrackResult:
        """LM from ``T_wc_init`` (4, 4 camera-to-world) with ``iters`` iterations over the pyramid. A
        start or a result that is not finite (NaN / inf data, a diverged solve) is a failed result
        at a finite pose (the start, else the last good pose) with its reason, never an exception."""
        if not np.all(np.isfinite(T_wc_init)):
            return TrackResult(self.last_good_or_identity(), float("inf"), 0.0, False, False, 0,
                               reason="not finite: the start pose")
        result, passes = self._solver.optimise(levels, snapshot, T_wc_init, iters)
        self._renders += passes
        bad = not_finite(result)
        if bad:
            return TrackResult(np.array(T_wc_init, dtype=np.float64), float("inf"), 0.0, False, False, result.iters,
                               reason=f"not finite: {', '.join(bad)} (bad input data or a diverged solve)")
        return result
