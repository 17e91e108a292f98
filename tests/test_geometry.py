"""Pose math: SO(3) exponential, increments, inversion, constant velocity, back-projection."""
import cv2
import numpy as np
import torch

from slam.geometry import (
    backproject,
    constant_velocity_guess,
    invert,
    orthonormalize,
    pivot_increment,
    relative_motion,
    so3_exp,
    so3_log,
    transform_points,
)


def pose_from_increment(delta) -> np.ndarray:
    """(6,) rotation vector + translation -> 4x4 [R | t]: the increment about the camera centre."""
    return pivot_increment(np.asarray(delta, dtype=np.float64), 0.0)


def test_exponential_matches_rodrigues_and_is_orthonormal():
    R = pose_from_increment([0.0, 0.0, np.pi / 2, 0, 0, 0])[:3, :3]
    assert np.allclose(R @ np.array([1.0, 0.0, 0.0]), [0.0, 1.0, 0.0], atol=1e-12)
    phi = np.array([0.3, -0.2, 0.5])
    R = pose_from_increment([*phi, 0, 0, 0])[:3, :3]
    assert np.allclose(R, cv2.Rodrigues(phi)[0], atol=1e-12)
    assert np.allclose(R @ R.T, np.eye(3), atol=1e-12)
    assert abs(np.linalg.det(R) - 1) < 1e-12


def test_exponential_is_continuous_through_its_small_angle_branch():
    # Below theta^2 = 1e-16 a Taylor expansion replaces sin/cos: both sides agree with Rodrigues.
    for scale in (1e-9, 1e-8, 1e-7):
        phi = np.array([0.3, -0.2, 0.5]) * scale
        R = pose_from_increment([*phi, 0, 0, 0])[:3, :3]
        assert np.allclose(R, cv2.Rodrigues(phi)[0], atol=1e-15)


def test_increment_inverse_and_transform():
    T = torch.as_tensor(pose_from_increment([0.1, 0.2, -0.1, 0.5, -0.3, 1.0]))
    assert torch.allclose(T @ invert(T), torch.eye(4, dtype=torch.float64), atol=1e-12)
    pts = torch.randn(5, 3, dtype=torch.float64)
    back = transform_points(invert(T), transform_points(T, pts))
    assert torch.allclose(back, pts, atol=1e-12)
    Tn = T.numpy()
    assert np.allclose(invert(Tn) @ Tn, np.eye(4))


def test_constant_velocity_repeats_last_motion():
    step = pose_from_increment([0.0, 0.05, 0.0, 0.1, 0.0, 0.0])
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
    T = pose_from_increment([0.2, -0.1, 0.3, 1.0, 2.0, 3.0])
    noisy = T.copy()
    noisy[:3, :3] *= 1.001
    fixed = orthonormalize(noisy)
    assert np.allclose(fixed[:3, :3] @ fixed[:3, :3].T, np.eye(3), atol=1e-12)
    assert np.allclose(fixed[:3, :3], T[:3, :3], atol=1e-9)
    assert np.allclose(fixed[:3, 3], T[:3, 3])


def test_motion_model_stays_a_rigid_transform_over_many_frames():
    step = pose_from_increment([0.01, 0.02, -0.01, 0.01, 0.0, 0.02]).astype(np.float32).astype(np.float64)
    prev2, prev = np.eye(4), step.astype(np.float32).astype(np.float64)   # float32 round trip
    for _ in range(200):
        nxt = constant_velocity_guess(prev2, prev).astype(np.float32).astype(np.float64)
        prev2, prev = prev, nxt
    R = constant_velocity_guess(prev2, prev)[:3, :3]
    assert abs(np.linalg.det(R) - 1) < 1e-9


def test_pivot_increment_is_the_increment_conjugated_by_the_pivot():
    rng = np.random.default_rng(3)
    for scale in (1e-9, 1e-3, 0.3):
        delta = rng.normal(size=6) * scale
        P, P_inv = np.eye(4), np.eye(4)
        P[2, 3], P_inv[2, 3] = 1.7, -1.7
        R = cv2.Rodrigues(delta[:3])[0]
        about_centre = np.eye(4)
        about_centre[:3, :3], about_centre[:3, 3] = R, delta[3:]
        np.testing.assert_allclose(pivot_increment(delta, 1.7), P @ about_centre @ P_inv, atol=1e-12)


def test_so3_log_inverts_exp_across_the_angle_range():
    rng = np.random.default_rng(0)
    for theta in (0.0, 1e-10, 1e-4, 0.3, 2.0, np.pi - 1e-3, np.pi - 1e-8):
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        phi = axis * theta
        R = so3_exp(phi)
        assert np.allclose(so3_exp(so3_log(R)), R, atol=1e-9)
        if theta < np.pi - 1e-3:
            assert np.allclose(so3_log(R), phi, atol=1e-9)


def test_constant_velocity_scales_the_motion_with_the_elapsed_time():
    # Two dropped frames: the motion of three intervals, not one.
    step = pose_from_increment([0.0, 0.04, 0.0, 0.02, 0.0, 0.0])
    T0, T1 = np.eye(4), step
    T4 = constant_velocity_guess(T0, T1, ratio=3.0)
    dt, dr = relative_motion(T1, T4)
    assert np.isclose(dr, 0.12) and np.isclose(dt, 0.06)
    assert np.allclose(constant_velocity_guess(T0, T1, ratio=1.0), T1 @ step)
    # A pure rotation scales exactly.
    rot = pose_from_increment([0.01, -0.02, 0.03, 0.0, 0.0, 0.0])
    assert np.allclose(constant_velocity_guess(np.eye(4), rot, ratio=2.0), rot @ rot @ rot, atol=1e-12)


