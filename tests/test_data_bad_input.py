"""The bad-input catalogue: every case is a clear error naming the file, or a counted skip.

Errors: ``FrameError`` subclasses (``DataNotFoundError`` is also a ``FileNotFoundError``) whose
message names the file and the problem. Skips: a warning on logger ``slam.data`` and a count in
``source.stats``; the rest of the sequence is delivered.
"""
import logging

import cv2
import numpy as np
import pytest

from data_helpers import (
    COLOR_TOPIC,
    DEPTH_TOPIC,
    INFO_TOPIC,
    write_7scenes_sequence,
    write_bag,
    write_replica_sequence,
    write_tum_sequence,
)
from slam.config import DataConfig
from slam.data import open_source
from slam.data.errors import CalibrationError, DataNotFoundError
from slam.data.frame import FrameError
from slam.data.trajectory_io import TrajectoryFormatError, read_tum_trajectory


def tum(path, **kw):
    return open_source(DataConfig(dataset="tum", path=str(path), **kw))


def bag(path, **kw):
    kw.setdefault("color_topic", COLOR_TOPIC)
    kw.setdefault("depth_topic", DEPTH_TOPIC)
    kw.setdefault("camera_info_topic", INFO_TOPIC)
    return open_source(DataConfig(dataset="rosbag", path=str(path), **kw))


def rgb_files(seq):
    return sorted((seq / "rgb").iterdir())


def depth_files(seq):
    return sorted((seq / "depth").iterdir())


@pytest.fixture
def seq(tmp_path):
    return write_tum_sequence(tmp_path / "seq", n=5)


# ----------------------------------------------------------------------------- missing things
@pytest.mark.parametrize("dataset", ["tum", "7scenes", "replica", "rosbag"])
def test_missing_folder(tmp_path, dataset):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match="nope.*not found") as err:
        open_source(DataConfig(dataset=dataset, path=str(missing), intrinsics=[1.0, 1.0, 0.0, 0.0]))
    assert isinstance(err.value, DataNotFoundError) and isinstance(err.value, FrameError)


@pytest.mark.parametrize("index", ["rgb.txt", "depth.txt"])
def test_missing_tum_index_file(seq, index):
    (seq / index).unlink()
    with pytest.raises(DataNotFoundError, match=rf"{index}: index file not found"):
        tum(seq)


