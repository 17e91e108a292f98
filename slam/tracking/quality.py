"""The tracking-quality test: is this frame's pose right? Evidence of the final pose, judged two ways.

Absolute floors: a test relative to recent frames alone misses the dangerous case where every
frame is bad (wide baselines after dropped frames): nothing looks like a spike and wrong poses are
reported as tracked. Relative to the sequence's recent level (``RecentLevel``: the median loss of
the last frames that passed the floors): how much evidence a right pose has depends on the sensor
and the motion (Kinect v1 at 65 deg/s: right poses with 50-95 % depth inliers; at walking pace
98-100 %), so one absolute threshold either flags half of a fast hand-held sequence or passes
wrong poses on a slow one, while a wrong pose stands out against its own sequence: its loss is
several times the recent level, or twice it with depth inliers a right pose keeps on a slow
sequence (the wide baselines of dropped frames). Calibrated as a detector on both real sequences
(``slam/eval/quality_calibration.py``, docs/benchmarks.md#quality-test-as-a-detector). The evidence:

- ``known``: the share of the frame's valid, edge-free depth pixels the map covers;
- ``depth_inliers``: of those covered pixels, the share whose rendered depth is within the
  sensor's noise model of the measured depth (``floor + quad * z^2``: structured-light and stereo
  depth noise grows with z^2). At a wrong pose the map's surfaces land in front of or behind the
  measured ones, so this share collapses even where colour still looks plausible;
- ``color_inliers``: of the covered pixels, the share whose colour error after the fitted
  exposure is within ``color_tol``;
- reported, not judged: ``conditioning`` (smallest / largest eigenvalue of the Jacobi-scaled pose
  block of J^T W J: near 0 = a degenerate view such as one plane) and the distance of the estimate
  from the motion prior (``prior_shift_m``, ``prior_turn_deg``).
"""
from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np

from slam.config import QualityConfig

NAN = float("nan")
# The recent level is the median over the last HISTORY frames that passed the absolute floors, used
# once MIN_HISTORY exist: long enough for a stable median, short enough to follow a loss that grows
# with the motion (with 30 frames, the onset of a fast turn on TUM fr1/rpy was flagged frame after
# frame and, without their keyframes, the map fell behind and tracking diverged). The calibration's
# samples carry the same window (slam/eval/quality_calibration.py, RECENT).
HISTORY = 10
MIN_HISTORY = 5
RELATIVE = "residual spike"
DEPTH_FLOOR = "depth inliers"


@dataclass
class TrackQuality:
    """Per-frame tracking evidence at the final pose (fractions in [0, 1]; see module doc)."""

    known: float = NAN
    depth_inliers: float = NAN
    color_inliers: float = NAN
    conditioning: float = NAN
    prior_shift_m: float = NAN
    prior_turn_deg: float = NAN

    def as_dict(self) -> dict:
        return asdict(self)


def conditioning(H) -> float:
    """Smallest / largest eigenvalue of the Jacobi-scaled 6x6 pose block of normal equations ``H``
    ((P, P), P >= 6, a host tensor or array, read as float64); NaN when unknown (None) or not
    finite (NaN data: no eigenvalues to take), 0 when a direction has no evidence at all."""
    if H is None:
        return NAN
    P = np.asarray(H[:6, :6], dtype=np.float64)
    if not np.all(np.isfinite(P)):
        return NAN
    d = np.sqrt(np.clip(np.diag(P), 1e-30, None))
    ev = np.linalg.eigvalsh(P / d[:, None] / d[None, :])
    return float(max(ev[0], 0.0) / ev[-1]) if ev[-1] > 0 else 0.0


