"""Re-initialisation across gaps: when the motion prior cannot be trusted, coarse poses from ORB
features matched against the newest keyframes (PnP + RANSAC on their depth) join the prior as
starting points of the dense refinement; the tracker keeps the start whose refined pose the
quality test likes best.

The prior is not trusted after a gap in the timestamps (a frame later than ``gap_factor`` x the
usual interval: dropped frames), at the first frame tracked after a pose was set (the start, a
relocalisation: no velocity yet, so the prior is "no motion", however fast the camera moves), or
when it predicts a large motion (the dense refinement's basin
of convergence is a few centimetres and degrees). After a gap the prior is a guess, so the coarse
poses are searched before the refinement (``Distrust.eager``), and the prior itself is refined with
``tracking.recovery_iters`` even when the search finds nothing. With no velocity yet the search
also comes first (once per start or relocalisation: its cost does not matter), but the prior keeps
the usual iterations unless the features offer another start (``Distrust.guess``): on TUM fr1/rpy
at 15 Hz the camera had turned 5.6 degrees by frame 1 and the refinement from "no motion" passed the
quality test 5 cm / 2 degrees off, the feature start's refinement was right. A large predicted motion at camera
rate is usually predicted right (a camera turning fast keeps turning; over 33 ms the velocity
barely changes), so there the coarse poses are searched only when the refinement from the prior
fails the quality test: on TUM fr1/rpy (H200) a tenth of the frames predicted more than 3 degrees
and paid 28 ms of ORB + PnP each, eagerly, a third of the tracking thread's time. In a slower
stream (usual interval above ``system.slow_stream_interval_s``) a constant velocity over the
interval is a poor guess and the search is cheap against the frame period, so it runs first: on
7-Scenes at stride 16 (0.53 s) the search only after a failure let 2 wrong refinements from the
prior pass as ok in every run. A failed previous frame alone does not make the
prior untrusted: the tracker predicts from the last good motion and the elapsed time, and a
flagged frame must not make the next one expensive (consecutive failures are the lost policy's
business: ``slam.tracking.lost``). PnP was chosen over a
coarse ICP on depth because it needs no initial guess at all, its cost does not grow with the
motion, and it already serves relocalisation; features of keyframes are cached, so a gap frame
pays one ORB extraction and a few matches.
"""
from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

import numpy as np

from slam.config import ReinitConfig
from slam.geometry import relative_motion
from slam.map.keyframes import Keyframe
from slam.observation import Observation
from slam.tracking.features import OrbFeatures, orb_features, pnp_pose

FEATURE_CACHE = 16        # keyframes whose ORB features are kept
NO_MOTION_YET = "no motion yet (the first frame tracked since the pose was set)"


@dataclass(frozen=True)
class Distrust:
    """Why the motion prior is not trusted, and whether the coarse poses are searched before the
    refinement (``eager``: after a gap) or only when the refinement from the prior fails."""

    reason: str
    eager: bool
    guess: bool = True      # the prior is a guess: refined longer (``tracking.recovery_iters``)
                            # even when the search finds no other start


class Reinitialiser:
    """Decides when the prior is untrusted and proposes coarse poses; owned by the tracking thread.
    ``attempts``/``ms`` count the coarse-pose searches and their time (metrics)."""

    def __init__(self, cfg: ReinitConfig) -> None:
        self.cfg = cfg
        self._features: OrderedDict = OrderedDict()   # keyframe frame index -> OrbFeatures
        self.attempts = 0
        self.ms = 0.0

    def untrusted(self, gap: Optional[float], slow: bool, prior: np.ndarray,
                  last: Optional[np.ndarray], moving: bool) -> Optional[Distrust]:
        """Why the motion prior ``prior`` (4, 4) is not to be trusted, or None. ``gap``: seconds
        of a gap in the timestamps before this frame, or None (``StreamClock.tick``); ``slow``:
        the stream is slow (``StreamClock.slow``); ``last``: the pose the prior extrapolates from;
        ``moving``: the prior has a velocity (False at the first frame tracked after a pose was set)."""
        if not self.cfg.enabled or last is None:
            return None
        if gap is not None:
            return Distrust(f"gap of {gap * 1e3:.0f} ms", eager=True)
        if not moving:
            return Distrust(NO_MOTION_YET, eager=True, guess=False)
        shift, turn = relative_motion(last, prior)
        if shift > self.cfg.max_prior_shift or math.degrees(turn) > self.cfg.max_prior_turn_deg:
            return Distrust(f"large predicted motion ({shift * 100:.1f} cm, {math.degrees(turn):.1f} deg)", eager=slow)
        return None

    def coarse_poses(self, obs: Observation, keyframes: list[Keyframe]) -> list[np.ndarray]:
        """T_wc (4, 4) candidates for ``obs`` (tracking resolution) from PnP against the newest
        ``reinit.keyframes`` keyframes, most RANSAC inliers first."""
        t0 = time.perf_counter()
        self.attempts += 1
        found = []
        if keyframes and self.cfg.keyframes > 0:
            query = orb_features(obs.color_uint8())
            K = obs.K.numpy()
            for kf in keyframes[-self.cfg.keyframes:]:
                res = pnp_pose(query, K, kf, self._keyframe_features(kf))
                if res is not None:
                    found.append(res)
        found.sort(key=lambda r: -r[1])
        self.ms += (time.perf_counter() - t0) * 1e3
        return [T for T, _ in found]

    def _keyframe_features(self, kf: Keyframe) -> OrbFeatures:
        feats = self._features.get(kf.frame_index)
        if feats is None:
            feats = self._features[kf.frame_index] = orb_features(kf.color)
            while len(self._features) > FEATURE_CACHE:
                self._features.popitem(last=False)
        return feats
