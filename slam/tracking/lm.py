"""The tracker's Levenberg-Marquardt pieces shared by the solver (``slam.tracking.fused``) and its
oracle (tests/render_oracle.py): the image pyramid, the iteration schedule over it and the numerical
guards of the damped step. The model (residuals, robust weights, Jacobian rows, normal equations)
is in rasterizer/gauss_newton.py, the LM's phases in rasterizer/lm_state.py."""
from __future__ import annotations

import torch

from rasterizer import depth_edge_mask
from slam.observation import Observation

# Numerical guards of the LM step, not tuning values: the damping never reaches 0 (a singular
# system), and parameters with no evidence (zero diagonal) still get a finite damping term.
MIN_DAMPING = 1e-6
MIN_DIAGONAL = 1e-9


def pyramid(obs: Observation, levels: int) -> list[tuple[Observation, torch.Tensor]]:
    """Coarse-to-fine levels of ``obs`` (finest = ``obs`` itself, each coarser one half the
    resolution), each with its (H, W) bool mask of valid depth away from depth edges."""
    out = []
    for level in reversed(range(levels)):
        o = obs.downsampled(2**level)
        out.append((o, depth_edge_mask(o.depth)))
    return out


def level_iters(total: int, levels: int, coarse_share: float) -> list[int]:
    """Split ``total`` iterations over ``levels`` pyramid levels, coarse first: the coarse levels
    (cheap) share ``coarse_share`` of the budget equally, the finest level gets the rest."""
    if levels == 1:
        return [total]
    coarse = int(round(total * coarse_share))
    per = [coarse // (levels - 1)] * (levels - 1)
    return per + [total - sum(per)]
