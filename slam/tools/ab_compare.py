"""Two builds measured side by side on one machine: A (the base) against B (the change), from the
JSON files that ``slam_profile --json`` (the tracker alone), ``slam_bench_gauss_newton --json`` (the
fused pass on random spheres) and ``run_slam`` (metrics.json: whole runs) write, several runs a
side, taken in turns (A, B, A, B, ...) so that a machine's drift falls on both.
``scripts/gpu_ab.sh`` makes the runs and calls this.

    python -m slam.tools.ab_compare --a a1.json a2.json --b b1.json b2.json \\
        [--bench-a ga1.json ga2.json --bench-b gb1.json gb2.json] \\
        [--runs-a runA1/metrics.json --runs-b runB1/metrics.json] [--kernels 12]

Prints markdown tables: per tracked frame (wall, host and GPU ms, renders, GPU operations) and per
GPU kernel (us a frame and a run, the profiler's names shortened), the benchmark's rows, and whole
runs (ATE, FPS, GPU ms a tracked frame, the threads' times and waits, memory); each figure the
median of its side's runs, [min-max] where they differ, and B / A. A kernel one side lacks shows
"-" there. Figures are the runs' own: a change moves them only beyond their spread.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path
from typing import Optional, Sequence

# Per tracked frame, in the order printed: (key in the profile's "tracking", label).
FRAME_FIGURES = (("wall_ms", "wall ms"), ("host_ms", "host ms"), ("gpu_ms", "GPU ms"),
                 ("renders", "renders"), ("launches", "GPU operations"))


def short_kernel_name(name: str) -> str:
    """The profiler's GPU operation name without its return type, namespaces and arguments:
    'void (anonymous namespace)::gn_tile_kernel<true, 4>(sr::Camera, ...)' -> 'gn_tile_kernel<true, 4>'."""
    s = re.sub(r"^void ", "", name.strip())
    s = s.replace("(anonymous namespace)::", "")
    depth, end = 0, len(s)
    for i, ch in enumerate(s):   # the argument list: the first '(' outside a template's '<...>'
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0 and s[i - 1] != " ":   # not 'Memcpy HtoD (...)'
            end = i
            break
    return s[:end].strip() or name


def spread(values: Sequence[float]) -> tuple:
    """(median, min, max) of ``values`` (at least one)."""
    return statistics.median(values), min(values), max(values)


def cell(values: Sequence[float], digits: int) -> str:
    """'median [min-max]' ('median' alone when they agree to ``digits``; '-' for none)."""
    if not values:
        return "-"
    med, lo, hi = spread(values)
    text = f"{med:.{digits}f}"
    return text if f"{lo:.{digits}f}" == f"{hi:.{digits}f}" else f"{text} [{lo:.{digits}f}-{hi:.{digits}f}]"


def ratio(a: Sequence[float], b: Sequence[float]) -> str:
    """B / A of the medians ('-' when either side is missing or A's is 0)."""
    if not a or not b or statistics.median(a) == 0:
        return "-"
    return f"{statistics.median(b) / statistics.median(a):.3f}"


def frame_rows(a: list, b: list) -> list:
    """[label, A cell, B cell, B / A] per FRAME_FIGURES from the profiles' "tracking" dicts."""
    rows = []
    for key, label in FRAME_FIGURES:
        va = [p["tracking"][key] for p in a if key in p.get("tracking", {})]
        vb = [p["tracking"][key] for p in b if key in p.get("tracking", {})]
        rows.append([label, cell(va, 3), cell(vb, 3), ratio(va, vb)])
    return rows


def kernel_figures(profiles: list) -> dict:
    """short name -> ([us a frame per run], [us a run per run]) over the profiles' gpu_by_kernel
    (kernels of one short name summed within a run)."""
    out: dict = {}
    for p in profiles:
        per_run: dict = {}
        for name, (us, runs) in p.get("tracking", {}).get("gpu_by_kernel", {}).items():
            short = short_kernel_name(name)
            u, r = per_run.get(short, (0.0, 0.0))
            per_run[short] = (u + us, r + runs)
        for short, (us, runs) in per_run.items():
            frame, call = out.setdefault(short, ([], []))
            frame.append(us)
            call.append(us / runs if runs else 0.0)
    return out


def kernel_rows(a: list, b: list, top: int) -> list:
    """[kernel, A us/frame, B us/frame, B / A, A us/run, B us/run] of the ``top`` kernels by the
    larger side's median time a frame."""
    fa, fb = kernel_figures(a), kernel_figures(b)

    def weight(name: str) -> float:
        return max(statistics.median(f[name][0]) if name in f else 0.0 for f in (fa, fb))

    names = sorted(set(fa) | set(fb), key=weight, reverse=True)[:top]
    rows = []
    for name in names:
        a_frame, a_call = fa.get(name, ([], []))
        b_frame, b_call = fb.get(name, ([], []))
        rows.append([name, cell(a_frame, 1), cell(b_frame, 1), ratio(a_frame, b_frame),
                     cell(a_call, 2), cell(b_call, 2)])
    return rows


def rss_at_middle_keyframe(metrics: dict) -> Optional[float]:
    """The process's RSS (MB) when the run's middle keyframe was mapped (``memory_over_time_mb``'s
    middle row), before a sequence's loops close at its end (7-Scenes dev: keyframes 67-70 of 72),
    where the peak of two runs that disagree on loops closed is not like for like; None if absent."""
    rows = metrics.get("memory_over_time_mb") or []
    row = rows[(len(rows) - 1) // 2] if rows else []
    return run_value({"rss": row[1]} if len(row) > 1 else {}, ("rss",))


# Whole runs (metrics.json of run_slam), in the order printed: (path of keys or a function of the
# metrics, label, digits, scale).
# Loops closed: a run that closes one holds gtsam and its graph (~65 MiB of peak RSS on an H100,
# docs/benchmarks.md#host-memory), so RSS compares like for like only between runs that agree here.
RUN_FIGURES = ((("trajectory", "ate_rmse_m"), "ATE cm", 2, 100.0), (("fps_system",), "FPS system", 1, 1.0),
               (("fps_tracking",), "FPS tracking", 1, 1.0),
               (("per_tracked_frame", "gpu_ms"), "GPU ms a tracked frame", 3, 1.0),
               (("stage_ms", "tracking_mean"), "tracking ms a frame", 2, 1.0),
               (("stage_ms", "mapping_mean"), "mapping ms a keyframe", 1, 1.0),
               (("tracking_waited_for_map_s",), "tracker's wait for the mapper s", 2, 1.0),
               (("tracking_waited_for_frames_s",), "tracker's wait for frames s", 2, 1.0),
               (("tracking_failures",), "frames flagged", 0, 1.0),
               (("loop_closure", "loops_closed"), "loops closed", 0, 1.0), (("peak_rss_mb",), "peak RSS MB", 0, 1.0),
               (rss_at_middle_keyframe, "RSS MB at the middle keyframe", 0, 1.0), (("peak_gpu_mb",), "peak GPU MB", 0, 1.0))


def run_value(metrics: dict, keys) -> Optional[float]:
    """metrics[keys[0]][keys[1]]... (``keys`` a function: keys(metrics)); None where absent or not a
    number."""
    if callable(keys):
        return keys(metrics)
    v = metrics
    for k in keys:
        v = v.get(k) if isinstance(v, dict) else None
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    return float(v)


def run_rows(a: list, b: list) -> list:
    """[figure, A cell, B cell, B / A] per RUN_FIGURES from metrics.json contents."""
    rows = []
    for keys, label, digits, scale in RUN_FIGURES:
        va = [scale * x for x in (run_value(m, keys) for m in a) if x is not None]
        vb = [scale * x for x in (run_value(m, keys) for m in b) if x is not None]
        if va or vb:
            rows.append([label, cell(va, digits), cell(vb, digits), ratio(va, vb)])
    return rows


def bench_rows(a: list, b: list) -> list:
    """[N, image, call, A GPU ms, B GPU ms, B / A] per benchmark row present on either side."""
    def table(runs: list) -> dict:
        out: dict = {}
        for run in runs:
            for r in run.get("rows", []):
                out.setdefault((r["n"], r["image"], r["call"]), []).append(r["gpu_ms"])
        return out

    ta, tb = table(a), table(b)
    keys = list(dict.fromkeys([*ta, *tb]))
    return [[str(n), image, call, cell(ta.get((n, image, call), []), 3), cell(tb.get((n, image, call), []), 3),
             ratio(ta.get((n, image, call), []), tb.get((n, image, call), []))] for n, image, call in keys]


def markdown(header: Sequence[str], rows: list) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def load(paths: Optional[Sequence[str]]) -> list:
    """The JSON files' contents (a clear error naming a file that is missing or not JSON)."""
    out = []
    for path in paths or []:
        try:
            out.append(json.loads(Path(path).read_text()))
        except FileNotFoundError:
            raise SystemExit(f"ab_compare: {path}: no such file") from None
        except json.JSONDecodeError as exc:
            raise SystemExit(f"ab_compare: {path}: not JSON ({exc})") from None
    return out


def main(argv=None) -> int:
    """Prints the comparison; 0 when done."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", nargs="*", default=[], help="A's slam_profile --json files")
    ap.add_argument("--b", nargs="*", default=[], help="B's slam_profile --json files")
    ap.add_argument("--bench-a", nargs="*", default=[], help="A's slam_bench_gauss_newton --json files")
    ap.add_argument("--bench-b", nargs="*", default=[], help="B's slam_bench_gauss_newton --json files")
    ap.add_argument("--runs-a", nargs="*", default=[], help="A's run_slam metrics.json files")
    ap.add_argument("--runs-b", nargs="*", default=[], help="B's run_slam metrics.json files")
    ap.add_argument("--kernels", type=int, default=12, help="kernels listed (by time a frame)")
    args = ap.parse_args(argv)
    a, b = load(args.a), load(args.b)
    ba, bb = load(args.bench_a), load(args.bench_b)
    ra, rb = load(args.runs_a), load(args.runs_b)
    if not (a or b or ba or bb or ra or rb):
        ap.error("no files: give --a / --b, --bench-a / --bench-b and / or --runs-a / --runs-b")
    if a or b:
        machines = sorted({p.get("machine", "?") for p in a + b})
        print(f"### The tracker alone, per tracked frame (A: {len(a)} runs, B: {len(b)}; {', '.join(machines)})\n")
        print(markdown(["figure", "A", "B", "B / A"], frame_rows(a, b)))
        rows = kernel_rows(a, b, args.kernels)
        print(f"\n### GPU kernels (the {args.kernels} longest)\n")
        print(markdown(["kernel", "A us a frame", "B us a frame", "B / A", "A us a run", "B us a run"], rows)
              if rows else "(none: the profiles have no gpu_by_kernel; slam_profile writes it on CUDA)")
    if ba or bb:
        gpus = sorted({r.get("gpu", "?") for r in ba + bb})
        print(f"\n### slam_bench_gauss_newton, GPU ms a call (A: {len(ba)} runs, B: {len(bb)}; {', '.join(gpus)})\n")
        print(markdown(["N", "image", "call", "A", "B", "B / A"], bench_rows(ba, bb)))
    if ra or rb:
        print(f"\n### Whole runs (A: {len(ra)}, B: {len(rb)})\n")
        print(markdown(["figure", "A", "B", "B / A"], run_rows(ra, rb)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
