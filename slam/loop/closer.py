"""The loop stage: for each mapped keyframe, find earlier keyframes that see the same place, verify
the best candidates geometrically, and when a verified loop disagrees with the current keyframe
poses, optimise the pose graph and hand the corrections to the mapper (the one writer of the map
and of the keyframe poses). Every keyframe is also measured against the one before it from their
depths (``slam.loop.bridges``); a verified loop whose span holds a tracking loss or a snap always
has its graph optimised, since the loop edge alone can agree with poses a relocalisation or the
snap set while the keyframes before it still carry the drift. Runs on its own thread in threaded
mode; reads only what it is given (the keyframe, the snapshot published after it) and its own
database.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from slam.config import LoopConfig, QualityConfig, TrackingConfig
from slam.loop.bridges import Bridges
from slam.loop.descriptor import global_descriptor, similarity
from slam.loop.messages import LoopCorrection, LoopEvent
from slam.loop.pose_graph import LoopEdge, optimise_pose_graph
from slam.loop.verify import LoopVerifier
from slam.mapping.keyframes import Keyframe
from slam.mapping.pose_refine import correction, motion_size
from slam.tracking.features import OrbFeatures, orb_features

log = logging.getLogger("slam.loop")


@dataclass
class _Entry:
    kf: Keyframe
    descriptor: np.ndarray
    features: OrbFeatures


class LoopCloser:
    """Revisit detection + verification + pose graph. ``submit``: where corrections go (the
    mapper's ``submit_correction``). ``events`` lists every verified candidate's outcome."""

    def __init__(self, cfg: LoopConfig, tracking: TrackingConfig, quality: QualityConfig,
                 submit: Callable[[LoopCorrection], None], backend: str = "auto") -> None:
        self.cfg = cfg
        self.submit = submit
        self.verifier = LoopVerifier(cfg, tracking, quality, backend)
        self.database: dict[int, _Entry] = {}
        self.loops: list[LoopEdge] = []
        self.events: list[LoopEvent] = []
        self.gauge: Optional[int] = None
        self.bridges = Bridges(cfg, self.verifier.measure)
        self.keyframes = 0
        self.skipped = 0          # keyframes the mapper could not hand over (stage busy)
        self.ms = 0.0
        # A submitted correction reaches the map with a later snapshot; until one shows its edge,
        # the poses here are stale and a second correction would be applied twice.
        self._awaiting: Optional[tuple] = None

    def add_saved(self, keyframes: list[Keyframe]) -> None:
        """A saved map's keyframes join the database (revisits of the saved map close loops)."""
        for kf in keyframes:
            self._remember(kf)

    def process(self, kf: Keyframe, snap, live_ids: Optional[set] = None,
                after_loss: bool = False) -> Optional[LoopCorrection]:
        """Handle one mapped keyframe ``kf`` given the snapshot published after it (its
        ``keyframe_poses`` are the current estimates); ``live_ids``: keyframe ids still in the
        store (others leave the database); ``after_loss``: tracking was lost since the previous
        keyframe this stage saw. Returns the correction it submitted, if any."""
        t0 = time.perf_counter()
        self.keyframes += 1
        if self.gauge is None:
            self.gauge = min(snap.keyframe_poses) if snap.keyframe_poses else kf.kf_id
        older = [k for k in self.database if k < kf.kf_id]
        self.bridges.add(kf, self.database[max(older)].kf if older else None, snap.keyframe_poses, after_loss)
        entry = self._remember(kf)
        if live_ids is not None:
            for k in [k for k in self.database if k not in live_ids and k != kf.kf_id]:
                del self.database[k]
        corr = None
        if self._awaiting is not None and self._awaiting not in snap.loop_edges:
            self.ms += (time.perf_counter() - t0) * 1e3
            return None
        self._awaiting = None
        for cand, sim in self._candidates(entry, snap.keyframe_poses):
            event, corr = self._try(entry, cand, sim, snap)
            self.events.append(event)
            if event.outcome != "rejected":
                break
        self.ms += (time.perf_counter() - t0) * 1e3
        return corr

    # ------------------------------------------------------------------ steps
    def _remember(self, kf: Keyframe) -> _Entry:
        entry = _Entry(kf, global_descriptor(kf.color), orb_features(kf.color))
        self.database[kf.kf_id] = entry
        return entry

    def _candidates(self, entry: _Entry, poses: dict) -> list[tuple[_Entry, float]]:
        """Older keyframes (by ``min_separation`` ids) whose camera is within ``max_distance``
        of this one's (covisibility under bounded drift) and whose descriptor correlates at least
        ``min_similarity``; the ``top_k`` best."""
        cfg, kf = self.cfg, entry.kf
        T = poses.get(kf.kf_id, kf.T_wc)
        out = []
        for k, e in self.database.items():
            if k > kf.kf_id - cfg.min_separation or k not in poses:
                continue
            if np.linalg.norm(poses[k][:3, 3] - T[:3, 3]) > cfg.max_distance:
                continue
            s = similarity(entry.descriptor, e.descriptor)
            if s >= cfg.min_similarity:
                out.append((e, s))
        out.sort(key=lambda c: -c[1])
        return out[: cfg.top_k]

    def _try(self, new: _Entry, old: _Entry, sim: float, snap) -> tuple[LoopEvent, Optional[LoopCorrection]]:
        t0 = time.perf_counter()
        poses = snap.keyframe_poses
        a, b = old.kf.kf_id, new.kf.kf_id
        max_anchor = a + self.cfg.min_separation // 2
        v = self.verifier.verify(new.kf, new.features, old.kf, old.features, poses[a], snap, max_anchor)
        event = LoopEvent(b, a, sim, "rejected", v.reason or "", v.pnp_inliers, v.overlap, v.depth_inliers,
                          v.render_agreement)
        if v.reason is not None:
            event.ms = (time.perf_counter() - t0) * 1e3
            log.info("loop candidate %d -> %d rejected: %s", b, a, v.reason)
            return event, None
        edge = LoopEdge(a, b, v.T_ab)
        event.shift_m, event.turn_deg = motion_size(correction(poses[b], poses[a] @ v.T_ab))
        self.loops.append(edge)
        graph_poses = {k: np.asarray(T) for k, T in poses.items() if k <= b}
        untrusted = self.bridges.untrusted(sorted(graph_poses))
        spans_break = any(a <= p < b for p, _ in untrusted)
        if not spans_break and self._small(event.shift_m, event.turn_deg):
            return self._consistent(event, t0, "verified; the poses already agree")
        information = {k: e.kf.information for k, e in self.database.items()
                       if k in graph_poses and e.kf.information is not None}
        sol = optimise_pose_graph(graph_poses, self.loops, self.cfg, self.gauge, untrusted, information)
        corrections = {k: correction(graph_poses[k], sol.poses[k]) for k in graph_poses}
        if spans_break and all(self._small(*motion_size(C)) for C in corrections.values()):
            return self._consistent(event, t0, "verified; the graph (a loss or snap in the loop) moves no keyframe")
        corr = LoopCorrection(corrections, corrections[b], (a, b))
        self.submit(corr)
        self._awaiting = (a, b)
        event.outcome, event.reason, event.graph = "accepted", "verified and closed", sol.as_dict()
        event.ms = (time.perf_counter() - t0) * 1e3
        log.info("loop closed: keyframe %d -> %d (%.1f cm, %.2f deg off; graph error %.3g -> %.3g)",
                 b, a, event.shift_m * 100, event.turn_deg, sol.error_before, sol.error_after)
        return event, corr

    def _small(self, shift_m: float, turn_deg: float) -> bool:
        return shift_m < self.cfg.min_correction and turn_deg < self.cfg.min_correction_deg

    @staticmethod
    def _consistent(event: LoopEvent, t0: float, why: str) -> tuple[LoopEvent, None]:
        event.outcome, event.reason = "consistent", why
        event.ms = (time.perf_counter() - t0) * 1e3
        return event, None

    # ------------------------------------------------------------------ report
    def summary(self) -> dict:
        """For metrics.json: candidates verified, accepted, consistent, rejected by reason."""
        reasons: dict = {}
        for e in self.events:
            if e.outcome == "rejected":
                kind = e.reason.split(":")[0]
                reasons[kind] = reasons.get(kind, 0) + 1
        return {
            "keyframes_checked": self.keyframes,
            "keyframes_skipped_busy": self.skipped,
            "candidates": len(self.events),
            "accepted": sum(e.outcome == "accepted" for e in self.events),
            "consistent": sum(e.outcome == "consistent" for e in self.events),
            "rejected": sum(e.outcome == "rejected" for e in self.events),
            "rejected_by": reasons,
            "bridges": self.bridges.summary(),
            "ms_total": self.ms,
            "ms_per_keyframe": self.ms / max(self.keyframes, 1),
            "events": [dict(vars(e)) for e in self.events[:200]],
        }
