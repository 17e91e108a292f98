"""Build the occupancy grid again from a finished run folder: its keyframes' depth and final poses
(``map.keyframes.npz``) with the grid settings of its config.yaml and ``--set grid.*`` overrides;
writes map.pgm, map.yaml and grid.png (into ``--out``, default the run folder) and prints the cost.

    python -m slam.tools.grid_from_run runs/kitchen --set grid.max_height=1.5 --out /tmp/grid

Use it to try grid settings without running SLAM again. One thread, in order (the run's grid
thread does the same work).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np


def rebuild(run: Path, overrides: list, out: Optional[Path] = None) -> dict:
    """-> the builder's figures (``GridBuilder.stats``) plus the wall time; writes the files."""
    from slam.config import load_config
    from slam.data.trajectory_io import read_tum_trajectory
    from slam.grid.builder import GridBuilder
    from slam.grid.export import write_grid_png, write_map_files
    from slam.map.map_io import load_keyframes

    cfg = load_config(run / "config.yaml", [f"grid.{o}" if not o.startswith("grid.") else o for o in overrides])
    keyframes = load_keyframes(run / "map.keyframes.npz")
    builder = GridBuilder(cfg.grid, threaded=False)
    t0 = time.perf_counter()
    for kf in keyframes:
        builder.offer(kf, {})
    grid = builder.finish({})
    stats = builder.stats()
    stats["wall_s"] = time.perf_counter() - t0
    if grid is None:
        return stats
    out = Path(out or run)
    out.mkdir(parents=True, exist_ok=True)
    write_map_files(out, grid, cfg.grid.occupied_thresh, cfg.grid.free_thresh)
    path = None
    if (run / "trajectory.txt").exists():
        _, poses = read_tum_trajectory(run / "trajectory.txt")
        path = np.asarray(poses)[:, :3, 3]
    write_grid_png(out / "grid.png", grid, cfg.grid.occupied_thresh, cfg.grid.free_thresh, path,
                   np.stack([kf.T_wc[:3, 3] for kf in keyframes]))
    stats["known_cells"] = int((grid.occupancy >= 0).sum())
    return stats


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m slam.tools.grid_from_run", description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path, help="a run folder with config.yaml and map.keyframes.npz")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="grid.KEY=VALUE")
    ap.add_argument("--out", type=Path, default=None, help="where to write (default: the run folder)")
    args = ap.parse_args(argv)
    stats = rebuild(args.run, args.overrides, args.out)
    print(json.dumps(stats, indent=1))
    return 0 if stats.get("error") is None else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
