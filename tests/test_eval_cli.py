"""slam_eval on files written in tmp_path."""
import json

import numpy as np
import pytest

from data_helpers import synthetic_pose, write_7scenes_sequence, write_replica_sequence, write_tum_sequence
from slam.data.trajectory_io import write_tum_trajectory
from slam.eval.cli import main


def noisy(poses, scale=0.01, seed=0):
    out = poses.copy()
    out[:, :3, 3] += np.random.default_rng(seed).normal(scale=scale, size=(len(poses), 3))
    return out


def test_gt_file_table_and_json(tmp_path, capsys):
    t = np.arange(20) / 30
    gt = np.stack([synthetic_pose(i) for i in range(20)])
    write_tum_trajectory(tmp_path / "gt.txt", t, gt)
    write_tum_trajectory(tmp_path / "est.txt", t, noisy(gt))
    rc = main([str(tmp_path / "est.txt"), "--gt", str(tmp_path / "gt.txt"), "--json", str(tmp_path / "m.json")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "ATE [m]" in out and "RPE rot [deg]" in out and "SE3 Umeyama, no scale" in out
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["frames"] == 20 and 0.005 < m["ate_rmse_m"] < 0.02 and m["scope"] == "all frames"


def test_ate_over_prefixes_grows_with_drift(tmp_path, capsys):
    """A trajectory whose error grows along it: each prefix is aligned on its own, so a short
    prefix is near its small noise and the whole one carries the drift; the whole prefix equals
    the whole trajectory's ATE; lengths beyond the estimate are skipped."""
    n = 120
    t = np.arange(n) / 30
    gt = np.stack([synthetic_pose(i) for i in range(n)])
    est = noisy(gt, scale=0.001)
    est[:, 0, 3] += 0.0005 * np.arange(n) ** 1.5 / 10          # drift: 0 -> 6.5 mm, faster at the end
    write_tum_trajectory(tmp_path / "gt.txt", t, gt)
    write_tum_trajectory(tmp_path / "est.txt", t, est)
    rc = main([str(tmp_path / "est.txt"), "--gt", str(tmp_path / "gt.txt"), "--prefixes", "20", "60", "120", "500",
               "--json", str(tmp_path / "m.json")])
    assert rc == 0
    m = json.loads((tmp_path / "m.json").read_text())
    rows = m["ate_over_prefixes"]
    assert [r["frames"] for r in rows] == [20, 60, 120]
    errs = [r["ate_rmse_m"] for r in rows]
    assert errs[0] < errs[1] < errs[2]
    assert errs[2] == pytest.approx(m["ate_rmse_m"], rel=1e-9)
    assert "ATE over the first 60 frames" in capsys.readouterr().out


@pytest.mark.parametrize("dataset", ["tum", "7scenes", "replica"])
def test_against_each_dataset_layout(tmp_path, dataset, capsys):
    n = 6
    seq = {"tum": write_tum_sequence, "7scenes": write_7scenes_sequence,
           "replica": write_replica_sequence}[dataset](tmp_path / "seq", n=n)
    t = 100 + np.arange(n) / 30 if dataset == "tum" else np.arange(n) / 30
    gt = np.stack([synthetic_pose(i) for i in range(n)])
    write_tum_trajectory(tmp_path / "est.txt", t, gt)
    rc = main([str(tmp_path / "est.txt"), "--dataset", dataset, "--path", str(seq), "--json", str(tmp_path / "m.json")])
    assert rc == 0, capsys.readouterr().err
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["frames"] == n and m["ate_rmse_m"] < 1e-6


def test_bad_input_exit_status(tmp_path, capsys):
    assert main([str(tmp_path / "missing.txt"), "--gt", str(tmp_path / "gt.txt")]) == 2
    assert "missing.txt: trajectory file not found" in capsys.readouterr().err
    (tmp_path / "est.txt").write_text("1.0 0 0 0 0 0 0\n")
    assert main([str(tmp_path / "est.txt"), "--gt", str(tmp_path / "est.txt")]) == 2
    assert "est.txt:1: expected 8 values" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["slam.eval.cli", "slam.data.cli", "slam.cli"])
def test_help_is_plain_text(module):
    """--help of the user's commands shows no reStructuredText markup (the docstrings use it)."""
    import importlib
    parser = importlib.import_module(module).build_parser()
    text = parser.format_help()
    assert "``" not in text and text.count("`") == 0
    if module == "slam.eval.cli":
        assert "Evaluate a TUM trajectory" in text and "slam_eval est.txt --gt groundtruth.txt" in text
