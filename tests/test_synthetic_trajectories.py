"""The generated sequences' trajectories (slam/data/synthetic/loop.py): both are rigid camera
poses with OpenCV axes that repeat after a full turn; the circle travels ~2.2 m a turn, the spin
stays within a few centimetres of its centre and turns at TUM fr1/rpy's pace (no open3d needed:
nothing is rendered)."""

import math

import numpy as np
import pytest

from slam.data.synthetic.loop import CENTRE, TRAJECTORIES, generate_loop, loop_pose, spin_pose


def _turn_deg(Ta, Tb):
    c = (np.trace(Ta[:3, :3].T @ Tb[:3, :3]) - 1.0) / 2.0
    return math.degrees(math.acos(min(1.0, max(-1.0, c))))


@pytest.mark.parametrize("pose", [loop_pose, spin_pose])
def test_poses_are_rigid_and_repeat_after_a_turn(pose):
    for k in range(0, 150, 7):
        T = pose(k, 150)
        R = T[:3, :3]
        assert np.allclose(R.T @ R, np.eye(3), atol=1e-12) and np.linalg.det(R) == pytest.approx(1.0)
        assert np.allclose(T[3], [0, 0, 0, 1])
        assert np.allclose(pose(k + 150, 150), T, atol=1e-9)
        assert T[2, 2] < 0          # the optical axis (camera z) looks down a little, never up


def test_the_spin_turns_in_place_and_the_circle_travels():
    spin = [spin_pose(k, 150) for k in range(151)]
    circle = [loop_pose(k, 150) for k in range(151)]
    off_centre = max(np.linalg.norm(T[:3, 3] - np.array(CENTRE)) for T in spin)
    travel = lambda poses: sum(np.linalg.norm(b[:3, 3] - a[:3, 3]) for a, b in zip(poses, poses[1:]))  # noqa: E731
    assert off_centre < 0.02 and travel(spin) < 0.1 * travel(circle)
    assert travel(circle) == pytest.approx(2 * math.pi * 0.35, rel=0.05)
    steps = [_turn_deg(a, b) for a, b in zip(spin, spin[1:])]
    assert 2.4 < np.mean(steps) < 3.2 and max(steps) < 5.0     # deg a frame: 72-96 deg/s at 30 Hz
    # the roll swings: the camera's x axis leaves the horizontal plane by up to ~9 deg
    roll = max(abs(math.degrees(math.asin(T[2, 0]))) for T in spin)
    assert 7.0 < roll < 10.0


def test_an_unknown_trajectory_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="unknown trajectory 'square'.*circle, spin"):
        generate_loop(tmp_path / "seq", frames=2, trajectory="square")
    assert not (tmp_path / "seq").exists()
    assert set(TRAJECTORIES) == {"circle", "spin"}
