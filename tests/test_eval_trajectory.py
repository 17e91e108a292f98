"""Trajectory metrics: a ground truth perturbed by a known rigid transform plus known noise."""
import numpy as np
import pytest

from slam.data.trajectory_io import pose_from_tum, quat_to_rot, read_tum_trajectory, rot_to_quat, write_tum_trajectory
from slam.eval.trajectory import evaluate_ate, evaluate_rpe, evaluate_trajectory


def rot(axis, angle):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    Kx = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * Kx + (1 - np.cos(angle)) * Kx @ Kx


def ground_truth(n=300):
    t = np.arange(n) / 30.0
    poses = np.tile(np.eye(4), (n, 1, 1))
    for i, s in enumerate(t):
        poses[i, :3, :3] = rot([0.2, 1, 0.1], 0.8 * np.sin(0.7 * s)) @ rot([1, 0, 0], 0.3 * np.cos(0.5 * s))
        poses[i, :3, 3] = [np.sin(0.6 * s), 0.3 * np.cos(0.9 * s), 0.5 * s]
    return t, poses


def rigid(angle=0.7, axis=(1, 2, 3), t=(2.0, -1.0, 0.5)):
    T = np.eye(4)
    T[:3, :3] = rot(axis, angle)
    T[:3, 3] = t
    return T


def umeyama_se3(src, dst):
    """Independent SE(3) least-squares alignment (Umeyama 1991, no scale): R, t with dst ~ R src + t."""
    mu_s, mu_d = src.mean(0), dst.mean(0)
    C = (dst - mu_d).T @ (src - mu_s) / len(src)
    U, _, Vt = np.linalg.svd(C)
    S = np.eye(3)
    if np.linalg.det(U) * np.linalg.det(Vt) < 0:
        S[2, 2] = -1
    R = U @ S @ Vt
    return R, mu_d - R @ mu_s


def test_ate_of_rigidly_moved_noisy_trajectory_matches_independent_computation():
    t, gt = ground_truth(300)
    rng = np.random.default_rng(0)
    noise = rng.normal(size=(300, 3))
    noise -= noise.mean(0)
    rms = 0.01
    noise *= rms / np.sqrt(np.mean(np.sum(noise ** 2, axis=1)))       # exactly 1 cm RMS
    est = np.einsum("ij,njk->nik", rigid(), gt)                        # a different world frame
    est[:, :3, 3] += noise
    res = evaluate_ate(est, t, gt, t)
    # independent: align est positions to gt with our own Umeyama, take the RMS residual
    R, tt = umeyama_se3(est[:, :3, 3], gt[:, :3, 3])
    resid = np.linalg.norm(est[:, :3, 3] @ R.T + tt - gt[:, :3, 3], axis=1)
    assert res["ate_rmse_m"] == pytest.approx(np.sqrt(np.mean(resid ** 2)), rel=1e-9)
    assert res["ate_mean_m"] == pytest.approx(resid.mean(), rel=1e-9)
    assert res["ate_median_m"] == pytest.approx(np.median(resid), rel=1e-9)
    assert res["ate_max_m"] == pytest.approx(resid.max(), rel=1e-9)
    # and the alignment removes the rigid transform: only the known noise RMS is left
    assert res["ate_rmse_m"] == pytest.approx(rms, rel=0.02)
    assert res["frames"] == 300 and res["alignment"] == "SE3 Umeyama, no scale"


def test_pure_rigid_transform_gives_zero_errors():
    t, gt = ground_truth(50)
    est = np.einsum("ij,njk->nik", rigid(), gt)
    res = evaluate_trajectory(est, t, gt, t)
    assert res["ate_rmse_m"] < 1e-9 and res["rpe_trans_rmse_m"] < 1e-9 and res["rpe_rot_rmse_deg"] < 1e-5
    assert "SE3 Umeyama" in res["protocol"] and res["rpe_delta_frames"] == 1


