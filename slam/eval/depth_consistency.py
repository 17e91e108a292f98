"""How well a trajectory agrees with the sensor's own depth, without trusting any ground truth.

For a pair of frames (a, b), frame a's depth is back-projected, moved into camera b by the
trajectory's relative pose and compared with b's depth at the pixel it lands on. A wrong relative
pose shows as disagreement whoever made the trajectory, so this ranks trajectories, the ground
truth among them, by the data alone. (On 7-Scenes redkitchen the ground truth, from KinectFusion,
disagrees with the depth more than this package's estimate does, and jumps at frame 122:
docs/benchmarks.md#7-scenes-ground-truth.)
"""
from __future__ import annotations

from typing import Iterable, Mapping, Optional

import numpy as np

from slam.geometry import invert


def depth_disagreement(depth_a: np.ndarray, depth_b: np.ndarray, K: np.ndarray, T_ba: np.ndarray,
                       within: float = 0.01) -> dict:
    """Frame a's depth moved into frame b by ``T_ba`` (4, 4: camera-a coordinates -> camera b) against
    b's depth. depth_*: (H, W) float metres, 0 = invalid, one camera ``K`` (3, 3). Returns
    {median_m: median |z_b - z_moved| over the pixels both see, within: the share of them within
    ``within`` m, pixels: how many} (NaN / 0 when none overlap)."""
    depth_a, depth_b = np.asarray(depth_a, np.float64), np.asarray(depth_b, np.float64)
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    v, u = np.nonzero(depth_a > 0)
    z = depth_a[v, u]
    pts = np.stack([(u - cx) / fx * z, (v - cy) / fy * z, z], axis=1) @ T_ba[:3, :3].T + T_ba[:3, 3]
    front = pts[:, 2] > 1e-6
    pts = pts[front]
    ub = np.round(pts[:, 0] / pts[:, 2] * fx + cx).astype(np.int64)
    vb = np.round(pts[:, 1] / pts[:, 2] * fy + cy).astype(np.int64)
    h, w = depth_b.shape
    inside = (ub >= 0) & (ub < w) & (vb >= 0) & (vb < h)
    zb = depth_b[vb[inside], ub[inside]]
    seen = zb > 0
    err = np.abs(zb[seen] - pts[inside][seen, 2])
    if err.size == 0:
        return {"median_m": float("nan"), "within": float("nan"), "pixels": 0}
    return {"median_m": float(np.median(err)), "within": float(np.mean(err <= within)), "pixels": int(err.size)}


def pair_table(depths: Mapping[int, np.ndarray], K: np.ndarray, trajectories: Mapping[str, Mapping[int, np.ndarray]],
               pairs: Iterable[tuple[int, int]]) -> list[dict]:
    """``depth_disagreement`` of every (a, b) in ``pairs`` for every trajectory (name -> {frame index:
    T_wc (4, 4)}) that has both frames: [{a, b, name: {median_m, within, pixels}, ...}]."""
    rows = []
    for a, b in pairs:
        row = {"a": a, "b": b}
        for name, poses in trajectories.items():
            if a in poses and b in poses:
                row[name] = depth_disagreement(depths[a], depths[b], K, invert(poses[b]) @ poses[a])
        rows.append(row)
    return rows


def keyframe_consistency(keyframes: list, worst: int = 3) -> Optional[dict]:
    """Ground-truth-free self-check of a run: ``depth_disagreement`` between each keyframe and the
    next (by frame index) at their final poses (``Keyframe``: T_wc, depth (H, W) metres, K). Returns
    {pairs, median_mm: the median over pairs of each pair's median |dz|, within_1cm: mean share,
    worst: the ``worst`` pairs [frame a, frame b, median mm]}; None with fewer than two keyframes.
    A tracking or loop-closure error between two keyframes shows as a pair far above the median."""
    kfs = sorted(keyframes, key=lambda k: k.frame_index)
    rows = []
    for a, b in zip(kfs, kfs[1:]):
        if a.depth.shape != b.depth.shape:
            continue
        d = depth_disagreement(a.depth, b.depth, np.asarray(a.K, np.float64), invert(b.T_wc) @ a.T_wc)
        if d["pixels"] > 0:
            rows.append((a.frame_index, b.frame_index, d["median_m"] * 1e3, d["within"]))
    if not rows:
        return None
    med = np.array([r[2] for r in rows])
    order = np.argsort(-med)[:worst]
    return {"pairs": len(rows), "median_mm": float(np.median(med)),
            "within_1cm": float(np.mean([r[3] for r in rows])),
            "worst": [[int(rows[i][0]), int(rows[i][1]), round(float(rows[i][2]), 2)] for i in order],
            "protocol": "consecutive keyframes at their final poses: the earlier one's depth moved into the "
                        "later one vs its depth, median |difference| over the pixels both see"}