def test_rotation_angle_is_exact_near_zero_and_robust_to_a_scale_error():
    R = pose_from_increment([0.0, 0.0, 1e-7, 0, 0, 0])[:3, :3]
    assert np.isclose(relative_motion(np.eye(4), np.block([[R, np.zeros((3, 1))], [np.zeros((1, 3)), 1]]))[1], 1e-7,
                      rtol=1e-6)
    # A rotation stored with a scale error of 2e-4 (7-Scenes' ground truth): the angle between two
    # such poses of the same orientation stays ~0, not ~1 degree.
    T = np.eye(4)
    T[:3, :3] = pose_from_increment([0.3, 0.1, -0.2, 0, 0, 0])[:3, :3] * (1 + 2e-4)
    assert np.degrees(relative_motion(T, T)[1]) < 0.05
    for theta in (0.5, 2.0, 3.0):
        R = pose_from_increment([0.0, theta, 0.0, 0, 0, 0])[:3, :3]
        P = np.eye(4)
        P[:3, :3] = R
        assert np.isclose(relative_motion(np.eye(4), P)[1], theta)


def test_tracker_motion_prior_uses_the_real_time_step():
    """Tracker.guess: the last good motion scaled by the time elapsed since the last good frame, at
    most MAX_EXTRAPOLATION_S beyond the motion's own interval (slam.tracking.tracker)."""
    from slam.config import load_config
    from slam.tracking.tracker import MAX_EXTRAPOLATION_S, Tracker

    cfg = load_config("default.yaml")
    step = pose_from_increment([0.0, 0.02, 0.0, 0.01, 0.0, 0.0])
    for interval in (1 / 30, 0.53):                       # a 30 Hz stream, 7-Scenes at stride 16
        tracker = Tracker(cfg.tracking, cfg.quality)
        tracker.initialise(np.eye(4), 0.0)
        tracker.prev2, tracker.prev2_t, tracker.prev, tracker.prev_t = np.eye(4), 0.0, step, interval
        assert np.allclose(tracker.guess(2 * interval), step @ step)          # the next frame: one step
        if interval < MAX_EXTRAPOLATION_S:                                     # a frame dropped: two steps
            assert np.isclose(relative_motion(step, tracker.guess(3 * interval))[1], 0.04)
        far = tracker.guess(interval + 10.0)                                   # a long dropout: capped
        assert np.isclose(relative_motion(step, far)[1], 0.02 * (interval + MAX_EXTRAPOLATION_S) / interval)


def test_the_motion_model_follows_flagged_frames_whose_colour_agrees():
    """A frame flagged only by the depth-inlier floor with its colour inliers above their floor
    moves the motion model (not the last good pose); a frame flagged otherwise does not."""
    from slam.config import load_config
    from slam.tracking.quality import TrackQuality, judge
    from slam.tracking.result import TrackResult
    from slam.tracking.tracker import Tracker

    cfg = load_config("default.yaml")
    step = pose_from_increment([0.0, 0.02, 0.0, 0.01, 0.0, 0.0])
    for colour, follows in ((0.9, True), (0.3, False)):
        tracker = Tracker(cfg.tracking, cfg.quality)
        tracker.initialise(np.eye(4), 0.0)
        tracker.prev2, tracker.prev2_t, tracker.prev, tracker.prev_t = np.eye(4), 0.0, step, 1 / 30
        q = TrackQuality(known=0.9, depth_inliers=0.45, color_inliers=colour)
        reason = judge(q, 0.3, cfg.tracking.min_known_fraction, cfg.quality)
        assert reason.startswith("depth inliers")
        res = TrackResult(step @ step, 0.3, 0.9, False, False, 5, quality=q, reason=reason)
        tracker._update_history(res, 2 / 30)
        assert tracker.failures == 1 and np.allclose(tracker.last_good, np.eye(4))
        assert np.allclose(tracker.prev, step @ step if follows else step)
        assert tracker.prev_t == (2 / 30 if follows else 1 / 30)


def test_only_a_depth_floor_flag_with_closely_agreeing_colour_explores():
    """``quality.explores``: the depth-inlier floor alone, colour inliers at or above
    ``explore_color_inliers``; not a frame that passed, nor one flagged for anything else."""
    from slam.config import load_config
    from slam.tracking.quality import TrackQuality, explores, judge

    cfg = load_config("default.yaml").quality
    for depth, colour, expected in ((0.45, cfg.explore_color_inliers, True), (0.45, cfg.explore_color_inliers - 0.01, False),
                                    (0.45, 0.3, False), (0.95, 0.95, False)):
        q = TrackQuality(known=0.9, depth_inliers=depth, color_inliers=colour)
        assert explores(judge(q, 0.3, 0.5, cfg), q, cfg) == expected, (depth, colour)
    q = TrackQuality(known=0.2, depth_inliers=0.45, color_inliers=0.99)      # too little of the map in view
    assert judge(q, 0.3, 0.5, cfg).startswith("coverage") and not explores(judge(q, 0.3, 0.5, cfg), q, cfg)
