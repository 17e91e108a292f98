"""RealSense source without a camera: recordings written by librealsense's software device and
recorder from the bundled sample (``.db3`` by the installed librealsense 2.59+, recorded in a
subprocess; ``.bag`` fixtures written by librealsense 2.56.5), played by ``RealsenseSource``.

ATE tolerance: a run on the recording may be at most 0.2 cm worse than the same run on the sample.
The only difference in the input is librealsense's depth-to-colour alignment (here between
identical cameras), which leaves holes in ~3 % of the depth pixels and moves ~1 % at depth edges.
"""
import importlib.metadata
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from slam.config import DataConfig
from slam.data import open_source
from slam.data.errors import DataNotFoundError
from slam.data.frame import FrameError
from slam.data.realsense import LatestSlot, RealsenseSource
from slam.data.sources import load_ground_truth
from slam.eval.trajectory import evaluate_ate
from slam.resources import sample_dir

# installed by setup.py wherever PyPI has a wheel (Linux x86-64/aarch64, Windows x64)
rs = pytest.importorskip("pyrealsense2", reason="pyrealsense2 not installed (no wheel for this machine)")

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
ROS1_BAG = FIXTURES / "realsense_sample_ros1.bag"
ROS1_NO_DEPTH = FIXTURES / "realsense_colour_only_ros1.bag"
VERSION = tuple(int(v) for v in importlib.metadata.version("pyrealsense2").split(".")[:2])
SUFFIX = ".db3" if VERSION >= (2, 59) else ".bag"     # what the installed recorder writes
ATE_TOLERANCE_CM = 0.2


def _record(path: Path, frames: int, *extra: str) -> Path:
    subprocess.run([sys.executable, str(TESTS / "realsense_helpers.py"), str(path), "--frames", str(frames), *extra],
                   check=True, capture_output=True, timeout=120)
    return path


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    d = tmp_path_factory.mktemp("rs")
    return {"sample12": _record(d / f"sample12{SUFFIX}", 12),
            "no_depth": _record(d / f"no_depth{SUFFIX}", 2, "--no-depth"),
            "bad_frames": _record(d / f"bad_frames{SUFFIX}", 6, "--blank-depth", "2", "--drop-depth", "4")}


