"""slam.tools.loop_ceiling: frames follow their keyframes through a pose-graph correction, and
ground-truth loop edges on a drifted circle bring the trajectory back to the truth."""
import numpy as np
import pytest

from slam.config import LoopConfig
from slam.data.synthetic.loop import loop_pose
from slam.geometry import invert
from slam.map.keyframes import Keyframe
from slam.tools.loop_ceiling import ceiling_ate, corrected_trajectory, frames_with_keyframes, relative_error

FRAMES, TOTAL, EVERY = 150, 120, 5     # one and a quarter turns of the generated loop, a keyframe every 5


def _shift(x: float) -> np.ndarray:
    T = np.eye(4)
    T[0, 3] = x
    return T


def _drifted():
    """(stamps, truth, run, keyframes): the run drifts along x, 0.3 mm a frame."""
    stamps = np.arange(FRAMES) / 30.0
    truth = np.stack([loop_pose(k, TOTAL) for k in range(FRAMES)])
    run = np.stack([_shift(3e-4 * k) @ truth[k] for k in range(FRAMES)])
    blank = np.zeros((2, 2, 3), np.uint8)
    keyframes = [Keyframe(k, stamps[k], run[k], blank, np.zeros((2, 2), np.float16), np.eye(3), kf_id=k // EVERY)
                 for k in range(0, FRAMES, EVERY)]
    return stamps, truth, run, keyframes


def test_frames_follow_their_reference_keyframe():
    stamps, _, run, keyframes = _drifted()
    ref = frames_with_keyframes(stamps, keyframes)
    assert list(ref[:7]) == [0, 0, 0, 0, 0, 1, 1]
    assert ref[-1] == len(keyframes) - 1
    solved = {k.kf_id: (_shift(0.1) @ k.T_wc if k.kf_id >= 3 else k.T_wc) for k in keyframes}
    moved = corrected_trajectory(run, ref, keyframes, solved)
    np.testing.assert_allclose(moved[:15], run[:15], atol=1e-12)
    np.testing.assert_allclose(moved[15:, 0, 3], run[15:, 0, 3] + 0.1, atol=1e-12)
    assert relative_error(run[20], moved[20])[1] == pytest.approx(0.0, abs=1e-6)


def test_ground_truth_loop_edges_remove_the_drift():
    pytest.importorskip("gtsam")
    from slam.loop.pose_graph import LoopEdge

    stamps, truth, run, keyframes = _drifted()
    by_frame = {k.frame_index: k for k in keyframes}
    # the last quarter turn sees the first again: frames k and k + TOTAL
    edges = [LoopEdge(by_frame[k].kf_id, by_frame[k + TOTAL].kf_id, invert(truth[k]) @ truth[k + TOTAL])
             for k in range(0, FRAMES - TOTAL, EVERY)]
    ref = frames_with_keyframes(stamps, keyframes)
    from slam.eval.trajectory import evaluate_ate
    before = evaluate_ate(run, stamps, truth, stamps)["ate_rmse_m"] * 100
    after, kept = ceiling_ate(edges, keyframes, LoopConfig(), run, ref, stamps, stamps, truth)
    assert before > 1.0
    assert kept == len(edges)
    assert after < 0.3 * before


def test_the_chi_square_of_the_truth_under_a_measurement_takes_the_inflation_out():
    """A measurement off the truth by a known twist e: e^T I e x NOISE_INFLATION; not for RGB-D
    odometry's or a missing information."""
    from slam.geometry import se3_exp
    from slam.loop.information import NOISE_INFLATION
    from slam.loop.verify import Measurement
    from slam.tools.loop_ceiling import uninflated_chi2

    T_ab = loop_pose(10, TOTAL)
    e = np.array([0.01, -0.02, 0.005, 0.03, 0.0, -0.01])
    info = np.diag([400.0, 400.0, 400.0, 2500.0, 2500.0, 2500.0])
    chi2 = uninflated_chi2(Measurement(T_ab, info, "icp"), T_ab @ se3_exp(e))
    assert chi2 == pytest.approx(float(e @ info @ e) * NOISE_INFLATION, rel=1e-6)
    assert uninflated_chi2(Measurement(T_ab, info, "rgbd"), T_ab) is None
    assert uninflated_chi2(Measurement(T_ab, None, "icp"), T_ab) is None
    assert uninflated_chi2(None, T_ab) is None


def test_the_tool_on_a_run_folder_of_the_sample(tmp_path, capsys):
    """A run folder made from the bundled sample's frames at drifted poses: the table prints, and
    the ground truth's loop edges bring the ATE down."""
    pytest.importorskip("gtsam")
    pytest.importorskip("open3d")
    import json

    from slam.config import load_config
    from slam.config.loading import dump_config
    from slam.data.sources import open_source
    from slam.data.trajectory_io import write_tum_trajectory
    from slam.map.map_io import save_keyframes
    from slam.tools.loop_ceiling import main

    cfg = load_config("default.yaml", ["data.stride=2"])
    frames = list(open_source(cfg.data))
    stamps = np.array([f.timestamp for f in frames])
    run = np.stack([_shift(6e-4 * k) @ f.gt_pose for k, f in enumerate(frames)])
    keyframes = [Keyframe.from_frame(f, run[k], downscale=2, kf_id=k // 3) for k, f in enumerate(frames) if k % 3 == 0]
    dump_config(cfg, tmp_path / "config.yaml")
    write_tum_trajectory(tmp_path / "trajectory.txt", stamps, run)
    save_keyframes(tmp_path / "map.keyframes.npz", keyframes, map_spheres=0)
    assert main([str(tmp_path), "--edges", "0", "--json", str(tmp_path / "out.json")]) == 0
    out = capsys.readouterr().out
    assert "revisit pairs" in out and "RGB-D odometry from the ground truth's" in out
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["pairs"] > 0
    # exact synthetic depth: ICP knows its error far better than on real data (inflation ~1, not 100)
    from slam.loop.information import NOISE_INFLATION, chi2_quantile
    assert 0.0 < report["chi2_median"] < 0.2 * NOISE_INFLATION * chi2_quantile(0.5, 6)
    every = report["ceiling"][-1]
    assert every["pairs"] == report["pairs"]
    assert every["ground_truth_edges_cm"] < 0.5 * report["ate_cm"]
