"""Dropped frames: run a sequence at several frame strides (every n-th frame, as a slow Jetson
would see a 30 Hz camera) and print one markdown table: ATE over all frames and over the frames
reported ok, failures flagged, silent failures, time per frame, re-initialisations.

    python scripts/stride_table.py --config 7scenes.yaml --strides 1 2 4 8 16 --out runs/strides
Each stride is one ``run_slam`` run (threaded, as deployed); its run folder is kept under --out.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="default.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--strides", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--out", default="runs/strides")
    args = ap.parse_args()
    rows = []
    for stride in args.strides:
        out = Path(args.out) / f"stride{stride}"
        cmd = [sys.executable, "-m", "slam.cli", "--config", args.config, "--quiet", "--out", str(out),
               "--set", f"data.stride={stride}", "--set", "output.plots=true"]
        for s in args.set:
            cmd += ["--set", s]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0 or not (out / "metrics.json").is_file():
            print(f"stride {stride}: run_slam failed ({res.returncode}): {res.stderr[-500:]}", file=sys.stderr)
            continue
        m = json.loads((out / "metrics.json").read_text())
        ate = (m.get("trajectory") or {}).get("ate_rmse_m")
        ate_ok = (m.get("trajectory_ok") or {}).get("ate_rmse_m")
        silent = m.get("silent_failures") or {}
        track = (m.get("stage_ms") or {}).get("tracking_mean")
        reinit = m.get("reinit") or {}
        cm = (lambda v: "n/a" if v is None else f"{v * 100:.2f} cm")
        rows.append(f"| {stride} | {30 / stride:.1f} Hz | {m['frames']} | {cm(ate)} | {cm(ate_ok)} | "
                    f"{m['tracking_failures']} ({m['tracking_recoveries']} recovered) | {silent.get('count', 'n/a')} | "
                    f"{reinit.get('frames', 0)} ({(reinit.get('ms_mean') or 0):.0f} ms) | "
                    f"{track:.1f} ms | {m.get('fps_system') or 0:.1f} |")
        print(rows[-1], flush=True)
    print("\n| stride | input rate | frames | ATE | ATE (ok frames) | failures flagged | silent failures | "
          "re-initialised (mean cost) | tracking per frame | system FPS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
