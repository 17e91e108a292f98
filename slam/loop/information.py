"""The information (inverse covariance) a loop or bridge measurement carries, from the measurement
itself, in gtsam's Pose3 convention: tangent (rotation rad, translation m) in the body frame of
the measured relative pose T_ab (T_ab Exp(xi)), which is how ``BetweenFactorPose3`` whitens its
error.

ICP (and open3d's RGB-D odometry) step on the left of T_ab, in the old camera's frame: their normal
equations are the information of that left perturbation, moved to the body frame by SE(3)'s
adjoint. Scaled by the residual variance, J^T J / sigma^2 is what the points would say if each
were an independent measurement; they are not (neighbouring samples share the sensor's
structured error, the registration of colour to depth, the depth quantisation), so the covariance
is inflated by NOISE_INFLATION, measured on the sequences against ground truth.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from slam.geometry import adjoint, invert, se3_log

# How much larger the real error of an ICP / RGB-D odometry measurement is than its normal
# equations say, as a factor on the covariance (so sqrt of it on the standard deviations).
# Measured on bridges (consecutive keyframes, their own measurement) against ground truth: the
# median squared Mahalanobis distance of the true error under the uninflated information is ~600
# on both real sequences (TUM fr1/rpy: 112 x the 6-dof chi-square median, 7-Scenes stride 2: 114;
# exact synthetic depth: below 1). docs/benchmarks.md#where-the-loop-defaults-come-from.
NOISE_INFLATION = 100.0
# Smallest eigenvalue kept, relative to the largest: a direction the measurement did not see keeps
# a tiny information (the edge stays positive definite) and says nothing there.
MIN_EIGEN_RATIO = 1e-9


def symmetric_pd(M: np.ndarray) -> Optional[np.ndarray]:
    """Symmetrise (6, 6) ``M``; eigenvalues below MIN_EIGEN_RATIO x the largest raised to it.
    None when it is not finite or has no positive eigenvalue."""
    M = 0.5 * (np.asarray(M, dtype=np.float64) + np.asarray(M, dtype=np.float64).T)
    if not np.all(np.isfinite(M)):
        return None
    w, V = np.linalg.eigh(M)
    if w[-1] <= 0:
        return None
    return (V * np.maximum(w, MIN_EIGEN_RATIO * w[-1])) @ V.T


def measurement_information(H_left: np.ndarray, residual_var: float, T_ab: np.ndarray,
                            max_sigmas: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
    """Information (6, 6) of a measured relative pose T_ab (4, 4) in the body frame, from the normal
    equations ``H_left`` (6, 6, rows (rotation, translation), unit residual weights) of a solver
    that stepped on the left of T_ab, its residual variance (m^2) and NOISE_INFLATION. Where it
    says less than ``max_sigmas`` (6,) would (a direction the depth did not fix), it is raised to
    that: in units of those sigmas, eigenvalues below 1 become 1. None when the equations are
    unusable."""
    if not residual_var > 0:
        return None
    A = adjoint(T_ab)
    info = symmetric_pd(A.T @ np.asarray(H_left, dtype=np.float64) @ A / (residual_var * NOISE_INFLATION))
    if info is None or max_sigmas is None:
        return info
    S = np.asarray(max_sigmas, dtype=np.float64)
    w, V = np.linalg.eigh(info * np.outer(S, S))
    return ((V * np.maximum(w, 1.0)) @ V.T) / np.outer(S, S)


def edge_error(T_a: np.ndarray, T_b: np.ndarray, T_ab: np.ndarray) -> np.ndarray:
    """(6,) the error a BetweenFactorPose3 with measurement T_ab sees at poses T_a, T_b (4, 4,
    T_wc): Log(T_ab^-1 T_a^-1 T_b), (rotation rad, translation m)."""
    return se3_log(invert(np.asarray(T_ab)) @ invert(np.asarray(T_a)) @ np.asarray(T_b))


def mahalanobis2(xi: np.ndarray, information: np.ndarray) -> float:
    """xi^T I xi: squared Mahalanobis distance of an error (6,) under an information (6, 6)."""
    return float(xi @ information @ xi)


def chi2_quantile(p: float, dof: int) -> float:
    """The chi-square distribution's ``p`` quantile for an even number of degrees of freedom ``dof``
    (closed-form CDF 1 - exp(-x/2) sum_{i < dof/2} (x/2)^i / i!, solved by bisection)."""
    if dof % 2 or dof <= 0:
        raise ValueError("dof must be even and positive")

    def cdf(x: float) -> float:
        h, term, total = x / 2.0, 1.0, 1.0
        for i in range(1, dof // 2):
            term *= h / i
            total += term
        return 1.0 - math.exp(-h) * total

    lo, hi = 0.0, 10.0 * dof + 100.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return 0.5 * (lo + hi)
