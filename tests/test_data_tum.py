"""TUM RGB-D loader: association, ground truth, calibration table and resolution order, undistortion."""

import cv2
import numpy as np
import pytest

from data_helpers import K_PARAMS, synthetic_images, synthetic_pose, write_tum_sequence
from slam.data.errors import CalibrationError
from slam.data.trajectory_io import tum_from_pose
from slam.data.tum import TUM_CAMERAS, TumSource, associate, interpolate_pose, resolve_tum_calibration, tum_camera_for


def test_reads_frames_with_values_units_and_gt(tmp_path):
    seq = write_tum_sequence(tmp_path / "seq", n=5)
    src = TumSource(seq)
    frames = list(src)
    assert len(frames) == 5 == len(src) and src.stats.delivered == 5 and src.stats.skipped == 0
    for i, f in enumerate(frames):
        color, depth = synthetic_images(i)
        assert f.index == i
        assert f.timestamp == pytest.approx(100.0 + i / 30, abs=1e-6)
        assert f.color.dtype == np.uint8 and np.array_equal(f.color, color)   # RGB order kept
        assert f.depth.dtype == np.float32
        np.testing.assert_allclose(f.depth, depth, atol=1 / 5000)             # factor 5000
        assert f.depth[0, 0] == 0.0
        np.testing.assert_allclose(f.gt_pose, synthetic_pose(i), atol=1e-6)
        fx, fy, cx, cy = K_PARAMS
        np.testing.assert_allclose(f.K, [[fx, 0, cx], [0, fy, cy], [0, 0, 1]])
        assert f.distortion is None and f.source_id.endswith(".png")
        assert f.depth_offset_s == pytest.approx(0.004, abs=1e-6)   # depth.txt's own stamp


def test_jpeg_colour(tmp_path):
    seq = write_tum_sequence(tmp_path / "seq", n=2, ext="jpg")
    frames = list(TumSource(seq))
    assert len(frames) == 2 and frames[0].color.shape == (24, 32, 3)
    # JPEG is lossy; the mean colour survives
    assert abs(frames[0].color.mean() - synthetic_images(0)[0].mean()) < 8


def test_association_nearest_one_to_one():
    a = np.array([0.0, 0.033, 0.066, 0.100])
    b = np.array([0.005, 0.031, 0.2])
    match, diff = associate(a, b, 0.02)
    assert match.tolist() == [0, 1, -1, -1]
    assert diff[0] == pytest.approx(0.005) and np.isinf(diff[2])
    # two colour stamps competing for one depth: the closer wins
    match, _ = associate(np.array([1.0, 1.01]), np.array([1.009]), 0.02)
    assert match.tolist() == [-1, 0]


def test_ground_truth_interpolated_between_samples_and_none_outside():
    T0, T1 = synthetic_pose(0), synthetic_pose(4)
    gt_t = np.array([1.0, 1.01])
    rows = np.stack([tum_from_pose(T0), tum_from_pose(T1)])
    mid = interpolate_pose(gt_t, rows, 1.005, 0.02)
    np.testing.assert_allclose(mid[:3, 3], 0.5 * (T0[:3, 3] + T1[:3, 3]), atol=1e-9)
    # rotation halfway: yaw 0 -> 0.2 rad gives 0.1 rad
    assert np.arctan2(mid[0, 2], mid[0, 0]) == pytest.approx(0.1, abs=1e-9)
    assert interpolate_pose(gt_t, rows, 1.5, 0.02) is None
    np.testing.assert_allclose(interpolate_pose(gt_t, rows, 0.99, 0.02), T0, atol=1e-9)


def test_frames_outside_ground_truth_have_none(tmp_path):
    seq = write_tum_sequence(tmp_path / "seq", n=4)
    lines = (seq / "groundtruth.txt").read_text().splitlines()
    (seq / "groundtruth.txt").write_text("\n".join(lines[:1] + lines[3:]) + "\n")  # gt starts at frame 2
    poses = [f.gt_pose for f in TumSource(seq)]
    assert poses[0] is None and poses[1] is None and poses[2] is not None and poses[3] is not None


