"""``slam_eval``: evaluate a TUM trajectory file against any supported dataset's ground truth.

    slam_eval est.txt --dataset tum --path datasets/tum/rgbd_dataset_freiburg1_desk
    slam_eval est.txt --dataset 7scenes --path ../shared/data/7scenes-redkitchen-0000-0499
    slam_eval est.txt --gt groundtruth.txt --json metrics.json
    slam_eval RUN/trajectory.txt --dataset 7scenes --path ... --prefixes 50 100 161 250

Prints a table of ATE (SE(3) Umeyama alignment, no scale) and RPE (1-frame steps) statistics and
the protocol; ``--prefixes`` adds the ATE of the first N frames for each N (each prefix aligned on
its own: how the error grows along the sequence); ``--json`` writes the same dict. Exit status 0 on success, 2 on bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

from slam.config import DataConfig
from slam.data.frame import FrameError
from slam.data.sources import load_ground_truth
from slam.data.trajectory_io import read_tum_trajectory
from slam.eval.trajectory import ate_over_prefixes, evaluate_trajectory


def build_parser() -> argparse.ArgumentParser:
    text = __doc__.replace("``", "")              # the docstring is reStructuredText; the help is plain
    head, rest = text.split("\n\n", 1)
    head = head.removeprefix("slam_eval: ")
    p = argparse.ArgumentParser(prog="slam_eval", description=head[0].upper() + head[1:],
                                epilog="examples:\n" + rest.rstrip(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("estimate", help="estimated trajectory, TUM format (timestamp tx ty tz qx qy qz qw)")
    ref = p.add_mutually_exclusive_group(required=True)
    ref.add_argument("--gt", help="ground-truth trajectory, TUM format")
    ref.add_argument("--dataset", choices=["tum", "7scenes", "replica"],
                     help="read the ground truth of this dataset layout (with --path)")
    p.add_argument("--path", help="dataset folder for --dataset ('sample' = the bundled sample)")
    p.add_argument("--max-time-diff", type=float, default=0.02, help="association tolerance, s (default 0.02)")
    p.add_argument("--delta", type=int, default=1, help="RPE step in frames (default 1)")
    p.add_argument("--scope", default="all frames", help="label of the pose set, e.g. 'keyframes'")
    p.add_argument("--prefixes", type=int, nargs="+", default=[], metavar="N",
                   help="also the ATE of the first N frames of the estimate, for each N")
    p.add_argument("--json", dest="json_out", help="also write the metrics to this JSON file")
    return p


def load_reference(args) -> tuple:
    """(timestamps, poses) of the reference named by --gt or --dataset/--path."""
    if args.gt:
        return read_tum_trajectory(args.gt)
    if not args.path:
        raise ValueError("--dataset needs --path (the sequence folder)")
    return load_ground_truth(DataConfig(dataset=args.dataset, path=args.path))


def format_table(metrics: dict) -> str:
    """Human-readable table of a metrics dict from ``evaluate_trajectory``."""
    rows = [("", "rmse", "mean", "median", "max")]
    rows.append(("ATE [m]", *(f"{metrics[f'ate_{k}_m']:.4f}" for k in ("rmse", "mean", "median", "max"))))
    rows.append(("RPE trans [m]", *(f"{metrics[f'rpe_trans_{k}_m']:.4f}" for k in ("rmse", "mean", "median", "max"))))
    rows.append(("RPE rot [deg]", *(f"{metrics[f'rpe_rot_{k}_deg']:.3f}" for k in ("rmse", "mean", "median", "max"))))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.append(f"frames: {metrics['frames']} ({metrics['scope']})")
    for row in metrics.get("ate_over_prefixes", []):
        lines.append(f"ATE over the first {row['frames']} frames: {100 * row['ate_rmse_m']:.2f} cm")
    lines.append(f"protocol: {metrics['protocol']}")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Console entry point ``slam_eval``; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        est_t, est_poses = read_tum_trajectory(args.estimate)
        ref_t, ref_poses = load_reference(args)
        metrics = evaluate_trajectory(est_poses, est_t, ref_poses, ref_t, max_time_diff=args.max_time_diff,
                                      delta=args.delta, scope=args.scope)
        if args.prefixes:
            metrics["ate_over_prefixes"] = ate_over_prefixes(est_poses, est_t, ref_poses, ref_t, args.prefixes,
                                                             max_time_diff=args.max_time_diff)
    except (FrameError, FileNotFoundError, ValueError) as exc:
        print(f"slam_eval: error: {exc}", file=sys.stderr)
        return 2
    metrics["estimate"] = str(args.estimate)
    metrics["reference"] = str(args.gt or f"{args.dataset}:{args.path}")
    print(format_table(metrics))
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(metrics, indent=2) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
