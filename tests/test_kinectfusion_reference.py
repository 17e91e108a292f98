"""slam.tools.kinectfusion_reference (a reference tracker for judging a ground truth) on the
bundled sample: it writes one pose per frame and tracks the camera (far closer to the ground
truth than a camera that never moves)."""
import numpy as np

from slam.config import load_config
from slam.data.sources import open_source
from slam.data.trajectory_io import read_tum_trajectory
from slam.eval.trajectory import evaluate_ate
from slam.tools import kinectfusion_reference as script

FRAMES = 12


def test_the_reference_tracks_the_sample(tmp_path, capsys):
    out = tmp_path / "kinfu.txt"
    assert script.main(["--config", "default.yaml", "--set", f"data.last={FRAMES}", "--out", str(out),
                        "--prefixes", "6", str(FRAMES)]) == 0
    printed = capsys.readouterr().out
    assert "ICP failed on 0" in printed and f"ATE over the first {FRAMES} frames" in printed
    stamps, poses = read_tum_trajectory(out)
    assert len(stamps) == FRAMES
    frames = list(open_source(load_config("default.yaml", [f"data.last={FRAMES}"]).data))
    gt = np.array([f.gt_pose for f in frames])
    gt_stamps = np.array([f.timestamp for f in frames])
    tracked = evaluate_ate(poses, stamps, gt, gt_stamps)["ate_rmse_m"]
    still = evaluate_ate(np.repeat(poses[:1], FRAMES, axis=0), stamps, gt, gt_stamps)["ate_rmse_m"]
    assert tracked < 0.3 * still, (tracked, still)
