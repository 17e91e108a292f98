"""slam.tools.blur_effect: sharpness, (partial) rank correlation and per-step motion errors."""
from __future__ import annotations

import cv2
import numpy as np

from slam.geometry import so3_exp
from slam.tools.blur_effect import motion_errors, sharpness, spearman


def test_a_blurred_image_is_less_sharp():
    rng = np.random.default_rng(0)
    img = (rng.random((120, 160, 3)) * 255).astype(np.uint8)
    blurred = [cv2.GaussianBlur(img, (0, 0), s) for s in (0.5, 1.0, 2.0)]
    values = [sharpness(img)] + [sharpness(b) for b in blurred]
    assert all(a > b for a, b in zip(values, values[1:]))


def test_partial_correlation_removes_a_common_cause():
    """x and y both follow c (and nothing else): correlated, but not once c is taken out."""
    rng = np.random.default_rng(1)
    c = rng.random(400)
    x, y = c + 0.05 * rng.standard_normal(400), c + 0.05 * rng.standard_normal(400)
    assert spearman(x, y) > 0.8
    assert abs(spearman(x, y, c)) < 0.15
    assert spearman(x, -x) < -0.99


def test_motion_errors_measure_the_run_against_the_truth():
    """A run that drifts 1 cm along x per frame on a truth that turns and moves: error 1 cm per
    frame step, 2 over two; a frame without a pose is left out."""
    truth, run = [], []
    for i in range(6):
        T = np.eye(4)
        T[:3, :3] = so3_exp(np.radians([0.0, 3.0 * i, 0.0]))
        T[:3, 3] = [0.02 * i, 0.0, 0.01 * i]
        truth.append(T)
        D = np.eye(4)
        D[0, 3] = 0.01 * i
        run.append(D @ T)        # drift along the world's x
    run[3] = None
    idx, err, size = motion_errors(run, truth, 1)
    assert list(idx) == [1, 2, 5] and np.allclose(err, 1.0)
    assert np.all(size > 3.0)    # 3 deg + the step's cm
    idx, err, _ = motion_errors(run, truth, 2)
    assert list(idx) == [2, 4] and np.allclose(err, 2.0)


def test_the_tool_on_a_run_folder_of_the_sample(tmp_path, capsys, monkeypatch):
    """A run folder of the bundled sample at the truth's poses but for a 1 cm slip at every other
    frame, those frames blurred: blurred frames score less sharp and worse, so the correlation
    comes out negative, also with the motion's size taken out."""
    from slam.config import load_config
    from slam.config.loading import dump_config
    from slam.data.sources import open_source
    from slam.data.trajectory_io import write_tum_trajectory
    from slam.tools import blur_effect

    cfg = load_config("default.yaml", ["data.last=40"])
    frames = list(open_source(cfg.data))
    poses, slip = [], 0.0
    for f in frames:
        slip += 0.01 * (f.index % 2)          # the odd frames' motion is 1 cm off
        T = f.gt_pose.copy()
        T[0, 3] += slip
        poses.append(T)
    dump_config(cfg, tmp_path / "config.yaml")
    write_tum_trajectory(tmp_path / "trajectory.txt", np.array([f.timestamp for f in frames]), np.stack(poses))
    real, order = blur_effect.sharpness, iter(range(len(frames)))
    monkeypatch.setattr(blur_effect, "sharpness",       # the tool reads the frames in order: blur the odd ones
                        lambda color: real(cv2.GaussianBlur(color, (0, 0), 2.0) if next(order) % 2 else color))
    assert blur_effect.main([str(tmp_path), "--steps", "1"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "over 1 frame(s)" in ln)
    corr = float(line.split("Spearman(sharpness, error) ")[1].split(",")[0])
    partial = float(line.split("taken out ")[1].split(";")[0])
    assert corr < -0.5 and partial < -0.5
