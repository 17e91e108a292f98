"""``run_slam``: run the SLAM system on a configured source and write a run folder.

    run_slam                                  # the bundled sample (default.yaml)
    run_slam --config 7scenes.yaml --set data.last=100 --set system.device=cpu
    run_slam --config tum.yaml                # TUM fr1/desk, downloaded into the data cache if missing
    run_slam --config realsense.yaml          # a live RealSense camera (data.path: file.bag plays one)
    run_slam --viewer                         # live rerun viewer (--rrd run.rrd: record to a file)
    run_slam --serve                          # live view in a browser: http://<this machine>:9090
    run_slam --set data.first=75 --map runs/a/map.ply --mode localize   # track on a frozen saved map
Exit codes: 0 done, 1 a stage failed, 2 bad config or input, 130 interrupted. Outputs so far
(trajectory, map, metrics) are written in every case once the system has started; after an input
error (a bad image in the middle of a sequence) every frame read before it is tracked and saved.
An error is printed once, as the last line, after the summary.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import traceback
from pathlib import Path
from typing import Optional

from tqdm import tqdm

from slam.config import ConfigError, load_config
from slam.data.errors import DataNotFoundError, DownloadError
from slam.data.frame import FrameError
from slam.data.sources import open_source
from slam.map.map_io import MapFormatError
from slam.output.session import RunSession
from slam.runtime.system import SlamSystem
from slam.runtime.threads import RERAISED

log = logging.getLogger("slam.cli")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run_slam", description="Sphere-splatting RGB-D SLAM",
                                epilog="Datasets fetch themselves: data.path may name a registry sequence "
                                       "(slam_data list), downloaded on first use into $SPHERE_SLAM_DATA. "
                                       "See docs/DATA.md.")
    p.add_argument("--config", default="default.yaml",
                   help="YAML config: a path, or a bare name of a shipped config (default: default.yaml, the "
                        "bundled sample; tum.yaml downloads TUM fr1/desk; realsense.yaml: a live RealSense camera)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key, e.g. --set tracking.iters=20 (repeatable)")
    p.add_argument("--out", default=None, help="run folder (default: output.root/<timestamp>)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--viewer", action="store_true", help="live rerun viewer: spawn one (or --connect)")
    p.add_argument("--connect", default=None, metavar="URL",
                   help="with --viewer: connect to a running rerun viewer (e.g. rerun+http://host:9876/proxy)")
    p.add_argument("--rrd", default=None, metavar="PATH", help="record the viewer stream to this .rrd file (headless)")
    p.add_argument("--serve", action="store_true",
                   help="serve the live view to browsers on the network (viewer.serve; ports viewer.grpc_port, "
                        "viewer.web_port; viewer.bind=127.0.0.1 for this machine only)")
    p.add_argument("--map", default=None, metavar="PLY",
                   help="start from a saved map (map.ply with its map.keyframes.npz next to it)")
    p.add_argument("--mode", choices=["slam", "localize", "continue"], default=None,
                   help="with --map: localize = track on the frozen map (default), continue = keep mapping")
    return p


class _Progress:
    """tqdm progress bar with frame rate and sphere count, and the status lines of the phases
    after the last frame (none with --quiet)."""

    def __init__(self, total: Optional[int], system, enabled: bool) -> None:
        self.system = system
        self.enabled = enabled
        self.bar = None
        if enabled:
            self.bar = tqdm(total=total, unit="frame", dynamic_ncols=True, file=sys.stderr)

    def __call__(self, rec) -> None:
        if self.bar is not None:
            self.bar.update(1)
            snap = self.system.latest_map()
            self.bar.set_postfix(spheres=snap.size if snap is not None else 0, ok="yes" if rec.ok else "LOST", refresh=False)

    def phase(self, text: str) -> None:
        """A status line for a phase after the last frame (above the bar while it is open)."""
        log.info("%s", text)
        if self.enabled:
            tqdm.write(f"run_slam: {text} ...", file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _sigterm_as_interrupt(signum, frame):  # pragma: no cover - exercised by the signal test
    raise KeyboardInterrupt()


def _defer_interrupts() -> list:
    """From here on a Ctrl-C / SIGTERM is noted, not obeyed: the run is over and its outputs
    are being written (writing them is what stopping cleanly is for). Returns the list the
    signals are noted in."""
    noted: list = []

    def note(signum, frame):  # pragma: no cover - exercised by the web viewer test's timing
        if not noted:
            print("run_slam: writing the outputs, then stopping", file=sys.stderr, flush=True)
        noted.append(signum)

    signal.signal(signal.SIGINT, note)
    signal.signal(signal.SIGTERM, note)
    return noted


def _not_reraised(record: logging.LogRecord) -> bool:
    """Terminal log filter: an error the runner re-raises is printed once, by ``main``."""
    return not getattr(record, "reraised", False)


def _stopped_early(exc: BaseException, frames: int, total: Optional[int]) -> str:
    """The summary's stop line for a run that ends with an error (printed after the summary)."""
    read = f"{frames} of {total}" if total is not None else str(frames)
    if isinstance(exc, FrameError):
        return (f"early, on bad input after {read} frames (the error is the last line below); "
                f"the frames before it are tracked and saved")
    return f"early, on an error after {read} frames (the error is the last line below)"


