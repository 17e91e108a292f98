"""The batch table: one row per job read from its run folder's ``metrics.json`` (ATE, RPE, PSNR,
FPS, peak memory, spheres, silent failures, ...), written as ``batch.csv`` and ``batch.md`` under the
batch's output root, plus one bar chart per metric across the jobs in ``plots/<metric>.png``.
"""
from __future__ import annotations

import csv
import io
import math
from typing import Any, Callable, Optional

from slam.batch.jobs import Job
from slam.batch.storage import JOB_FILE, RunStorage


def _get(*path: str, scale: float = 1.0) -> Callable[[dict], Optional[float]]:
    def read(m: dict) -> Optional[float]:
        v: Any = m
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
        if v is None:
            return None
        return v * scale if scale != 1.0 else v  # ints (counts) stay ints
    return read


# (column, markdown header, reader of metrics.json, format); None where a run has no such value
METRICS = [
    ("ate_cm", "ATE cm", _get("trajectory", "ate_rmse_m", scale=100), "{:.2f}"),
    # the poses as tracked (before refinement and loop corrections), and over frames reported ok only
    ("ate_tracked_cm", "ATE as tracked cm", _get("trajectory_tracked", "ate_rmse_m", scale=100), "{:.2f}"),
    ("ate_ok_cm", "ATE ok frames cm", _get("trajectory_ok", "ate_rmse_m", scale=100), "{:.2f}"),
    ("rpe_trans_cm", "RPE cm", _get("trajectory", "rpe_trans_rmse_m", scale=100), "{:.2f}"),
    ("rpe_rot_deg", "RPE deg", _get("trajectory", "rpe_rot_rmse_deg"), "{:.3f}"),
    ("psnr_db", "PSNR dB", _get("images", "psnr"), "{:.2f}"),
    # over the keyframe pixels with valid depth only (where the map is seeded and optimised)
    ("psnr_valid_depth_db", "PSNR valid depth dB", _get("images", "psnr_valid_depth"), "{:.2f}"),
    ("fps", "FPS", _get("fps_system"), "{:.2f}"),
    ("fps_tracking", "FPS tracking", _get("fps_tracking"), "{:.2f}"),
    # only with system.profile_frames > 0 on CUDA
    ("gpu_ms_per_frame", "GPU ms / tracked frame", _get("per_tracked_frame", "gpu_ms"), "{:.2f}"),
    ("peak_gpu_mb", "peak GPU MB", _get("peak_gpu_mb"), "{:.0f}"),
    ("peak_rss_mb", "peak RSS MB", _get("peak_rss_mb"), "{:.0f}"),
    ("spheres", "spheres", _get("spheres"), "{:.0f}"),
    ("spheres_peak", "spheres peak", _get("max_spheres_seen"), "{:.0f}"),
    ("silent_failures", "silent failures", _get("silent_failures", "count"), "{:.0f}"),
    ("tracking_failures", "failures flagged", _get("tracking_failures"), "{:.0f}"),
    ("frames", "frames", _get("frames"), "{:.0f}"),
    ("detector_false_alarms", "detector false alarms", _get("quality_detector", "false_alarms"), "{:.0f}"),
    ("detector_misses", "detector misses", _get("quality_detector", "misses"), "{:.0f}"),
    # places seen again: depth agreement of keyframe pairs >= 3 s apart (no ground truth needed)
    ("revisit_mm", "revisit depth mm", _get("revisit_depth_consistency", "final_mm"), "{:.1f}"),
    ("revisit_tracked_mm", "revisit depth as tracked mm", _get("revisit_depth_consistency", "as_tracked_mm"),
     "{:.1f}"),
    ("revisit_gt_mm", "revisit depth ground truth mm", _get("revisit_depth_consistency", "ground_truth_mm"),
     "{:.1f}"),
]
PLOTTED = ["ate_cm", "rpe_trans_cm", "psnr_db", "fps", "peak_gpu_mb", "peak_rss_mb", "spheres", "silent_failures"]
MARKDOWN = ["ate_cm", "rpe_trans_cm", "rpe_rot_deg", "psnr_db", "fps", "peak_gpu_mb", "peak_rss_mb", "spheres",
            "silent_failures"]


