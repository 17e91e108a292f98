"""What the loop and grid threads cost the whole system: the same run with both, without the grid,
without the loop stage and without either, interleaved (run 1 of every setting, then run 2, ...:
a machine's drift hits all settings alike), one ``run_slam`` process each; prints the system frame
rate (median [min-max]) against the run without either, what each thread took, and the peak
process RSS and GPU memory (allocated by torch) of each setting; then each thread's cost with the
other thread on and off, paired by round.

    python -m slam.tools.thread_cost --config 7scenes.yaml --set data.path=/data/7s --runs 4

Figures: docs/benchmarks.md#the-other-threads-cost (issue 32 asks the loop thread <= 10 % of the
frame rate and <= 10 % more peak GPU memory, issue 35 the grid <= 5 % and <= 50 MB).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

SETTINGS = {
    "default": [],
    "grid off": ["grid.enabled=false"],
    "loop off": ["loop.enabled=false"],
    "both off": ["grid.enabled=false", "loop.enabled=false"],
}


def run_once(config: str, overrides: list, out: Path) -> dict:
    """One ``run_slam`` process; its metrics.json."""
    cmd = [sys.executable, "-m", "slam.cli", "--config", config, "--out", str(out), "--quiet",
           "--set", "output.plots=false"]
    for o in overrides:
        cmd += ["--set", o]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"thread_cost: {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads((out / "metrics.json").read_text())


def _spread(values: list, fmt: str = "{:.1f}") -> str:
    med = statistics.median(values)
    if len(values) == 1 or min(values) == max(values):
        return fmt.format(med)
    return f"{fmt.format(med)} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def table(results: dict) -> str:
    """results: setting -> list of metrics dicts (run i of every setting made together). A markdown
    table; "vs both off" is the median of run i's FPS over run i's without either thread (paired:
    a machine's drift between rounds cancels), with its range."""
    base = [m["fps_system"] for m in results.get("both off", [])]
    rows = ["| setting | system FPS | vs both off (paired) | tracker ms/frame | mapper ms/keyframe "
            "| loop ms/keyframe (wall) | grid ms/keyframe (CPU) | peak RSS MB | peak GPU MB | ATE cm |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for name, runs in results.items():
        fps = [m["fps_system"] for m in runs]
        rel = "-"
        if base:
            change = [100.0 * (f / b - 1.0) for f, b in zip(fps, base)]
            rel = _spread(change, "{:+.0f}") + " %"
        loop = [m["stage_ms"].get("loop_per_keyframe") or 0.0 for m in runs]
        grid = [(m.get("grid") or {}).get("cpu_ms_per_keyframe_mean") or 0.0 for m in runs]
        ate = [100.0 * m["trajectory"]["ate_rmse_m"] for m in runs if m.get("trajectory")]
        rss = [m["peak_rss_mb"] for m in runs if m.get("peak_rss_mb") is not None]
        gpu = [m["peak_gpu_mb"] for m in runs if m.get("peak_gpu_mb") is not None]
        rows.append(f"| {name} | {_spread(fps)} | {rel} | {_spread([m['stage_ms']['tracking_mean'] for m in runs], '{:.2f}')} "
                    f"| {_spread([m['stage_ms']['mapping_mean'] for m in runs])} "
                    f"| {_spread(loop) if any(loop) else '-'} | {_spread(grid) if any(grid) else '-'} "
                    f"| {_spread(rss, '{:.0f}') if rss else '-'} | {_spread(gpu, '{:.0f}') if gpu else '-'} "
                    f"| {_spread(ate, '{:.2f}') if ate else '-'} |")
    return "\n".join(rows)


# Each thread's cost with the other one on and off: (what, setting with it, setting without it).
COSTS = (("loop stage, grid on", "default", "loop off"), ("loop stage, grid off", "grid off", "both off"),
         ("grid, loop stage on", "default", "grid off"), ("grid, loop stage off", "loop off", "both off"))


def costs(results: dict) -> str:
    """Each thread's cost in system FPS, paired by round: 100 (1 - fps_with / fps_without) per
    round, median and range (a negative cost: faster with it); only pairs whose settings ran."""
    lines = []
    for what, on, off in COSTS:
        if results.get(on) and results.get(off):
            cost = [100.0 * (1.0 - a["fps_system"] / b["fps_system"]) for a, b in zip(results[on], results[off])]
            lines.append(f"- {what}: {statistics.median(cost):.1f} % of the system frame rate "
                         f"(rounds {min(cost):.1f} to {max(cost):.1f})")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Runs the settings, prints the table; 0 when every run finished."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="7scenes.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="for every run")
    ap.add_argument("--runs", type=int, default=4, help="runs of each setting")
    ap.add_argument("--out", default="thread_cost", help="folder for the runs and table.md (rewritten every round)")
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"of: {', '.join(SETTINGS)}")
    args = ap.parse_args(argv)
    chosen = [s.strip() for s in args.settings.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SETTINGS]
    if unknown:
        ap.error(f"unknown setting(s) {unknown}; known: {', '.join(SETTINGS)}")
    out = Path(args.out)
    results: dict = {s: [] for s in chosen}
    for i in range(1, args.runs + 1):
        for s in chosen:
            m = run_once(args.config, args.set + SETTINGS[s], out / f"{s.replace(' ', '_')}_{i}")
            results[s].append(m)
            print(f"run {i} {s}: {m['fps_system']:.1f} FPS", flush=True)
        # after every round, so a run stopped early still leaves the rounds it finished
        (out / "table.md").write_text(f"{i} of {args.runs} rounds\n\n{table(results)}\n\n{costs(results)}\n")
    print(f"\n`python -m slam.tools.thread_cost --config {args.config} "
          + " ".join(f"--set {o}" for o in args.set) + f" --runs {args.runs}`\n")
    print(table(results))
    print()
    print(costs(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
