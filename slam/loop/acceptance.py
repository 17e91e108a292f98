"""When a verified loop is closed: the tests after verification, each able to hold a loop back.

- **Separation** (before verification, it is cheap): the two keyframes are at least
  ``loop.min_separation_s`` apart in time, and on the way from the old keyframe to the new one the
  camera went at least ``loop.min_excursion_m`` metres away from the old keyframe's camera (the
  current keyframe poses in id order). A camera turning in place sees every view again, after
  looking away, without going anywhere: that is tracking against the map, whose drift a pose
  graph of keyframes a few centimetres apart cannot correct (on TUM fr1/rpy such loops bent the
  trajectory; its camera never goes 0.25 m from where it was). Not the path length: summed over
  keyframe steps, the jitter of a hand-held camera in place adds up to metres.
- **Consistency** (``Consistency``): ``loop.consistent_detections`` consecutive keyframes of the
  loop stage each verify a loop, and each loop agrees with the one before it: the relative pose
  of the two new keyframes that the two loops imply (through the old keyframes' current relative
  pose) is within the chi-square bound of their combined noise of the current one (ORB-SLAM's
  check over consecutive keyframes, with the loops' own covariances). One look-alike view cannot
  close a loop on its own.
- **Significance** (``significance``): the correction a group asks for is beyond its own noise:
  the group's edges' squared whitened errors at the current poses sum beyond the chi-square
  bound of ``loop.significance``; below it the loop is recorded as consistent, not applied.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from slam.config import LoopConfig
from slam.geometry import adjoint, invert, se3_log
from slam.loop.information import chi2_quantile, edge_error, mahalanobis2
from slam.loop.pose_graph import LoopEdge, config_sigmas

DOF = 6     # a relative pose's degrees of freedom


@dataclass
class Separation:
    """Between two keyframes: seconds, and the excursion: the farthest (metres) any keyframe in
    between (at its current pose) got from the older one's camera."""

    seconds: float
    excursion_m: float

    def reason(self, cfg: LoopConfig) -> Optional[str]:
        """Why the two keyframes are too close to be a loop, or None."""
        if self.seconds < cfg.min_separation_s:
            return f"separation: {self.seconds:.1f} s apart < {cfg.min_separation_s} s"
        if self.excursion_m < cfg.min_excursion_m:
            return f"separation: the camera went {self.excursion_m:.2f} m away < {cfg.min_excursion_m} m"
        return None


class Path:
    """Keyframes in id order at their current ``poses`` (id -> T_wc (4, 4)) and their
    ``timestamps`` (id -> s): ``between`` two of them."""

    def __init__(self, poses: dict, timestamps: dict) -> None:
        self.ids = sorted(poses)
        self.index = {k: i for i, k in enumerate(self.ids)}
        self.timestamps = timestamps
        self.centres = np.array([np.asarray(poses[k])[:3, 3] for k in self.ids], dtype=np.float64).reshape(-1, 3)

    def between(self, a: int, b: int) -> Separation:
        """``Separation`` of keyframes a and b (both in the poses)."""
        i, j = sorted((self.index[a], self.index[b]))
        origin = self.centres[self.index[a]]
        excursion = float(np.linalg.norm(self.centres[i:j + 1] - origin, axis=1).max())
        return Separation(abs(self.timestamps[b] - self.timestamps[a]), excursion)


def separation(a: int, b: int, poses: dict, timestamps: dict) -> Separation:
    """``Separation`` of keyframes a and b; ``poses``: id -> T_wc (4, 4) (the path runs through
    the keyframes there, in id order); ``timestamps``: id -> s."""
    return Path(poses, timestamps).between(a, b)


def covariance(edge: LoopEdge, cfg: LoopConfig) -> np.ndarray:
    """(6, 6) covariance of a loop edge's measurement (its information's inverse, or the
    configured loop sigmas')."""
    if edge.information is None:
        return np.diag(config_sigmas(cfg.loop_sigma_trans, cfg.loop_sigma_rot_deg) ** 2)
    return np.linalg.inv(edge.information)


