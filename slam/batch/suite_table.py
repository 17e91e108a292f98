"""The benchmark suite's table (``slam_suite``): the runs of each sequence (its repeats) reduced to
their median and spread, with a header line saying what ran where, written as ``suite.md`` and
``suite.csv`` under the output root.

Input: the per-run rows of ``slam.batch.results.build_rows`` (metrics read from each run's
``metrics.json`` by ``results.METRICS``). Only finished runs (status done / cached) enter the
medians; failed ones are listed with their error. A value no run has is ``n/a``.
"""
from __future__ import annotations

import csv
import datetime as _dt
import io
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from slam.batch.speed_probe import describe
from slam.batch.storage import RunStorage

OK = ("done", "cached")
# The statistics kept per sequence: slam.batch.results.METRICS columns (the rows' keys), plus
# flagged_pct (flagged frames in % of the run's frames, derived per run).
STATS = ["ate_cm", "ate_tracked_cm", "ate_ok_cm", "tracking_failures", "flagged_pct", "silent_failures", "fps",
         "fps_tracking", "gpu_ms_per_frame", "peak_gpu_mb", "peak_rss_mb", "detector_false_alarms",
         "detector_misses", "frames", "revisit_mm", "revisit_tracked_mm", "revisit_gt_mm", "psnr_db",
         "psnr_valid_depth_db"]
CODE_PATHS = ("slam", "rasterizer", "configs")   # what a run's result depends on, for the header's 'uncommitted'
NOTE = ("Values: median over the finished runs of each sequence, [min-max] where they differ; ATE: RMSE in cm "
        "(all frames; the poses as tracked, before refinement and loop corrections; the frames reported ok); "
        "n/a: no run has it in its metrics.json (no ground truth, a CPU run, GPU ms needs "
        "system.profile_frames > 0 on CUDA, ...); revisit depth: keyframes of a place seen again >= 3 s "
        "later, the earlier one's depth moved into the later one at the final poses, as tracked and at the "
        "ground truth's, median |difference| (metrics.json revisit_depth_consistency: no ground truth needed); "
        "keyframe PSNR: the final map rendered at the keyframes, over every pixel and over those with valid "
        "depth (metrics.json images).")


