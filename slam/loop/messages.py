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
    the outcome ('accepted', 'consistent' = verified but already in place, or 'rejected'), why,
    and the verification's evidence."""

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
