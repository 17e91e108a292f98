"""Replica (NICE-SLAM layout) loader on a synthetic sequence."""
import numpy as np
import pytest

from data_helpers import K_PARAMS, synthetic_images, synthetic_pose, write_replica_sequence
from slam.data.errors import CalibrationError
from slam.data.frame import FrameError
from slam.data.replica import ReplicaSource


def test_reads_frames_scale_and_poses(tmp_path):
    seq = write_replica_sequence(tmp_path / "room0", n=3)
    frames = list(ReplicaSource(seq, intrinsics=list(K_PARAMS)))
    assert len(frames) == 3
    for i, f in enumerate(frames):
        color, depth = synthetic_images(i)
        np.testing.assert_array_equal(f.color, color)
        np.testing.assert_allclose(f.depth, depth, atol=1 / 6553.5)
        np.testing.assert_allclose(f.gt_pose, synthetic_pose(i), atol=1e-8)
        assert f.timestamp == pytest.approx(i / 30)


def test_intrinsics_required(tmp_path):
    seq = write_replica_sequence(tmp_path / "room0", n=1)
    with pytest.raises(CalibrationError, match="data.intrinsics"):
        ReplicaSource(seq)
    with pytest.raises(CalibrationError, match="4 finite numbers"):
        ReplicaSource(seq, intrinsics=[600.0, 600.0, 599.5])


def test_a_pose_that_is_not_rigid_names_file_and_line(tmp_path):
    seq = write_replica_sequence(tmp_path / "room0", n=3)
    lines = (seq / "traj.txt").read_text().splitlines()
    lines[1] = " ".join(f"{v:.9f}" for v in (2.0 * synthetic_pose(1)).reshape(-1))   # last row 0 0 0 2
    (seq / "traj.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(FrameError, match=r"traj.txt:2: not a rigid 4x4 pose \(last row is"):
        ReplicaSource(seq, intrinsics=list(K_PARAMS))
    T = synthetic_pose(1)
    T[:3, :3] *= 1.5                                                                  # a scaled rotation
    lines[1] = " ".join(f"{v:.9f}" for v in T.reshape(-1))
    (seq / "traj.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(FrameError, match=r"traj.txt:2: not a rigid 4x4 pose \(rotation part is not a rotation"):
        ReplicaSource(seq, intrinsics=list(K_PARAMS))
