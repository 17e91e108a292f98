"""The pose graph of keyframes, optimised with gtsam (optional dependency, imported here only:
``gtsam_available`` says whether it is installed; docs/ARCHITECTURE.md says why gtsam).

Nodes: keyframe poses T_wc. Edges: odometry between consecutive keyframes (the relative pose of
their current estimates, Gaussian noise from ``loop.odometry_sigma_*``, shaped by the tracker's
information on the newer keyframe where known: ``odometry_information``), every verified loop
(Huber-robust, ``loop.loop_sigma_*``), and a prior on the gauge keyframe (the first). Solved by
Levenberg-Marquardt on SE(3).

Where the current relative pose of two consecutive keyframes is not to be trusted (a tracking
loss or a snap between them: ``slam.loop.bridges``), their edge is the two keyframes' own
measurement (ICP / RGB-D odometry, a "bridge", noise as a loop's), or, when there is none, the
current relative pose with LOST_SIGMA_SCALE x the odometry's noise: it keeps the graph connected
and says nothing else.
"""
from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from slam.config import LoopConfig
from slam.geometry import invert, orthonormalize

# The gauge prior is far stiffer than any edge: it pins the first keyframe, it tunes nothing.
GAUGE_SIGMA = 1e-6
HUBER_K = 1.345          # the usual 95 %-efficiency Huber constant (in standard deviations)
LOST_SIGMA_SCALE = 100.0 # an unmeasured edge across a tracking loss: 1 m / 50 deg at the defaults
# The tracker's information shapes an odometry edge within SHAPE_RANGE x (either way) of the
# configured sigmas: it says which directions the frame pinned down and which it hardly saw, its
# absolute scale (thousands of correlated pixels) would claim far more than the tracker knows.
SHAPE_RANGE = 100.0


def gtsam_available() -> bool:
    """Whether the optional dependency gtsam is installed."""
    return importlib.util.find_spec("gtsam") is not None


@dataclass
class LoopEdge:
    """A verified loop: keyframe ids a (old), b (new) and T_ab (4, 4), b's pose in a's camera."""

    a: int
    b: int
    T_ab: np.ndarray


@dataclass
class GraphSolution:
    """poses: id -> optimised T_wc (4, 4); error_before/after: the graph's total weighted squared
    error (0.5 sum r^T Sigma^-1 r); loop_residual_before/after: the newest loop edge's
    (translation m, rotation deg) residual."""

    poses: dict
    error_before: float
    error_after: float
    loop_residual_before: tuple
    loop_residual_after: tuple
    iterations: int

    def as_dict(self) -> dict:
        return {"error_before": self.error_before, "error_after": self.error_after,
                "loop_residual_before_m_deg": list(self.loop_residual_before),
                "loop_residual_after_m_deg": list(self.loop_residual_after), "iterations": self.iterations,
                "nodes": len(self.poses)}


def edge_residual(T_a: np.ndarray, T_b: np.ndarray, T_ab: np.ndarray) -> tuple[float, float]:
    """(translation m, rotation deg) between the measured relative pose T_ab and the one implied
    by T_wc poses T_a, T_b."""
    E = invert(T_ab) @ invert(T_a) @ T_b
    c = (np.trace(E[:3, :3]) - 1.0) / 2.0
    return float(np.linalg.norm(E[:3, 3])), math.degrees(math.acos(max(-1.0, min(1.0, c))))


def _sigmas(trans: float, rot_deg: float) -> np.ndarray:
    # gtsam's Pose3 tangent order: rotation first, then translation.
    return np.array([math.radians(rot_deg)] * 3 + [trans] * 3)


