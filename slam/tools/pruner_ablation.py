"""Pruner ablation as one slam_batch: the same sequence with the pruner on and off, then on with a
hard budget of half the unpruned peak sphere count. The budget is known once the 'off' run has
finished, so the batch runs twice: first the on/off jobs, then the same jobs plus the budget job
(the first two are finished run folders by then, so only the budget job runs). Each job is its own
``run_slam`` process (clean peak-memory figures); the comparison below is computed from the batch
table (``OUT/batch.csv``, ``OUT/batch.md``).

    python -m slam.tools.pruner_ablation --config 7scenes.yaml --out runs/ablation
    python -m slam.tools.pruner_ablation --set data.last=60 --local        # bundled sample, short, no Ray

Prints a markdown table and the on-vs-off comparison, and writes ``ablation.json`` in OUT (a local
folder). Run it again to resume: finished runs are kept.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from slam.batch import BatchSpec, BatchSpecError, RayMissing, RunOptions, expand, run_batch

ON = {"name": "pruner on", "set": ["pruner.enabled=true"]}
OFF = {"name": "pruner off", "set": ["pruner.enabled=false"]}


def comparison_row(row: dict) -> dict:
    """One ablation row from a batch-table row (``slam.batch.results.build_rows``)."""
    gpu = row["peak_gpu_mb"] is not None
    nan = float("nan")
    return {"run": row["job"], "spheres_final": row["spheres"], "spheres_peak": row["spheres_peak"],
            "peak_mem_mb": row["peak_gpu_mb"] if gpu else row["peak_rss_mb"],
            "mem_kind": "GPU max_memory_allocated" if gpu else "process peak RSS",
            "ate_cm": nan if row["ate_cm"] is None else row["ate_cm"],
            "psnr_db": nan if row["psnr_db"] is None else row["psnr_db"],
            "fps": row["fps"], "failures": row["tracking_failures"], "folder": row["folder"]}


def main(argv=None) -> int:
    """Runs the ablation batch and prints the comparison; 0 when done (SystemExit on a failed job)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="default.yaml")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--out", default="runs/ablation")
    p.add_argument("--local", action="store_true", help="no Ray: the runs one after another (slam_batch --local)")
    p.add_argument("--address", default=None, help="an existing Ray cluster (slam_batch --address)")
    p.add_argument("--gpus-per-job", type=float, default=None)
    p.add_argument("--cpus-per-job", type=float, default=2.0)
    args = p.parse_args(argv)
    opts = RunOptions(local=args.local, address=args.address, gpus_per_job=args.gpus_per_job,
                      cpus_per_job=args.cpus_per_job)
    spec = BatchSpec(config=args.config, overrides=list(args.overrides), jobs=[ON, OFF])
    try:
        first = run_batch(expand(spec), args.out, opts, plots=False)
        if first.failed:
            raise SystemExit(f"[ablation] failed: {first.failed[0]['job']}: {first.failed[0]['error']}")
        half = max(1, int(first.rows[1]["spheres_peak"]) // 2)
        spec.jobs = [ON, OFF, {"name": f"on, budget {half}", "set": ["pruner.enabled=true", f"map.max_spheres={half}"]}]
        batch = run_batch(expand(spec), args.out, opts)
    except (BatchSpecError, RayMissing) as exc:
        raise SystemExit(f"[ablation] {exc}") from None
    print(batch.markdown())
    if batch.failed:
        raise SystemExit(f"[ablation] failed: {batch.failed[0]['job']}: {batch.failed[0]['error']}")
    rows = [comparison_row(r) for r in batch.rows]

    print("\n| run | spheres (final / peak) | peak memory MB | ATE cm | PSNR dB | FPS | failures |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['run']} | {r['spheres_final']} / {r['spheres_peak']} | {r['peak_mem_mb']:.0f} | "
              f"{r['ate_cm']:.2f} | {r['psnr_db']:.2f} | {r['fps'] or math.nan:.2f} | {r['failures']} |")
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
    print(f"batch table: {batch.written['markdown']}")
    out = Path(args.out)
    if out.is_dir():
        (out / "ablation.json").write_text(json.dumps({"rows": rows, "ratios": ratios}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
