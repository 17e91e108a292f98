"""The tracking thread's per-frame work: the first frame defines the world, later frames are
tracked against the latest map snapshot, a saved map verifies the tracked pose, and a lost
camera is relocalised. One ``LostPolicy`` decides when the camera is lost in every mode:

- every tracked frame: when the motion prior is not trusted (a gap in the timestamps: before the
  refinement; a large predicted motion: only when the refinement from the prior fails), coarse
  poses from features join the prior as starting points (``slam.tracking.reinit``);
- SLAM: after ``relocalise.after_failures`` consecutive tracking failures, a later failed frame
  (paced by the retry schedule) is relocalised against the keyframes mapped so far, off the
  tracking thread (``slam.tracking.background``): the tracker goes on with the next frames, and
  the first frame after the attempt has finished is tracked from the pose it found (the frames in
  between are flagged). Sequential mode runs the attempt inline, with the same one-frame hand-over.
- saved map (``use_saved_map``): the start pose is unknown, so frames are only relocalised
  against the saved keyframes until one is verified; tracked poses must then agree with the map
  (``Relocaliser.verify``), and after ``relocalise.after_failures_saved_map`` consecutive
  failures the frames are relocalised again.
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

import numpy as np

from slam.config import Config
from slam.geometry import invert, orthonormalize
from slam.map.keyframes import Keyframe
from slam.map.snapshot import MapSnapshot
from slam.observation import Observation
from slam.tracking.background import BackgroundAttempts
from slam.tracking.lost import LostPolicy
from slam.tracking.reinit import Distrust, Reinitialiser
from slam.tracking.relocalise import Relocaliser, RelocResult
from slam.tracking.result import TrackResult
from slam.tracking.rolling_shutter import unroll
from slam.tracking.stream_clock import StreamClock
from slam.tracking.tracker import Tracker

log = logging.getLogger("slam.tracking")


def _unchanged(obs: Observation) -> Observation:
    return obs


class TrackingFrontend:
    """Per-frame pose estimation with failure handling; owned by the tracking thread.

    keyframes: returns a copy of the keyframes mapped so far (what SLAM-mode relocalisation
    searches). ``relocalisations`` lists every attempt's ``RelocResult``.
    """

    def __init__(self, cfg: Config, keyframes: Callable[[], list[Keyframe]]) -> None:
        self.tracking_cfg, self.quality_cfg, self.cfg = cfg.tracking, cfg.quality, cfg.relocalise
        self.backend = cfg.raster.backend
        self.keyframes = keyframes
        self.tracker = Tracker(cfg.tracking, cfg.quality, self.backend)
        self.policy = LostPolicy(cfg.relocalise.after_failures, cfg.relocalise.max_skip)
        self.reinit = Reinitialiser(cfg.reinit)
        self.clock = StreamClock(cfg.reinit.gap_factor, cfg.system.slow_stream_interval_s)
        self.readout_s = cfg.data.rolling_shutter_s
        self.depth_readout_s = (cfg.data.rolling_shutter_s if cfg.data.depth_rolling_shutter_s is None
                                else cfg.data.depth_rolling_shutter_s)
        self.sync_depth = cfg.data.sync_depth
        self.saved_map: Optional[Relocaliser] = None   # set by use_saved_map
        self.relocalisations: list[RelocResult] = []
        self.attempts = BackgroundAttempts(cfg.system.threaded)
        # The keyframe the tracker's poses are expressed against: (id, its pose as the tracker
        # knows it, the loop corrections the map had applied then). None before the first keyframe.
        self.reference: Optional[tuple[int, np.ndarray, int]] = None
        self.rebases = 0
        # The product of every correction ``follow_map`` moved the tracker by (4, 4): the map's
        # correction of the tracker's drift so far. inv(T_map_odom) @ T_wc is a pose that never
        # jumps at a loop closure (REP-105's odom frame; the ROS node's map -> odom).
        self.T_map_odom = np.eye(4)

    def set_reference(self, kf_id: int, T_wc: np.ndarray, loops_seen: int = 0) -> None:
        """Frame poses from now on are relative to keyframe ``kf_id`` made at ``T_wc``, tracked
        against a map that had applied ``loops_seen`` loop corrections (``len(snap.loop_later)``)."""
        self.reference = (kf_id, T_wc.copy(), loops_seen)

    def follow_map(self, snap: Optional[MapSnapshot]) -> None:
        """When ``snap`` carries a new estimate of the reference keyframe's pose (the mapper
        refined it, or a loop closure moved it), move the tracker's pose history with it, so the
        next frame starts from where the map now puts the camera. A reference keyframe the mapper
        has not mapped yet (the tracker runs ahead of the map) is moved by the loop corrections
        applied since it was made, as the mapper will move it (``MapSnapshot.loop_later``):
        otherwise the tracker would keep predicting in the uncorrected frame and its poses would
        jump onto the corrected map."""
        if self.reference is None or snap is None:
            return
        kf_id, T_known, seen = self.reference
        T_map = snap.keyframe_poses.get(kf_id)
        if T_map is None:
            T_map = T_known
            for C in snap.loop_later[seen:]:
                T_map = orthonormalize(np.asarray(C) @ T_map)
        self.reference = (kf_id, np.array(T_map, copy=True), len(snap.loop_later))
        if np.allclose(T_map, T_known, rtol=0.0, atol=1e-9):
            return
        C = orthonormalize(T_map @ invert(T_known))
        self.tracker.rebase(C)
        self.T_map_odom = orthonormalize(C @ self.T_map_odom)
        self.rebases += 1

    def relative_to_reference(self, T_wc: np.ndarray) -> tuple[int, Optional[np.ndarray]]:
        """(reference keyframe id or -1, T_kc (4, 4): ``T_wc`` relative to it, or None)."""
        if self.reference is None:
            return -1, None
        kf_id, T_k, _ = self.reference
        return kf_id, invert(T_k) @ T_wc

    def use_saved_map(self, keyframes: list[Keyframe]) -> None:
        """Localise in a saved map made from ``keyframes``: the start pose is unknown until a
        relocalisation is verified."""
        self.saved_map = self._relocaliser(keyframes)
        self.policy = LostPolicy(self.cfg.after_failures_saved_map, self.cfg.max_skip, needs_pose=True)

    def unroller(self, depth_offset_s: float = 0.0) -> Callable[[Observation], Observation]:
        """The frame's unroll, for its images at any resolution (the tracking resolution's and, when
        keyframes are stored at another, the keyframe's): an observation resampled into its colour's
        middle row's camera (``data.rolling_shutter_s``, ``data.depth_rolling_shutter_s``) and its
        depth, taken ``depth_offset_s`` s after the colour, turned to the colour's time
        (``data.sync_depth``), at the rate of the tracker's last motion taken now, before the frame
        is tracked (``slam.tracking.rolling_shutter``); the identity without that rate (until two
        frames were tracked: the first frames, after a relocalisation) or anything to turn back."""
        offset = depth_offset_s if self.sync_depth else 0.0
        if self.readout_s == 0 and self.depth_readout_s == 0 and offset == 0.0:
            return _unchanged
        omega = self.tracker.turn_rate()
        if omega is None:
            return _unchanged
        return lambda obs: unroll(obs, omega, self.readout_s, offset, self.depth_readout_s)

    def process(self, obs: Observation, snap: Optional[MapSnapshot], index: int, timestamp: float,
                gt_pose: Optional[np.ndarray] = None) -> TrackResult:
        """The pose of frame ``index`` (``obs`` at the tracking resolution, ``timestamp`` s)
        against ``snap`` (None before the first keyframe is mapped: this frame then defines the
        world, at its ground-truth pose when known)."""
        prior = self.tracker.guess(timestamp) if self.tracker.prev is not None else None
        last = self.tracker.prev if prior is not None else None   # where the prior extrapolates from
        gap = self.clock.tick(timestamp)
        why = self.reinit.untrusted(gap, self.clock.slow, prior, last, moving=self.tracker.has_velocity)
        if snap is None:
            T_wc = gt_pose.copy() if gt_pose is not None else np.eye(4)
            self.tracker.initialise(T_wc, timestamp)
            return TrackResult(T_wc, 0.0, 1.0, True, False, 0)
        if self.policy.needs_pose:
            if self.policy.should_try():
                return self._relocalise_in_saved_map(obs, snap, index, timestamp)
            # Lost and backing off before the next attempt: report the last pose, not tracked.
            return TrackResult(self.tracker.last_good_or_identity(), float("inf"), 0.0, False, False, 0)
        found = self._finished_attempt() if self.saved_map is None else None
        res = self._track(obs, snap, why, prior, timestamp, [found] if found is not None else [])
        if found is not None and res.ok:
            # Tracked from the relocalised pose (or by itself): recovered; the velocity from
            # before the loss is stale.
            self.tracker.initialise(res.T_wc, timestamp)
            self.tracker.recoveries += 1
            res.recovered = True
        if self.saved_map is not None:
            res.ok = res.ok and self.saved_map.verify(obs, snap, res.T_wc)
            if self.policy.record(res.ok):
                log.warning("tracking lost for %d frames: relocalising against the saved map", self.policy.failures)
                self.policy.needs_pose, self.policy.failures = True, 0
            return res
        if not self.policy.record(res.ok):
            return res
        keyframes = self.keyframes()
        if not keyframes:
            return res
        if float((obs.depth > 0).float().mean()) < self.tracking_cfg.min_known_fraction:
            return res  # a dropout (black / depth-less frame): nothing to relocalise with
        if self.attempts.busy or not self.policy.should_try():
            return res
        log.warning("tracking lost for %d frames: relocalising frame %d against %d keyframes",
                    self.policy.failures, index, len(keyframes))
        relocaliser = self._relocaliser(keyframes)
        stop = self.attempts.stopping
        self.attempts.submit(index, timestamp, lambda: relocaliser.relocalise(obs, snap, stop), obs.depth.device)
        return res

    def _track(self, obs: Observation, snap: MapSnapshot, untrusted: Optional[Distrust],
               prior: Optional[np.ndarray], timestamp: float, starts: list[np.ndarray]) -> TrackResult:
        """The tracker's estimate from the motion ``prior`` (the tracker's guess; None: it makes
        it); with coarse starting poses from features when the prior is ``untrusted`` (before the
        refinement, or only when the refinement from the prior fails: ``Distrust.eager``), and from
        ``starts`` (T_wc (4, 4): a relocalised pose)."""
        if untrusted is None and not starts:
            return self.tracker.track(obs, snap, prior=prior, timestamp=timestamp)
        ms0, attempts0 = self.reinit.ms, self.reinit.attempts
        search = (lambda: self.reinit.coarse_poses(obs, self.keyframes())) if untrusted is not None else None
        if untrusted is not None and untrusted.eager:
            coarse, fallback = starts + search(), None
            if not coarse and not untrusted.guess:
                coarse = None            # nothing else to start from: the prior, refined as usual
        else:
            coarse, fallback = starts or None, search
        res = self.tracker.track(obs, snap, coarse, prior=prior, timestamp=timestamp, fallback=fallback)
        if self.reinit.attempts > attempts0:
            res.reinit, res.reinit_ms = untrusted.reason, self.reinit.ms - ms0
        return res

    def end(self) -> None:
        """The stream has ended (tracking thread): a relocalisation attempt still running off the
        thread gives up at its next step and is waited for; its result is dropped."""
        self.attempts.stop()

    @property
    def failures(self) -> int:
        """Frames the tracker reported as failed so far."""
        return self.tracker.failures

    # ------------------------------------------------------------------ relocalisation
    def _relocaliser(self, keyframes: list[Keyframe]) -> Relocaliser:
        return Relocaliser(keyframes, self.cfg, self.tracking_cfg, self.quality_cfg, self.backend)

    def _relocalise_in_saved_map(self, obs: Observation, snap: MapSnapshot, index: int,
                                 timestamp: float) -> TrackResult:
        """Saved map, no pose yet: relocalise this frame on the tracking thread (there is nothing
        to track until a pose is found)."""
        res = self.saved_map.relocalise(obs, snap)
        res.frame = index
        self.relocalisations.append(res)
        self.policy.relocalised(res.ok)
        if res.ok:
            self.tracker.initialise(res.T_wc, timestamp)
        log.info("relocalisation attempt %d: %s (inliers %.2f, %.0f ms, from saved keyframe %d)",
                 len(self.relocalisations), "found" if res.ok else "not found", res.inliers, res.ms, res.keyframe)
        return TrackResult(res.T_wc, res.loss, res.inliers, res.ok, False, 0)

    def _finished_attempt(self) -> Optional[np.ndarray]:
        """A relocalisation attempt that finished since the last frame is recorded; returns the
        pose it found (T_wc (4, 4) of an earlier frame) when the camera is still lost, else None."""
        done = self.attempts.poll()
        if done is None:
            return None
        reloc = done.result
        reloc.frame = done.frame
        self.relocalisations.append(reloc)
        lost = self.policy.failures > 0
        self.policy.relocalised(reloc.ok)
        log.warning("relocalisation of frame %d %s (%.0f ms)", done.frame, "succeeded" if reloc.ok else "failed",
                    reloc.ms)
        return reloc.T_wc if reloc.ok and lost else None