def odometry_information(information: Optional[np.ndarray], cfg: LoopConfig) -> np.ndarray:
    """(6, 6) information of an odometry edge (gtsam order: rotation rad, translation m). Without
    the tracker's ``information`` (6, 6; up to scale) or when it is not positive definite: the
    configured sigmas' diagonal. Else its shape: in units of the configured sigmas, each block
    (rotation, translation) is scaled to determinant 1, so the sigmas keep setting the size while
    the tracker sets the directions and the coupling; eigenvalues are kept within SHAPE_RANGE x."""
    sig = _sigmas(cfg.odometry_sigma_trans, cfg.odometry_sigma_rot_deg)
    default = np.diag(1.0 / sig ** 2)
    if information is None:
        return default
    M = np.asarray(information, dtype=np.float64) * np.outer(sig, sig)    # dimensionless
    M = 0.5 * (M + M.T)
    if not np.all(np.isfinite(M)) or np.linalg.eigvalsh(M)[0] <= 0:
        return default
    scale = np.repeat([np.linalg.det(M[:3, :3]) ** (-1 / 6), np.linalg.det(M[3:, 3:]) ** (-1 / 6)], 3)
    w, V = np.linalg.eigh(M * np.outer(scale, scale))
    M = (V * np.clip(w, 1.0 / SHAPE_RANGE, SHAPE_RANGE)) @ V.T
    return M / np.outer(sig, sig)


def optimise_pose_graph(poses: dict, loops: list[LoopEdge], cfg: LoopConfig, gauge: int,
                        untrusted: Optional[dict] = None, information: Optional[dict] = None) -> GraphSolution:
    """Optimise keyframe poses (id -> T_wc (4, 4) float64) given loop edges; the gauge keyframe's
    pose is held. Odometry edges join keyframes consecutive in id order; ``untrusted``: (a, b) ->
    the edge's measurement T_ab (4, 4) instead of the current relative pose, or None for an edge
    that only keeps the graph connected; ``information``: keyframe id -> the tracker's (6, 6)
    information on its pose (``odometry_information`` shapes the edge into that keyframe)."""
    import gtsam  # optional heavy dependency (loop closure only)

    ids = sorted(poses)
    graph = gtsam.NonlinearFactorGraph()
    values = gtsam.Values()
    for i in ids:
        values.insert(i, gtsam.Pose3(np.asarray(poses[i], dtype=np.float64)))
    graph.add(gtsam.PriorFactorPose3(gauge, gtsam.Pose3(np.asarray(poses[gauge], dtype=np.float64)),
                                     gtsam.noiseModel.Isotropic.Sigma(6, GAUGE_SIGMA)))
    odo_sigmas = _sigmas(cfg.odometry_sigma_trans, cfg.odometry_sigma_rot_deg)
    odo = gtsam.noiseModel.Diagonal.Sigmas(odo_sigmas)
    unknown = gtsam.noiseModel.Diagonal.Sigmas(odo_sigmas * LOST_SIGMA_SCALE)
    loop_noise = gtsam.noiseModel.Robust.Create(
        gtsam.noiseModel.mEstimator.Huber.Create(HUBER_K),
        gtsam.noiseModel.Diagonal.Sigmas(_sigmas(cfg.loop_sigma_trans, cfg.loop_sigma_rot_deg)))
    untrusted, information = untrusted or {}, information or {}
    for a, b in zip(ids[:-1], ids[1:]):
        rel, noise = invert(np.asarray(poses[a])) @ np.asarray(poses[b]), odo
        if (a, b) in untrusted:
            rel, noise = (rel, unknown) if untrusted[(a, b)] is None else (untrusted[(a, b)], loop_noise)
        elif b in information:
            noise = gtsam.noiseModel.Gaussian.Information(odometry_information(information[b], cfg))
        graph.add(gtsam.BetweenFactorPose3(a, b, gtsam.Pose3(orthonormalize(rel)), noise))
    for e in loops:
        if e.a in poses and e.b in poses:
            graph.add(gtsam.BetweenFactorPose3(e.a, e.b, gtsam.Pose3(orthonormalize(e.T_ab)), loop_noise))
    params = gtsam.LevenbergMarquardtParams()
    optimizer = gtsam.LevenbergMarquardtOptimizer(graph, values, params)
    result = optimizer.optimize()
    out = {i: orthonormalize(result.atPose3(i).matrix()) for i in ids}
    last = loops[-1]
    return GraphSolution(out, float(graph.error(values)), float(graph.error(result)),
                         edge_residual(poses[last.a], poses[last.b], last.T_ab),
                         edge_residual(out[last.a], out[last.b], last.T_ab), int(optimizer.iterations()))