class RecentLevel:
    """The loss of the last ``HISTORY`` frames that passed the absolute floors: what a right pose
    costs in this sequence now (owned by one tracker). Frames flagged only by the relative test
    count too: a lasting change of the level (fast motion, blur, a new part of the scene) is then
    taken in within HISTORY / 2 frames instead of flagging every later frame against a level that
    no frame could pass any more (a failure cascade: no keyframes, the map stops growing)."""

    def __init__(self) -> None:
        self.losses: deque = deque(maxlen=HISTORY)

    def add(self, loss: float) -> None:
        """Record the loss of a frame that passed the absolute floors."""
        if math.isfinite(loss):
            self.losses.append(loss)

    def loss(self) -> Optional[float]:
        """The median loss, or None before MIN_HISTORY frames."""
        return statistics.median(self.losses) if len(self.losses) >= MIN_HISTORY else None


def judge(q: TrackQuality, loss: float, min_known: float, cfg: QualityConfig,
          level: Optional[RecentLevel] = None) -> Optional[str]:
    """None when the frame passes, else why it fails as 'kind: details' (for logs and metrics).
    ``level``: the sequence's recent level (None: the absolute floors only, e.g. a one-off
    tracker's alignment). A reason that starts with ``RELATIVE`` is the relative test's."""
    if not math.isfinite(loss):
        return "no residual: nothing of the map in view"
    if not q.known >= min_known:      # NaN (not measured) fails too
        return f"coverage: the map covers {q.known:.0%} of the valid depth (< {min_known:.0%})"
    if not q.depth_inliers >= cfg.min_depth_inliers:
        return f"{DEPTH_FLOOR}: {q.depth_inliers:.0%} (< {cfg.min_depth_inliers:.0%})"
    if not q.color_inliers >= cfg.min_color_inliers:
        return f"colour inliers: {q.color_inliers:.0%} (< {cfg.min_color_inliers:.0%})"
    recent = level.loss() if level is not None else None
    if recent is None:
        return None
    ratio = loss / max(recent, 1e-6)
    if ratio > cfg.residual_spike:
        return f"{RELATIVE}: {loss:.3f} above {cfg.residual_spike:g} x the recent median {recent:.3f}"
    if ratio > cfg.weak_spike and q.depth_inliers < cfg.weak_depth_inliers:
        return (f"{RELATIVE} with few depth inliers: {loss:.3f} above {cfg.weak_spike:g} x the recent median "
                f"{recent:.3f} and depth inliers {q.depth_inliers:.0%} (< {cfg.weak_depth_inliers:.0%})")
    return None


def colour_agrees(reason: Optional[str], q: TrackQuality, cfg: QualityConfig) -> bool:
    """A frame flagged only by the depth-inlier floor (``reason``, from ``judge``) whose colour
    inliers pass their own floor: the map's colours agree with the pose while its depth does not
    (a view turning onto ground the map has barely seen, depth noise, the depth's own timing). On
    TUM fr1/rpy such streaks (depth inliers 42-48 %, colour 75-96 %) were the detector's false
    alarms; the frame stays flagged, but the motion model follows it (``Tracker``)."""
    return _depth_floor_alone(reason, q, cfg.min_color_inliers)


def explores(reason: Optional[str], q: TrackQuality, cfg: QualityConfig) -> bool:
    """A flagged frame that may still make a keyframe: flagged by the depth-inlier floor alone
    (``reason``, from ``judge``) with colour inliers of at least ``cfg.explore_color_inliers``, what
    right poses keep on a view the map trails and wrong ones did not (the calibration's perturbed
    poses: <= 0.84 on TUM fr1/rpy). The frame stays flagged; the map grows into its view instead of
    waiting for a frame that passes (the failure cascade of a turn the map trails)."""
    return _depth_floor_alone(reason, q, cfg.explore_color_inliers)


def _depth_floor_alone(reason: Optional[str], q: TrackQuality, min_color: float) -> bool:
    """Flagged by the depth-inlier floor (``reason`` from ``judge``), colour inliers >= ``min_color``."""
    return (reason or "").startswith(DEPTH_FLOOR) and q.color_inliers >= min_color
