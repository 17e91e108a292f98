"""``slam.output.session.RunSession``, the run folder that ``run_slam`` and the ROS bridge share:
what it writes while a run goes and after it ends (also after an error), a viewer that cannot
start, and calls made twice. Short sequential runs on the bundled sample, CPU."""
import json
import logging

import pytest

from slam.data.sources import open_source
from slam.output import session as session_module
from slam.output.session import RunSession
from slam.runtime.system import SlamSystem

FRAMES = 6


def _cfg(sample_run, *extra):
    return sample_run.cfg(FRAMES, "system.threaded=false", "system.device=cpu", "tracking.iters=2",
                          "mapping.iters=3", "mapping.final_iters=2", "loop.enabled=false", *extra)


def _slam_handlers():
    return [h for h in logging.getLogger("slam").handlers if isinstance(h, logging.FileHandler)]


def test_a_session_writes_the_run_folder_while_running_and_at_the_end(tmp_path, sample_run, capsys):
    cfg = _cfg(sample_run, "output.autosave_every=1")
    system = SlamSystem(cfg)
    source = open_source(cfg.data)
    before = len(_slam_handlers())
    session = RunSession(system, cfg, source.stats, out=str(tmp_path / "run"))
    run = session.run_dir
    assert run == tmp_path / "run" and run.is_dir() and len(_slam_handlers()) == before + 1
    assert session.journal.hook in system.frame_hooks and session.autosaver.hook in system.keyframe_hooks
    assert session.attach_viewer() is None and session.viewer is None     # none asked for
    system.run(source)
    # while the run goes (before finish): the journal's trajectory and the autosave's partial metrics
    journal = [ln for ln in (run / "trajectory.txt").read_text().splitlines() if not ln.startswith("#")]
    assert len(journal) == FRAMES                                          # one line per tracked frame
    session.close_writers()
    session.close_writers()                                                # a second call does nothing
    assert session.journal.closed and session.autosaver.saves >= 1
    told = []
    metrics = session.finish(extra={"caller": {"x": 1}}, status=told.append)
    assert session.finish() is metrics                                     # the same metrics, nothing rewritten
    for name in ("trajectory.txt", "frames.csv", "keyframes.txt", "map.ply", "map.keyframes.npz",
                 "metrics.json", "config.yaml", "log.txt"):
        assert (run / name).is_file(), name
    written = json.loads((run / "metrics.json").read_text())
    assert written["frames"] == FRAMES and "partial" not in written and written["caller"] == {"x": 1}
    assert written["autosave"]["saves"] == session.autosaver.saves and "viewer" not in written
    assert any(t.startswith("evaluating") for t in told) and any("map" in t for t in told)
    out = capsys.readouterr().out
    assert f"run folder        {run}" in out                                # the summary, printed
    log_txt = (run / "log.txt").read_text()
    assert "run finished:" in log_txt and "autosaved after" in log_txt
    assert len(_slam_handlers()) == before                                 # log.txt detached


def test_finish_after_an_error_writes_what_was_tracked_and_the_stop_line(tmp_path, sample_run, capsys):
    """A run that stops early (here the source fails after 3 frames): finish still writes every
    frame tracked so far; ``stopped`` gets the metrics and names the summary's stop line. No
    profile on the CPU even when asked for."""
    cfg = _cfg(sample_run)
    system = SlamSystem(cfg)
    source = open_source(cfg.data)

    def failing():
        for i, frame in enumerate(source):
            if i == 3:
                raise RuntimeError("camera unplugged")
            yield frame

    session = RunSession(system, cfg, source.stats, out=str(tmp_path / "run"))
    with pytest.raises(RuntimeError, match="camera unplugged"):
        try:
            system.run(failing())
        finally:
            session.close_writers()
    profiled = []
    system.profile_tracking = lambda: profiled.append(1)
    metrics = session.finish(stopped=lambda m: f"early, after {m['frames']} frames", profile=True)
    assert metrics["frames"] == 3 and not profiled
    poses = [ln for ln in (tmp_path / "run" / "trajectory.txt").read_text().splitlines() if not ln.startswith("#")]
    assert len(poses) == 3
    assert "early, after 3 frames" in capsys.readouterr().out


def test_the_metrics_peak_rss_is_the_runs_before_the_profile_and_the_evaluation(tmp_path, sample_run, monkeypatch):
    """metrics.json's peak_rss_mb is read when finish starts: the after-run profiler and the
    evaluation do not count as the run's memory."""
    import slam.output.metrics as metrics_module
    cfg = _cfg(sample_run)
    system = SlamSystem(cfg)
    source = open_source(cfg.data)
    session = RunSession(system, cfg, source.stats, out=str(tmp_path / "run"))
    system.run(iter(list(source)[:4]))
    session.close_writers()
    monkeypatch.setattr(session_module, "peak_rss_mb", lambda: 123.0)       # at finish's start
    monkeypatch.setattr(metrics_module, "peak_rss_mb", lambda: 456.0)       # later, in the evaluation
    metrics = session.finish()
    assert metrics["peak_rss_mb"] == 123.0 and "peak_rss_mb_after_profile" not in metrics   # CPU: no profile
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["peak_rss_mb"] == 123.0


def test_a_viewer_that_cannot_start_is_reported_and_the_run_goes_on(tmp_path, sample_run, monkeypatch):
    cfg = _cfg(sample_run, f"viewer.rrd={tmp_path / 'v.rrd'}")
    system = SlamSystem(cfg)

    def broken(*args, **kwargs):
        raise RuntimeError("no rerun here")

    monkeypatch.setattr(session_module, "attach_viewer", broken)
    session = RunSession(system, cfg, out=str(tmp_path / "run"))
    assert session.wants_viewer
    assert session.attach_viewer() is None and session.viewer is None
    assert isinstance(session.viewer_error, RuntimeError)
    hooks = list(system.frame_hooks)
    system.run(open_source(cfg.data))
    metrics = session.finish()
    assert metrics["frames"] == FRAMES and "viewer" not in metrics and hooks == [session.journal.hook]
    assert "viewer disabled: RuntimeError: no rerun here" in (tmp_path / "run" / "log.txt").read_text()


def test_a_failing_write_still_detaches_the_log(tmp_path, sample_run, monkeypatch):
    cfg = _cfg(sample_run)
    system = SlamSystem(cfg)
    before = len(_slam_handlers())
    session = RunSession(system, cfg, out=str(tmp_path / "run"))
    system.run(open_source(cfg.data))

    def full_disk(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(session_module, "write_outputs", full_disk)
    with pytest.raises(OSError):
        session.finish()
    assert len(_slam_handlers()) == before and session.metrics is None


def test_a_one_frame_quality_summary_is_nan_without_a_numpy_warning():
    # The first frame has no recent loss level: its ratios are NaN; a one-frame run printed
    # numpy's "All-NaN slice encountered" on the terminal.
    import warnings
    from dataclasses import asdict, dataclass

    from slam.output.metrics import _quality_summary

    @dataclass
    class Quality:
        coverage: float
        loss_ratio: float

        def as_dict(self):
            return asdict(self)

    class Rec:
        def __init__(self, q):
            self.quality = q

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one = _quality_summary([Rec(Quality(0.9, float("nan")))])
        two = _quality_summary([Rec(Quality(0.9, float("nan"))), Rec(Quality(0.7, 2.0))])
    assert one["coverage"] == pytest.approx(0.9) and one["loss_ratio"] != one["loss_ratio"]
    assert two == {"coverage": pytest.approx(0.8), "loss_ratio": 2.0}
