"""Does motion blur cost a run accuracy? (issue 31's "Kinect v1 facts": blur.) From a finished run
folder: each frame's sharpness (the variance of the Laplacian of its grey image at the input
resolution, ``data.downscale`` 1: the sensor's blur, before any downscale), the run's motion error
against the ground truth over ``--steps`` frames (cm), and how they go together: Spearman's rank
correlation, the same with the true motion's size taken out (blur comes with fast motion, which is
hard to track for reasons of its own), and the mean error of the blurriest and the sharpest
quarter of the frames. A negative correlation that stays with the motion taken out says blur
costs accuracy; none or a positive one says it does not.

    python -m slam.tools.blur_effect RUN [--set data.path=...] [--steps 1 5]
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

import cv2
import numpy as np

from slam.geometry import invert, motion_size


def sharpness(color: np.ndarray) -> float:
    """Variance of the Laplacian of ``color`` (H, W, 3) uint8 RGB as grey: high = sharp."""
    return float(cv2.Laplacian(cv2.cvtColor(color, cv2.COLOR_RGB2GRAY), cv2.CV_64F).var())


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1 of ``x`` (n,) (ties broken by position: the inputs here are continuous)."""
    out = np.empty(len(x))
    out[np.argsort(x, kind="stable")] = np.arange(len(x))
    return out


def spearman(x: np.ndarray, y: np.ndarray, control: Optional[np.ndarray] = None) -> float:
    """Spearman's rank correlation of ``x`` and ``y`` (n,); with ``control`` (n,), the partial one:
    each rank vector's straight-line fit on the control's ranks taken out first."""
    rx, ry = ranks(x), ranks(y)
    if control is not None:
        rc = ranks(control)
        rx = rx - np.polyval(np.polyfit(rc, rx, 1), rc)
        ry = ry - np.polyval(np.polyfit(rc, ry, 1), rc)
    return float(np.corrcoef(rx, ry)[0, 1])


def motion_errors(run: list, truth: list, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over frames i with both poses at i - ``step`` and i (``run``, ``truth``: (4, 4) T_wc or None
    per frame): (frame indices, the run's motion error in cm, the true motion's size: cm + deg).
    The error is the translation of inv(true motion) @ run's motion."""
    idx, err, size = [], [], []
    for i in range(step, len(run)):
        if any(p is None for p in (run[i], run[i - step], truth[i], truth[i - step])):
            continue
        moved, true = invert(run[i - step]) @ run[i], invert(truth[i - step]) @ truth[i]
        shift_m, turn_deg = motion_size(true)
        idx.append(i)
        err.append(100.0 * motion_size(invert(true) @ moved)[0])
        size.append(100.0 * shift_m + turn_deg)
    return np.array(idx, dtype=int), np.array(err), np.array(size)


def main(argv: Optional[list] = None) -> int:
    """Prints one line per step; 0 when done."""
    from slam.config import load_config
    from slam.data.sources import open_source
    from slam.data.trajectory_io import read_tum_trajectory

    ap = argparse.ArgumentParser(prog="python -m slam.tools.blur_effect", description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a finished run folder (config.yaml, trajectory.txt)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--steps", type=int, nargs="+", default=[1, 5], help="frames the motion spans")
    args = ap.parse_args(argv)

    cfg = load_config(args.run / "config.yaml", [*args.overrides, "data.downscale=1"])
    stamps, poses = read_tum_trajectory(args.run / "trajectory.txt")
    run, truth, sharp = [], [], []
    for frame in open_source(cfg.data):
        k = int(np.argmin(np.abs(stamps - frame.timestamp))) if len(stamps) else -1
        run.append(poses[k] if k >= 0 and abs(stamps[k] - frame.timestamp) < 1e-4 else None)
        truth.append(frame.gt_pose)
        sharp.append(sharpness(frame.color))
    sharp_arr = np.array(sharp)
    print(f"{args.run}: {len(sharp)} frames, sharpness (variance of the Laplacian) 5/25/50/75/95 %: "
          + " / ".join(f"{q:.0f}" for q in np.quantile(sharp_arr, [0.05, 0.25, 0.5, 0.75, 0.95])))
    for step in args.steps:
        idx, err, size = motion_errors(run, truth, step)
        if len(idx) < 8:
            print(f"  over {step} frame(s): {len(idx)} motions with both poses: too few")
            continue
        s = sharp_arr[idx]
        low, high = np.quantile(s, [0.25, 0.75])
        print(f"  over {step} frame(s), {len(idx)} motions: Spearman(sharpness, error) {spearman(s, err):+.2f}, "
              f"with the motion's size taken out {spearman(s, err, size):+.2f}; Spearman(sharpness, motion) "
              f"{spearman(s, size):+.2f}; error cm blurriest / sharpest quarter {err[s <= low].mean():.2f} / "
              f"{err[s >= high].mean():.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