def test_rpe_matches_independent_computation():
    t, gt = ground_truth(100)
    rng = np.random.default_rng(1)
    est = gt.copy()
    est[:, :3, 3] += rng.normal(scale=0.005, size=(100, 3))
    for i in range(100):
        est[i, :3, :3] = est[i, :3, :3] @ rot(rng.normal(size=3), np.deg2rad(0.5))
    res = evaluate_rpe(est, t, gt, t)
    errs_t, errs_r = [], []
    for i in range(99):
        dr = np.linalg.inv(gt[i]) @ gt[i + 1]
        de = np.linalg.inv(est[i]) @ est[i + 1]
        E = np.linalg.inv(dr) @ de
        errs_t.append(np.linalg.norm(E[:3, 3]))
        errs_r.append(np.degrees(np.arccos(np.clip((np.trace(E[:3, :3]) - 1) / 2, -1, 1))))
    assert res["rpe_trans_rmse_m"] == pytest.approx(np.sqrt(np.mean(np.square(errs_t))), rel=1e-6)
    assert res["rpe_rot_rmse_deg"] == pytest.approx(np.sqrt(np.mean(np.square(errs_r))), rel=1e-4)
    assert res["frames"] == 100


def test_association_by_timestamp_subset_and_offset():
    t, gt = ground_truth(90)
    est_t = t[::3] + 0.004
    res = evaluate_ate(gt[::3], est_t, gt, t, max_time_diff=0.01)
    assert res["frames"] == 30 and res["ate_rmse_m"] < 1e-9
    with pytest.raises(ValueError, match="associate|reference pose within"):
        evaluate_ate(gt[:10], t[:10] + 5.0, gt, t, max_time_diff=0.01)
    with pytest.raises(ValueError, match=r"\(N, 4, 4\)"):
        evaluate_ate(gt[:, :3], t, gt, t)


def test_tum_file_roundtrip(tmp_path):
    t, gt = ground_truth(40)
    gt[5, :3, :3] = rot([1, 0, 0], np.pi)            # quaternion edge cases (w = 0)
    gt[6, :3, :3] = rot([0, 1, 1], np.pi)
    write_tum_trajectory(tmp_path / "traj.txt", t, gt, header="test")
    t2, gt2 = read_tum_trajectory(tmp_path / "traj.txt")
    np.testing.assert_allclose(t2, t, atol=1e-6)
    np.testing.assert_allclose(gt2, gt, atol=1e-8)
    for T in gt:
        np.testing.assert_allclose(quat_to_rot(rot_to_quat(T[:3, :3])), T[:3, :3], atol=1e-12)
    np.testing.assert_allclose(pose_from_tum([1, 2, 3, 0, 0, 0, 1]), np.array(
        [[1, 0, 0, 1], [0, 1, 0, 2], [0, 0, 1, 3], [0, 0, 0, 1]], float))


def test_straight_line_trajectory_still_evaluates():
    """evo's Umeyama refuses collinear positions; the fallback aligns and says so."""
    n = 20
    t = np.arange(n) / 30
    gt = np.tile(np.eye(4), (n, 1, 1))
    gt[:, 0, 3] = np.linspace(0, 1, n)
    est = np.einsum("ij,njk->nik", rigid(), gt)
    est[:, :3, 3] += np.array([0.0, 0.01, 0.0]) * (np.arange(n) % 2 * 2 - 1)[:, None]  # +-1 cm zigzag
    res = evaluate_ate(est, t, gt, t)
    assert "degenerate" in res["alignment"]
    assert res["ate_rmse_m"] == pytest.approx(0.01, rel=0.01)


def test_slightly_non_orthonormal_ground_truth_is_accepted():
    """7-Scenes' poses have det(R) ~ 0.9999; evo refuses those unless they are projected."""
    from slam.eval.trajectory import evaluate_trajectory
    rng = np.random.default_rng(3)
    n = 20
    gt = np.repeat(np.eye(4)[None], n, axis=0)
    gt[:, :3, 3] = np.cumsum(rng.normal(0, 0.02, (n, 3)), axis=0)
    gt[:, :3, :3] *= 0.99993          # like the real data
    stamps = np.arange(n) / 30.0
    res = evaluate_trajectory(gt.copy(), stamps, gt, stamps)
    assert res["ate_rmse_m"] < 1e-6 and res["rpe_rot_rmse_deg"] < 1e-3
