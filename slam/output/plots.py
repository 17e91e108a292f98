"""Run-folder plots where ground truth exists: trajectory top view and translation error over time.

The estimate is aligned to the ground truth with the same SE(3) Umeyama alignment (no scale) the
ATE uses, so the plotted error is the ATE's per-frame error. "Top view" drops the axis along
which the ground-truth positions vary least (the vertical for a hand-held or wheeled camera).
Drawn with matplotlib's object API on the Agg canvas: no pyplot, no global backend change.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from slam.eval.failures import silent_failures
from slam.eval.trajectory import umeyama_se3


def trajectory_errors(frames: list) -> dict | None:
    """Aligned positions and per-frame translation errors of the frames with ground truth, or
    None when fewer than 2 frames have it. Keys: t (N,) s from the first, est/gt (N, 3) m,
    err (N,) m, rmse m, index (N,) frame indices, ok (N,) bool reported ok."""
    sel = [f for f in frames if f.gt_pose is not None and np.all(np.isfinite(f.gt_pose)) and np.all(np.isfinite(f.T_wc))]
    if len(sel) < 2:
        return None
    est = np.stack([np.asarray(f.T_wc, dtype=np.float64)[:3, 3] for f in sel])
    gt = np.stack([np.asarray(f.gt_pose, dtype=np.float64)[:3, 3] for f in sel])
    T = umeyama_se3(est, gt) if len(sel) >= 3 else np.eye(4)
    est_a = est @ T[:3, :3].T + T[:3, 3]
    err = np.linalg.norm(est_a - gt, axis=1)
    t = np.array([f.timestamp for f in sel], dtype=np.float64)
    return {"t": t - t[0], "est": est_a, "gt": gt, "err": err, "rmse": float(np.sqrt(np.mean(err ** 2))),
            "index": np.array([f.index for f in sel]), "ok": np.array([bool(f.ok) for f in sel])}


def _canvas(w: float = 6.0, h: float = 5.0):
    # matplotlib: heavy import, only when plots are written
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def write_plots(run_dir: str | Path, frames: list) -> list[Path]:
    """Write ``trajectory.png`` and ``translation_error.png`` into ``run_dir``; returns the
    paths written (none when the run has no ground truth)."""
    e = trajectory_errors(frames)
    if e is None:
        return []
    run_dir = Path(run_dir)
    keep = [a for a in range(3) if a != int(np.argmin(e["gt"].std(0)))]
    names = "xyz"
    fig = _canvas()
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(e["gt"][:, keep[0]], e["gt"][:, keep[1]], "-", color="tab:green", lw=2, label="ground truth")
    ax.plot(e["est"][:, keep[0]], e["est"][:, keep[1]], "--", color="tab:orange", lw=1.5, label="estimate (SE(3)-aligned)")
    ax.plot(*e["gt"][0, keep], "o", color="tab:green", label="start")
    ax.set_xlabel(f"{names[keep[0]]} [m]")
    ax.set_ylabel(f"{names[keep[1]]} [m]")
    ax.set_aspect("equal", adjustable="datalim")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    ax.set_title(f"Trajectory, top view ({len(e['t'])} frames, ATE RMSE {e['rmse'] * 100:.2f} cm)", fontsize=10)
    fig.tight_layout()
    traj = run_dir / "trajectory.png"
    fig.savefig(traj)

    fig = _canvas(7.0, 3.5)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(e["t"], e["err"] * 100, color="tab:red", lw=1.2, label="translation error")
    ax.axhline(e["rmse"] * 100, color="k", ls=":", lw=1, label=f"RMSE {e['rmse'] * 100:.2f} cm")
    lost = ~e["ok"]
    if lost.any():
        ax.plot(e["t"][lost], e["err"][lost] * 100, "|", color="tab:gray", ms=10, label=f"reported lost ({lost.sum()})")
    silent = silent_failures(frames)
    if silent and silent["count"]:
        hit = np.isin(e["index"], silent["frames"])
        ax.plot(e["t"][hit], e["err"][hit] * 100, "x", color="k", ms=7, mew=2,
                label=f"silent failures ({silent['count']})")
    ax.set_xlabel("time since first frame [s]")
    ax.set_ylabel("error [cm]")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title("Translation error over time (after SE(3) alignment)", fontsize=10)
    fig.tight_layout()
    err = run_dir / "translation_error.png"
    fig.savefig(err)
    return [traj, err]
