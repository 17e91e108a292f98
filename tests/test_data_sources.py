"""open_source dispatch, stride/first/last without reading skipped files, downscale, repeat."""
import numpy as np
import pytest

import slam.data.sequence as sequence_mod
from data_helpers import K_PARAMS, write_7scenes_sequence, write_replica_sequence, write_tum_sequence
from slam.config import DataConfig
from slam.data import RepeatSource, load_ground_truth, open_source
from slam.data.frame import FrameSource


@pytest.fixture
def tum_seq(tmp_path):
    return write_tum_sequence(tmp_path / "seq", n=10)


def test_dispatch_each_dataset(tmp_path, tum_seq):
    s7 = write_7scenes_sequence(tmp_path / "7s", n=3)
    rep = write_replica_sequence(tmp_path / "rep", n=3)
    for cfg in (DataConfig(dataset="tum", path=str(tum_seq)),
                DataConfig(dataset="7scenes", path=str(s7)),
                DataConfig(dataset="replica", path=str(rep), intrinsics=list(K_PARAMS))):
        src = open_source(cfg)
        assert isinstance(src, FrameSource)
        frames = list(src)
        assert len(frames) >= 3 and frames[0].gt_pose is not None


def test_stride_first_last_read_only_selected_files(tum_seq, monkeypatch):
    read = []
    real = sequence_mod.read_color
    monkeypatch.setattr(sequence_mod, "read_color", lambda p: read.append(p.name) or real(p))
    src = open_source(DataConfig(dataset="tum", path=str(tum_seq), first=2, last=9, stride=3))
    frames = list(src)
    assert len(src) == 3 and [f.index for f in frames] == [0, 1, 2]
    assert [round(f.timestamp, 4) for f in frames] == [round(100 + k / 30, 4) for k in (2, 5, 8)]
    assert len(read) == 3  # frames 0, 1, 3, 4, 6, 7, 9 were never opened


def test_downscale_scales_images_and_K(tum_seq):
    full = next(iter(open_source(DataConfig(dataset="tum", path=str(tum_seq)))))
    half = next(iter(open_source(DataConfig(dataset="tum", path=str(tum_seq), downscale=2))))
    assert half.color.shape == (12, 16, 3) and half.depth.shape == (12, 16)
    fx, fy, cx, cy = K_PARAMS
    np.testing.assert_allclose(half.K, [[fx / 2, 0, (cx + 0.5) / 2 - 0.5], [0, fy / 2, (cy + 0.5) / 2 - 0.5], [0, 0, 1]])
    # every downscaled depth is the median of valid full-res pixels: within the block's range
    blocks = full.depth.reshape(12, 2, 16, 2)
    assert np.all(half.depth <= blocks.max(axis=(1, 3)) + 1e-6)


def test_repeat_keeps_index_and_time_increasing(tum_seq):
    src = open_source(DataConfig(dataset="tum", path=str(tum_seq), repeat=3, last=4))
    assert isinstance(src, RepeatSource) and len(src) == 12
    frames = list(src)
    assert [f.index for f in frames] == list(range(12))
    t = np.array([f.timestamp for f in frames])
    assert np.all(np.diff(t) > 0)
    np.testing.assert_allclose(np.diff(t), 1 / 30, atol=1e-5)  # the period continues the frame rate
    np.testing.assert_array_equal(frames[4].color, frames[0].color)
    assert src.stats.delivered == 12


def test_load_ground_truth_matches_frames(tmp_path, tum_seq):
    t, poses = load_ground_truth(DataConfig(dataset="tum", path=str(tum_seq), stride=4))
    assert poses.shape == (10, 4, 4) and len(t) == 10        # whole sequence, stride ignored
    s7 = write_7scenes_sequence(tmp_path / "7s", n=3)
    t7, p7 = load_ground_truth(DataConfig(dataset="7scenes", path=str(s7)))
    np.testing.assert_allclose(t7, [0, 1 / 30, 2 / 30])
    frames = list(open_source(DataConfig(dataset="7scenes", path=str(s7))))
    np.testing.assert_allclose(p7[2], frames[2].gt_pose)


