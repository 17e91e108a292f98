"""Keyframe selection and the bounded keyframe store the mapper optimises over.

The keyframes themselves (``Keyframe``, ``KeyframeView``) are shared state and live in
``slam.map.keyframes``. Their number is capped; when full, the most redundant keyframe (closest in
pose to another one) is dropped, never the first (the map's anchor).
"""
from __future__ import annotations

import random
from typing import Optional

import numpy as np

from slam.config import MappingConfig
from slam.geometry import relative_motion
from slam.map.keyframes import Keyframe


class KeyframeSelector:
    """Decides whether a tracked frame becomes a keyframe (motion or frame-count based)."""

    def __init__(self, cfg: MappingConfig) -> None:
        self.cfg = cfg
        self.last_pose: Optional[np.ndarray] = None
        self.frames_since = 0

    def is_keyframe(self, T_wc: np.ndarray, tracking_ok: bool) -> bool:
        """Call once per frame, in order."""
        self.frames_since += 1
        if self.last_pose is None:
            return self._take(T_wc)
        if not tracking_ok:
            return False
        dt, dr = relative_motion(self.last_pose, T_wc)
        if (
            self.frames_since >= self.cfg.keyframe_every
            or dt >= self.cfg.keyframe_translation
            or np.degrees(dr) >= self.cfg.keyframe_rotation_deg
        ):
            return self._take(T_wc)
        return False

    def _take(self, T_wc: np.ndarray) -> bool:
        self.last_pose = T_wc.copy()
        self.frames_since = 0
        return True


class KeyframeStore:
    """At most ``capacity`` keyframes; chooses the optimisation window for each mapping step."""

    def __init__(self, capacity: int, seed: int = 0) -> None:
        self.capacity = capacity
        self.items: list[Keyframe] = []
        self.rng = random.Random(seed)

    def __len__(self) -> int:
        return len(self.items)

    def add(self, kf: Keyframe) -> Optional[Keyframe]:
        """Insert; returns the keyframe dropped to respect the cap, if any."""
        self.items.append(kf)
        if len(self.items) <= self.capacity:
            return None
        return self.items.pop(self._most_redundant())

    def _most_redundant(self) -> int:
        best, best_score = 1, float("inf")
        last = len(self.items) - 1
        for i in range(1, last):  # never the anchor (0) nor the newest
            neighbours = [j for j in (i - 1, i + 1)]
            score = min(self._distance(self.items[i], self.items[j]) for j in neighbours)
            if score < best_score:
                best, best_score = i, score
        return best

    @staticmethod
    def _distance(a: Keyframe, b: Keyframe) -> float:
        dt, dr = relative_motion(a.T_wc, b.T_wc)
        return dt + 0.5 * dr  # metres + half a metre per radian

    def window(self, size: int, n_random: int) -> list[Keyframe]:
        """The newest keyframe, the ``size - 1`` keyframes closest to it in pose, and
        ``n_random`` others drawn at random (keeps old parts of the map from drifting)."""
        if not self.items:
            return []
        newest = self.items[-1]
        others = self.items[:-1]
        others_sorted = sorted(others, key=lambda k: self._distance(k, newest))
        chosen = [newest] + others_sorted[: size - 1]
        rest = others_sorted[size - 1 :]
        if rest and n_random > 0:
            chosen += self.rng.sample(rest, min(n_random, len(rest)))
        return chosen

    def around(self, kf_ids: list[int], size: int) -> list[Keyframe]:
        """The keyframes with ids ``kf_ids`` and, for each, its ``size // 2`` closest others in
        pose (the seam of a loop closure), without repeats."""
        chosen: dict[int, Keyframe] = {}
        for kf in self.items:
            if kf.kf_id in kf_ids:
                chosen[kf.kf_id] = kf
                near = sorted((k for k in self.items if k is not kf), key=lambda k: self._distance(k, kf))
                for k in near[: max(size // 2, 0)]:
                    chosen.setdefault(k.kf_id, k)
        return list(chosen.values())

    def nbytes(self) -> int:
        return sum(k.nbytes() for k in self.items)
