"""What the tracker returns for a frame."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from slam.tracking.quality import TrackQuality


def not_finite(r: "TrackResult") -> list[str]:
    """The names of ``r``'s numbers that are NaN or infinite where a solver's result needs them
    finite: the pose, the loss, the measured quality figures and the information. An infinite loss
    with nothing known (``known_fraction`` 0) is the solvers' "no valid pixel in view", left to the
    quality test. Empty for a usable result."""
    bad = [] if np.all(np.isfinite(r.T_wc)) else ["pose"]
    if math.isfinite(r.loss):
        q = r.quality
        bad += [k for k in ("known", "depth_inliers", "color_inliers") if not math.isfinite(getattr(q, k))]
    elif not (r.loss == math.inf and r.known_fraction == 0.0):
        bad.append("loss")   # NaN, or infinite over measured pixels (infinite data)
    if r.information is not None and not np.all(np.isfinite(r.information)):
        bad.append("information")
    return bad


def rank(r: "TrackResult") -> tuple:
    """Order of preference between refined poses of one frame: passing the quality test, then
    more depth inliers, then more colour inliers, then a lower residual."""
    return (r.reason is None, r.quality.depth_inliers, r.quality.color_inliers, -r.loss)


@dataclass
class TrackResult:
    """T_wc: (4, 4) float64 estimated camera-to-world pose; loss: final residual (L1 colour +
    depth_weight * L1 depth per known pixel); known_fraction: share of valid-depth pixels the map
    explains; ok: passed the checks; recovered: needed (and passed) a recovery attempt, or was
    relocalised after being lost; iters: LM iterations run in all; quality: the evidence the
    checks judged; reason: why the frame failed (None when ok); reinit: why the motion prior was
    not trusted (coarse poses were searched, taking reinit_ms), or None; information: (6, 6)
    float64 the final normal equations' pose block in T_wc's body-frame tangent (rotation rad,
    translation m: ``slam.geometry.pivot_information_to_body``), up to scale: how well each
    direction of the pose is determined (None when not computed)."""

    T_wc: np.ndarray
    loss: float
    known_fraction: float
    ok: bool
    recovered: bool
    iters: int
    quality: TrackQuality = field(default_factory=TrackQuality)
    reason: Optional[str] = None
    reinit: Optional[str] = None
    reinit_ms: float = 0.0
    renders: int = 0
    information: Optional[np.ndarray] = None
