"""Rank trajectories by how well they agree with the sensor's depth (slam/eval/depth_consistency.py):
for each frame pair (a, b), frame a's depth moved into frame b by each trajectory's relative pose,
against b's depth. No trajectory is trusted, the ground truth included.

    python -m slam.tools.depth_consistency --config 7scenes.yaml --gt \\
        --run renders=runs/x/trajectory.txt --run fused=runs/y/trajectory.txt \\
        --pairs 60:100 80:121 121:122 [--json out.json]
    python -m slam.tools.depth_consistency --config 7scenes.yaml --gt --run est=runs/x/trajectory.txt \\
        --span 40 --every 20 --last 160        # pairs (0, 40), (20, 60), ... up to frame 159

Prints, per pair and trajectory, the median |depth difference| (mm) over the pixels both frames see
and the share within 1 cm. Trajectory files are TUM (timestamp tx ty tz qx qy qz qw), matched to
frames by timestamp (within 0.02 s).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from slam.config import load_config
from slam.data.sources import open_source
from slam.data.trajectory_io import read_tum_trajectory
from slam.eval.depth_consistency import pair_table

MAX_TIME_DIFF = 0.02


def parse_pairs(args) -> list[tuple[int, int]]:
    """Frame pairs (a, b) from ``--pairs A:B ...`` or ``--span/--every/--last``."""
    if args.pairs:
        try:
            pairs = [tuple(int(x) for x in p.split(":")) for p in args.pairs]
        except ValueError:
            raise SystemExit(f"depth_consistency: --pairs takes A:B frame numbers, got {args.pairs}") from None
    else:
        if args.span is None or args.last is None:
            raise SystemExit("depth_consistency: give --pairs, or --span with --last (and --every)")
        pairs = [(a, a + args.span) for a in range(0, args.last - args.span, args.every)]
    if not pairs or any(len(p) != 2 or p[0] < 0 or p[1] < 0 for p in pairs):
        raise SystemExit(f"depth_consistency: bad pairs {pairs}")
    return pairs


def by_frame(path: str, frames: dict) -> dict:
    """{frame index: T_wc} of the TUM file ``path`` at the frames' timestamps."""
    stamps, poses = read_tum_trajectory(path)
    out = {}
    for index, t in frames.items():
        k = int(np.argmin(np.abs(stamps - t)))
        if abs(stamps[k] - t) <= MAX_TIME_DIFF:
            out[index] = poses[k]
    return out


def main(argv=None) -> int:
    """Prints the pair table; 0 when done."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--gt", action="store_true", help="include the dataset's ground truth")
    p.add_argument("--run", action="append", default=[], metavar="NAME=TRAJECTORY.txt")
    p.add_argument("--pairs", nargs="+", metavar="A:B")
    p.add_argument("--span", type=int, help="pairs (a, a + span) ...")
    p.add_argument("--every", type=int, default=20, help="... for a = 0, every, 2 every, ...")
    p.add_argument("--last", type=int, help="... while a + span < last")
    p.add_argument("--json", dest="json_out")
    args = p.parse_args(argv)
    pairs = parse_pairs(args)
    needed = {i for pair in pairs for i in pair}
    first = min(needed)
    cfg = load_config(args.config, [*args.set, f"data.first={first}", f"data.last={max(needed) + 1}",
                                    "data.stride=1"])
    depths, stamps, gt, K = {}, {}, {}, None
    for frame in open_source(cfg.data):
        i = first + frame.index          # Frame.index counts from data.first
        if i in needed:
            depths[i], stamps[i], K = frame.depth, frame.timestamp, frame.K
            if frame.gt_pose is not None:
                gt[i] = frame.gt_pose
    missing = needed - set(depths)
    if missing:
        raise SystemExit(f"depth_consistency: frames {sorted(missing)} are not in {cfg.data.path}")
    trajectories = {}
    if args.gt:
        if not gt:
            raise SystemExit(f"depth_consistency: {cfg.data.path} has no ground truth")
        trajectories["gt"] = gt
    for spec in args.run:
        name, _, path = spec.partition("=")
        if not path:
            raise SystemExit(f"depth_consistency: --run takes NAME=TRAJECTORY.txt, got {spec!r}")
        trajectories[name] = by_frame(path, stamps)
    rows = pair_table(depths, np.asarray(K, dtype=np.float64), trajectories, pairs)
    for row in rows:
        cells = [f"{name} {row[name]['median_m'] * 1e3:5.1f} mm {row[name]['within']:.2f}"
                 for name in trajectories if name in row]
        print(f"{row['a']:5d} -> {row['b']:5d} | " + " | ".join(cells))
    print("median |depth difference| over the pixels both frames see, share within 1 cm")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
