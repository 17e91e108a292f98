"""Calibrate the tracking-quality test (``quality.*``) as a detector, on a sequence with ground truth.

Runs SLAM with the test opened, tracks every ``--every``-th frame again from perturbed starts, and
prints how the quality test separates right from wrong results under a grid of its settings
(``slam/eval/quality_calibration.py`` says how they are made and labelled); ``--json`` keeps the
samples:

    python -m slam.tools.calibrate_quality --config tum.yaml --set data.path=../shared/data/rgbd_dataset_freiburg1_rpy-0000-0359
    python -m slam.tools.calibrate_quality --config 7scenes.yaml --set data.stride=8 --every 1 --json s8.json
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict

import numpy as np

from slam.config import load_config
from slam.data.sources import open_source
from slam.eval.quality_calibration import OPEN_TEST, collect, rule_table

FIELDS = ("known", "depth_inliers", "color_inliers", "conditioning")


def main(argv=None) -> int:
    """Prints the separation and the rule table; 0 when done."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="default.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--every", type=int, default=3, help="perturb every N-th frame (default 3)")
    ap.add_argument("--json", default=None, help="write the samples here")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, [*args.set, *OPEN_TEST])
    samples = collect(cfg, open_source(cfg.data), every=args.every)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(s) for s in samples], f)
    for label in ("right", "wrong"):
        qs = [s.quality for s in samples if s.label == label and s.quality]
        print(f"{label:5s} n={len(qs)}")
        for k in FIELDS:
            p = np.nanpercentile([q.get(k, np.nan) for q in qs], [1, 5, 50, 95, 99]) if qs else [np.nan] * 5
            print(f"      {k:14s} p1 {p[0]:.3f}  p5 {p[1]:.3f}  p50 {p[2]:.3f}  p95 {p[3]:.3f}  p99 {p[4]:.3f}")
    base = load_config(args.config, args.set)
    grid = {"min_depth_inliers": [0.3, 0.5, 0.7, 0.9], "residual_spike": [2.0, 2.5, 3.0, 1e9],
            "weak_spike": [1.5, 2.0, 1e9], "weak_depth_inliers": [0.85, 0.9, 0.95]}
    print(f"quality test ({', '.join(grid)}; the rest as configured): false alarms among right / misses among wrong")
    for r in rule_table(samples, base.quality, base.tracking.min_known_fraction, grid):
        fa = "n/a" if r["false_alarms"] is None else f"{r['false_alarms']:.1%}"
        mi = "n/a" if r["misses"] is None else f"{r['misses']:.1%}"
        print("  " + ", ".join(f"{r[k]:g}" for k in grid) + f"   {fa:>6s} / {mi:>6s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
