"""No silent failures: a frame from far away is flagged and never mapped, and a run killed with
SIGKILL leaves a valid trajectory, its resolved config and its last autosaved map, from which it
resumes."""
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slam.config import load_config
from slam.data.sources import open_source
from slam.data.trajectory_io import read_tum_trajectory
from slam.map.map_io import load_saved_map

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "RERUN_ANALYTICS": "0"}


class Spliced:
    """Frames ``0..n-1`` of a source, with frame ``at`` replaced by the images of frame ``far``
    (ground truth kept: the frame claims to be where it is not)."""

    def __init__(self, frames: list, at: int, far) -> None:
        self.frames, self.at, self.far = frames, at, far

    def __iter__(self):
        for f in self.frames:
            yield replace(f, color=self.far.color, depth=self.far.depth) if f.index == self.at else f


def test_a_frame_from_far_away_is_flagged_never_mapped_and_tracking_recovers(sample_run):
    cfg = sample_run.cfg(30, "system.threaded=false")
    frames = list(open_source(cfg.data))
    far = list(open_source(sample_run.cfg(121, "data.first=120").data))[0]   # across the room
    system = sample_run.run(cfg, Spliced(frames, 15, far))
    recs = {f.index: f for f in system.recorder.frames}
    assert not recs[15].ok and recs[15].reason                          # flagged, with a reason
    assert not recs[15].keyframe
    assert all(kf.frame_index != 15 for kf in system.store.items)        # never mapped
    assert all(recs[i].ok for i in range(18, 30))                        # back within a few frames
    m = sample_run.metrics(system)
    assert m["silent_failures"]["count"] == 0


def _progress_reader(proc, seen: list) -> None:
    """Collect (time, frames done) from run_slam's progress bar on stderr."""
    buf = b""
    while True:
        chunk = proc.stderr.read1(4096) if hasattr(proc.stderr, "read1") else proc.stderr.read(1)
        if not chunk:
            return
        buf += chunk
        for m in re.finditer(rb"(\d+)/\d+ \[", buf):
            seen.append((time.monotonic(), int(m.group(1))))
        buf = buf[-200:]


def test_sigkill_leaves_trajectory_and_map_and_the_run_resumes(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "slam.cli", "--out", str(run), "--set", "output.autosave_every=2",
         "--set", "output.plots=false", "--set", "system.threaded=false"],
        cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen: list = []
    reader = threading.Thread(target=_progress_reader, args=(proc, seen), daemon=True)
    reader.start()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (seen and seen[-1][1] >= 14 and (run / "map.ply").is_file()):
        assert proc.poll() is None, "run_slam ended before it could be killed"
        time.sleep(0.2)
    assert seen and (run / "map.ply").is_file(), "no progress or no autosaved map in time"
    time.sleep(1.5)
    killed_at = time.monotonic()
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    reader.join(5)
    # The trajectory parses and holds every frame reported done more than 1 s before the kill.
    _, poses = read_tum_trajectory(run / "trajectory.txt")
    done_before = max(n for t, n in seen if t <= killed_at - 1.0)
    assert len(poses) >= done_before >= 14
    rows, keyframes = load_saved_map(run / "map.ply")          # the last autosave, whole
    assert rows.shape[0] > 0 and len(keyframes) >= 2
    assert not list(run.glob("*.tmp*"))                       # nothing half-written left under another name
    assert load_config(run / "config.yaml").system.threaded is False   # the run's resolved config, overrides in
    # Resume from the autosaved map.
    first = len(poses)
    res = subprocess.run(
        [sys.executable, "-m", "slam.cli", "--quiet", "--map", str(run / "map.ply"), "--mode", "continue",
         "--set", f"data.first={first}", "--set", f"data.last={first + 6}", "--set", "output.plots=false",
         "--set", "mapping.final_iters=0", "--out", str(tmp_path / "resumed")],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    _, resumed = read_tum_trajectory(tmp_path / "resumed" / "trajectory.txt")
    assert len(resumed) == 6
    assert "relocalisation    found" in res.stdout


@pytest.mark.parametrize("stride", [4, 8])
def test_sample_at_strides_4_and_8_has_no_silent_failures(sample_run, stride):
    system = sample_run.run(sample_run.cfg(150, "system.threaded=false", f"data.stride={stride}",
                                           "mapping.final_iters=0"))
    m = sample_run.metrics(system)
    assert m["silent_failures"]["count"] == 0, m["silent_failures"]
    assert m["trajectory_ok"]["ate_rmse_m"] < 0.01
