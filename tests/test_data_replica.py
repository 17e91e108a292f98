"""Replica (NICE-SLAM layout) loader on a synthetic sequence."""
import numpy as np
import pytest

from data_helpers import K_PARAMS, synthetic_images, synthetic_pose, write_replica_sequence
from slam.data.errors import CalibrationError
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
