"""The pose graph of keyframes, optimised with gtsam (optional dependency, imported here only:
``gtsam_available`` says whether it is installed; docs/ARCHITECTURE.md says why gtsam).

Nodes: keyframe poses T_wc. Edges: odometry between consecutive keyframes (the relative pose of
their current estimates, Gaussian noise from ``loop.odometry_sigma_*``, shaped by the tracker's
information on the newer keyframe where known: ``odometry_information``), every loop the stage
accepted (each with its own measurement's information, ``slam.loop.information``; the configured
``loop.loop_sigma_*`` only where that is not known), and a prior on the gauge keyframe (the first).

The back end (``loop.backend``) decides how much a loop edge that disagrees with the rest may
bend the trajectory: ``gnc`` (default) is graduated non-convexity with a truncated quadratic
(gtsam's GncOptimizer over Levenberg-Marquardt: the odometry, bridges across losses and the gauge
are known inliers, a loop edge (or a snap's candidate) whose whitened error at the solution is beyond the chi-square bound
GNC_INLIER_PROBABILITY gets weight 0); ``dcs`` (dynamic covariance scaling), ``cauchy`` and
``huber`` are M-estimators on the loop edges, solved by Levenberg-Marquardt. Why GNC:
docs/benchmarks.md#where-the-loop-defaults-come-from.

Where the current relative pose of two consecutive keyframes is not to be trusted (a tracking
loss between them: ``slam.loop.bridges``), their edge is the two keyframes' own measurement (ICP /
RGB-D odometry, a "bridge", with its information), or, when there is none, the current relative
pose with LOST_SIGMA_SCALE x the odometry's noise: it keeps the graph connected and says nothing
else. Where the bridge and the tracker disagree without a loss (a snap) either can be the wrong
one (on the generated loop the tracker, snapping onto the old map; on TUM fr1/rpy the bridge,
depth-only ICP on a fast turn): both go in as robust candidates beside such a connecting edge;
the loops and the two edges' information decide which holds (GNC keeps both where they are
close enough to each other).
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
# The M-estimators' usual constants (whitened units): 95 % efficiency under Gaussian noise for
# Huber and Cauchy; Agarwal et al.'s (ICRA 2013) Phi = 1 for DCS.
HUBER_K = 1.345
CAUCHY_K = 2.3849
DCS_PHI = 1.0
# GNC's truncated quadratic: a loop edge is an inlier while its squared whitened error is within
# the chi-square bound (6 degrees of freedom) of this probability.
GNC_INLIER_PROBABILITY = 0.99
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
    """A verified loop: keyframe ids a (old), b (new), T_ab (4, 4): b's pose in a's camera, and
    its information (6, 6; gtsam order, body frame of T_ab) or None (the configured sigmas)."""

    a: int
    b: int
    T_ab: np.ndarray
    information: Optional[np.ndarray] = None


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
    weights: dict = None          # (a, b) -> the loop edge's weight at the solution (0 = ignored)
    contested: dict = None        # (a, b, 'tracker' | 'bridge') -> a contested pair's edges' weights

    def as_dict(self) -> dict:
        return {"error_before": self.error_before, "error_after": self.error_after,
                "loop_residual_before_m_deg": list(self.loop_residual_before),
                "loop_residual_after_m_deg": list(self.loop_residual_after), "iterations": self.iterations,
                "nodes": len(self.poses),
                "loop_weights": [[a, b, round(float(w), 4)] for (a, b), w in (self.weights or {}).items()],
                "snap_weights": [[a, b, kind, round(float(w), 4)] for (a, b, kind), w in (self.contested or {}).items()]}


def edge_residual(T_a: np.ndarray, T_b: np.ndarray, T_ab: np.ndarray) -> tuple[float, float]:
    """(translation m, rotation deg) between the measured relative pose T_ab and the one implied
    by T_wc poses T_a, T_b."""
    E = invert(T_ab) @ invert(T_a) @ T_b
    c = (np.trace(E[:3, :3]) - 1.0) / 2.0
    return float(np.linalg.norm(E[:3, 3])), math.degrees(math.acos(max(-1.0, min(1.0, c))))


def config_sigmas(trans: float, rot_deg: float) -> np.ndarray:
    """(6,) standard deviations in gtsam's Pose3 tangent order: rotation (rad) first, then translation (m)."""
    return np.array([math.radians(rot_deg)] * 3 + [trans] * 3)


def odometry_information(information: Optional[np.ndarray], cfg: LoopConfig) -> np.ndarray:
    """(6, 6) information of an odometry edge (gtsam order: rotation rad, translation m). Without
    the tracker's ``information`` (6, 6; up to scale) or when it is not positive definite: the
    configured sigmas' diagonal. Else its shape: in units of the configured sigmas, each block
    (rotation, translation) is scaled to determinant 1, so the sigmas keep setting the size while
    the tracker sets the directions and the coupling; eigenvalues are kept within SHAPE_RANGE x."""
    sig = config_sigmas(cfg.odometry_sigma_trans, cfg.odometry_sigma_rot_deg)
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


def _estimator(backend: str):
    """gtsam's M-estimator of a backend name (None for gnc: GNC weighs the edges itself)."""
    import gtsam

    est = gtsam.noiseModel.mEstimator
    return {"huber": lambda: est.Huber.Create(HUBER_K), "cauchy": lambda: est.Cauchy.Create(CAUCHY_K),
            "dcs": lambda: est.DCS.Create(DCS_PHI), "gnc": lambda: None}[backend]()


def _gaussian(information: Optional[np.ndarray], sigmas: np.ndarray):
    import gtsam

    if information is None:
        return gtsam.noiseModel.Diagonal.Sigmas(sigmas)
    return gtsam.noiseModel.Gaussian.Information(np.asarray(information, dtype=np.float64))