def _number(v: Any) -> Optional[float]:
    """A finite int/float as float; anything else (None, NaN, bool, text) as None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def spread(values: list) -> Optional[tuple]:
    """(median, min, max) of the numbers among ``values`` (None / NaN / non-numbers left out), or
    None when there are none."""
    nums = [x for x in (_number(v) for v in values) if x is not None]
    return (statistics.median(nums), min(nums), max(nums)) if nums else None


def _flagged_pct(row: dict) -> Optional[float]:
    flagged, frames = _number(row.get("tracking_failures")), _number(row.get("frames"))
    return 100.0 * flagged / frames if flagged is not None and frames else None


def summarise(jobs: list, rows: list[dict]) -> list[dict]:
    """One summary per sequence (jobs sharing ``Job.base_label``, in job order) from the per-run
    rows (same order as ``jobs``): sequence, config, overrides, runs (finished), repeats (all),
    failed [{job, status, error, folder}], folders, stats {STATS column: (median, min, max) | None}."""
    groups: dict = {}
    for job, row in zip(jobs, rows):
        g = groups.setdefault(job.base_label, {"sequence": job.base_label, "config": job.config,
                                               "overrides": list(job.overrides), "rows": [], "failed": [],
                                               "folders": []})
        g["folders"].append(row["folder"])
        if row["status"] in OK:
            g["rows"].append({**row, "flagged_pct": _flagged_pct(row)})
        else:
            g["failed"].append({"job": row["job"], "status": row["status"], "error": row.get("error") or "",
                                "folder": row["folder"]})
    out = []
    for g in groups.values():
        ok = g.pop("rows")
        g["runs"], g["repeats"] = len(ok), len(ok) + len(g["failed"])
        g["stats"] = {c: spread([r.get(c) for r in ok]) for c in STATS}
        out.append(g)
    return out


def _stat_cell(stat: Optional[tuple], fmt: str, show_spread: bool) -> str:
    """``median`` or ``median [min-max]`` (when shown and the runs differ at this precision); n/a."""
    if stat is None:
        return "n/a"
    med, lo, hi = stat
    text, low, high = fmt.format(med), fmt.format(lo), fmt.format(hi)
    if show_spread and low != high:
        text += f" [{low}-{high}]"
    return text


def _stat(column: str, fmt: str, show_spread: bool) -> Callable[[dict], str]:
    return lambda s: _stat_cell(s["stats"][column], fmt, show_spread)


def _runs_cell(s: dict) -> str:
    if not s["failed"]:
        return str(s["runs"])
    if s["runs"]:
        return f"{s['runs']} ({len(s['failed'])} failed)"
    first = s["failed"][0]
    error = first["error"] if len(first["error"]) <= 80 else first["error"][:77] + "..."
    return f"{first['status']} ({len(s['failed'])}): {error}"


def _flagged_cell(s: dict) -> str:
    count, pct = s["stats"]["tracking_failures"], s["stats"]["flagged_pct"]
    if count is None:
        return "n/a"
    return _stat_cell(count, "{:g}", True) + (f" ({pct[0]:.1f} %)" if pct is not None else "")


def _joined(columns: tuple, fmt: str, show_spread: bool) -> Callable[[dict], str]:
    """A cell of several statistics joined by ' / ' (each ``_stat_cell``); n/a when none has a value."""
    def cell(s: dict) -> str:
        stats = [s["stats"][c] for c in columns]
        if all(x is None for x in stats):
            return "n/a"
        return " / ".join(_stat_cell(x, fmt, show_spread) for x in stats)
    return cell


# (header, cell of a summary): the table's columns, in order
COLUMNS = [
    ("sequence", lambda s: s["sequence"]),
    ("runs", _runs_cell),
    ("ATE cm (all frames)", _stat("ate_cm", "{:.2f}", True)),
    ("ATE as tracked", _stat("ate_tracked_cm", "{:.2f}", True)),
    ("ATE over ok frames", _stat("ate_ok_cm", "{:.2f}", True)),
    ("flagged frames (% of frames)", _flagged_cell),
    ("silent failures", _stat("silent_failures", "{:g}", True)),
    ("FPS system", _stat("fps", "{:.1f}", True)),
    ("FPS tracking", _stat("fps_tracking", "{:.1f}", True)),
    ("GPU ms / tracked frame", _stat("gpu_ms_per_frame", "{:.2f}", True)),
    ("peak GPU MB", _stat("peak_gpu_mb", "{:.0f}", False)),
    ("peak RSS MB", _stat("peak_rss_mb", "{:.0f}", False)),
    ("detector false alarms / misses", _joined(("detector_false_alarms", "detector_misses"), "{:g}", True)),
    ("keyframe PSNR dB: all / valid depth", _joined(("psnr_db", "psnr_valid_depth_db"), "{:.2f}", True)),
    ("revisit depth mm: final / as tracked / ground truth",
     _joined(("revisit_mm", "revisit_tracked_mm", "revisit_gt_mm"), "{:.1f}", False)),
]


# (row key, header, "diff" or "ratio", format): the figures a grid's values are compared by, run by run
PAIRED = [("ate_cm", "ATE cm", "diff", "{:+.2f}"), ("fps", "FPS system", "ratio", "{:.2f}"),
          ("fps_tracking", "FPS tracking", "ratio", "{:.2f}"),
          ("gpu_ms_per_frame", "GPU ms / tracked frame", "ratio", "{:.2f}"),
          ("peak_gpu_mb", "peak GPU MB", "ratio", "{:.2f}"),
          ("psnr_valid_depth_db", "keyframe PSNR valid depth dB", "diff", "{:+.2f}")]
PAIRED_NOTE = ("Paired by repeat (`--grid`): each grid value against the grid's first value of the same sequence in the "
               "same repeat (run next to it, so both met the machine in the same state): the difference (ATE, PSNR) or "
               "the ratio (speeds, memory), median [min-max] over the repeats both finished.")


def paired(jobs: list, rows: list[dict]) -> list[dict]:
    """Each grid value of a sequence (jobs sharing ``Job.entry``) against that sequence's first grid
    value, repeat by repeat (rows in job order, as ``summarise``): [{sequence, value, first, pairs,
    stats {PAIRED key: (median, min, max) | None}}]; empty without a grid of two or more values."""
    runs: dict = {}                                # entry -> grid value -> repeat -> row
    for job, row in zip(jobs, rows):
        if not job.grid:
            continue
        finished = runs.setdefault(job.entry, {}).setdefault(job.grid, {})
        if row["status"] in OK:
            finished[job.repeat] = row
    out = []
    for entry, values in runs.items():
        first, *others = list(values)
        for value in others:
            both = [(values[first][r], values[value][r]) for r in values[value] if r in values[first]]
            stats = {}
            for key, _, kind, _ in PAIRED:
                got = [(_number(a.get(key)), _number(b.get(key))) for a, b in both]
                if kind == "diff":
                    stats[key] = spread([b - a for a, b in got if a is not None and b is not None])
                else:
                    stats[key] = spread([b / a for a, b in got if a and b is not None])
            out.append({"sequence": entry, "value": value, "first": first, "pairs": len(both), "stats": stats})
    return out


def paired_table(pairs: list[dict]) -> str:
    """``paired``'s comparisons as markdown, one row per grid value after the first."""
    lines = ["| sequence | value vs first | pairs | " + " | ".join(f"{h} ({k})" for _, h, k, _ in PAIRED) + " |",
             "|" + "---|" * (3 + len(PAIRED))]
    for p in pairs:
        cells = []
        for key, _, kind, fmt in PAIRED:
            cell = _stat_cell(p["stats"][key], fmt, True)
            cells.append(cell.replace("-0.00", "+0.00") if kind == "diff" else cell)   # a difference rounding to 0
        lines.append(f"| {p['sequence']} | {p['value']} vs {p['first']} | {p['pairs']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def markdown_table(summary: list[dict]) -> str:
    """The table as markdown, one row per sequence (``COLUMNS``)."""
    lines = ["| " + " | ".join(h for h, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for s in summary:
        lines.append("| " + " | ".join(cell(s).replace("|", "/") for _, cell in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def document(summary: list[dict], header: str, notes: list[str], pairs: Optional[list[dict]] = None) -> str:
    """suite.md: the header line, the table, what the values are, a grid's paired comparisons
    (``paired``), failed runs, notes (skipped ...)."""
    parts = [header, "", markdown_table(summary), NOTE]
    if pairs:
        parts += ["", paired_table(pairs), PAIRED_NOTE]
    failed = [f for s in summary for f in s["failed"]]
    if failed:
        parts += ["", "Failed runs (not in the medians):"]
        parts += [f"- {f['job']}: {f['status']}: {f['error'] or 'no error message'} (runs/{f['folder']})"
                  for f in failed]
    if notes:
        parts += ["", "Notes:"] + [f"- {n}" for n in notes]
    return "\n".join(parts) + "\n"


def to_csv(summary: list[dict]) -> str:
    """suite.csv: one row per sequence: its runs, each statistic's median, min and max (empty: n/a),
    the failed runs' errors and the run folders."""
    fields = ["sequence", "config", "overrides", "runs", "repeats", "failed"]
    fields += [f"{c}_{k}" for c in STATS for k in ("median", "min", "max")] + ["errors", "folders"]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for s in summary:
        row = {"sequence": s["sequence"], "config": s["config"], "overrides": " ".join(s["overrides"]),
               "runs": s["runs"], "repeats": s["repeats"], "failed": len(s["failed"]),
               "errors": " | ".join(f"{f['job']}: {f['error']}" for f in s["failed"]),
               "folders": " ".join(s["folders"])}
        for c in STATS:
            for k, v in zip(("median", "min", "max"), s["stats"][c] or (None, None, None)):
                row[f"{c}_{k}"] = "" if v is None else v
        writer.writerow(row)
    return buf.getvalue()


def write_suite(summary: list[dict], storage: RunStorage, header: str, notes: list[str],
                pairs: Optional[list[dict]] = None) -> tuple[str, dict]:
    """Write ``suite.md`` and ``suite.csv`` under the output root; returns (markdown text, {what: path})."""
    text = document(summary, header, notes, pairs)
    written = {"markdown": storage.write_bytes("suite.md", text.encode()),
               "csv": storage.write_bytes("suite.csv", to_csv(summary).encode())}
    return text, written


# --------------------------------------------------------------------------- the header line
def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu_name() -> str:
    try:
        import torch  # heavy: only when a header is written
    except Exception as exc:  # noqa: BLE001
        return f"unknown (torch: {type(exc).__name__})"
    if not torch.cuda.is_available():
        return f"none (torch {torch.__version__}, no CUDA device)"
    n = torch.cuda.device_count()
    return torch.cuda.get_device_name(0) + (f" (x{n})" if n > 1 else "")


def _git(root: Path, *args: str) -> Optional[str]:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code_version(cwd: Optional[str] = None) -> str:
    """The code the runs use: the ``slam`` package that ``python -m slam.cli`` imports from ``cwd``
    (a source checkout there wins over the installed package); its git commit and whether slam/,
    rasterizer/ or configs/ have uncommitted changes, or 'not a git checkout'."""
    probe = "import importlib.util as u; print(u.find_spec('slam').origin)"
    try:
        out = subprocess.run([sys.executable, "-c", probe], cwd=cwd or os.getcwd(), capture_output=True,
                             text=True, timeout=60)
        root = Path(out.stdout.strip()).resolve().parents[1]
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return "unknown (cannot locate the slam package)"
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root:
        return f"{root}/slam (not a git checkout)"
    commit = _git(root, "rev-parse", "--short=12", "HEAD") or "no commit"
    changed = (_git(root, "status", "--porcelain", "--", *CODE_PATHS) or "").splitlines()
    dirty = f" + uncommitted changes in {len(changed)} files under {', '.join(CODE_PATHS)}" if changed else ""
    return f"git {commit}{dirty} ({root})"


def header_line(command: str, cwd: Optional[str] = None, speed: Optional[dict] = None) -> str:
    """One line: the command, the machine (host, CPU, GPU), the date and the code's git commit;
    with ``speed`` (``slam.batch.speed_probe.probe``'s figures) the machine's speed too."""
    date = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    machine = f"{socket.gethostname()}, CPU {_cpu_name()} ({os.cpu_count()} threads), GPU {_gpu_name()}"
    line = f"`{command}` | machine: {machine} | {date} | code: {code_version(cwd)}"
    return line if speed is None else f"{line} | speed: {describe(speed)}"
