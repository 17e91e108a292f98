"""What the loop stage sends the mapper, and what it records for the metrics."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np


@dataclass
class LoopCorrection:
    """A pose-graph solution for the mapper to apply. corrections: keyframe id -> (4, 4) float64
    world-frame correction C (T_new = C @ T_old) of every keyframe in the graph; later: the
    correction of the newest keyframe in the graph, applied to keyframes mapped after the graph
    was built; edge: (old keyframe id, new keyframe id) of the loop that triggered it."""

    corrections: dict
    later: np.ndarray
    edge: tuple


@dataclass
class LoopEvent:
    """One verified-or-rejected candidate: keyframe ids, the similarity that made it a candidate,
    the outcome ('accepted', 'consistent' = verified but already in place, 'pending' = verified,
    no consecutive detection confirmed it (yet), 'deferred' = a complete group within
    ``loop.min_separation`` keyframes of the last closure: kept as an edge, not applied, or
    'rejected'), why, the verification's evidence,
    the correction it asks for (shift_m, turn_deg; chi2: its group's squared whitened error at the
    current poses against chi2_bound) and the guard's depth agreement [before, after, pairs]."""

    keyframe: int
    candidate: int
    similarity: float
    outcome: str
    reason: str = ""
    pnp_inliers: int = 0
    overlap: float = 0.0
    depth_inliers: float = 0.0
    render_agreement: float = 0.0
    shift_m: float = 0.0
    turn_deg: float = 0.0
    graph: Optional[dict] = field(default=None)   # residuals before/after when optimised
    ms: float = 0.0
    chi2: Optional[float] = None
    chi2_bound: Optional[float] = None
    guard: Optional[list] = None