def _data_path_hint(exc: BaseException, config: str, overrides: list, path: str) -> str:
    """For data that is not where ``data.path`` says (not a failed download, which explains
    itself, nor data of another dataset's layout, whose error names the dataset): where the path
    came from and how to give another, appended to the error line."""
    if not isinstance(exc, DataNotFoundError) or isinstance(exc, DownloadError) or getattr(exc, "looks_like", None):
        return ""
    origin = "--set" if any(o.strip().startswith("data.path=") for o in overrides) else config
    return f" (data.path '{path}' from {origin}: give your data with --set data.path=PATH; docs/DATA.md)"


def _setup_logging() -> None:
    """The terminal shows warnings (log.txt, the run session's, gets everything)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for h in logging.getLogger().handlers:
        h.setLevel(logging.WARNING)
        if _not_reraised not in h.filters:
            h.addFilter(_not_reraised)


def _fail(message: str, rc: int = 2) -> int:
    print(f"run_slam: {message}", file=sys.stderr)
    return rc


def _open_run(args):
    """(config, source, system, session) for ``args``, or the exit code after a clear error: the
    config, the command-line flags over it, the input, the system (and a saved map), the run folder."""
    try:
        cfg = load_config(args.config, args.overrides)
    except (ConfigError, FileNotFoundError) as exc:
        return _fail(str(exc))
    cfg.viewer.enabled = cfg.viewer.enabled or args.viewer or args.connect is not None
    cfg.viewer.rrd = args.rrd or cfg.viewer.rrd
    cfg.viewer.serve = cfg.viewer.serve or args.serve
    mode = args.mode or ("localize" if args.map else "slam")
    if (mode == "slam") != (args.map is None):
        return _fail("--mode localize/continue needs --map PLY, and --map needs one of them")
    if args.out is not None and Path(args.out).exists() and not Path(args.out).is_dir():
        return _fail(f"--out '{args.out}' is a file, not a folder: pass a new or existing folder")
    try:
        source = open_source(cfg.data)
    except (FrameError, FileNotFoundError, ValueError) as exc:
        return _fail(f"{exc}{_data_path_hint(exc, args.config, args.overrides, cfg.data.path)}")
    except KeyboardInterrupt:  # e.g. during a download: its .part file resumes next time
        return _fail("interrupted before the run started", 130)
    opened = _system_and_session(args, cfg, mode, source)
    if isinstance(opened, int):
        source.close()    # opened first: a live camera would keep streaming until the process ends
        return opened
    return (cfg, source, *opened)


def _system_and_session(args, cfg, mode: str, source):
    """(system, session) for an opened ``source``: the system (and a saved map), the run folder;
    or the exit code after a clear error."""
    try:
        system = SlamSystem(cfg)
    except RuntimeError as exc:
        return _fail(str(exc))
    if args.map:
        try:
            system.use_saved_map(args.map, mode)
        except (FileNotFoundError, MapFormatError, ValueError) as exc:
            return _fail(f"cannot use saved map: {exc}")
    try:
        session = RunSession(system, cfg, source.stats, out=args.out)   # run folder, log.txt, journal, autosave
    except OSError as exc:  # --out (or output.root) names a file, or a place this user cannot write
        where = args.out or cfg.output.root
        return _fail(f"cannot create the run folder under '{where}': {exc.strerror or exc}"
                     f"{f' ({exc.filename})' if exc.filename else ''}; pass --out (or set output.root) with a writable folder")
    return system, session


def _announce_viewer(session: RunSession, viewer) -> None:
    """Says where the live view is, or why the viewer is off (it never stops the run)."""
    if session.viewer_error is not None:
        print(f"run_slam: viewer disabled: {session.viewer_error}", file=sys.stderr)
    elif viewer is not None and viewer.live is not None:
        print(f"run_slam: live view in a browser: {viewer.live.page_url or '(no page: web_port 0)'}\n"
              f"run_slam: native viewer: rerun {viewer.live.grpc_url}", file=sys.stderr, flush=True)


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging()
    opened = _open_run(args)
    if isinstance(opened, int):
        return opened
    cfg, source, system, session = opened
    run_dir = session.run_dir
    log.info("run folder %s, device %s, config %s", run_dir, system.device, args.config)
    try:
        total = len(source)
    except TypeError:
        total = None
    progress = _Progress(total, system, cfg.system.progress and not args.quiet)
    system.phase_hooks.append(progress.phase)
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    # A process started in the background by a non-interactive shell inherits SIGINT as ignored;
    # a SLAM run must still stop cleanly (and write its outputs) on Ctrl-C / kill -INT.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _announce_viewer(session, session.attach_viewer(connect=args.connect))   # None unless asked for
    rc, error_line, failure = 0, None, None
    try:
        system.run(source, progress)
    except KeyboardInterrupt:
        rc = 130
        log.warning("interrupted: writing what was done so far")
    except FrameError as exc:
        rc, failure = 2, exc
        error_line = f"run_slam: bad input: {exc}"
        log.error("bad input: %s", exc, extra=RERAISED)
    except Exception as exc:  # noqa: BLE001 - report, write outputs, exit non-zero
        rc, failure = 1, exc
        error_line = f"run_slam: error: {type(exc).__name__}: {exc} (details in {run_dir / 'log.txt'})"
        log.error("run failed:\n%s", traceback.format_exc(), extra=RERAISED)
    finally:
        late_interrupts = _defer_interrupts()
        progress.close()
        source.close()
        session.close_writers()
    stopped = (lambda metrics: _stopped_early(failure, metrics["frames"], total)) if failure is not None else None
    session.finish(status=progress.phase, stopped=stopped, profile=rc == 0)
    if error_line is not None:
        print(error_line, file=sys.stderr, flush=True)
    return 130 if late_interrupts and rc == 0 else rc


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
