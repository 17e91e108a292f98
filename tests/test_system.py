"""End-to-end runs on a short piece of the bundled sample: accuracy, outputs, determinism,
threads, error propagation, robustness to dropouts and jumps, interruption."""
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from slam.data.sources import open_source
from slam.output.metrics import collect_metrics
from slam.output.run_folder import write_outputs
from slam.runtime.system import SlamSystem

REPO = Path(__file__).resolve().parents[1]


def test_sequential_run_tracks_and_is_deterministic(sample_run):
    cfg = sample_run.cfg(12, "system.threaded=false")
    a = sample_run.run(cfg)
    b = sample_run.run(cfg)
    pa = np.stack([f.T_wc for f in a.recorder.frames])
    pb = np.stack([f.T_wc for f in b.recorder.frames])
    assert len(pa) == 12
    assert np.array_equal(pa, pb)                      # identical run to run
    assert a.smap.n == b.smap.n and a.smap.n > 1000
    assert sample_run.ate_cm(a) < 1.0                             # exact synthetic depth: sub-centimetre
    assert all(f.ok for f in a.recorder.frames)


def test_threaded_run_writes_complete_outputs(tmp_path, sample_run):
    cfg = sample_run.cfg(12)
    system = sample_run.run(cfg)
    assert [f.index for f in system.recorder.frames] == list(range(12))
    assert len(system.recorder.mapping) >= 2
    result = system.result()
    metrics = collect_metrics(result)
    write_outputs(tmp_path, cfg, result, metrics)
    for name in ["trajectory.txt", "keyframes.txt", "map.ply", "metrics.json", "config.yaml"]:
        assert (tmp_path / name).is_file(), name
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["frames"] == 12 and m["trajectory"]["ate_rmse_m"] < 0.01
    assert m["images"]["psnr"] > 20
    assert m["fps_system"] > 0 and m["spheres"] == system.smap.n
    timeline = m["timeline_s"]     # start, frames, end: the time the system rate divides by
    assert min(timeline.values()) >= 0.0 and timeline["frames"] > 0.0
    assert sum(timeline.values()) == pytest.approx(m["frames"] / m["fps_system"], rel=1e-9)
    kc = m["keyframe_depth_consistency"]                # exact synthetic depth, sub-centimetre poses
    assert kc["pairs"] == len(result.keyframes) - 1 and kc["median_mm"] < 5.0 and kc["within_1cm"] > 0.8


def test_keyframes_are_stored_at_the_tracking_resolution_unless_configured(sample_run):
    """mapping.keyframe_downscale defaults to tracking.downscale: the map is built from images
    as fine as the tracker sees, not finer; an explicit value wins."""
    default = sample_run.run(sample_run.cfg(4, "system.threaded=false", "tracking.downscale=2"))
    assert default.store.items and all(kf.depth.shape == (60, 80) for kf in default.store.items)
    assert all(f.ok for f in default.recorder.frames)
    explicit = sample_run.run(sample_run.cfg(4, "system.threaded=false", "tracking.downscale=2",
                                  "mapping.keyframe_downscale=1"))
    assert all(kf.depth.shape == (120, 160) for kf in explicit.store.items)


def test_map_receives_no_gradient_from_tracking(sample_run):
    cfg = sample_run.cfg(4, "system.threaded=false")
    system = sample_run.run(cfg)
    snap = system.smap.latest()
    assert not any(t.requires_grad for t in (snap.means, snap.radii, snap.colors, snap.opacities))
    assert not system.smap.params.requires_grad and system.smap.params.grad is None


def test_exception_in_mapping_thread_reaches_caller_and_stops_everything(sample_run):
    cfg = sample_run.cfg(30)
    system = SlamSystem(cfg)
    calls = {"n": 0}
    real = system.mapper.add_keyframe

    def failing(kf):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected mapping failure")
        return real(kf)

    system.mapper.add_keyframe = failing
    with pytest.raises(RuntimeError, match="injected mapping failure"):
        system.run(open_source(cfg.data))
    frames = system.recorder.frames
    assert 0 < len(frames) < 30                        # stopped early, not after all frames
    assert "injected mapping failure" in system.recorder.stop_reason


class Dropouts:
    """Wraps frames: a stretch of black, depth-less frames, then a jump (frames skipped)."""

    def __init__(self, frames, black=range(8, 11), skip=range(14, 20)):
        self.frames, self.black, self.skip = frames, set(black), set(skip)

    def __iter__(self):
        for f in self.frames:
            if f.index in self.skip:
                continue
            if f.index in self.black:
                f = replace(f, color=np.zeros_like(f.color), depth=np.zeros_like(f.depth))
            yield f