def optimise_pose_graph(poses: dict, loops: list[LoopEdge], cfg: LoopConfig, gauge: int,
                        untrusted: Optional[dict] = None, information: Optional[dict] = None,
                        contested: frozenset = frozenset()) -> GraphSolution:
    """Optimise keyframe poses (id -> T_wc (4, 4) float64) given loop edges; the gauge keyframe's
    pose is held. Odometry edges join keyframes consecutive in id order; ``untrusted``: (a, b) ->
    the edge's measurement (``slam.loop.verify.Measurement``: T_ab (4, 4) and its information)
    instead of the current relative pose, or None for an edge that only keeps the graph connected;
    ``information``: keyframe id -> the tracker's (6, 6) information on its pose
    (``odometry_information`` shapes the edge into that keyframe). The loop edges go through the
    ``loop.backend``'s robust back end. ``contested``: pairs of ``untrusted`` whose bridge and
    tracker disagree without a loss (a snap, ``slam.loop.bridges``): both go in as robust
    candidates, weighed like the loop edges, beside a connecting edge of LOST_SIGMA_SCALE x the
    odometry's noise; the loops decide which of the two holds."""
    import gtsam  # optional heavy dependency (loop closure only)

    ids = sorted(poses)
    graph = gtsam.NonlinearFactorGraph()
    values = gtsam.Values()
    for i in ids:
        values.insert(i, gtsam.Pose3(np.asarray(poses[i], dtype=np.float64)))
    graph.add(gtsam.PriorFactorPose3(gauge, gtsam.Pose3(np.asarray(poses[gauge], dtype=np.float64)),
                                     gtsam.noiseModel.Isotropic.Sigma(6, GAUGE_SIGMA)))
    odo_sigmas = config_sigmas(cfg.odometry_sigma_trans, cfg.odometry_sigma_rot_deg)
    loop_sigmas = config_sigmas(cfg.loop_sigma_trans, cfg.loop_sigma_rot_deg)
    odo = gtsam.noiseModel.Diagonal.Sigmas(odo_sigmas)
    unknown = gtsam.noiseModel.Diagonal.Sigmas(odo_sigmas * LOST_SIGMA_SCALE)
    untrusted, information = untrusted or {}, information or {}
    estimator = _estimator(cfg.backend)
    candidates = {}                         # (a, b, kind) -> factor index: weighed by the back end

    def candidate(key, a, b, T, noise):
        if estimator is not None:
            noise = gtsam.noiseModel.Robust.Create(estimator, noise)
        candidates[key] = graph.size()
        graph.add(gtsam.BetweenFactorPose3(a, b, gtsam.Pose3(orthonormalize(T)), noise))

    for a, b in zip(ids[:-1], ids[1:]):
        rel, noise = invert(np.asarray(poses[a])) @ np.asarray(poses[b]), odo
        if b in information:
            noise = gtsam.noiseModel.Gaussian.Information(odometry_information(information[b], cfg))
        if (a, b) in contested and untrusted.get((a, b)) is not None:
            m = untrusted[(a, b)]
            candidate((a, b, "tracker"), a, b, rel, noise)
            candidate((a, b, "bridge"), a, b, m.T_ab, _gaussian(m.information, loop_sigmas))
            rel, noise = rel, unknown
        elif (a, b) in untrusted:
            m = untrusted[(a, b)]
            rel, noise = (rel, unknown) if m is None else (m.T_ab, _gaussian(m.information, loop_sigmas))
        graph.add(gtsam.BetweenFactorPose3(a, b, gtsam.Pose3(orthonormalize(rel)), noise))
    for e in loops:
        if e.a in poses and e.b in poses:
            candidate((e.a, e.b, "loop"), e.a, e.b, e.T_ab, _gaussian(e.information, loop_sigmas))
    result, iterations, w = _solve(graph, values, candidates, estimator)
    weights = {(a, b): v for (a, b, kind), v in w.items() if kind == "loop"}
    contest = {(a, b, kind): v for (a, b, kind), v in w.items() if kind != "loop"}
    out = {i: orthonormalize(result.atPose3(i).matrix()) for i in ids}
    last = loops[-1]
    return GraphSolution(out, float(graph.error(values)), float(graph.error(result)),
                         edge_residual(poses[last.a], poses[last.b], last.T_ab),
                         edge_residual(out[last.a], out[last.b], last.T_ab), iterations, weights, contest)


def _solve(graph, values, loop_factors: dict, estimator):
    """(result Values, iterations, key -> weight at the solution of each robust edge); ``loop_factors``:
    key -> factor index of the edges the back end weighs (every other factor is a known inlier)."""
    import gtsam

    if estimator is None:                                   # GNC, truncated quadratic
        params = gtsam.GncLMParams(gtsam.LevenbergMarquardtParams())
        params.setLossType(gtsam.GncLossType.TLS)
        params.setKnownInliers([k for k in range(graph.size()) if k not in set(loop_factors.values())])
        optimizer = gtsam.GncLMOptimizer(graph, values, params)
        optimizer.setInlierCostThresholdsAtProbability(GNC_INLIER_PROBABILITY)
        result = optimizer.optimize()
        w = optimizer.getWeights()
        return result, 0, {edge: float(w[k]) for edge, k in loop_factors.items()}
    optimizer = gtsam.LevenbergMarquardtOptimizer(graph, values, gtsam.LevenbergMarquardtParams())
    result = optimizer.optimize()
    weights = {}
    for edge, k in loop_factors.items():
        factor = graph.at(k)
        d = factor.noiseModel().mahalanobisDistance(factor.unwhitenedError(result))
        weights[edge] = float(estimator.weight(d))
    return result, int(optimizer.iterations()), weights
