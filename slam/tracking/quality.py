"""The absolute tracking-quality test: is this frame's pose right, judged by the frame alone?

A failure test relative to recent frames (a residual spike over the running median) misses the
dangerous case: when every frame is bad (wide baselines after dropped frames), nothing looks like
a spike and wrong poses are reported as tracked. This test uses evidence of the final pose only:

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
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np
import torch

from slam.config import QualityConfig
from slam.observation import Observation

NAN = float("nan")


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


def pixel_counts(out, obs: Observation, valid: torch.Tensor, covered: torch.Tensor, r: torch.Tensor,
                 cfg: QualityConfig) -> torch.Tensor:
    """(3,) float32 device tensor: covered pixels, depth inliers, colour inliers (no host sync).

    out: the render at the final pose; valid: (H, W) bool valid edge-free depth; covered: (H, W)
    bool, valid and explained by the map (alpha above the threshold); r: (H, W, 4) the masked
    residual (colour after exposure in channels 0-2)."""
    z = obs.depth
    depth_ok = (out.depth - z).abs() <= cfg.depth_noise_floor + cfg.depth_noise_quad * z * z
    color_ok = r[..., :3].abs().mean(-1) <= cfg.color_tol
    return torch.stack([covered.sum(), (covered & depth_ok).sum(), (covered & color_ok).sum()]).float()


def conditioning(H: Optional[torch.Tensor]) -> float:
    """Smallest / largest eigenvalue of the Jacobi-scaled 6x6 pose block of ``H`` (host, float64);
    NaN when unknown or not finite (NaN data: no eigenvalues to take), 0 when a direction has no
    evidence at all."""
    if H is None:
        return NAN
    P = np.asarray(H[:6, :6], dtype=np.float64)
    if not np.all(np.isfinite(P)):
        return NAN
    d = np.sqrt(np.clip(np.diag(P), 1e-30, None))
    ev = np.linalg.eigvalsh(P / d[:, None] / d[None, :])
    return float(max(ev[0], 0.0) / ev[-1]) if ev[-1] > 0 else 0.0


def judge(q: TrackQuality, loss: float, min_known: float, cfg: QualityConfig) -> Optional[str]:
    """None when the frame passes, else why it fails as 'kind: details' (for logs and metrics)."""
    if not math.isfinite(loss):
        return "no residual: nothing of the map in view"
    if not q.known >= min_known:      # NaN (not measured) fails too
        return f"coverage: the map covers {q.known:.0%} of the valid depth (< {min_known:.0%})"
    if not q.depth_inliers >= cfg.min_depth_inliers:
        return f"depth inliers: {q.depth_inliers:.0%} (< {cfg.min_depth_inliers:.0%})"
    if not q.color_inliers >= cfg.min_color_inliers:
        return f"colour inliers: {q.color_inliers:.0%} (< {cfg.min_color_inliers:.0%})"
    return None
