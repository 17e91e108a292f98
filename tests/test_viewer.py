"""The rerun viewer: never blocks SLAM, builds nothing when off, and writes a recording rerun reads back."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "RERUN_ANALYTICS": "0"}


def test_latest_queue_drops_the_oldest_and_never_blocks():
    from slam.output.viewer import LatestQueue

    q = LatestQueue(2)
    t0 = time.perf_counter()
    for i in range(100):
        q.put(i)
    assert time.perf_counter() - t0 < 0.05
    assert q.dropped == 98
    assert [q.get(0), q.get(0), q.get(0)] == [98, 99, None]
    q.close()
    assert q.get(5.0) is None          # closed and empty: returns at once


class _SlowRecording:
    """Stands in for a rerun RecordingStream whose sink is slow (a viewer over a bad link)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.logged: list[str] = []
        self.lock = threading.Lock()

    def set_time(self, *a, **k):
        pass

    def log(self, path, *a, **k):
        time.sleep(self.delay)
        with self.lock:
            self.logged.append(path)

    def flush(self, **k):
        pass

    def disconnect(self):
        pass


def test_hook_never_blocks_and_keeps_every_scalar_when_the_viewer_lags():
    from slam.output.viewer import RerunViewer
    from slam.runtime.recorder import FrameRecord

    rec = _SlowRecording(delay=0.02)
    viewer = RerunViewer(rec, torch.device("cpu"), queue=2)
    frame = SimpleNamespace(color=np.zeros((12, 16, 3), np.uint8), depth=np.ones((12, 16), np.float32),
                            K=np.array([[10.0, 0, 7.5], [0, 10.0, 5.5], [0, 0, 1]]))
    times = []
    for i in range(40):
        T = np.eye(4)
        T[0, 3] = 0.01 * i
        r = FrameRecord(i, float(i), T, T.copy(), True, False, 0.1, 1.0, False)
        t0 = time.perf_counter()
        viewer.hook(frame, r, None)
        times.append(time.perf_counter() - t0)
    # The slow sink needs >= 40 x 6 logs x 20 ms = 4.8 s; the hook must not wait for any of it
    # (bounds leave room for GIL hand-offs on a loaded 2-core machine: 0.79 s in all was seen once
    # there while the median stayed far below 2 ms).
    assert sum(times) < 1.5 and float(np.median(times)) < 0.002, f"hook times (ms): {np.round(np.array(times) * 1e3, 2)}"
    viewer.close()
    assert viewer.error is None
    assert viewer.payloads.dropped > 0                       # stale images were dropped ...
    assert rec.logged.count("metrics/tracking_loss") == 40  # ... but no scalar
    assert rec.logged.count("world/camera/image/rgb") == 40 - viewer.payloads.dropped


def _frames_by_entity(rrd: Path) -> dict:
    import rerun.chunk as rc

    reader = rc.RrdReader(str(rrd))
    assert len(reader.recordings()) == 1 and len(reader.blueprints()) == 1   # data + default blueprint
    frames: dict = {}
    for chunk in reader.store().stream():
        if chunk.is_static or "frame" not in chunk.timeline_names:
            continue
        values = chunk.to_record_batch().column("frame").to_pylist()
        frames.setdefault(chunk.entity_path, set()).update(values)
    return frames


def test_rrd_recording_reads_back_with_expected_entities_and_frames(tmp_path):
    n = 10
    rrd = tmp_path / "run.rrd"
    res = subprocess.run([sys.executable, "-m", "slam.cli", "--set", f"data.last={n}", "--set", "viewer.map_every=4",
                          "--set", "output.mesh=true", "--set", "mapping.final_iters=0", "--set", "grid.floor_keyframes=1",
                          "--rrd", str(rrd), "--out", str(tmp_path / "run"), "--quiet"],
                         env=ENV, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert rrd.is_file() and rrd.stat().st_size > 10_000
    rerun_cli = shutil.which("rerun", path=str(Path(sys.executable).parent)) or shutil.which("rerun")
    if rerun_cli:
        v = subprocess.run([rerun_cli, "rrd", "verify", str(rrd)], env=ENV, capture_output=True, text=True, timeout=120)
        assert v.returncode == 0, v.stderr[-2000:]
    frames = _frames_by_entity(rrd)
    every = set(range(n))
    for scalar in ("fps", "spheres", "tracking_loss", "peak_memory_mb"):
        got = frames[f"/metrics/{scalar}"]
        assert got == (every - {0} if scalar == "fps" else every), (scalar, got)   # no rate before frame 1
    for image in ("/world/camera", "/world/camera/image", "/world/camera/image/rgb", "/world/camera/image/depth"):
        assert frames[image] and frames[image] <= every          # images may be dropped, never invented
    for rendered in ("/render/rgb", "/render/depth", "/world/map"):
        assert frames[rendered] and frames[rendered] <= every - {0}   # the map exists from frame 1 on
    assert max(frames["/world/trajectory/estimate"]) == n - 1
    assert frames["/grid"] and frames["/grid"] <= every - {0}   # the occupancy grid, with the map
    assert max(frames["/world/trajectory/ground_truth"]) == n - 1

    # The same run folder, after the fact: slam_view_run writes a recording of it.
    run = tmp_path / "run"
    assert all((run / f).is_file() for f in ("map.ply", "map.keyframes.npz", "mesh.ply", "trajectory.png"))
    view = tmp_path / "view.rrd"
    res = subprocess.run([sys.executable, "-m", "slam.output.view_run", str(run), "--rrd", str(view)],
                         env=ENV, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"poses {n}" in res.stdout and f"ground_truth {n}" in res.stdout and "mesh_triangles" in res.stdout
    import rerun.chunk as rc

    paths = {c.entity_path for c in rc.RrdReader(str(view)).store().stream()}
    assert {"/world/map", "/world/mesh", "/world/trajectory/estimate", "/world/trajectory/ground_truth",
            "/world/camera", "/world/camera/image/rgb"} <= paths


def test_viewer_without_rerun_or_with_an_old_one_says_what_to_install(monkeypatch):
    import builtins

    import pytest
    import rerun

    from slam.output.viewer_sinks import open_recording

    monkeypatch.setattr(rerun, "__version__", "0.23.1")      # no set_sinks, no server sink to bind
    with pytest.raises(RuntimeError, match=r"rerun-sdk >= 0\.36, found 0\.23\.1"):
        open_recording(rrd="unused.rrd")
    real_import = builtins.__import__

    def no_rerun(name, *a, **k):
        if name.split(".")[0] == "rerun":
            raise ImportError(f"No module named '{name}'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_rerun)
    with pytest.raises(RuntimeError, match=r"pip install 'sphere-slam\[viewer\]'"):
        open_recording(rrd="unused.rrd")
