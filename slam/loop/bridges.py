"""Which odometry edges of the pose graph the tracker's relative poses may not give.

The graph's odometry edge between consecutive keyframes is normally their current relative pose:
the tracker's measurement, refined by the mapper. Two things break that:

- a tracking loss between them: a relocalisation (or a guess) put the second keyframe where it
  is, so their relative pose measures nothing;
- a snap: near a revisit the tracker, which tracks against the whole map, pulls itself onto the
  old visit's spheres over a few frames. Those frames' relative poses then hold the loop's error,
  and a loop edge found afterwards agrees with the poses while the keyframes before the snap
  still carry the drift.

So every keyframe is also measured against the one before it from their depths alone (a
"bridge": ``LoopVerifier.measure``, ICP or on a flat view RGB-D odometry). The graph replaces the
tracker's edge by the bridge where tracking was lost, and where the bridge disagrees with the
tracker by more than SNAP_SIGMAS robust standard deviations of the sequence's own disagreements
(median absolute deviation over the pairs without a loss) and more than the loop stage's
``min_correction``. A loss whose keyframes cannot be measured leaves an edge that only keeps the
graph connected (``slam.loop.pose_graph``).
"""
from __future__ import annotations

import logging
from typing import Optional

import numpy as np

from slam.config import LoopConfig
from slam.geometry import correction, invert, motion_size
from slam.map.keyframes import Keyframe

log = logging.getLogger("slam.loop")

SNAP_SIGMAS = 3.0        # an outlier test on the disagreement, in robust standard deviations
MIN_PAIRS = 5            # disagreements needed before their spread is estimated
MAD_TO_SIGMA = 1.4826    # median absolute deviation -> standard deviation of a normal


class Bridges:
    """Bridges between consecutive keyframes (in the order the loop stage sees them) and the
    tracking losses between them. ``measure(new, old, T_init)`` -> (``Measurement`` (T_ab (4, 4)
    and its information) or None, reason)."""

    def __init__(self, cfg: LoopConfig, measure) -> None:
        self.cfg = cfg
        self.measure = measure
        self.losses: set[int] = set()        # keyframes reached through a tracking loss
        self.measured: dict = {}             # (previous id, id) -> the bridge (Measurement)
        self.disagreement: dict = {}         # (previous id, id) -> (m, deg): bridge vs tracker
        self.not_measured = 0

    def add(self, kf: Keyframe, prev: Optional[Keyframe], poses: dict, after_loss: bool) -> None:
        """Measure ``kf`` against ``prev`` (the newest older keyframe, or None) from their current
        poses ``poses`` (id -> T_wc (4, 4)); ``after_loss``: tracking was lost in between."""
        if after_loss:
            self.losses.add(kf.kf_id)
        if prev is None or prev.kf_id not in poses or kf.kf_id not in poses:
            self.not_measured += 1
            return
        T_init = invert(np.asarray(poses[prev.kf_id])) @ np.asarray(poses[kf.kf_id])
        bridge, reason = self.measure(kf, prev, T_init)
        if bridge is None:
            self.not_measured += 1
            if after_loss:
                log.info("keyframe %d after a tracking loss: not measured against keyframe %d (%s)",
                         kf.kf_id, prev.kf_id, reason)
            return
        pair = (prev.kf_id, kf.kf_id)
        self.measured[pair] = bridge
        self.disagreement[pair] = motion_size(correction(T_init, bridge.T_ab))
        if after_loss:
            log.info("keyframe %d after a tracking loss: measured against keyframe %d (%.1f cm, %.2f deg "
                     "from its tracked pose)", kf.kf_id, prev.kf_id, self.disagreement[pair][0] * 100,
                     self.disagreement[pair][1])

    def gate(self) -> tuple[float, float]:
        """(m, deg): a bridge disagreeing with the tracker by more than this (either part) marks a
        snap: SNAP_SIGMAS robust standard deviations of the disagreements without a loss, at
        least ``loop.min_correction`` / ``min_correction_deg``."""
        clean = np.array([d for (a, b), d in self.disagreement.items() if b not in self.losses]).reshape(-1, 2)
        floor = np.array([self.cfg.min_correction, self.cfg.min_correction_deg])
        if len(clean) < MIN_PAIRS:
            return tuple(floor)
        spread = SNAP_SIGMAS * MAD_TO_SIGMA * np.median(clean, axis=0)
        return tuple(np.maximum(floor, spread))

    def untrusted(self, ids: list[int]) -> dict:
        """For consecutive ``ids`` (sorted keyframe ids in the graph): (a, b) -> the bridge
        (``Measurement``) where the tracker's relative pose may not be the edge, or None where
        tracking was lost and no bridge exists."""
        gate = self.gate()
        out = {}
        for a, b in zip(ids[:-1], ids[1:]):
            if any(a < k <= b for k in self.losses):
                out[(a, b)] = self.measured.get((a, b))
            elif (a, b) in self.measured and self._snap((a, b), gate):
                out[(a, b)] = self.measured[(a, b)]
        return out

    def snaps(self, untrusted: dict) -> frozenset:
        """The pairs of ``untrusted`` (``untrusted``'s output) that are snaps: a bridge and no loss.
        The pose graph weighs the bridge against the tracker there (``optimise_pose_graph``'s
        ``contested``): on TUM fr1/rpy (360 frames, CPU) the bridge, not the tracker, was 5-6 cm
        off the ground truth at three of its four snaps; on the generated loop the tracker was."""
        return frozenset(p for p, m in untrusted.items()
                         if m is not None and not any(p[0] < k <= p[1] for k in self.losses))

    def _snap(self, pair: tuple, gate: tuple) -> bool:
        shift, turn = self.disagreement[pair]
        return shift > gate[0] or turn > gate[1]

    def summary(self) -> dict:
        """For metrics.json: losses, bridges measured, snaps found (bridges that replace the
        tracker's edge without a loss) and the gate."""
        gate = self.gate()
        return {"keyframes_after_loss": len(self.losses), "bridges": len(self.measured),
                "not_measured": self.not_measured,
                "snaps": int(sum(b not in self.losses and self._snap((a, b), gate) for a, b in self.measured)),
                "snap_gate_m_deg": [float(g) for g in gate]}
