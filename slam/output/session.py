"""``RunSession``: one run's outputs around a ``SlamSystem``, the same for ``run_slam`` and the ROS
nodes. It owns the run folder and everything written into it, while the run goes and after it ends:

    session = RunSession(system, cfg, source.stats, out=args.out)   # run folder, log.txt, journal, autosave
    session.attach_viewer(connect=None)                             # optional rerun live view (viewer.*)
    try:
        system.run(source)                                          # the caller's: a thread, a progress bar
    finally:
        session.close_writers()                                     # journal, autosave, viewer: stopped
    metrics = session.finish(stats)                                 # metrics.json, trajectory, map, summary

``finish`` runs on success, on an error and after Ctrl-C alike: whatever was tracked is written
(``slam.output.run_folder.write_outputs``), the summary is printed and logged, and log.txt is
detached. What differs between the callers stays with them: ``run_slam`` its exit codes, signal
handling and progress bar; the ROS bridge its worker thread, publishers and input counts (passed to
``finish`` as ``extra`` metrics).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Optional

from slam.config import Config, dump_config
from slam.output.journal import Autosaver, RunJournal
from slam.output.metrics import collect_metrics
from slam.output.run_folder import attach_log, make_run_dir, write_outputs
from slam.output.summary import summary_text
from slam.output.viewer import RerunViewer, attach_viewer
from slam.runtime.recorder import peak_rss_mb

log = logging.getLogger("slam.output.session")

Status = Callable[[str], None]


class RunSession:
    """The run folder of one ``SlamSystem`` run and what writes into it.

    On construction: the run folder (``out``, else ``output.root/<name or timestamp>``), the
    package's log records sent to ``log.txt``, the resolved ``config.yaml``, the ``RunJournal`` (trajectory.txt and frames.csv
    appended per tracked frame: a frame hook) and the ``Autosaver`` (map, side file and partial
    metrics every ``output.autosave_every`` keyframes: a keyframe hook). ``source_stats`` (a
    ``SourceStats``: frames delivered and skipped) goes into the autosaved metrics and is
    ``finish``'s default.

    Attributes: ``system``, ``cfg``, ``run_dir`` (Path), ``journal``, ``autosaver``, ``viewer``
    (``RerunViewer`` or None), ``viewer_error`` (the exception that disabled the viewer, or None),
    ``metrics`` (dict once ``finish`` ran, else None).
    """

    def __init__(self, system, cfg: Config, source_stats=None, out: Optional[str] = None) -> None:
        self.system = system
        self.cfg = cfg
        self.source_stats = source_stats
        self.run_dir: Path = make_run_dir(cfg, out)
        self._log_handler: Optional[logging.Handler] = attach_log(self.run_dir)
        # The resolved config first (``finish`` writes it again): a run killed with kill -9 can
        # still be read by the run tools (slam_view_run, grid_from_run: their data and camera come
        # from it) and repeated.
        dump_config(cfg, self.run_dir / "config.yaml")
        # Written while the run goes, so that even kill -9 leaves a trajectory and the last autosaved map.
        self.journal = RunJournal(self.run_dir)
        system.frame_hooks.append(self.journal.hook)
        self.autosaver = Autosaver(self.run_dir, cfg, system.result, source_stats)
        system.keyframe_hooks.append(self.autosaver.hook)
        self.viewer: Optional[RerunViewer] = None
        self.viewer_error: Optional[Exception] = None
        self.metrics: Optional[dict] = None
        self._writers_closed = False

    @property
    def wants_viewer(self) -> bool:
        """Whether the config asks for a viewer (``viewer.enabled``, ``viewer.rrd`` or ``viewer.serve``)."""
        v = self.cfg.viewer
        return bool(v.enabled or v.rrd or v.serve)

    def attach_viewer(self, connect: Optional[str] = None) -> Optional[RerunViewer]:
        """The rerun live view the config asks for, hooked into the system (a frame hook after the
        journal's), or None when none is asked for (rerun is then not even imported) or it failed:
        a viewer problem is logged, kept in ``viewer_error`` and never stops the run.
        ``connect``: a running rerun viewer's URL (``run_slam --connect``)."""
        if not self.wants_viewer:
            return None
        try:
            self.viewer = attach_viewer(self.system, self.cfg.viewer, connect=connect)
        except Exception as exc:  # noqa: BLE001 - see docstring
            log.warning("viewer disabled: %s: %s", type(exc).__name__, exc)
            self.viewer_error = exc
            return None
        if self.viewer.live is not None:
            log.info("live view: %s (data %s)", self.viewer.live.page_url, self.viewer.live.grpc_url)
        return self.viewer

    def close_writers(self) -> None:
        """Stop what writes while the run goes: the journal (closed), the autosave (its save in
        progress waited for, before the final outputs replace its files) and the viewer (pending
        payloads and the final map logged). Call it once the system has stopped; safe to call
        again."""
        if self._writers_closed:
            return
        self._writers_closed = True
        self.journal.close()
        self.autosaver.close()
        if self.viewer is not None:
            self.viewer.close()

    def finish(self, stats=None, extra: Optional[dict] = None, status: Optional[Status] = None,
               stopped: Optional[Callable[[dict], Optional[str]]] = None, profile: bool = False) -> dict:
        """Write the run folder's final outputs and return the metrics (the same dict on a second call).

        stats:   ``SourceStats`` of the frames lost before tracking (default: the constructor's)
        extra:   caller's metrics sections (e.g. the ROS node's ``ros_input``), added first
        status:  told one line before each step that can take seconds (a progress display)
        stopped: given the metrics, the summary's stop line for a run that ended early (None: the
                 run went to the end; e.g. "early, on an error after 12 of 150 frames")
        profile: on CUDA, first track the last frame again under torch.profiler for the per-frame
                 GPU ms and kernel launches (``SlamSystem.profile_tracking``); a failure is logged

        Closes the writers first (``close_writers``), prints the summary (and logs it) and
        detaches log.txt last, also when writing fails.
        """
        if self.metrics is not None:
            return self.metrics
        say = status or (lambda text: None)
        stats = self.source_stats if stats is None else stats
        self.close_writers()
        # the run's own high-water mark: the after-run profiler's replays add ~550 MB to it on CUDA
        # (docs/benchmarks.md#host-memory), which is not what the run costs
        run_peak_rss_mb = peak_rss_mb()
        try:
            if profile and self.system.device.type == "cuda":
                say("profiling the tracker on the last frame (GPU ms, kernel launches)")
                try:  # GPU ms and kernel launches per frame, measured after the run (not in its timing)
                    self.system.profile_tracking()
                except Exception as exc:  # noqa: BLE001 - a profiling problem must not lose the outputs
                    log.warning("tracking profile failed: %s: %s", type(exc).__name__, exc)
            result = self.system.result()
            every = self.cfg.output.eval_images_every
            if status is not None:
                images = (f", PSNR/SSIM on {len(result.keyframes[::every])} keyframes"
                          if every and result.keyframes else "")
                say("evaluating: trajectory against the ground truth, depth agreement" + images)
            metrics = collect_metrics(result, stats, every)
            if result.tracking_profile:
                metrics["peak_rss_mb_after_profile"] = metrics["peak_rss_mb"]
            metrics["peak_rss_mb"] = run_peak_rss_mb
            metrics.update(extra or {})
            if self.viewer is not None:
                metrics["viewer"] = self.viewer.stats()
            metrics["autosave"] = self.autosaver.stats()
            write_outputs(self.run_dir, self.cfg, result, metrics, status=status)
            text = summary_text(metrics, self.run_dir, stopped(metrics) if stopped is not None else None)
            log.info("run finished:\n%s", text)
            print(text, flush=True)
            self.metrics = metrics
            return metrics
        finally:
            self.detach_log()

    def detach_log(self) -> None:
        """Stop sending the package's log records to log.txt (``finish`` does it last)."""
        if self._log_handler is not None:
            logging.getLogger("slam").removeHandler(self._log_handler)
            self._log_handler.close()
            self._log_handler = None
