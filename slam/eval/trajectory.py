"""Trajectory metrics through ``evo``: ATE after SE(3) Umeyama alignment (no scale) and RPE.

Inputs are (N, 4, 4) camera-to-world poses (T_wc) with (N,) timestamps in seconds. Estimated and
reference poses are associated by nearest timestamp within ``max_time_diff``
(``evo.core.sync.associate_trajectories``). Every result is a plain dict of floats/strings that
states the protocol, ready for metrics.json.
"""
from __future__ import annotations

import copy
from typing import Tuple

import numpy as np

from slam.geometry import orthonormalize

ALIGNMENT = "SE3 Umeyama, no scale"


def _traj(poses: np.ndarray, stamps: np.ndarray, what: str):
    from evo.core.trajectory import PoseTrajectory3D  # evo: heavy import (matplotlib, scipy), only when scoring

    poses = np.asarray(poses, dtype=np.float64)
    stamps = np.asarray(stamps, dtype=np.float64).reshape(-1)
    if poses.ndim != 3 or poses.shape[1:] != (4, 4):
        raise ValueError(f"{what} poses must be (N, 4, 4), got {poses.shape}")
    if len(poses) != len(stamps):
        raise ValueError(f"{what}: {len(poses)} poses but {len(stamps)} timestamps")
    if not np.all(np.isfinite(poses)):
        raise ValueError(f"{what} poses contain non-finite values")
    # Real ground truth is often not exactly orthonormal (7-Scenes' KinectFusion poses have
    # det(R) ~ 0.9999): evo refuses such matrices, so project each rotation onto SO(3) first.
    poses = np.stack([orthonormalize(T) for T in poses]) if len(poses) else poses
    return PoseTrajectory3D(poses_se3=list(poses), timestamps=stamps)


def associate(est_poses, est_stamps, ref_poses, ref_stamps, max_time_diff: float = 0.02) -> Tuple:
    """Associate by timestamp -> (ref, est) evo trajectories of equal length (at least 3 pairs)."""
    from evo.core import sync

    ref = _traj(ref_poses, ref_stamps, "reference")
    est = _traj(est_poses, est_stamps, "estimated")
    try:
        ref_a, est_a = sync.associate_trajectories(ref, est, max_diff=max_time_diff)
    except sync.SyncException as exc:
        raise ValueError(f"no estimated pose has a reference pose within {max_time_diff} s ({exc})") from None
    if ref_a.num_poses < 3:
        raise ValueError(f"only {ref_a.num_poses} poses associate within {max_time_diff} s; need >= 3")
    return ref_a, est_a