def test_missing_groundtruth_file_is_fine(tmp_path):
    seq = write_tum_sequence(tmp_path / "seq", n=2, gt=False)
    assert all(f.gt_pose is None for f in TumSource(seq))


def test_published_cameras_are_pinned():
    """The TUM RGB-D colour-camera calibration as published (cvg.cit.tum.de file_formats page)."""
    fr1, fr2, fr3 = (TUM_CAMERAS[f"freiburg{i}"] for i in (1, 2, 3))
    assert (fr1.fx, fr1.fy, fr1.cx, fr1.cy) == (517.3, 516.5, 318.6, 255.3)
    assert fr1.distortion == (0.2624, -0.9531, -0.0054, 0.0026, 1.1633)
    assert (fr2.fx, fr2.fy, fr2.cx, fr2.cy) == (520.9, 521.0, 325.1, 249.7)
    assert fr2.distortion == (0.2312, -0.7849, -0.0033, -0.0001, 0.9172)
    assert (fr3.fx, fr3.fy, fr3.cx, fr3.cy) == (535.4, 539.2, 320.1, 247.6)
    assert not any(fr3.distortion)
    assert tum_camera_for("rgbd_dataset_freiburg2_xyz") is fr2
    assert tum_camera_for("fr3_office") is fr3
    assert tum_camera_for("my_sequence") is None


def test_calibration_resolution_order(tmp_path):
    seq = tmp_path / "rgbd_dataset_freiburg1_desk"
    seq.mkdir()
    c = resolve_tum_calibration(seq)                       # table by name
    assert c.K[0, 0] == 517.3 and c.distortion is not None and c.depth_units == 5000
    (seq / "camera.yaml").write_text("fx: 100\nfy: 101\ncx: 50\ncy: 40\ndepth_scale: 1000\n")
    c = resolve_tum_calibration(seq)                       # camera.yaml beats the table
    assert c.K[0, 0] == 100 and c.distortion is None and c.depth_units == 1000
    c = resolve_tum_calibration(seq, intrinsics=[1, 2, 3, 4], depth_scale=42.0)  # override beats both
    assert c.K.tolist() == [[1, 0, 3], [0, 2, 4], [0, 0, 1]] and c.depth_units == 42.0
    other = tmp_path / "unnamed"
    other.mkdir()
    with pytest.raises(CalibrationError, match="no intrinsics"):
        resolve_tum_calibration(other)


def test_fr1_sequence_is_undistorted_colour_linear_depth_nearest(tmp_path):
    seq = tmp_path / "rgbd_dataset_freiburg1_xyz"
    write_tum_sequence(seq, n=1, camera_yaml=False, w=640, h=480)
    src = TumSource(seq)
    f = next(iter(src))
    cam = TUM_CAMERAS["freiburg1"]
    K = np.array([[cam.fx, 0, cam.cx], [0, cam.fy, cam.cy], [0, 0, 1]])
    color, depth = synthetic_images(0, 640, 480)
    expected = cv2.undistort(color, K, np.array(cam.distortion), None, K)
    # bilinear remap vs cv2.undistort: same maps, tiny fixed-point differences
    assert np.mean(np.abs(f.color.astype(int) - expected.astype(int))) < 1.0
    assert f.distortion is None
    np.testing.assert_allclose(f.K, K)
    # nearest neighbour: every valid output depth is one of the input depths (no blending)
    raw = cv2.imread(str(next((seq / "depth").iterdir())), cv2.IMREAD_UNCHANGED)
    valid = f.depth > 0
    assert valid.mean() > 0.9
    assert np.isin(np.round(f.depth[valid] * 5000).astype(np.int64), raw.astype(np.int64)).all()
    # the image centre barely moves, the corners move a lot
    assert abs(f.depth[255, 318] - depth[255, 318]) < 0.02
