"""Calibrate the absolute tracking-quality test (``quality.*`` in the config) on data with ground truth.

Maps the first ``--map-frames`` frames, then tracks each of the next ``--frames`` frames from
starts of increasing error: the previous frame's true pose (ordinary tracking) and the true pose
perturbed by ``--shifts`` (m) / ``--turns`` (deg) in random directions (what a wrong motion prior
after dropped frames looks like). Each result is classed by its final error against ground truth:
right (< 2 cm and < 1 deg) or wrong (> 5 cm or > 3 deg: the silent-failure definition). Prints the
quality figures of both classes and how the configured thresholds separate them:

    python scripts/calibrate_quality.py --config default.yaml
    python scripts/calibrate_quality.py --config 7scenes.yaml --set tracking.downscale=4
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

try:
    import slam  # noqa: F401
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from map_first_frames import load_frames, map_first_frames  # noqa: E402 - scripts/, after slam is importable
from slam.geometry import pivot_increment, relative_motion
from slam.tracking.quality import judge
from slam.tracking.tracker import Tracker

FIELDS = ("known", "depth_inliers", "color_inliers", "conditioning")


def perturbed(T_wc: np.ndarray, shift: float, turn_deg: float, rng: np.random.Generator) -> np.ndarray:
    """T_wc moved by ``shift`` m and turned by ``turn_deg`` about random camera-frame axes."""
    t = rng.normal(size=3)
    w = rng.normal(size=3)
    delta = np.concatenate([w / np.linalg.norm(w) * math.radians(turn_deg), t / np.linalg.norm(t) * shift])
    return T_wc @ np.linalg.inv(pivot_increment(delta, 0.0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="default.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--map-frames", type=int, default=40)
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--shifts", type=float, nargs="+", default=[0.05, 0.10, 0.15])
    ap.add_argument("--turns", type=float, nargs="+", default=[3.0, 6.0, 9.0])
    args = ap.parse_args()

    cfg, system, snap, first = map_first_frames(args.config, args.set, args.map_frames)
    frames = load_frames(args.config, args.set, first + args.map_frames - 1, first + args.map_frames + args.frames)
    rng = np.random.default_rng(0)
    rows = {"right": [], "wrong": []}
    for prev, frame in zip(frames[:-1], frames[1:]):
        obs = system.observation(frame)
        starts = [prev.gt_pose] + [perturbed(frame.gt_pose, s, a, rng) for s, a in zip(args.shifts, args.turns)]
        for start in starts:
            tracker = Tracker(cfg.tracking, cfg.quality, cfg.raster.backend)
            tracker.initialise(start)
            res = tracker.track(obs, snap)
            dt, dr = relative_motion(frame.gt_pose, res.T_wc)
            q = res.quality
            row = [getattr(q, f) for f in FIELDS] + [judge(q, res.loss, cfg.tracking.min_known_fraction, cfg.quality)]
            if dt < 0.02 and math.degrees(dr) < 1.0:
                rows["right"].append(row)
            elif dt > 0.05 or math.degrees(dr) > 3.0:
                rows["wrong"].append(row)
    print(f"{args.config}: map of {snap.size:,} spheres from {args.map_frames} frames; "
          f"{len(rows['right'])} right and {len(rows['wrong'])} wrong results (error < 2 cm / 1 deg, > 5 cm / 3 deg)")
    for kind, rs in rows.items():
        if not rs:
            continue
        arr = np.array([r[:len(FIELDS)] for r in rs], dtype=float)
        passed = sum(r[-1] is None for r in rs)
        print(f"  {kind:5s} n={len(rs):3d}  passing the test: {passed} ({passed / len(rs):.0%})")
        for i, f in enumerate(FIELDS):
            p = np.nanpercentile(arr[:, i], [0, 5, 50, 95, 100])
            print(f"        {f:14s} min {p[0]:.3f}  p5 {p[1]:.3f}  median {p[2]:.3f}  p95 {p[3]:.3f}  max {p[4]:.3f}")
    print("  share passing other (min_depth_inliers, min_color_inliers), right / wrong:")
    for d in (0.7, 0.8, 0.85, 0.9, 0.95):
        cells = []
        for c in (0.5, 0.7, 0.9):
            share = [np.mean([r[1] >= d and r[2] >= c and r[0] >= cfg.tracking.min_known_fraction for r in rs])
                     if rs else float("nan") for rs in rows.values()]
            cells.append(f"({d:.2f}, {c:.2f}) {share[0]:4.0%} / {share[1]:4.0%}")
        print("    " + "   ".join(cells))


if __name__ == "__main__":
    main()