def umeyama_se3(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """4x4 rigid transform T minimising sum |T src_i - dst_i|^2 (SVD; valid for rank-deficient input)."""
    mu_s, mu_d = src.mean(0), dst.mean(0)
    U, _, Vt = np.linalg.svd((dst - mu_d).T @ (src - mu_s))
    S = np.diag([1.0, 1.0, -1.0 if np.linalg.det(U) * np.linalg.det(Vt) < 0 else 1.0])
    T = np.eye(4)
    T[:3, :3] = U @ S @ Vt
    T[:3, 3] = mu_d - T[:3, :3] @ mu_s
    return T


def evaluate_ate(est_poses, est_stamps, ref_poses, ref_stamps, max_time_diff: float = 0.02,
                 scope: str = "all frames") -> dict:
    """Absolute trajectory error of the translations (m) after SE(3) Umeyama alignment, no scale.

    Returns {"ate_rmse_m", "ate_mean_m", "ate_median_m", "ate_std_m", "ate_min_m", "ate_max_m",
    "alignment", "frames" (associated pairs), "scope", "max_time_diff_s"}.
    """
    from evo.core import metrics
    from evo.core.geometry import GeometryException

    ref, est = associate(est_poses, est_stamps, ref_poses, ref_stamps, max_time_diff)
    est = copy.deepcopy(est)
    alignment = ALIGNMENT
    try:
        est.align(ref, correct_scale=False)
    except GeometryException:
        # collinear / single-point positions: evo refuses, but a least-squares rigid alignment
        # still exists (rotation about the line is arbitrary and does not change the error)
        est.transform(umeyama_se3(est.positions_xyz, ref.positions_xyz))
        alignment = ALIGNMENT + " (degenerate geometry: rotation about the trajectory line arbitrary)"
    ape = metrics.APE(metrics.PoseRelation.translation_part)
    ape.process_data((ref, est))
    stats = ape.get_all_statistics()
    out = {f"ate_{k}_m": float(stats[k]) for k in ("rmse", "mean", "median", "std", "min", "max")}
    out.update({"alignment": alignment, "frames": int(ref.num_poses), "scope": scope,
                "max_time_diff_s": float(max_time_diff)})
    return out


def ate_over_prefixes(est_poses, est_stamps, ref_poses, ref_stamps, lengths, max_time_diff: float = 0.02) -> list:
    """ATE RMSE (m) of the first n estimated poses for each n in ``lengths`` (frames of the
    estimate, in time order), each prefix aligned on its own as ``evaluate_ate`` aligns a whole
    trajectory: how the error grows along a sequence (drift). Lengths beyond the estimate are
    skipped. Returns [{"frames": n, "ate_rmse_m": e}, ...] in the order of ``lengths``."""
    est_stamps = np.asarray(est_stamps, dtype=np.float64)
    est_poses = np.asarray(est_poses, dtype=np.float64)
    order = np.argsort(est_stamps, kind="stable")
    out = []
    for n in lengths:
        if n < 3 or n > len(order):
            continue
        idx = order[:n]
        ate = evaluate_ate(est_poses[idx], est_stamps[idx], ref_poses, ref_stamps, max_time_diff,
                           scope=f"first {n} frames")
        out.append({"frames": int(n), "ate_rmse_m": ate["ate_rmse_m"]})
    return out


def evaluate_rpe(est_poses, est_stamps, ref_poses, ref_stamps, max_time_diff: float = 0.02,
                 delta: int = 1, scope: str = "all frames") -> dict:
    """Relative pose error between associated poses ``delta`` frames apart (no alignment needed).

    Returns {"rpe_trans_rmse_m", "rpe_trans_mean_m", "rpe_trans_median_m", "rpe_trans_max_m",
    "rpe_rot_rmse_deg", "rpe_rot_mean_deg", "rpe_rot_median_deg", "rpe_rot_max_deg",
    "rpe_delta_frames", "frames", "scope"}; per-step errors (not normalised by distance).
    """
    from evo.core import metrics
    from evo.core.units import Unit

    ref, est = associate(est_poses, est_stamps, ref_poses, ref_stamps, max_time_diff)
    out = {}
    for name, rel, unit in (("trans", metrics.PoseRelation.translation_part, "m"),
                            ("rot", metrics.PoseRelation.rotation_angle_deg, "deg")):
        rpe = metrics.RPE(rel, delta=delta, delta_unit=Unit.frames, all_pairs=False)
        rpe.process_data((ref, est))
        stats = rpe.get_all_statistics()
        for k in ("rmse", "mean", "median", "max"):
            out[f"rpe_{name}_{k}_{unit}"] = float(stats[k])
    out.update({"rpe_delta_frames": int(delta), "frames": int(ref.num_poses), "scope": scope,
                "max_time_diff_s": float(max_time_diff)})
    return out


def evaluate_trajectory(est_poses, est_stamps, ref_poses, ref_stamps, max_time_diff: float = 0.02,
                        delta: int = 1, scope: str = "all frames") -> dict:
    """ATE and RPE in one dict (see ``evaluate_ate`` / ``evaluate_rpe``), plus the protocol text."""
    out = evaluate_ate(est_poses, est_stamps, ref_poses, ref_stamps, max_time_diff, scope)
    out.update(evaluate_rpe(est_poses, est_stamps, ref_poses, ref_stamps, max_time_diff, delta, scope))
    out["protocol"] = (f"evo: poses associated by nearest timestamp within {max_time_diff} s; ATE on "
                       f"translations after {ALIGNMENT}; RPE translation/rotation over {delta}-frame steps, "
                       f"no alignment; scope: {scope}")
    return out