def test_missing_replica_traj_and_empty_7scenes_folder(tmp_path):
    rep = write_replica_sequence(tmp_path / "rep", n=2)
    (rep / "traj.txt").unlink()
    with pytest.raises(DataNotFoundError, match="traj.txt: trajectory file not found"):
        open_source(DataConfig(dataset="replica", path=str(rep), intrinsics=[1.0, 1.0, 0.0, 0.0]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataNotFoundError, match="no frame-XXXXXX.color"):
        open_source(DataConfig(dataset="7scenes", path=str(tmp_path / "empty")))


def test_an_empty_folder_as_tum_names_the_missing_index_file_not_the_intrinsics(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataNotFoundError, match=r"empty/rgb.txt: index file not found"):
        tum(tmp_path / "empty")


@pytest.mark.parametrize("configured, actual", [("tum", "7scenes"), ("replica", "tum"), ("7scenes", "replica"),
                                                ("tum", "rosbag")])
def test_data_of_another_dataset_says_which_it_looks_like(tmp_path, configured, actual):
    if actual == "rosbag":
        path = write_bag(tmp_path / "rec.bag", "ros1", n=1)
    else:
        write = {"tum": write_tum_sequence, "7scenes": write_7scenes_sequence, "replica": write_replica_sequence}
        path = write[actual](tmp_path / "seq", n=1)
    with pytest.raises(FrameError, match=rf"; {path} looks like a {actual} sequence: set data.dataset={actual} "):
        open_source(DataConfig(dataset=configured, path=str(path), intrinsics=[30.0, 31.0, 15.5, 11.5]))


def test_missing_image_in_the_middle_is_skipped(seq, caplog):
    victim = rgb_files(seq)[2]
    victim.unlink()
    src = tum(seq)
    with caplog.at_level(logging.WARNING, logger="slam.data"):
        frames = list(src)
    assert [f.index for f in frames] == [0, 1, 3, 4]          # the gap stays visible in the index
    assert src.stats.skipped == 1 and src.stats.delivered == 4
    assert src.stats.skip_reasons[0].endswith(f"{victim.name}: file is missing")
    assert victim.name in caplog.text


@pytest.mark.parametrize("damage", ["garbage", "empty", "truncated"])
def test_unreadable_images_are_skipped(tmp_path, damage):
    seq = write_tum_sequence(tmp_path / "seq", n=4, ext="jpg")
    victim_c = rgb_files(seq)[1]
    victim_d = depth_files(seq)[2]
    for victim in (victim_c, victim_d):
        data = victim.read_bytes()
        victim.write_bytes({"garbage": b"not an image at all" * 10, "empty": b"",
                            "truncated": data[: len(data) // 2]}[damage])
    src = tum(seq)
    frames = list(src)
    assert [f.index for f in frames] == [0, 3]
    assert src.stats.skipped == 2
    reasons = " ".join(src.stats.skip_reasons)
    assert victim_c.name in reasons and victim_d.name in reasons


def _corrupt_jpeg(path):
    """An end-of-image marker in the middle of the entropy-coded data: OpenCV decodes the file
    (its lower part grey), and libjpeg only prints 'premature end of data segment'."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] + b"\xff\xd9" + data[len(data) // 2 + 2:])


def test_a_corrupt_jpeg_in_the_middle_is_skipped_not_delivered_half_grey(tmp_path, capfd):
    seq = write_tum_sequence(tmp_path / "seq", n=4, ext="jpg", w=64, h=48)
    victim = rgb_files(seq)[2]
    _corrupt_jpeg(victim)
    src = tum(seq)
    assert [f.index for f in src] == [0, 1, 3]
    assert len(src.stats.skip_reasons) == 1
    assert src.stats.skip_reasons[0].startswith(f"{victim}: corrupt JPEG (")
    assert "Corrupt JPEG" not in capfd.readouterr().err   # counted and named, not libjpeg's stray line


def test_a_sound_jpeg_decodes_as_opencv_decodes_it(tmp_path):
    from slam.data.imageio import read_color
    rng = np.random.default_rng(0)
    img = cv2.GaussianBlur(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8), (5, 5), 0)
    for name, pixels in (("colour.jpg", img), ("grey.jpg", img[:, :, 0])):
        cv2.imwrite(str(tmp_path / name), pixels)
        want = cv2.imread(str(tmp_path / name), cv2.IMREAD_COLOR)[:, :, ::-1]
        np.testing.assert_array_equal(read_color(tmp_path / name), want)


def test_every_frame_unusable_is_an_error(seq):
    for p in rgb_files(seq):
        p.unlink()
    src = tum(seq)
    with pytest.raises(FrameError, match="no usable frame among 5 selected"):
        list(src)


@pytest.mark.parametrize("dataset", ["tum", "7scenes", "replica"])
def test_a_selection_past_the_last_frame_is_an_error_at_open(tmp_path, dataset):
    write = {"tum": write_tum_sequence, "7scenes": write_7scenes_sequence, "replica": write_replica_sequence}[dataset]
    path = write(tmp_path / "s", n=3)
    cfg = dict(dataset=dataset, path=str(path), intrinsics=[30.0, 31.0, 15.5, 11.5] if dataset == "replica" else None)
    assert len(open_source(DataConfig(**cfg, first=2))) == 1
    with pytest.raises(FrameError, match=r"s: data.first=3 selects no frame: the sequence has 3 frames \(0..2\)"):
        open_source(DataConfig(**cfg, first=3))


def test_a_bag_selection_past_the_last_pair_says_so(tmp_path):
    path = write_bag(tmp_path / "few.bag", "ros1", n=3)
    with pytest.raises(FrameError, match=r"few.bag: data.first=5 selects no frame: the stream has 3 colour/depth pairs"):
        list(bag(path, first=5))


# ----------------------------------------------------------------------------- wrong content
def test_colour_depth_size_mismatch(seq):
    victim = rgb_files(seq)[0]
    cv2.imwrite(str(victim), np.zeros((10, 12, 3), np.uint8))
    with pytest.raises(FrameError, match=rf"{victim.name} is 12x10 but .*depth.* is 32x24"):
        list(tum(seq))


def test_depth_of_wrong_dtype(seq):
    victim = depth_files(seq)[0]
    cv2.imwrite(str(victim), np.full((24, 32), 100, np.uint8))   # an 8-bit depth PNG
    with pytest.raises(FrameError, match=rf"{victim.name}: depth image must be 16-bit .* got uint8"):
        list(tum(seq))
    cv2.imwrite(str(victim), np.zeros((24, 32, 3), np.uint16))   # a 3-channel "depth"
    with pytest.raises(FrameError, match="single-channel"):
        list(tum(seq))


@pytest.mark.parametrize("dataset", ["tum", "7scenes"])
@pytest.mark.parametrize("calibrated_size", [True, False])
def test_one_frame_of_another_size_mid_sequence_is_a_counted_skip(tmp_path, caplog, dataset, calibrated_size):
    # Without a stated size (7-Scenes, camera.yaml without width/height) such a frame was delivered
    # with the other frames' K; with one it ended the run.
    if dataset == "tum":
        path = write_tum_sequence(tmp_path / "s", n=5)
        if not calibrated_size:
            (path / "camera.yaml").write_text("fx: 30\nfy: 31\ncx: 15.5\ncy: 11.5\n")
        color, depth = rgb_files(path)[2], depth_files(path)[2]
    else:
        path = write_7scenes_sequence(tmp_path / "s", n=5)
        color, depth = path / "frame-000002.color.png", path / "frame-000002.depth.png"
    cv2.imwrite(str(color), np.zeros((12, 16, 3), np.uint8))
    cv2.imwrite(str(depth), np.full((12, 16), 2000, np.uint16))
    src = open_source(DataConfig(dataset=dataset, path=str(path)))
    with caplog.at_level(logging.WARNING, logger="slam.data"):
        frames = list(src)
    assert [f.index for f in frames] == [0, 1, 3, 4] and {f.color.shape for f in frames} == {(24, 32, 3)}
    assert src.stats.skipped == 1
    assert src.stats.skip_reasons[0] == f"{depth}: image is 16x12 but the sequence's frames are 32x24"
    assert depth.name in caplog.text


def test_mid_sequence_depth_of_the_wrong_kind_or_colour_of_another_size_is_a_counted_skip(seq):
    cv2.imwrite(str(depth_files(seq)[1]), np.full((24, 32), 100, np.uint8))   # an 8-bit depth PNG
    cv2.imwrite(str(rgb_files(seq)[3]), np.zeros((10, 12, 3), np.uint8))
    src = tum(seq)
    assert [f.index for f in src] == [0, 2, 4]
    assert "depth image must be 16-bit" in src.stats.skip_reasons[0]
    assert "is 12x10 but" in src.stats.skip_reasons[1] and "must have the same size" in src.stats.skip_reasons[1]


def test_a_downscale_that_leaves_no_pixel_is_an_error(seq):
    assert next(iter(tum(seq, downscale=24))).color.shape == (1, 1, 3)
    with pytest.raises(FrameError, match=r"data.downscale=25 is larger than the 32x24 images: no pixel would be left"):
        list(tum(seq, downscale=25))


def test_image_size_contradicts_camera_yaml(seq):
    (seq / "camera.yaml").write_text("fx: 30\nfy: 30\ncx: 15\ncy: 11\nwidth: 640\nheight: 480\n")
    with pytest.raises(FrameError, match="calibration is for 640x480"):
        list(tum(seq))


def test_all_invalid_depth_is_skipped(seq):
    cv2.imwrite(str(depth_files(seq)[1]), np.zeros((24, 32), np.uint16))
    cv2.imwrite(str(depth_files(seq)[3]), np.full((24, 32), 65535, np.uint16))
    src = tum(seq)
    assert [f.index for f in src] == [0, 2, 4]
    assert src.stats.skipped == 2 and "no valid pixel" in src.stats.skip_reasons[0]


def test_nan_depth_in_bag_all_skipped_partial_cleaned(tmp_path):
    path = write_bag(tmp_path / "nan.bag", "ros1", n=3, depth_encoding="32FC1", nan_depth=[1])
    src = bag(path)
    frames = list(src)
    assert [f.index for f in frames] == [0, 2] and src.stats.skipped == 1
    assert all(np.isfinite(f.depth).all() for f in frames)


# ----------------------------------------------------------------------------- index files
def test_timestamps_out_of_order(seq):
    lines = (seq / "rgb.txt").read_text().splitlines()
    lines[3], lines[4] = lines[4], lines[3]
    (seq / "rgb.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(FrameError, match=r"rgb.txt:5: timestamp .* is not after the previous one"):
        tum(seq)


def test_malformed_index_line(seq):
    with open(seq / "depth.txt", "a") as fh:
        fh.write("100.5\n")
    with pytest.raises(FrameError, match=r"depth.txt:\d+: expected 'timestamp filename'"):
        tum(seq)


def test_association_gap_beyond_tolerance(seq, caplog):
    lines = (seq / "depth.txt").read_text().splitlines()
    (seq / "depth.txt").write_text("\n".join(line for line in lines if not line.startswith("100.07")) + "\n")
    with caplog.at_level(logging.WARNING, logger="slam.data"):
        src = tum(seq, max_time_diff=0.01)
    assert len(src) == 4 and src.stats.skipped == 1
    assert "1 of 5 colour images have no depth image within 0.010 s" in caplog.text
    assert len(list(src)) == 4
    with pytest.raises(FrameError, match="no colour image has a depth image within"):
        tum(seq, max_time_diff=0.001)


@pytest.mark.parametrize("bad,msg", [
    ("100.0 1 2 3 0 0 0\n", "expected 8 values"),
    ("100.0 1 2 x 0 0 0 1\n", "not a number"),
    ("100.0 1 2 3 0 0 0 0\n", "quaternion .* has norm 0.0000"),
])
def test_malformed_ground_truth_lines(seq, bad, msg):
    gt = seq / "groundtruth.txt"
    gt.write_text("# gt\n" + bad)
    with pytest.raises(TrajectoryFormatError, match=rf"groundtruth.txt:2: {msg}"):
        tum(seq)
    with pytest.raises(TrajectoryFormatError, match="groundtruth.txt:2"):
        read_tum_trajectory(gt)


def test_malformed_replica_traj_and_7scenes_pose(tmp_path):
    rep = write_replica_sequence(tmp_path / "rep", n=3)
    lines = (rep / "traj.txt").read_text().splitlines()
    lines[1] = " ".join(lines[1].split()[:12])
    (rep / "traj.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(FrameError, match=r"traj.txt:2: expected 16 numbers"):
        open_source(DataConfig(dataset="replica", path=str(rep), intrinsics=[1.0, 1.0, 0.0, 0.0]))
    s7 = write_7scenes_sequence(tmp_path / "s7", n=2)
    (s7 / "frame-000001.pose.txt").write_text("1 0 0\n0 1 0\n")
    with pytest.raises(FrameError, match=r"frame-000001.pose.txt: pose must be a 4x4 matrix"):
        list(open_source(DataConfig(dataset="7scenes", path=str(s7))))


# ----------------------------------------------------------------------------- intrinsics
def test_intrinsics_of_the_wrong_shape(tmp_path, seq):
    s7 = write_7scenes_sequence(tmp_path / "s7", n=1)
    np.savetxt(s7 / "camera-intrinsics.txt", np.eye(3)[:2])
    with pytest.raises(CalibrationError, match=r"camera-intrinsics.txt: intrinsics must be a 3x3 matrix"):
        open_source(DataConfig(dataset="7scenes", path=str(s7)))
    np.savetxt(s7 / "camera-intrinsics.txt", np.zeros((3, 3)))
    with pytest.raises(CalibrationError, match="not a pinhole matrix"):
        open_source(DataConfig(dataset="7scenes", path=str(s7)))
    with pytest.raises(CalibrationError, match=r"data.intrinsics: intrinsics must be 4"):
        tum(seq, intrinsics=[500.0, 500.0, 320.0, 240.0, 1.0])
    (seq / "camera.yaml").write_text("fx: 30\nfy: 30\ncx: 15\n")
    with pytest.raises(CalibrationError, match=r"camera.yaml: missing key 'cy'"):
        tum(seq)
    (seq / "camera.yaml").write_text("fx: 30\nfy: 30\ncx: 15\ncy: 11\ndistortion: [0.1, 0.2]\n")
    with pytest.raises(CalibrationError, match="camera.yaml: distortion must be"):
        tum(seq)
    (seq / "camera.yaml").write_text("fx: [30\n")
    with pytest.raises(CalibrationError, match=r"camera.yaml:2:1: not valid YAML"):
        tum(seq)
    (seq / "camera.yaml").write_bytes(b"\xff\xfe\x00fx")
    with pytest.raises(CalibrationError, match=r"camera.yaml: not a text file"):
        tum(seq)


# ----------------------------------------------------------------------------- bags
def test_unknown_bag_topic_lists_the_available_ones(tmp_path):
    path = write_bag(tmp_path / "t.bag", "ros1", n=1)
    with pytest.raises(FrameError, match=r"t.bag: color topic '/rgb' is not in the bag; topics: .*image_raw"):
        bag(path, color_topic="/rgb")
    with pytest.raises(FrameError, match="carries sensor_msgs/msg/CameraInfo, expected sensor_msgs/msg/Image"):
        bag(path, depth_topic=INFO_TOPIC)


def test_unknown_bag_encoding(tmp_path):
    path = write_bag(tmp_path / "enc.bag", "ros1", n=1, depth_encoding="16UC1", color_encoding="mono8")
    with pytest.raises(FrameError, match=r"enc.bag: topic '.*' has encoding 'mono8'; depth must be one of"):
        list(bag(path, depth_topic=COLOR_TOPIC, color_topic=DEPTH_TOPIC))


@pytest.mark.parametrize("kind", ["ros1", "sqlite3", "mcap"])
def test_truncated_bag(tmp_path, kind):
    path = write_bag(tmp_path / ("b.bag" if kind == "ros1" else kind), kind, n=3)
    files = [path] if path.is_file() else [p for p in path.iterdir() if p.suffix in (".db3", ".mcap")]
    for f in files:
        data = f.read_bytes()
        f.write_bytes(data[: int(len(data) * 0.6)])
    with pytest.raises(FrameError, match=rf"{path.name}: cannot open bag .* truncated"):
        bag(path)
