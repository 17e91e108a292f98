"""Rigid-body math: SO(3) / SE(3) exponential and logarithm maps and the adjoint (gtsam's Pose3
convention: tangent = rotation rad, translation m), the SE(3) increment the tracker and the
keyframe pose refinement apply, pose inversion and composition, corrections between two poses and
their size, point transforms, the motion model, back-projection (numpy on the host, torch where
the device needs it).

Conventions: poses are 4x4 camera-to-world ``T_wc`` unless the name says ``T_cw``; OpenCV camera
axes (x right, y down, z forward); translations in metres, angles in radians.
"""
from __future__ import annotations

import math

import numpy as np
import torch


def skew(v: np.ndarray) -> np.ndarray:
    """(3,) -> (3, 3) cross-product matrix: skew(v) @ u = v x u."""
    return np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])


def so3_exp(phi: np.ndarray) -> np.ndarray:
    """Rotation vector (3,) rad -> (3, 3) float64 rotation (Rodrigues; a Taylor expansion near 0)."""
    phi = np.asarray(phi, dtype=np.float64)
    theta2 = float(phi @ phi)
    if theta2 < 1e-16:
        a, b = 1.0 - theta2 / 6.0, 0.5 - theta2 / 24.0
    else:
        theta = math.sqrt(theta2)
        a, b = math.sin(theta) / theta, (1.0 - math.cos(theta)) / theta2
    W = skew(phi)
    return np.eye(3) + a * W + b * (W @ W)


def so3_log(R: np.ndarray) -> np.ndarray:
    """(3, 3) rotation -> rotation vector (3,) rad, angle in [0, pi] (``so3_exp``'s inverse)."""
    R = np.asarray(R, dtype=np.float64)
    theta = rotation_angle(R)
    w = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    if theta < 1e-8:
        return 0.5 * w
    if theta > math.pi - 1e-6:
        # sin(theta) ~ 0: the axis from the symmetric part, R + I = 2 a a^T (up to the sign)
        B = 0.5 * (R + np.eye(3))
        axis = B[int(np.argmax(np.diag(B)))]
        axis = axis / np.linalg.norm(axis)
        return theta * (axis if axis @ w >= 0 else -axis)
    return theta / (2.0 * math.sin(theta)) * w


def adjoint(T: np.ndarray) -> np.ndarray:
    """(6, 6) adjoint of the rigid transform T (4, 4) in the (rotation, translation) order:
    Exp(Ad_T xi) T = T Exp(xi)."""
    R, t = T[:3, :3], T[:3, 3]
    A = np.zeros((6, 6))
    A[:3, :3] = R
    A[3:, 3:] = R
    A[3:, :3] = skew(t) @ R
    return A


def se3_exp(xi: np.ndarray) -> np.ndarray:
    """(6,) tangent (rotation rad, translation m) -> (4, 4) rigid transform, gtsam's Pose3.Expmap."""
    xi = np.asarray(xi, dtype=np.float64)
    w, v = xi[:3], xi[3:]
    theta = float(np.linalg.norm(w))
    W = skew(w)
    if theta < 1e-8:
        V = np.eye(3) + 0.5 * W
    else:
        V = np.eye(3) + (1.0 - math.cos(theta)) / theta ** 2 * W + (theta - math.sin(theta)) / theta ** 3 * (W @ W)
    T = np.eye(4)
    T[:3, :3] = so3_exp(w)
    T[:3, 3] = V @ v
    return T


def se3_log(T: np.ndarray) -> np.ndarray:
    """(4, 4) rigid transform -> (6,) tangent (rotation rad, translation m), gtsam's Pose3.Logmap."""
    w = so3_log(T[:3, :3])
    theta = float(np.linalg.norm(w))
    W = skew(w)
    if theta < 1e-8:
        V_inv = np.eye(3) - 0.5 * W
    else:
        V_inv = np.eye(3) - 0.5 * W + (1.0 - theta * math.sin(theta) / (2.0 * (1.0 - math.cos(theta)))) / theta ** 2 * (W @ W)
    return np.r_[w, V_inv @ T[:3, 3]]