def _sample(n):
    lines = [ln.split() for ln in (sample_dir() / "rgb.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    dlines = [ln.split() for ln in (sample_dir() / "depth.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    out = []
    for (t, c), (_, d) in list(zip(lines, dlines))[:n]:
        color = cv2.cvtColor(cv2.imread(str(sample_dir() / c)), cv2.COLOR_BGR2RGB)
        out.append((float(t), color, cv2.imread(str(sample_dir() / d), cv2.IMREAD_UNCHANGED) / 5000.0))
    return out


def _cfg(path, **kw):
    return DataConfig(dataset="realsense", path=str(path), **kw)


@pytest.mark.parametrize("which", ["recorded_now", "ros1_bag_fixture"])
def test_recording_delivers_the_sample_frames(recordings, which):
    path = recordings["sample12"] if which == "recorded_now" else ROS1_BAG
    src = open_source(_cfg(path))
    frames = list(src)
    ref = _sample(len(frames))
    assert len(frames) == 12 and src.stats.skipped == 0
    assert [f.index for f in frames] == list(range(len(frames)))
    for f, (t, color, depth) in zip(frames, ref):
        assert f.timestamp == pytest.approx(t, abs=1e-6)              # the device clock as recorded
        np.testing.assert_allclose(f.K, [[130, 0, 79.5], [0, 130, 59.5], [0, 0, 1]])   # stream profile
        np.testing.assert_array_equal(f.color, color)
        same = np.abs(f.depth - depth) < 1e-4                         # device depth scale 1/5000 m
        assert same.mean() > 0.95                                     # the rest: alignment holes, edges
        assert f.gt_pose is None and f.distortion is None


def test_first_last_stride_count_pairs(recordings):
    frames = list(open_source(_cfg(recordings["sample12"], first=2, last=11, stride=3)))
    ref = _sample(12)
    assert [f.index for f in frames] == [0, 1, 2]
    assert [f.timestamp for f in frames] == pytest.approx([ref[k][0] for k in (2, 5, 8)], abs=1e-6)


@pytest.fixture(scope="module")
def sample_ate_cm(sample_run):
    return sample_run.ate_cm(sample_run.run(sample_run.cfg(12, "system.threaded=false", "mapping.iters=15")))


@pytest.mark.parametrize("which", ["recorded_now", "ros1_bag_fixture"])
def test_run_on_the_recording_matches_a_run_on_the_sample(recordings, sample_run, sample_ate_cm, which):
    extra = ("system.threaded=false", "mapping.iters=15")
    path = recordings["sample12"] if which == "recorded_now" else ROS1_BAG
    cfg = sample_run.cfg(12, *extra, "data.dataset=realsense", f"data.path={path}")
    camera = sample_run.run(cfg)
    gt_t, gt = load_ground_truth(sample_run.cfg(12).data)
    recs = camera.recorder.frames
    assert len(recs) == 12
    ate_cm = evaluate_ate(np.stack([r.T_wc for r in recs]), np.array([r.timestamp for r in recs]), gt, gt_t)["ate_rmse_m"] * 100
    assert sample_ate_cm < 1.0 and ate_cm <= sample_ate_cm + ATE_TOLERANCE_CM, (ate_cm, sample_ate_cm)


def test_bad_recordings_are_clear_errors(tmp_path, recordings):
    for name, good in (("cut.bag", ROS1_BAG), (f"cut{SUFFIX}", recordings["sample12"])):
        cut = tmp_path / name
        cut.write_bytes(good.read_bytes()[: good.stat().st_size * 6 // 10])
        with pytest.raises(FrameError, match=f"{cut}: cannot open RealSense recording .*truncated"):
            open_source(_cfg(cut))
    for no_depth in (ROS1_NO_DEPTH, recordings["no_depth"]):
        with pytest.raises(FrameError, match=rf"{no_depth}: no depth \(z16\) stream; streams: color 160x120@30 rgb8"):
            open_source(_cfg(no_depth))
    with pytest.raises(DataNotFoundError, match="recording not found"):
        open_source(_cfg(tmp_path / "missing.bag"))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "slam.cli", "--config", "realsense.yaml", "--set",
                           f"data.path={tmp_path / 'cut.bag'}"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "cut.bag: cannot open RealSense recording" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_bad_frame_is_a_counted_skip(recordings):
    src = open_source(_cfg(recordings["bad_frames"]))
    frames = list(src)
    ref = _sample(6)
    assert [f.timestamp for f in frames] == pytest.approx([ref[k][0] for k in (0, 1, 3, 5)], abs=1e-6)
    assert [f.index for f in frames] == [0, 1, 3, 4]                  # pair 2 skipped; colour 4 never paired
    assert src.stats.skipped == 2
    reasons = " | ".join(src.stats.skip_reasons)
    assert "has no valid pixel" in reasons and "has no depth frame" in reasons


def test_slower_consumer_keeps_the_newest_pair_and_counts_drops(recordings):
    src = RealsenseSource(str(recordings["sample12"]), keep_newest=True)
    ref = [t for t, _, _ in _sample(12)]
    frames = []
    for f in src:
        frames.append(f)
        time.sleep(0.15)                                               # SLAM slower than the "camera"
    assert src.stats.dropped >= 1 and len(frames) + src.stats.dropped == 12
    idx = [f.index for f in frames]
    assert idx == sorted(set(idx)) and idx[-1] == 11                  # the newest pair always wins
    assert [f.timestamp for f in frames] == pytest.approx([ref[i] for i in idx], abs=1e-6)   # honest stamps


def test_latest_slot():
    slot = LatestSlot(block=False)
    for k in range(3):
        slot.put(k)
    assert slot.get(0.01) == 2 and slot.dropped == 2 and slot.get(0.01) is None
    slot = LatestSlot(block=True)
    slot.put("a")
    t = threading.Thread(target=slot.put, args=("b",))
    t.start()
    time.sleep(0.05)
    assert t.is_alive()                                                # waits for the reader
    assert slot.get(1) == "a" and slot.get(1) == "b" and slot.dropped == 0
    t.join(1)
    slot.put("c")
    slot.close()                                                       # Ctrl-C: wakes a blocked put
    assert slot.get(0.01) is None


def test_stop_midway_releases_the_recording(recordings):
    src = open_source(_cfg(recordings["sample12"]))
    it = iter(src)
    next(it), next(it)                       # the callback thread is now blocked on the full slot
    start = time.time()
    it.close()                               # what Ctrl-C does to the generator, then run_slam's close()
    src.close()
    src.close()
    assert time.time() - start < 2.0
    assert len(list(open_source(_cfg(recordings["sample12"])))) == 12   # the file is free to play again


def test_no_camera_is_a_clear_error(tmp_path):
    if len(rs.context().query_devices()) > 0:
        pytest.skip("a RealSense camera is connected to this machine")
    with pytest.raises(FrameError, match="no RealSense camera found"):
        open_source(_cfg("live"))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "slam.cli", "--config", "realsense.yaml"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no RealSense camera found" in proc.stderr and "Traceback" not in proc.stderr
