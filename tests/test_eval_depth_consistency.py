"""Depth consistency of trajectories (slam/eval/depth_consistency.py, slam.tools.depth_consistency)
on the bundled sample: its ground truth agrees with its depth, a pose moved by 2 cm along the optical axis does not."""
import json

import numpy as np

from slam.config import load_config
from slam.data.sources import open_source
from slam.data.trajectory_io import write_tum_trajectory
from slam.eval.depth_consistency import depth_disagreement, keyframe_consistency, pair_table, revisit_consistency, revisit_pairs
from slam.geometry import invert, pivot_increment
from slam.map.keyframes import Keyframe
from slam.tools import depth_consistency as script


def _frames(n=6):
    cfg = load_config("default.yaml", [f"data.last={n}"])
    return list(open_source(cfg.data))


def test_ground_truth_agrees_with_the_depth_and_a_wrong_pose_does_not():
    frames = _frames()
    a, b = frames[0], frames[5]
    K = np.asarray(a.K, dtype=np.float64)
    same = depth_disagreement(a.depth, a.depth, K, np.eye(4))
    assert same["median_m"] == 0.0 and same["within"] == 1.0 and same["pixels"] == int((a.depth > 0).sum())
    right = depth_disagreement(a.depth, b.depth, K, invert(b.gt_pose) @ a.gt_pose)
    moved = pivot_increment(np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.02]), 0.0) @ invert(b.gt_pose) @ a.gt_pose
    wrong = depth_disagreement(a.depth, b.depth, K, moved)
    assert right["pixels"] > 0.5 * (a.depth > 0).sum()
    assert right["median_m"] < 0.5 * wrong["median_m"] and right["within"] > wrong["within"] + 0.2
    rows = pair_table({0: a.depth, 5: b.depth}, K, {"gt": {0: a.gt_pose, 5: b.gt_pose}, "half": {0: a.gt_pose}},
                      [(0, 5)])
    assert rows[0]["gt"] == right and "half" not in rows[0]     # a trajectory without frame 5 is left out


def test_the_script_ranks_a_perturbed_trajectory_below_the_ground_truth(tmp_path, capsys):
    frames = _frames()
    stamps = np.array([f.timestamp for f in frames])
    bad = np.array([pivot_increment(np.array([0, 0, 0, 0.01 * i, 0, 0]), 0.0) @ f.gt_pose
                    for i, f in enumerate(frames)])
    write_tum_trajectory(tmp_path / "bad.txt", stamps, bad)
    out = tmp_path / "rows.json"
    assert script.main(["--config", "default.yaml", "--gt", "--run", f"bad={tmp_path / 'bad.txt'}",
                        "--pairs", "0:5", "1:4", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [(r["a"], r["b"]) for r in rows] == [(0, 5), (1, 4)]
    assert all(r["gt"]["median_m"] < r["bad"]["median_m"] for r in rows)
    assert "0 ->     5" in capsys.readouterr().out


def test_the_script_reads_pairs_that_do_not_start_at_frame_0(tmp_path):
    # pairs (2, 5): the frames are loaded from data.first = 2, whose Frame.index counts from 0
    frames = _frames()
    stamps = np.array([f.timestamp for f in frames])
    write_tum_trajectory(tmp_path / "gt.txt", stamps, np.array([f.gt_pose for f in frames]))
    out = tmp_path / "rows.json"
    assert script.main(["--config", "default.yaml", "--gt", "--run", f"copy={tmp_path / 'gt.txt'}",
                        "--pairs", "2:5", "--json", str(out)]) == 0
    row = json.loads(out.read_text())[0]
    a, b = frames[2], frames[5]
    want = depth_disagreement(a.depth, b.depth, np.asarray(a.K, dtype=np.float64), invert(b.gt_pose) @ a.gt_pose)
    assert (row["a"], row["b"]) == (2, 5)
    assert abs(row["gt"]["median_m"] - want["median_m"]) < 1e-9 and row["gt"]["pixels"] == want["pixels"]
    assert abs(row["copy"]["median_m"] - want["median_m"]) < 1e-6


def test_keyframe_self_check_points_at_a_wrong_keyframe_pose():
    """metrics.json's keyframe_depth_consistency: consecutive keyframes at their poses; a keyframe
    put 3 cm off is in both of its pairs, which become the worst."""
    kfs = [Keyframe.from_frame(f, f.gt_pose) for f in _frames(8)[::2]]
    good = keyframe_consistency(kfs)
    assert good["pairs"] == 3 and good["median_mm"] < 5.0
    kfs[2].T_wc = kfs[2].T_wc @ pivot_increment(np.array([0, 0, 0, 0, 0, 0.03]), 0.0)
    bad = keyframe_consistency(kfs, worst=2)
    assert sorted(tuple(w[:2]) for w in bad["worst"]) == [(2, 4), (4, 6)]
    assert min(w[2] for w in bad["worst"]) > 2 * good["median_mm"]
    assert keyframe_consistency(kfs[:1]) is None


def test_places_seen_again_judge_final_tracked_and_true_poses_on_the_same_pairs():
    """metrics.json's revisit_depth_consistency: the sample's closed path comes back to its start
    ~5 s later. At the true poses those revisits agree with the depth; a drift of 3 cm over the
    path's second half (the poses "as tracked") shows on them; pairs closer in time than
    ``min_gap_s``, or apart by more than ``max_distance_m``, are no revisits."""
    frames = _frames(150)
    kfs = [Keyframe.from_frame(f, f.gt_pose) for f in frames[::10]]
    truth = {f.index: f.gt_pose for f in frames}
    drift = {}
    for i, T in truth.items():
        drift[i] = T.copy()
        drift[i][:3, 3] += T[:3, 2] * 0.03 * max(i - 75, 0) / 75     # along the optical axis, up to 3 cm
    out = revisit_consistency(kfs, drift, truth, min_gap_s=3.0)
    assert out is not None and out["pairs"] >= 2
    assert out["final_mm"] == out["ground_truth_mm"] < 5.0
    assert out["as_tracked_mm"] > 2 * out["final_mm"]
    assert all(b.timestamp - a.timestamp >= 3.0 for a, b in revisit_pairs(kfs, 3.0, 0.5, 20.0, 150))
    assert revisit_consistency(kfs, drift, truth, min_gap_s=10.0) is None          # the sample lasts 5 s
    assert revisit_consistency(kfs, drift, truth, max_distance_m=1e-4) is None
    assert revisit_consistency(kfs, drift, {}, min_gap_s=3.0)["ground_truth_mm"] is None