def test_bundled_sample_default_config():
    """The default DataConfig (path: sample) opens the committed sample through camera.yaml."""
    from slam.resources import sample_dir

    if not (sample_dir() / "rgb.txt").is_file():
        pytest.skip(f"bundled sample not present at {sample_dir()}")
    src = open_source(DataConfig(stride=25))
    frames = list(src)
    assert len(frames) >= 2 and src.stats.skipped == 0
    f = frames[0]
    assert f.color.dtype == np.uint8 and f.depth.dtype == np.float32 and f.gt_pose is not None
    assert f.depth.shape == f.color.shape[:2] and (f.depth > 0).mean() > 0.5
    assert f.K[0, 0] > 0 and f.distortion is None


def _damage(seq):
    """Frame 3's depth truncated, frame 5's colour missing, frame 7's depth of another size."""
    import cv2
    depths, colors = sorted((seq / "depth").iterdir()), sorted((seq / "rgb").iterdir())
    data = depths[3].read_bytes()
    depths[3].write_bytes(data[: len(data) // 2])
    colors[5].unlink()
    cv2.imwrite(str(depths[7]), np.full((8, 8), 5000, np.uint16))


def test_reading_ahead_delivers_the_frames_and_skips_of_reading_one_at_a_time(tum_seq):
    _damage(tum_seq)
    runs = {}
    for threads in (0, 1, 3):
        src = open_source(DataConfig(dataset="tum", path=str(tum_seq), read_threads=threads))
        assert src.read_threads == threads
        frames = list(src)
        runs[threads] = ([f.index for f in frames], [f.depth for f in frames], list(src.stats.skip_reasons))
    indices, depths, skips = runs[0]
    assert indices == [0, 1, 2, 4, 6, 8, 9] and len(skips) == 3
    for threads in (1, 3):
        assert runs[threads][0] == indices and runs[threads][2] == skips
        assert all(np.array_equal(a, b) for a, b in zip(runs[threads][1], depths))


def test_preprocessing_runs_on_the_read_threads_and_fails_only_where_the_checks_let_a_frame_through(
        tum_seq, monkeypatch):
    """The colour registration / undistortion / downscale of each frame runs on the read threads
    (off the consumer's thread); an error it raises counts only where reading one frame at a time
    would reach it: frame 7 (4x4 colour and depth) fails the downscale of 8 on its read thread, but
    the consumer's size check skips it first, with the size check's reason."""
    import threading

    import cv2

    from slam.data.preprocess import Preprocessor

    depths, colors = sorted((tum_seq / "depth").iterdir()), sorted((tum_seq / "rgb").iterdir())
    cv2.imwrite(str(depths[7]), np.full((4, 4), 5000, np.uint16))
    cv2.imwrite(str(colors[7]), np.full((4, 4, 3), 128, np.uint8))
    threads_seen = set()
    real = Preprocessor.__call__

    def recording(self, color, depth):
        threads_seen.add(threading.current_thread().name.split("_")[0])
        return real(self, color, depth)

    monkeypatch.setattr(Preprocessor, "__call__", recording)
    for threads, names in ((0, {"MainThread"}), (2, {"frame-reader"})):
        threads_seen.clear()
        src = open_source(DataConfig(dataset="tum", path=str(tum_seq), read_threads=threads, downscale=8))
        frames = list(src)
        assert [f.index for f in frames] == [0, 1, 2, 3, 4, 5, 6, 8, 9]
        assert frames[0].depth.shape == (3, 4)
        (reason,) = src.stats.skip_reasons
        assert "4x4" in reason and "data.downscale" not in reason, reason
        assert threads_seen == names, threads_seen


def test_a_consumer_that_stops_early_ends_the_read_threads(tum_seq):
    import threading
    import time

    src = open_source(DataConfig(dataset="tum", path=str(tum_seq), read_threads=2))
    frames = iter(src)
    next(frames), next(frames)
    assert any(t.name.startswith("frame-reader") for t in threading.enumerate())
    frames.close()
    deadline = time.monotonic() + 5.0
    while any(t.name.startswith("frame-reader") for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(t.name.startswith("frame-reader") for t in threading.enumerate())


def test_read_threads_must_not_be_negative():
    from slam.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="data.read_threads"):
        load_config("default.yaml", ["data.read_threads=-1"])