def build_rows(jobs: list[Job], outcomes: dict, storage: RunStorage) -> list[dict]:
    """One row per job, in job order: label, folder, status, the job's parameters, the metrics
    (None where a run has none, e.g. ATE without ground truth or any metric of a failed job),
    wall time and error."""
    rows = []
    for job in jobs:
        res = outcomes.get(job.folder) or {"status": "not run"}
        m = storage.finished_metrics(job.folder) if res["status"] in ("done", "cached") else None
        record = storage.read_json(job.folder, JOB_FILE) or {}
        row: dict = {"job": job.label, "folder": job.folder, "status": res["status"], **job.params}
        if job.repeat:
            row["repeat"] = job.repeat
        for col, _, read, _ in METRICS:
            row[col] = read(m) if m else None
        row["wall_s"] = res.get("wall_s", record.get("wall_s"))
        row["attempt"] = res.get("attempt", record.get("attempt"))
        row["error"] = res.get("error", "")
        rows.append(row)
    return rows


def _fmt(v: Any, fmt: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return fmt.format(v)


def markdown(rows: list[dict]) -> str:
    """The table as markdown: job, status, the main metrics, wall time (failed jobs show their error)."""
    cols = [(c, h, f) for c, h, _, f in METRICS if c in MARKDOWN]
    head = "| job | status | " + " | ".join(h for _, h, _ in cols) + " | wall s |"
    lines = [head, "|" + "---|" * (len(cols) + 3)]
    for r in rows:
        status = r["status"] if r["status"] != "failed" else f"failed: {r['error']}".replace("|", "/")
        lines.append(f"| {r['job']} | {status} | " + " | ".join(_fmt(r[c], f) for c, _, f in cols)
                     + f" | {_fmt(r['wall_s'], '{:.1f}')} |")
    return "\n".join(lines) + "\n"


def to_csv(rows: list[dict]) -> str:
    """The table as CSV, every column (parameters of all jobs; empty where a job has none)."""
    fields: list = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, restval="", lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return buf.getvalue()


def plot_png(rows: list[dict], column: str) -> Optional[bytes]:
    """A horizontal bar chart of one metric across the jobs (PNG bytes), or None when no job has it."""
    header = next(h for c, h, _, _ in METRICS if c == column)
    vals = [r[column] for r in rows]
    if all(v is None for v in vals):
        return None
    # matplotlib: heavy import, only when plots are written
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 1.2 + 0.35 * len(rows)), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ys = list(range(len(rows)))[::-1]
    ax.barh(ys, [0.0 if v is None else v for v in vals], color=["tab:blue" if v is not None else "none" for v in vals])
    for y, v, r in zip(ys, vals, rows):
        if v is None:
            ax.text(0, y, f"  {r['status'] if r['status'] == 'failed' else 'n/a'}", va="center", fontsize=8, color="tab:red")
    ax.set_yticks(ys)
    ax.set_yticklabels([r["job"] for r in rows], fontsize=8)
    ax.set_xlabel(header)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"{header} per job", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def write_results(rows: list[dict], storage: RunStorage, plots: bool = True) -> dict:
    """Write ``batch.csv``, ``batch.md`` and ``plots/<metric>.png``; returns {what: display path}."""
    written = {"csv": storage.write_bytes("batch.csv", to_csv(rows).encode()),
               "markdown": storage.write_bytes("batch.md", markdown(rows).encode())}
    if plots:
        for col in PLOTTED:
            png = plot_png(rows, col)
            if png is not None:
                written[f"plot {col}"] = storage.write_bytes(f"plots/{col}.png", png)
    return written
