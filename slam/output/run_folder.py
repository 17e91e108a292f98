"""The run folder: trajectory, keyframe trajectory, map, resolved config, metrics, log (the
terminal summary: ``slam.output.summary``)."""
from __future__ import annotations

import datetime as _dt
import logging
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from slam.config import Config, dump_config
from slam.data.trajectory_io import write_tum_trajectory
from slam.grid.export import write_grid_png, write_map_files
from slam.map.map_io import save_map, save_map_pair
from slam.output.journal import TRAJECTORY_HEADER, write_frames_csv, write_json_atomic
from slam.output.mesh import write_mesh
from slam.output.plots import write_plots
from slam.runtime.result import RunResult

log = logging.getLogger("slam.output.run_folder")


def make_run_dir(cfg: Config, override: Optional[str] = None) -> Path:
    """Create ``output.root/name`` (timestamped when no name is set); returns its path."""
    if override:
        run = Path(override)
    else:
        name = cfg.output.name or _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        run = Path(cfg.output.root) / name
    if run.exists() and any(run.iterdir()) and cfg.output.name is None and not override:
        run = run.with_name(run.name + _dt.datetime.now().strftime("-%f"))
    elif (run / "metrics.json").exists():
        # a folder named on purpose (--out, output.name) is reused: say so, as files this run does
        # not write (a grid, plots, a mesh of other settings) stay beside the new ones
        log.warning("%s holds an earlier run: its files are replaced where this run writes them, the others "
                    "stay (log.txt is appended to)", run)
    run.mkdir(parents=True, exist_ok=True)
    return run


def attach_log(run_dir: Path) -> logging.Handler:
    """Send the package's log records to ``run_dir/log.txt``; returns the handler (remove it after)."""
    handler = logging.FileHandler(run_dir / "log.txt")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("slam")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return handler


Status = Optional[Callable[[str], None]]


def write_outputs(run_dir: Path, cfg: Config, result: RunResult, metrics: dict, status: Status = None) -> None:
    """Write everything a run leaves behind. Called on success, error and Ctrl-C alike.
    ``status`` is told (one line each) before the steps that can take seconds: the map, the
    plots, the mesh."""
    status = status or (lambda text: None)
    frames, _, _ = result.recorder.snapshot()
    dump_config(cfg, run_dir / "config.yaml")
    if frames:
        stamps = np.array([f.timestamp for f in frames])
        write_tum_trajectory(run_dir / "trajectory.txt", stamps, np.stack([f.T_wc for f in frames]),
                             header=TRAJECTORY_HEADER)
        write_frames_csv(run_dir / "frames.csv", frames)
        if any(f.T_wc_tracked is not None for f in frames):
            # the poses as tracked (what live consumers such as ROS odometry saw), beside the final
            # ones re-expressed on the refined / loop-corrected keyframes
            write_tum_trajectory(run_dir / "trajectory_tracked.txt", stamps, np.stack([f.T_wc_as_tracked for f in frames]),
                                 header="poses as tracked, before the final keyframe poses (refinement, loop closure)")
    kfs = [f for f in frames if f.keyframe]
    if kfs:
        write_tum_trajectory(run_dir / "keyframes.txt", np.array([f.timestamp for f in kfs]),
                             np.stack([f.T_wc for f in kfs]), header="keyframe poses")
    if cfg.output.save_map and result.map_rows.shape[0] > 0:
        status(f"saving the map: {result.map_rows.shape[0]} spheres, {len(result.map_keyframes)} keyframes")
        _write_map(run_dir / "map.ply", result)
    # Plots, mesh: each guarded, never lose the outputs above.
    _write_extras(run_dir, cfg, result, frames, status)
    write_json_atomic(run_dir / "metrics.json", metrics)


def _write_map(path: Path, result: RunResult) -> None:
    """``map.ply`` and, with keyframes, its side file ``map.keyframes.npz`` replaced together
    (``slam.map.map_io.save_map_pair``: a kill -9 never pairs the map with another map's
    keyframes). A side file that cannot be written is logged and never costs the map."""
    if result.map_keyframes:
        save_map_pair(path, result.map_rows, result.map_anchors, result.map_keyframes, side_optional=True)
    else:
        save_map(path, result.map_rows, result.map_anchors)


def _write_extras(run_dir: Path, cfg: Config, result: RunResult, frames: list, status: Callable[[str], None]) -> None:
    """``trajectory.png``/``translation_error.png`` (slam.output.plots, when ground truth exists),
    ``mesh.ply`` (slam.output.mesh, when ``output.mesh``), the occupancy grid (``map.pgm`` +
    ``map.yaml``, ``grid.png``: slam.grid.export, when the run has one)."""
    steps = [("occupancy grid", "writing the occupancy grid (map.pgm, map.yaml, grid.png)",
              lambda: write_grid(run_dir, cfg, result, frames), result.grid is not None and result.grid.floor is not None),
             ("plots", "writing the plots (output.plots)", lambda: write_plots(run_dir, frames),
              cfg.output.plots and bool(frames)),
             ("mesh", f"building the mesh from {len(result.keyframes)} keyframes (output.mesh)",
              lambda: write_mesh(run_dir / "mesh.ply", result.keyframes), cfg.output.mesh and len(result.keyframes) > 0)]
    for what, text, step, wanted in steps:
        if not wanted:
            continue
        status(text)
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - an optional output must not lose the run
            log.error("could not write the %s: %s: %s", what, type(exc).__name__, exc)


def write_grid(run_dir: Path, cfg: Config, result: RunResult, frames: list) -> None:
    """map.pgm + map.yaml (map_server) and grid.png (the grid with the final trajectory and the
    keyframes drawn on it)."""
    g = result.grid
    write_map_files(run_dir, g, cfg.grid.occupied_thresh, cfg.grid.free_thresh)
    path = np.array([f.T_wc[:3, 3] for f in frames]) if frames else None
    kfs = np.array([f.T_wc[:3, 3] for f in frames if f.keyframe]) if frames else None
    write_grid_png(run_dir / "grid.png", g, cfg.grid.occupied_thresh, cfg.grid.free_thresh, path, kfs)
