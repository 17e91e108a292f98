#!/usr/bin/env python3
"""Pruner ablation in one script run: the same sequence with the pruner on, off, and on with a
hard budget of half the unpruned sphere count. Each run is its own ``run_slam`` process (clean
peak-memory figures); the table compares them as ratios.

    python scripts/pruner_ablation.py --config 7scenes.yaml --out runs/ablation
    python scripts/pruner_ablation.py --set data.last=60        # bundled sample, short

Prints a markdown table and writes ``ablation.json`` in the output folder.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def run(name: str, config: str, overrides: list[str], out: Path) -> dict:
    """One run_slam process; returns its metrics.json."""
    run_dir = out / name
    cmd = [sys.executable, "-m", "slam.cli", "--config", config, "--out", str(run_dir), "--quiet"]
    for o in overrides:
        cmd += ["--set", o]
    print(f"[ablation] {name}: {' '.join(cmd[3:])}", flush=True)
    proc = subprocess.run(cmd, text=True, capture_output=True)
    print(proc.stdout.strip(), flush=True)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"[ablation] run '{name}' failed with exit code {proc.returncode}")
    return json.loads((run_dir / "metrics.json").read_text())


def row(name: str, m: dict) -> dict:
    traj = m.get("trajectory") or {}
    img = m.get("images") or {}
    peak_mem = m.get("peak_gpu_mb") if m.get("peak_gpu_mb") is not None else m.get("peak_rss_mb")
    return {
        "run": name,
        "spheres_final": m["spheres"],
        "spheres_peak": m["max_spheres_seen"],
        "budget": m["sphere_budget"],
        "peak_mem_mb": peak_mem,
        "mem_kind": "GPU max_memory_allocated" if m.get("peak_gpu_mb") is not None else "process peak RSS",
        "ate_cm": traj.get("ate_rmse_m", float("nan")) * 100,
        "psnr_db": img.get("psnr", float("nan")),
        "fps": m.get("fps_system"),
        "failures": m.get("tracking_failures"),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="default.yaml")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--out", default="runs/ablation")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    on = run("pruner_on", args.config, args.overrides + ["pruner.enabled=true"], out)
    off = run("pruner_off", args.config, args.overrides + ["pruner.enabled=false"], out)
    half = max(1, off["max_spheres_seen"] // 2)
    budget = run("budget_half", args.config, args.overrides + ["pruner.enabled=true", f"map.max_spheres={half}"], out)
    rows = [row("pruner on", on), row("pruner off", off), row(f"on, budget {half}", budget)]

    print("\n| run | spheres (final / peak) | peak memory MB | ATE cm | PSNR dB | FPS | failures |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['run']} | {r['spheres_final']} / {r['spheres_peak']} | {r['peak_mem_mb']:.0f} | "
              f"{r['ate_cm']:.2f} | {r['psnr_db']:.2f} | {r['fps'] or float('nan'):.2f} | {r['failures']} |")
    a, b = rows[0], rows[1]
    ratios = {
        "sphere_peak_reduction": 1 - a["spheres_peak"] / max(b["spheres_peak"], 1),
        "peak_memory_reduction": 1 - a["peak_mem_mb"] / max(b["peak_mem_mb"], 1e-9),
        "ate_change": a["ate_cm"] / max(b["ate_cm"], 1e-9) - 1,
        "psnr_change_db": a["psnr_db"] - b["psnr_db"],
        "budget_held": rows[2]["spheres_peak"] <= half,
    }
    print(f"\npruner on vs off: spheres {-100 * ratios['sphere_peak_reduction']:+.0f} %, peak memory "
          f"{-100 * ratios['peak_memory_reduction']:+.0f} % ({a['mem_kind']}), ATE {100 * ratios['ate_change']:+.0f} %, "
          f"PSNR {ratios['psnr_change_db']:+.2f} dB; budget {half} held at every moment: {ratios['budget_held']}")
    (out / "ablation.json").write_text(json.dumps({"rows": rows, "ratios": ratios}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