def test_black_frames_and_a_jump_are_detected_and_recovered(sample_run):
    cfg = sample_run.cfg(32, "system.threaded=false")
    system = SlamSystem(cfg)
    system.run(Dropouts(open_source(cfg.data)))
    recs = {f.index: f for f in system.recorder.frames}
    assert all(not recs[i].ok for i in (8, 9, 10))        # dropouts are failures, counted
    assert not any(recs[i].keyframe for i in (8, 9, 10))  # and never become keyframes
    assert all(recs[i].ok for i in range(22, 32))         # tracking is back after the jump
    errs = [np.linalg.norm(recs[i].T_wc[:3, 3] - recs[i].gt_pose[:3, 3]) for i in range(22, 32)]
    assert max(errs) < 0.03
    m = collect_metrics(system.result(), eval_images_every=None)
    assert m["tracking_failures"] >= 3


def test_cli_interrupt_leaves_outputs(tmp_path, sample_run):
    """Ctrl-C in the middle of a run: exit 130, the outputs of the frames so far. The input (60
    frames played 50 times) outlasts the wait below on any machine: on an idle one 60 frames
    ended before the signal came."""
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    frames = 60 * 50
    proc = subprocess.Popen(
        [sys.executable, "-m", "slam.cli", "--out", str(out), "--quiet", "--set", "data.last=60",
         "--set", "data.repeat=50"] + sum([["--set", o] for o in sample_run.FAST], []),
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    traj = out / "log.txt"
    while time.time() < deadline and proc.poll() is None:   # wait until it is really running
        if traj.exists() and len(list(out.iterdir())) >= 1 and time.time() - traj.stat().st_mtime < 60:
            time.sleep(8)
            break
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 130, stderr[-2000:]
    for name in ["trajectory.txt", "map.ply", "metrics.json"]:
        assert (out / name).is_file(), (name, stderr[-2000:])
    m = json.loads((out / "metrics.json").read_text())
    assert "interrupted" in m["stop_reason"]
    assert 0 < m["frames"] < frames
    assert len((out / "trajectory.txt").read_text().strip().splitlines()) - 2 == m["frames"]


def test_a_ctrl_c_while_the_outputs_are_written_is_noted_not_obeyed():
    """After the run, run_slam writes its outputs; a Ctrl-C or SIGTERM arriving then (the input
    ended just before it) must not kill the process half-way through writing them."""
    from slam.cli import _defer_interrupts
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        noted = _defer_interrupts()
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)                       # the handlers run between bytecodes; no exception
        assert noted == [signal.SIGINT, signal.SIGTERM]
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


def test_cli_bad_config_and_missing_data_exit_2(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    bad = subprocess.run([sys.executable, "-m", "slam.cli", "--set", "tracking.itres=3"], cwd=tmp_path,
                         env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "tracking.iters" in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "slam.cli", "--set", f"data.path={tmp_path / 'nope'}"],
                             cwd=tmp_path, env=env, capture_output=True, text=True)
    assert missing.returncode == 2 and "nope" in missing.stderr


def _map_lags(system) -> list:
    """A list that fills, per frame tracked against a map, with how many of the keyframes handed
    over before that frame the map lacked (a frame hook of ``system``)."""
    lags = []

    def lag(frame, rec, snap):
        if snap is not None:   # the first frame has no map yet
            handed = rec.keyframe_id - 1 if rec.keyframe else rec.keyframe_id   # before this frame's own
            lags.append(handed - max(snap.keyframe_poses))

    system.frame_hooks.append(lag)
    return lags


@pytest.mark.parametrize("bound", [0, 1, 3])
def test_tracker_never_runs_more_than_the_bound_ahead_of_the_map(sample_run, bound):
    """A slow mapper (a keyframe hook that sleeps, on the mapping thread): every frame is tracked
    against a map missing at most ``system.max_unmapped_keyframes`` of the keyframes already
    handed over (0: none, the sequential order), and the tracker's wait is reported. With the
    bound at 3 the tracker does run more than one keyframe ahead (so the check can fail)."""
    cfg = sample_run.cfg(30, "mapping.iters=2", "mapping.final_iters=0", "loop.enabled=false",
                         f"system.max_unmapped_keyframes={bound}")
    system = SlamSystem(cfg)
    lags = _map_lags(system)
    system.keyframe_hooks.append(lambda report: time.sleep(1.5))   # slower than 5 tracked frames
    system.run(open_source(cfg.data))
    assert max(lags) <= bound
    if bound <= 1:
        assert system.recorder.map_wait_s > 0.5
    else:
        assert max(lags) > 1