def agreement(first: LoopEdge, second: LoopEdge, poses: dict, cfg: LoopConfig) -> float:
    """Squared whitened disagreement of two loops (a1, b1), (a2, b2): the relative pose of b2 in
    b1 that they imply through a1 -> a2's current relative pose, against b1 -> b2's current one;
    the noise is both loops' (the first carried into the second's frame) plus the configured
    odometry noise of the keyframe steps a1 -> a2 and b1 -> b2. Chi-square with 6 dof if they agree."""
    T = {k: np.asarray(v) for k, v in poses.items()}
    X = invert(first.T_ab) @ invert(T[first.a]) @ T[second.a] @ second.T_ab       # b1 -> b2, by the loops
    xi = se3_log(invert(invert(T[first.b]) @ T[second.b]) @ X)
    Ad = adjoint(invert(X))
    steps = sum(1 for k in T if min(first.a, second.a) < k <= max(first.a, second.a))
    steps += sum(1 for k in T if min(first.b, second.b) < k <= max(first.b, second.b))
    odo = np.diag(config_sigmas(cfg.odometry_sigma_trans, cfg.odometry_sigma_rot_deg) ** 2) * max(steps, 1)
    S = Ad @ covariance(first, cfg) @ Ad.T + covariance(second, cfg) + odo
    return float(xi @ np.linalg.solve(S, xi))


class Consistency:
    """Consecutive detections: ``add`` a keyframe's verified loop as (LoopEdge, anything the
    caller keeps with it), or None where the keyframe verified none; a group is complete when
    ``loop.consistent_detections`` consecutive keyframes each verified a loop that agrees with the
    previous one (``agreement`` within the chi-square bound of ``loop.significance``, 0.99 when
    that is 0)."""

    def __init__(self, cfg: LoopConfig) -> None:
        self.cfg = cfg
        self.group: list[tuple] = []
        self.bound = chi2_quantile(cfg.significance if cfg.significance > 0 else 0.99, DOF)

    def add(self, detection: Optional[tuple], poses: dict) -> tuple[Optional[list], Optional[str]]:
        """(the complete group [(edge, kept), ...] oldest first, None) or (None, why it is not
        complete: a reason for the caller's record)."""
        if detection is None:
            self.group = []
            return None, None
        if self.group:
            d2 = agreement(self.group[-1][0], detection[0], poses, self.cfg)
            if d2 > self.bound:
                self.group = [detection]
                return self._pending(f"disagrees with the loop before (chi2 {d2:.1f} > {self.bound:.1f}); ")
        self.group.append(detection)
        if len(self.group) >= self.cfg.consistent_detections:
            group, self.group = self.group, []
            return group, None
        return self._pending("")

    def _pending(self, why: str) -> tuple[None, str]:
        need = self.cfg.consistent_detections
        return None, f"consistency: {why}{len(self.group)} of {need} consecutive detections"


def significance(group: list[LoopEdge], poses: dict) -> float:
    """The group's squared whitened errors at the current ``poses`` (id -> T_wc (4, 4)), summed:
    chi-square with 6 x len(group) dof if the poses already agree with the loops. Edges without
    information count 0 (they rely on ``loop.min_correction``)."""
    return float(sum(mahalanobis2(edge_error(poses[e.a], poses[e.b], e.T_ab), e.information)
                     for e in group if e.information is not None))


def significant(group: list[LoopEdge], poses: dict, cfg: LoopConfig) -> tuple[bool, float, float]:
    """(whether the correction is beyond its noise, the statistic, the bound)."""
    if cfg.significance <= 0:
        return True, 0.0, 0.0
    n = sum(e.information is not None for e in group)
    if n == 0:
        return True, 0.0, 0.0
    stat, bound = significance(group, poses), chi2_quantile(cfg.significance, DOF * n)
    return stat > bound, stat, bound
