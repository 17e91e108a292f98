"""Pose math: SO(3) exponential, increments, inversion, constant velocity, back-projection."""
import numpy as np
import torch

from slam.geometry import (backproject, constant_velocity_guess, invert, pose_from_increment,
                           relative_motion, so3_exp, transform_points)


def test_so3_exp_matches_rodrigues_and_is_orthonormal():
    axis = torch.tensor([0.0, 0.0, 1.0])
    R = so3_exp(axis * (np.pi / 2))
    assert torch.allclose(R @ torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 1.0, 0.0]), atol=1e-6)
    phi = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64)
    R = so3_exp(phi)
    assert torch.allclose(R @ R.T, torch.eye(3, dtype=torch.float64), atol=1e-12)
    assert abs(torch.linalg.det(R).item() - 1) < 1e-12


def test_so3_exp_gradient_is_finite_at_zero():
    phi = torch.zeros(3, requires_grad=True)
    so3_exp(phi).sum().backward()
    assert torch.all(torch.isfinite(phi.grad))
    # d(R)/d(phi) at 0 is the skew generator: sum of R entries has gradient 0 by antisymmetry
    assert torch.allclose(phi.grad, torch.zeros(3), atol=1e-6)


def test_increment_inverse_and_transform():
    delta = torch.tensor([0.1, 0.2, -0.1, 0.5, -0.3, 1.0], dtype=torch.float64)
    T = pose_from_increment(delta)
    assert torch.allclose(T @ invert(T), torch.eye(4, dtype=torch.float64), atol=1e-12)
    pts = torch.randn(5, 3, dtype=torch.float64)
    back = transform_points(invert(T), transform_points(T, pts))
    assert torch.allclose(back, pts, atol=1e-12)
    Tn = T.numpy()
    assert np.allclose(invert(Tn) @ Tn, np.eye(4))


def test_constant_velocity_repeats_last_motion():
    step = pose_from_increment(torch.tensor([0.0, 0.05, 0.0, 0.1, 0.0, 0.0], dtype=torch.float64)).numpy()
    T0 = np.eye(4)
    T1 = T0 @ step
    T2 = constant_velocity_guess(T0, T1)
    assert np.allclose(T2, T1 @ step)
    dt, dr = relative_motion(T1, T2)
    assert np.isclose(dt, 0.1) and np.isclose(dr, 0.05)


def test_backproject_inverts_projection():
    K = torch.tensor([[100.0, 0, 50], [0, 110.0, 40], [0, 0, 1]])
    pts = torch.tensor([[0.2, -0.1, 2.0], [-0.5, 0.3, 1.5]])
    u = K[0, 0] * pts[:, 0] / pts[:, 2] + K[0, 2]
    v = K[1, 1] * pts[:, 1] / pts[:, 2] + K[1, 2]
    assert torch.allclose(backproject(pts[:, 2], K, u, v), pts, atol=1e-6)


def test_orthonormalize_projects_to_rotation_and_keeps_translation():
    from slam.geometry import orthonormalize
    T = pose_from_increment(torch.tensor([0.2, -0.1, 0.3, 1.0, 2.0, 3.0], dtype=torch.float64)).numpy()
    noisy = T.copy()
    noisy[:3, :3] *= 1.001
    fixed = orthonormalize(noisy)
    assert np.allclose(fixed[:3, :3] @ fixed[:3, :3].T, np.eye(3), atol=1e-12)
    assert np.allclose(fixed[:3, :3], T[:3, :3], atol=1e-9)
    assert np.allclose(fixed[:3, 3], T[:3, 3])


def test_motion_model_stays_a_rigid_transform_over_many_frames():
    step = pose_from_increment(torch.tensor([0.01, 0.02, -0.01, 0.01, 0.0, 0.02])).double().numpy()
    prev2, prev = np.eye(4), step.astype(np.float32).astype(np.float64)   # float32 round trip
    for _ in range(200):
        nxt = constant_velocity_guess(prev2, prev).astype(np.float32).astype(np.float64)
        prev2, prev = prev, nxt
    R = constant_velocity_guess(prev2, prev)[:3, :3]
    assert abs(np.linalg.det(R) - 1) < 1e-9


def test_pivot_increment_matches_the_torch_composition():
    from slam.geometry import pivot_increment
    rng = np.random.default_rng(3)
    for scale in (1e-9, 1e-3, 0.3):
        delta = rng.normal(size=6) * scale
        P, P_inv = torch.eye(4, dtype=torch.float64), torch.eye(4, dtype=torch.float64)
        P[2, 3], P_inv[2, 3] = 1.7, -1.7
        want = (P @ pose_from_increment(torch.as_tensor(delta)) @ P_inv).numpy()
        np.testing.assert_allclose(pivot_increment(delta, 1.7), want, atol=1e-12)
