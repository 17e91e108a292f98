"""The adaptive pruner: keeps the map inside its budget by removing low-value spheres.

Statistics (both from the rasterizer's backward pass during mapping, no extra render):
- contribution c_i: blend weight the sphere put into the rendered pixels, summed over the pixels
  of a mapping step and averaged over the step's renders. It is exactly the factor by which the
  loss gradient reaches the sphere's colour (dC_p/dc_i = w_ip), i.e. its gradient contribution.
- error e_i: the blend-weighted mean L1 colour error of the pixels the sphere covers.
Both are exponential moving averages over mapping rounds, updated only for spheres seen in the
round (a sphere out of view keeps its statistics: being out of sight is not being useless).

Importance I_i = (c_i / median c) / (1 + k * e_i / median e): spheres that paint much and paint it
right matter. A sphere is "low" in a round when I_i < threshold * adapt * median I; it is
removed after ``window`` consecutive low rounds (young spheres get that many rounds to settle).
Also removed at once: transparent (opacity < min_opacity) and oversized (screen radius above
max_radius_px in the newest keyframe) spheres.

The statistics and every rule run on the host (``SphereMap.stats`` live there): a keyframe's few
hundred kilobytes of sums come down once, and on a GPU the masked medians, ratios and comparisons
would each load an operation family's kernels into host memory (docs/benchmarks.md#host-memory).

Adaptive: ``adapt`` moves from ``explore_keep`` (novel view: many unexplained pixels, keep more)
to ``revisit_prune`` (known view, relocalising or looping: prune harder) with the share of the new
keyframe's pixels the map did not yet explain. The hard budget is enforced by ``make_room``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rasterizer import lower_median
from slam.config import PrunerConfig
from slam.map.sphere_map import SphereMap, activate
from slam.tensor_ops import at_least, logical_not


@dataclass
class PruneReport:
    removed_low: int = 0
    removed_transparent: int = 0
    removed_oversized: int = 0
    removed_budget: int = 0

    @property
    def total(self) -> int:
        return self.removed_low + self.removed_transparent + self.removed_oversized + self.removed_budget


def adapt_factor(cfg: PrunerConfig, novelty: float) -> float:
    """Threshold multiplier for a keyframe whose unexplained-pixel share is ``novelty`` in [0, 1].
    Saturates at 30 % novelty (clearly exploring)."""
    t = min(max(novelty / 0.3, 0.0), 1.0)
    return cfg.revisit_prune + (cfg.explore_keep - cfg.revisit_prune) * t


def _median(x: torch.Tensor) -> torch.Tensor:
    return at_least(lower_median(x), 1e-12) if x.numel() else torch.ones((), device=x.device)


class Pruner:
    """Owns the statistics update and the removal rules; mutates the map it is given."""

    def __init__(self, cfg: PrunerConfig) -> None:
        self.cfg = cfg

    def record(self, smap: SphereMap, weight_sum: torch.Tensor, error_sum: torch.Tensor, renders: int) -> None:
        """Fold one mapping round's sums (N,) (any device: copied to the host) into the EMA
        statistics of the seen spheres."""
        n = smap.n
        weight_sum, error_sum = weight_sum[:n].cpu(), error_sum[:n].cpu()
        seen = weight_sum > 0
        c_new = weight_sum / max(renders, 1)
        e_new = error_sum / at_least(weight_sum, 1e-12)
        beta = self.cfg.weight_ema
        st = smap.stats
        fresh = st["age"][:n] <= 0          # ages count rounds (>= 0)
        for name, new in (("contribution", c_new), ("error", e_new)):
            old = st[name][:n]
            blended = torch.where(fresh, new, beta * old + (1 - beta) * new)
            st[name][:n] = torch.where(seen, blended, old)
        st["age"][:n] += seen.float()

    def importance(self, smap: SphereMap) -> torch.Tensor:
        """(N,) importance scores (dimensionless, median-normalised), on the host."""
        n = smap.n
        c = smap.stats["contribution"][:n]
        e = smap.stats["error"][:n]
        scored = smap.stats["age"][:n] > 0
        c_rel = c / _median(c[scored])
        e_rel = e / _median(e[scored])
        return c_rel / (1 + self.cfg.score_error_weight * e_rel)

    def prune(self, smap: SphereMap, novelty: float, screen_radius_px: torch.Tensor, seen: torch.Tensor) -> PruneReport:
        """One prune round after a mapping step.

        screen_radius_px: (N,) radius in px in the newest keyframe (0 where not in view);
        seen: (N,) bool, spheres that received blend weight this round. Both on any device (the
        rules run on the host).
        """
        report = PruneReport()
        if not self.cfg.enabled or smap.n == 0:
            return report
        n = smap.n
        score = self.importance(smap)
        scored = smap.stats["age"][:n] > 0
        ranked = score[scored]
        thr = self.cfg.threshold * adapt_factor(self.cfg, novelty) * (
            lower_median(ranked) if ranked.numel() else torch.zeros(()))
        seen = seen[:n].cpu()
        low = (score < thr) & seen
        rounds = smap.stats["low_rounds"][:n]
        smap.stats["low_rounds"][:n] = torch.where(seen, torch.where(low, rounds + 1, torch.zeros_like(rounds)), rounds)
        remove_low = smap.stats["low_rounds"][:n] >= self.cfg.window
        opacity = activate(smap.params[:n])[3].cpu()   # the map's kernel (torch.sigmoid's would load, 8 MB)
        transparent = opacity < self.cfg.min_opacity
        oversized = screen_radius_px[:n].cpu() > self.cfg.max_radius_px
        for m in (remove_low, transparent, oversized):
            m[: smap.frozen] = False   # a frozen saved map (localize) is never pruned
        report.removed_transparent = int(transparent.sum())
        opaque, in_size = logical_not(transparent), logical_not(oversized)
        report.removed_oversized = int((oversized & opaque).sum())
        report.removed_low = int((remove_low & opaque & in_size).sum())
        smap.remove(remove_low | transparent | oversized)
        return report

    def make_room(self, smap: SphereMap, incoming: int, headroom: float = 0.9) -> int:
        """Remove the least important spheres so that ``incoming`` new ones fit in the budget
        (keeping the map at most ``headroom`` of the budget afterwards when possible).
        Works with the pruner disabled too: the budget is a hard limit."""
        target = int(smap.budget * headroom) - incoming
        # Only rows above a frozen saved map (localize) can go.
        excess = min(smap.n - max(target, 0), smap.n - smap.frozen)
        if excess <= 0:
            return 0
        score = self.importance(smap)
        score = torch.where(smap.stats["age"][: smap.n] > 0, score, torch.full_like(score, float("inf")))
        score[: smap.frozen] = float("inf")
        # the lowest scores (ties: the oldest rows first), on the host
        victims = torch.argsort(score, stable=True)[:excess]
        mask = torch.zeros(smap.n, dtype=torch.bool)
        mask[victims] = True
        return smap.remove(mask)
