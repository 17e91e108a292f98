"""ROS bags written with rosbags (ROS 1, ROS 2 sqlite3, ROS 2 mcap) and read back; ros_convert."""
import logging
from types import SimpleNamespace

import numpy as np
import pytest

from data_helpers import COLOR_TOPIC, DEPTH_TOPIC, INFO_TOPIC, K_PARAMS, synthetic_images, write_bag
from slam.config import DataConfig
from slam.data import open_source
from slam.data.frame import FrameError
from slam.data.ros_convert import RosConvertError, camera_info_to_K, color_to_rgb, depth_to_metres, image_to_numpy, stamp_ns
from slam.data.rosbag import RosbagSource


def _bag_path(tmp_path, kind):
    return tmp_path / ("rec.bag" if kind == "ros1" else f"rec_{kind}")


def _open(path, **kw):
    cfg = DataConfig(dataset="rosbag", path=str(path), color_topic=COLOR_TOPIC, depth_topic=DEPTH_TOPIC,
                     camera_info_topic=INFO_TOPIC, **kw)
    return open_source(cfg)


@pytest.mark.parametrize("kind", ["ros1", "sqlite3", "mcap"])
def test_roundtrip_each_format(tmp_path, kind):
    path = write_bag(_bag_path(tmp_path, kind), kind, n=4)
    src = _open(path)
    assert isinstance(src, RosbagSource) and len(src) == 4
    frames = list(src)
    assert len(frames) == 4 and src.stats.skipped == 0
    fx, fy, cx, cy = K_PARAMS
    for i, f in enumerate(frames):
        color, depth = synthetic_images(i)
        assert f.index == i
        assert f.timestamp == pytest.approx(10 + i / 30, abs=1e-9)      # colour header stamp
        np.testing.assert_array_equal(f.color, color)
        np.testing.assert_allclose(f.depth, np.round(depth * 1000) / 1000, atol=1e-6)
        np.testing.assert_allclose(f.K, [[fx, 0, cx], [0, fy, cy], [0, 0, 1]])
        assert f.gt_pose is None


@pytest.mark.parametrize("color_enc,depth_enc", [("bgr8", "32FC1"), ("mono8", "16UC1")])
def test_encodings(tmp_path, color_enc, depth_enc):
    path = write_bag(tmp_path / "e.bag", "ros1", n=2, color_encoding=color_enc, depth_encoding=depth_enc)
    f = next(iter(_open(path)))
    color, depth = synthetic_images(0)
    if color_enc == "mono8":
        np.testing.assert_array_equal(f.color, np.repeat(color[:, :, :1], 3, axis=2))
    else:
        np.testing.assert_array_equal(f.color, color)
    tol = 1e-6 if depth_enc == "32FC1" else 5e-4
    valid = depth > 0
    np.testing.assert_allclose(f.depth[valid], depth[valid], atol=tol)


def test_frames_before_camera_info_are_skipped_and_counted(tmp_path, caplog):
    path = write_bag(tmp_path / "late.bag", "ros1", n=5, info_after=2)
    src = _open(path)
    with caplog.at_level(logging.WARNING, logger="slam.data"):
        frames = list(src)
    assert [f.index for f in frames] == [2, 3, 4]
    assert src.stats.skipped == 2 and "before the first CameraInfo" in src.stats.skip_reasons[0]
    assert "CameraInfo" in caplog.text


def test_intrinsics_override_needs_no_camera_info(tmp_path):
    path = write_bag(tmp_path / "noinfo.bag", "ros1", n=2, with_info=False)
    with pytest.raises(FrameError, match="info topic '/camera/color/camera_info' has no messages"):
        _open(path)
    frames = list(_open(path, intrinsics=[10.0, 10.0, 15.5, 11.5]))
    assert len(frames) == 2 and frames[0].K[0, 0] == 10.0


def test_unpaired_colour_beyond_tolerance_is_skipped(tmp_path):
    # depth 30 ms after colour (frames 200 ms apart): outside 20 ms, inside 40 ms
    path = write_bag(tmp_path / "gap.bag", "ros1", n=3, depth_offset=0.03, period=0.2)
    src = _open(path, max_time_diff=0.02)
    with pytest.raises(FrameError, match="no usable frame"):
        list(src)
    assert src.stats.skipped == 3 and "no depth image within" in src.stats.skip_reasons[0]
    assert len(list(_open(path, max_time_diff=0.04))) == 3


def test_stride_first_last_count_pairs(tmp_path):
    path = write_bag(tmp_path / "s.bag", "ros1", n=6)
    frames = list(_open(path, first=1, last=6, stride=2))
    assert [round(f.timestamp, 4) for f in frames] == [round(10 + k / 30, 4) for k in (1, 3, 5)]
    assert [f.index for f in frames] == [0, 1, 2]


def test_downscale(tmp_path):
    path = write_bag(tmp_path / "d.bag", "ros1", n=1)
    f = next(iter(_open(path, downscale=2)))
    assert f.color.shape == (12, 16, 3) and f.K[0, 0] == K_PARAMS[0] / 2


# ----------------------------------------------------------------------------- ros_convert
def _stand_in_image(arr, enc, bigendian=False, pad=0):
    """A rospy-like Image: bytes data, padded rows, secs/nsecs stamp."""
    h, w = arr.shape[:2]
    rowbytes = arr[0].nbytes
    a = arr.astype(arr.dtype.newbyteorder(">" if bigendian else "<"))
    rows = [a[r].tobytes() + b"\0" * pad for r in range(h)]
    return SimpleNamespace(header=SimpleNamespace(stamp=SimpleNamespace(secs=3, nsecs=500_000_000)),
                           height=h, width=w, encoding=enc, is_bigendian=int(bigendian),
                           step=rowbytes + pad, data=b"".join(rows))


def test_convert_rospy_like_objects_with_padding_and_endianness():
    depth = (np.arange(12, dtype=np.uint16) * 1000).reshape(3, 4)
    msg = _stand_in_image(depth, "16UC1", bigendian=True, pad=3)
    np.testing.assert_array_equal(image_to_numpy(msg), depth)
    np.testing.assert_allclose(depth_to_metres(msg), depth / 1000.0)
    assert stamp_ns(msg) == 3_500_000_000
    rgb = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
    np.testing.assert_array_equal(color_to_rgb(_stand_in_image(rgb[:, :, ::-1], "bgr8")), rgb)
    f = np.array([[1.5, np.nan], [-1.0, np.inf]], np.float32)
    np.testing.assert_array_equal(depth_to_metres(_stand_in_image(f, "32FC1")), [[1.5, 0], [0, 0]])
    info = SimpleNamespace(K=[500.0, 0, 320, 0, 501.0, 240, 0, 0, 1])   # ROS 1 field name
    np.testing.assert_allclose(camera_info_to_K(info), [[500, 0, 320], [0, 501, 240], [0, 0, 1]])


def test_convert_errors():
    with pytest.raises(RosConvertError, match="yuv422"):
        image_to_numpy(_stand_in_image(np.zeros((2, 2), np.uint16), "yuv422"))
    short = _stand_in_image(np.zeros((4, 4), np.uint16), "16UC1")
    short.data = short.data[:-5]
    with pytest.raises(RosConvertError, match="bytes"):
        image_to_numpy(short)
    with pytest.raises(RosConvertError, match="uncalibrated"):
        camera_info_to_K(SimpleNamespace(k=[0.0] * 9))
    with pytest.raises(RosConvertError, match="colour encoding '16UC1'"):
        color_to_rgb(_stand_in_image(np.zeros((2, 2), np.uint16), "16UC1"))