def pivot_increment(delta: np.ndarray, z_pivot: float) -> np.ndarray:
    """delta (6,) = (rotation vector rad, translation m) applied about the pivot (0, 0, z_pivot)
    of the camera frame -> (4, 4) float64: X' = R (X - p) + p + t. Host math (numpy): the tracker
    composes dozens of these per frame, each a handful of tiny kernels on a GPU."""
    R = so3_exp(delta[:3])
    p = np.array([0.0, 0.0, z_pivot])
    out = np.eye(4)
    out[:3, :3] = R
    out[:3, 3] = p - R @ p + np.asarray(delta[3:6], dtype=np.float64)
    return out


def pivot_information_to_body(H: np.ndarray, z_pivot: float) -> np.ndarray:
    """Information (6, 6) of a pose estimated with ``pivot_increment`` steps on T_cw (H: the pose
    block of the normal equations, rows (rotation rad, translation m) about the pivot (0, 0,
    z_pivot)) -> the same information in the body-frame tangent of T_wc, T_wc Exp(xi) with
    xi = (rotation rad, translation m): gtsam's Pose3 convention. To first order a step delta on
    T_cw is the body-frame perturbation xi = -A delta of T_wc, A = [[I, 0], [[p]x, I]], so the
    information becomes A^-T H A^-1."""
    p = np.array([0.0, 0.0, float(z_pivot)])
    A_inv = np.eye(6)
    A_inv[3:, :3] = -np.array([[0.0, -p[2], p[1]], [p[2], 0.0, -p[0]], [-p[1], p[0], 0.0]])
    H = np.asarray(H, dtype=np.float64)[:6, :6]
    return A_inv.T @ H @ A_inv


def invert(T: torch.Tensor) -> torch.Tensor:
    """Inverse of a rigid 4x4 transform (torch or numpy)."""
    if isinstance(T, np.ndarray):
        out = np.eye(4, dtype=T.dtype)
        R = T[:3, :3]
        out[:3, :3] = R.T
        out[:3, 3] = -R.T @ T[:3, 3]
        return out
    R = T[:3, :3]
    t = T[:3, 3]
    # -R^T t without cuBLAS, and negated by a product with -1 (exact): on a GPU the negation's own
    # kernels would be loaded into host memory for this one use (docs/benchmarks.md#host-memory)
    top = torch.cat([R.T, (R * t[:, None]).sum(0).mul(-1.0)[:, None]], dim=1)
    return torch.cat([top, T[3:]], dim=0)