@pytest.mark.parametrize("bound", [0, 1, 2])
def test_the_sequential_runner_tracks_exactly_the_bound_behind_the_map(sample_run, bound):
    """``system.threaded: false`` with ``system.max_unmapped_keyframes`` N: the threaded runner's
    case of a slow mapper, deterministic: every frame is tracked against a map missing at most N
    of the keyframes already made, and once N keyframes wait, exactly N."""
    cfg = sample_run.cfg(30, "system.threaded=false", "mapping.iters=2", "mapping.final_iters=0",
                         "loop.enabled=false", f"system.max_unmapped_keyframes={bound}")
    system = SlamSystem(cfg)
    lags = _map_lags(system)
    system.run(open_source(cfg.data))
    assert max(lags) == bound and lags[-1] == bound, lags
    made = sum(1 for r in system.recorder.frames if r.keyframe)
    assert len(system.recorder.mapping) == made   # end of input maps the ones left


def test_the_tracker_s_wait_for_frames_is_reported(sample_run):
    """A source slower than the tracker (0.4 s a frame; the caller's thread reads it): the
    tracking thread's time blocked on its next frame is counted (metrics.json
    ``tracking_waited_for_frames_s``, the summary's speed line) apart from its wait for the mapper;
    the same frames read at once leave far less of it (measured: 2.6 s against 0.0003)."""
    from slam.output.summary import summary_text

    cfg = sample_run.cfg(8, "mapping.iters=2", "mapping.final_iters=0", "loop.enabled=false")
    frames = list(open_source(cfg.data))

    def slowly():
        for f in frames:
            time.sleep(0.4)
            yield f

    waits = {}
    for name, source in (("slow", slowly()), ("fast", iter(frames))):
        system = SlamSystem(cfg)
        system.run(source)
        m = sample_run.metrics(system)
        waits[name] = m["tracking_waited_for_frames_s"]
        assert m["tracking_waited_for_frames_s"] == system.recorder.frame_wait_s
        assert "s for frames" in summary_text(m, Path("run"))
        first = m["tracking_waited_for_first_frame_s"]
        assert 0.0 < first <= m["tracking_waited_for_frames_s"]
        if name == "slow":   # the first of 8 slow frames: one 0.4 s read (no more, no less)
            assert 0.35 < first < 1.5, first
    assert waits["slow"] > 1.5 and waits["slow"] > waits["fast"] + 1.0, waits


@pytest.mark.parametrize("slow", [True, False])
def test_in_a_slow_stream_each_keyframe_is_mapped_before_the_next_frame(sample_run, slow):
    """The sample at 30 Hz with the slow-stream interval below (slow) or above (default) its
    frame interval, and a slow mapper, with ``system.max_unmapped_keyframes`` 1: in a slow stream
    every frame is tracked against a map that has every keyframe handed over before it (the
    sequential order); at camera rate the tracker runs one keyframe ahead of the map (so the check
    can fail)."""
    interval = 0.01 if slow else 0.1
    cfg = sample_run.cfg(16, "mapping.iters=2", "mapping.final_iters=0", "loop.enabled=false",
                         f"system.slow_stream_interval_s={interval}", "system.max_unmapped_keyframes=1")
    system = SlamSystem(cfg)
    lags = _map_lags(system)
    system.keyframe_hooks.append(lambda report: time.sleep(0.5))
    system.run(open_source(cfg.data))
    assert system.slow_stream() == slow
    assert max(lags) == (0 if slow else 1), lags


# run_slam with its source cut after BAD frames, as a recording that ends in damaged data is (a folder
# dataset skips a bad frame instead: tests/test_data_bad_input.py): the source raises FrameError
# naming the file of frame BAD when it reaches it.
_CUT_SOURCE = """
import sys
import slam.cli as cli
from slam.data.frame import FrameError
bad, victim = int(sys.argv[1]), sys.argv[2]
real = cli.open_source
def cut(cfg):
    src = real(cfg)
    frames = src._frames
    def until_bad():
        for frame in frames():
            if frame.index == bad:
                raise FrameError(f"{victim}: unreadable (the recording is cut here)")
            yield frame
    src._frames = until_bad
    return src
cli.open_source = cut
sys.exit(cli.main(sys.argv[3:]))
"""


