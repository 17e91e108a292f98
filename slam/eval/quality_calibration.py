"""Calibrating the tracking-quality test as a detector: right and wrong poses under it, on real data.

During a sequential run (loop closure off, the quality thresholds opened so that no frame is
flagged: what is measured is the evidence, not the test), every ``every``-th frame with ground
truth is tracked again from its own estimate and from starts perturbed around its true pose by
``PERTURBATIONS`` (what a wrong motion prior after fast motion or dropped frames looks like),
against the same map snapshot. Each result's quality evidence is recorded (``TrackQuality``), with
its label:

- the run's own estimate is **right** / **wrong** by the silent-failure definition
  (``slam.eval.failures``: its motion since the previous frame differs from the truth's by more than
  5 cm / 3 deg = wrong; less than 2 cm / 1 deg = right);
- a perturbed start's result is judged against the run's own estimate, and only on frames where
  that estimate is right: the map the tracker aligns with has drifted with the run, so the truth is
  not where a right result lands (within 2 cm / 1 deg of it = right, beyond 5 cm / 3 deg = wrong).

``rule_table`` then gives, for a grid of quality settings, the share of right results the test
flags (false alarms) and the share of wrong results it passes (misses).
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from slam.config import Config, QualityConfig
from slam.eval.failures import MAX_SHIFT_M, MAX_TURN_DEG
from slam.eval.stats import nanmedian
from slam.geometry import invert, pivot_increment, relative_motion
from slam.tracking.quality import HISTORY, TrackQuality, judge

# (shift m, turn deg) of the perturbed starts around the true pose.
PERTURBATIONS = ((0.05, 3.0), (0.10, 6.0), (0.15, 9.0), (0.0, 5.0), (0.0, 10.0), (0.08, 0.0))
RIGHT_SHIFT_M, RIGHT_TURN_DEG = 0.02, 1.0        # "right": well inside the failure definition
RECENT = HISTORY   # frames of the run's recent level (Sample.recent), as the tracker's
# Overrides that open the test (the evidence is recorded, nothing is flagged) and keep the run
# deterministic and about tracking alone.
OPEN_TEST = ["system.threaded=false", "system.progress=false", "loop.enabled=false", "mapping.final_iters=0",
             "quality.min_depth_inliers=0.0", "quality.min_color_inliers=0.0", "quality.residual_spike=1e9",
             "tracking.min_known_fraction=0.0"]


@dataclass
class Sample:
    """One tracked result: frame index, start (shift m, turn deg; (0, 0) = the run's own estimate),
    label ('right' | 'wrong' | None between the two), quality evidence (``TrackQuality`` fields),
    loss, and ``recent``: the medians of the same fields and of the loss over the run's last
    ``RECENT`` frames before this one (for tests relative to the sequence's own level)."""

    frame: int
    start: tuple
    label: Optional[str]
    quality: dict = field(default_factory=dict)
    loss: float = float("nan")
    recent: dict = field(default_factory=dict)


def _label(shift: float, turn_rad: float) -> Optional[str]:
    turn = math.degrees(turn_rad)
    if shift > MAX_SHIFT_M or turn > MAX_TURN_DEG:
        return "wrong"
    if shift < RIGHT_SHIFT_M and turn < RIGHT_TURN_DEG:
        return "right"
    return None


def perturbed(T_wc: np.ndarray, shift: float, turn_deg: float, rng: np.random.Generator) -> np.ndarray:
    """T_wc (4, 4) moved by ``shift`` m and turned by ``turn_deg`` about random camera-frame axes."""
    t, w = rng.normal(size=3), rng.normal(size=3)
    delta = np.concatenate([w / np.linalg.norm(w) * math.radians(turn_deg), t / np.linalg.norm(t) * shift])
    return T_wc @ np.linalg.inv(pivot_increment(delta, 0.0))


def collect(cfg: Config, frames, every: int = 3, seed: int = 0) -> list[Sample]:
    """Run SLAM on ``frames`` with ``cfg`` (which must include ``OPEN_TEST``) and record the samples
    described in the module doc."""
    from slam.runtime.system import SlamSystem  # the system pulls in the whole stack
    from slam.tracking.tracker import Tracker

    system = SlamSystem(cfg)
    rng = np.random.default_rng(seed)
    samples: list[Sample] = []
    prev_ok: list = []
    history: list[dict] = []

    def hook(frame, rec, snap) -> None:
        if frame.gt_pose is None:
            return
        own = None
        if prev_ok:
            p = prev_ok[-1]
            own = relative_motion(invert(p.gt_pose) @ frame.gt_pose, invert(p.T_wc) @ rec.T_wc)
        if rec.ok:
            prev_ok[:] = [rec]
        recent = {k: nanmedian([h[k] for h in history[-RECENT:]]) for k in history[0]} if history else {}
        if rec.quality is not None:
            history.append({**rec.quality.as_dict(), "loss": rec.loss})
        if snap is None or own is None or frame.index % every:
            return
        own_label = _label(*own)
        samples.append(Sample(frame.index, (0.0, 0.0), own_label, rec.quality.as_dict() if rec.quality else {}, rec.loss,
                              recent))
        if own_label != "right":
            return
        obs = system.observation(frame)
        for shift, turn in PERTURBATIONS:
            tracker = Tracker(cfg.tracking, cfg.quality, cfg.raster.backend)
            tracker.initialise(perturbed(rec.T_wc, shift, turn, rng))
            res = tracker.track(obs, snap)
            samples.append(Sample(frame.index, (shift, turn), _label(*relative_motion(rec.T_wc, res.T_wc)),
                                  res.quality.as_dict(), res.loss, recent))

    system.frame_hooks.append(hook)
    system.run(frames)
    return samples


class _Level:
    """A sample's recorded recent level in ``judge``'s interface (``RecentLevel``)."""

    def __init__(self, recent: dict) -> None:
        self.recent = recent

    def loss(self) -> Optional[float]:
        v = self.recent.get("loss")
        return v if v is not None and math.isfinite(v) else None


def rule_table(samples: list[Sample], quality: QualityConfig, min_known: float, grid: dict) -> list[dict]:
    """For each combination of ``grid`` ({quality key: [values]}) on top of ``quality``, the
    quality test (``slam.tracking.quality.judge`` with each sample's recorded recent level): {the
    grid's values, false_alarms (share of right samples it flags), misses (share of wrong samples
    it passes), right, wrong (counts)}."""
    right = [x for x in samples if x.label == "right" and x.quality]
    wrong = [x for x in samples if x.label == "wrong" and x.quality]
    keys = list(grid)
    rows = []
    for values in itertools.product(*(grid[k] for k in keys)):
        cfg = dataclasses.replace(quality, **dict(zip(keys, values)))

        def passes(x: Sample) -> bool:
            return judge(TrackQuality(**x.quality), x.loss, min_known, cfg, _Level(x.recent)) is None
        rows.append({**dict(zip(keys, values)), "right": len(right), "wrong": len(wrong),
                     "false_alarms": float(np.mean([not passes(x) for x in right])) if right else None,
                     "misses": float(np.mean([passes(x) for x in wrong])) if wrong else None})
    return rows