def transform_points(T: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Apply 4x4 ``T`` to points (N, 3) -> (N, 3): p' = R p + t.

    Broadcast and sum, not a matrix product: on a GPU the first cuBLAS call costs the process host
    memory (its handle and kernel tables; docs/benchmarks.md#host-memory), and with the normal equations
    reduced by the rasterizer's kernel this is the only product a SLAM run would make."""
    return (points.unsqueeze(1) * T[:3, :3]).sum(-1) + T[:3, 3]


def rotation_angle(R) -> float:
    """Angle in radians of a 3x3 rotation (numpy or torch), in [0, pi]. From both the trace and the
    skew part (atan2), not acos of the trace alone: near 0 that loses precision, and a rotation
    whose scale is off by 1e-4 (7-Scenes' ground truth) would read as about one degree."""
    R = np.asarray(R.detach().cpu() if isinstance(R, torch.Tensor) else R, dtype=np.float64)
    c = (np.trace(R) - 1.0) / 2.0
    s = 0.5 * math.sqrt((R[2, 1] - R[1, 2]) ** 2 + (R[0, 2] - R[2, 0]) ** 2 + (R[1, 0] - R[0, 1]) ** 2)
    return float(math.atan2(s, c))


def relative_motion(T_a: np.ndarray, T_b: np.ndarray) -> tuple[float, float]:
    """Translation (m) and rotation (rad) between two 4x4 poses."""
    rel = invert(np.asarray(T_a, dtype=np.float64)) @ np.asarray(T_b, dtype=np.float64)
    return float(np.linalg.norm(rel[:3, 3])), rotation_angle(rel[:3, :3])


def orthonormalize(T: np.ndarray) -> np.ndarray:
    """Project the rotation block of a 4x4 pose onto SO(3) (nearest rotation, via SVD).

    Poses pass through float32 on the device; without this, composing them (the motion model
    uses R^T as the inverse) lets the rotation's scale error grow geometrically frame to frame.
    """
    out = np.array(T, dtype=np.float64, copy=True)
    U, _, Vt = np.linalg.svd(out[:3, :3])
    R = U @ Vt
    if np.linalg.det(R) < 0:
        U[:, -1] *= -1
        R = U @ Vt
    out[:3, :3] = R
    out[3] = (0.0, 0.0, 0.0, 1.0)
    return out


def increment_pose(T_wc: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """The pose T_wc (4, 4) after the increment ``delta`` (6,) = (rotation vector rad, translation
    m) applied left of its world-to-camera pose, about the camera centre: T_cw' = [exp(omega) | v]
    T_cw (``pivot_increment(delta, 0)``; camera-frame points move as X' = R X + v). Returns the new
    T_wc (4, 4) float64, re-orthonormalised."""
    T_cw = invert(np.asarray(T_wc, dtype=np.float64))
    return orthonormalize(invert(pivot_increment(np.asarray(delta, dtype=np.float64), 0.0) @ T_cw))


def correction(T_before: np.ndarray, T_after: np.ndarray) -> np.ndarray:
    """World-frame correction C (4, 4) float64 with T_after = C @ T_before (both (4, 4) T_wc),
    re-orthonormalised."""
    return orthonormalize(np.asarray(T_after, dtype=np.float64) @ invert(np.asarray(T_before, dtype=np.float64)))


def motion_size(C: np.ndarray) -> tuple[float, float]:
    """(translation m, rotation deg) of a 4x4 transform ``C``; the angle from the trace (acos)."""
    c = (np.trace(C[:3, :3]) - 1.0) / 2.0
    return float(np.linalg.norm(C[:3, 3])), math.degrees(math.acos(max(-1.0, min(1.0, c))))


def constant_velocity_guess(T_prev2: np.ndarray | None, T_prev: np.ndarray, ratio: float = 1.0) -> np.ndarray:
    """Predict T_wc (4, 4) ``ratio`` inter-frame intervals after ``T_prev``, assuming the motion
    from ``T_prev2`` to ``T_prev`` goes on at the same rate (ratio = elapsed time / the interval
    between the two poses: 1 for the next frame of a steady stream, 3 after two dropped frames).
    The motion is scaled in the camera frame: its rotation vector and its translation each times
    ``ratio`` (exact for ratio 1)."""
    if T_prev2 is None:
        return T_prev.copy()
    step = invert(T_prev2) @ T_prev
    if ratio != 1.0:
        scaled = np.eye(4)
        scaled[:3, :3] = so3_exp(so3_log(step[:3, :3]) * ratio)
        scaled[:3, 3] = step[:3, 3] * ratio
        step = scaled
    return orthonormalize(T_prev @ step)


def backproject(depth: torch.Tensor, K: torch.Tensor, us: torch.Tensor, vs: torch.Tensor) -> torch.Tensor:
    """Pixels (u = column, v = row; OpenCV centres) with depth z (M,) -> camera points (M, 3)."""
    x = (us - K[0, 2]) / K[0, 0] * depth
    y = (vs - K[1, 2]) / K[1, 1] * depth
    return torch.stack([x, y, depth], dim=-1)