def _run_cli(tmp_path, args, prefix=()):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-c", _CUT_SOURCE, *prefix] if prefix else [sys.executable, "-m", "slam.cli"]
    return subprocess.run([*cmd, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("threaded", [True, False])
def test_a_fatal_input_error_loses_no_frame_read_before_it(tmp_path, threaded):
    """A generated TUM sequence whose source fails at its 7th frame: every frame before it is tracked
    and saved, the run stops with exit code 2 and one error line naming the file (the last line),
    and the summary says that the run stopped early and why. The threaded run shows its progress,
    so the status lines of the phases after the last frame are checked there too."""
    from data_helpers import write_tum_sequence
    n, bad = 10, 6
    seq = write_tum_sequence(tmp_path / "seq", n=n)
    victim = sorted((seq / "depth").iterdir())[bad]
    out = tmp_path / "run"
    args = ["--set", f"data.path={seq}", "--set", "mapping.final_iters=5", "--set", "output.plots=false",
            "--set", f"system.threaded={str(threaded).lower()}", "--out", str(out)]
    if not threaded:
        args.append("--quiet")
    proc = _run_cli(tmp_path, args, prefix=(str(bad), str(victim)))
    assert proc.returncode == 2, proc.stderr[-2000:]
    poses = [ln for ln in (out / "trajectory.txt").read_text().splitlines() if not ln.startswith("#")]
    assert len(poses) == bad
    naming = [ln for ln in (proc.stdout + proc.stderr).splitlines() if victim.name in ln]
    assert len(naming) == 1 and naming[0].startswith("run_slam: bad input: ") and str(victim) in naming[0]
    assert proc.stderr.strip().splitlines()[-1] == naming[0]          # the last line, after the summary
    assert "Traceback" not in proc.stderr and "ERROR" not in proc.stderr
    stopped = next(ln for ln in proc.stdout.splitlines() if ln.startswith("stopped"))
    assert f"early, on bad input after {bad} of {n} frames" in stopped
    m = json.loads((out / "metrics.json").read_text())
    assert m["frames"] == bad and m["stop_reason"].startswith(f"input error after {bad} frames: FrameError: {victim}")
    if threaded:
        for phase in ("final refinement of the map", "evaluating", "saving the map"):
            assert f"run_slam: {phase}" in proc.stderr, phase
    else:
        assert "run_slam: final refinement" not in proc.stderr           # --quiet: no status lines


def test_one_odd_frame_mid_sequence_is_skipped_and_named(tmp_path):
    """A generated TUM sequence whose 7th depth image is an 8-bit PNG (right on the first frame it
    would be fatal: the units would be wrong for every frame): the run goes on without it, exit 0,
    the frame counted and its file named in metrics.json."""
    import cv2

    from data_helpers import write_tum_sequence
    n, bad = 10, 6
    seq = write_tum_sequence(tmp_path / "seq", n=n)
    victim = sorted((seq / "depth").iterdir())[bad]
    cv2.imwrite(str(victim), np.full((24, 32), 100, np.uint8))
    out = tmp_path / "run"
    proc = _run_cli(tmp_path, ["--quiet", "--set", f"data.path={seq}", "--set", "mapping.final_iters=5",
                               "--set", "output.plots=false", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads((out / "metrics.json").read_text())
    assert m["frames"] == n - 1 and m["skipped_frames"] == 1
    assert len(m["skip_reasons"]) == 1 and str(victim) in m["skip_reasons"][0]


@pytest.mark.parametrize("explore", [True, False])
def test_frames_flagged_by_the_depth_floor_alone_still_grow_the_map_where_their_colour_agrees(sample_run, explore):
    """A depth-inlier floor no frame can pass (1.01) flags every tracked frame for depth alone, while
    the sample's exact colours agree with the map: the frames stay flagged, and make keyframes as
    right ones would (``quality.explore_color_inliers``), unless exploration is off (above 1)."""
    sets = ["system.threaded=false", "mapping.iters=2", "mapping.final_iters=0", "loop.enabled=false",
            "reinit.enabled=false", "relocalise.after_failures=1000", "quality.min_depth_inliers=1.01"]
    cfg = sample_run.cfg(16, *sets, *([] if explore else ["quality.explore_color_inliers=1.01"]))
    system = sample_run.run(cfg)
    frames = system.recorder.frames[1:]                          # the first frame: the map's start
    assert frames and all(not f.ok and f.reason.startswith("depth inliers") for f in frames)
    assert all(f.quality.color_inliers >= cfg.quality.explore_color_inliers for f in frames) == explore
    keyframes = sum(f.keyframe for f in frames)
    assert keyframes >= 2 if explore else keyframes == 0