def revisit_pairs(keyframes: list, min_gap_s: float, max_distance_m: float, max_angle_deg: float,
                  max_pairs: int) -> list[tuple]:
    """Pairs (a, b) of keyframes (``Keyframe``s, a earlier) at least ``min_gap_s`` apart in time whose
    final poses put the cameras within ``max_distance_m`` and their optical axes within
    ``max_angle_deg``: places the camera came back to. At most ``max_pairs``, spread evenly over the
    candidates in time order (deterministic)."""
    kfs = sorted(keyframes, key=lambda k: k.frame_index)
    centres = np.array([np.asarray(k.T_wc)[:3, 3] for k in kfs]).reshape(-1, 3)
    axes = np.array([np.asarray(k.T_wc)[:3, 2] for k in kfs]).reshape(-1, 3)
    stamps = np.array([k.timestamp for k in kfs])
    cos_max = np.cos(np.radians(max_angle_deg))
    pairs = []
    for i in range(len(kfs)):
        later = np.arange(i + 1, len(kfs))
        ok = ((stamps[later] - stamps[i] >= min_gap_s)
              & (np.linalg.norm(centres[later] - centres[i], axis=1) <= max_distance_m)
              & (axes[later] @ axes[i] >= cos_max))
        pairs += [(kfs[i], kfs[j]) for j in later[ok]]
    if len(pairs) > max_pairs:
        pairs = [pairs[int(k)] for k in np.linspace(0, len(pairs) - 1, max_pairs).round()]
    return pairs


def revisit_consistency(keyframes: list, as_tracked: Mapping[int, np.ndarray],
                        ground_truth: Mapping[int, np.ndarray], min_gap_s: float = 3.0,
                        max_distance_m: float = 0.5, max_angle_deg: float = 20.0,
                        max_pairs: int = 150) -> Optional[dict]:
    """Ground-truth-free check of a run's global consistency: ``depth_disagreement`` between
    keyframes of the same place seen at least ``min_gap_s`` apart (``revisit_pairs``), where drift
    shows and loop closure should remove it. The same pairs at three sets of poses: final (the
    keyframes' T_wc), as tracked (``as_tracked``: frame index -> T_wc (4, 4) before refinement and
    loop corrections) and the ground truth (``ground_truth``: frame index -> T_wc, where known), so
    a trajectory can be judged where the ground truth itself is doubtful. Returns {pairs, final_mm,
    as_tracked_mm, ground_truth_mm (the median over pairs of each pair's median |dz|; None where
    no pair has those poses), within_1cm (final: mean share), ...}; None without a revisit."""
    pairs = [(a, b) for a, b in revisit_pairs(keyframes, min_gap_s, max_distance_m, max_angle_deg, max_pairs)
             if a.depth.shape == b.depth.shape]
    if not pairs:
        return None
    sets = {"final": {k.frame_index: k.T_wc for p in pairs for k in p}, "as_tracked": as_tracked,
            "ground_truth": ground_truth}
    rows = [pair_table({a.frame_index: a.depth, b.frame_index: b.depth}, np.asarray(a.K, np.float64), sets,
                       [(a.frame_index, b.frame_index)])[0] for a, b in pairs]
    seen = {name: [r[name] for r in rows if name in r and r[name]["pixels"] > 0] for name in sets}
    if not seen["final"]:
        return None
    medians = {name: [d["median_m"] * 1e3 for d in ds] for name, ds in seen.items()}
    within = [d["within"] for d in seen["final"]]
    summary = {f"{name}_mm": (float(np.median(v)) if v else None) for name, v in medians.items()}
    return {"pairs": len(medians["final"]), **summary, "within_1cm": float(np.mean(within)),
            "protocol": f"keyframe pairs >= {min_gap_s:g} s apart whose final poses are within {max_distance_m:g} m "
                        f"and {max_angle_deg:g} deg (at most {max_pairs}): the earlier one's depth moved into the "
                        "later one vs its depth at each set of poses, median over pairs of the median |difference|"}
