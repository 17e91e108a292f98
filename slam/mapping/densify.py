"""Densification: new spheres at back-projected keyframe pixels the map does not yet explain."""
from __future__ import annotations

import torch

from slam.config import MappingConfig
from slam.geometry import backproject, transform_points
from slam.observation import Observation


def candidate_mask(obs: Observation, render, cfg: MappingConfig, depth_ok: torch.Tensor) -> torch.Tensor:
    """(H, W) bool: ``depth_ok`` ((H, W) bool, valid depth away from depth edges: the keyframe
    view's ``KeyframeView.depth_ok``, the mask its mapping loss uses) where the map is missing
    (alpha below ``densify_alpha``), wrong (observed surface in front of the rendered one by more
    than ``densify_depth_error`` metres) or too coarse (mean colour error above
    ``densify_color_error``). With no map yet (``render`` None) every such pixel qualifies."""
    if render is None:
        return depth_ok
    needed = (render.alpha < cfg.densify_alpha) | ((render.depth - obs.depth) > cfg.densify_depth_error)
    # Colours are in [0, 1], so a mean error above 1 never happens: at 1 (off, the default) the
    # test is skipped (on a GPU its kernels would load into host memory for nothing).
    if cfg.densify_color_error < 1.0:
        needed = needed | ((render.color - obs.color).abs().mean(-1) > cfg.densify_color_error)
    return depth_ok & needed


def seed_pixels(mask: torch.Tensor, cfg: MappingConfig, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The masked pixels on a grid of ``densify_stride`` px with a random offset: (vs, us) (M,)
    int64 rows and columns, in row-major order (one host wait: their count)."""
    s = cfg.densify_stride
    off = torch.randint(0, s, (2,), generator=generator).tolist()
    grid = torch.zeros_like(mask)
    grid[off[0] :: s, off[1] :: s] = True
    return torch.nonzero(mask & grid, as_tuple=True)


def most_needed(vs: torch.Tensor, us: torch.Tensor, priority: torch.Tensor, room: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``room`` pixels of (vs, us) with the lowest ``priority`` (H, W) (e.g. rendered alpha:
    the map's biggest holes), ties in their given order: what a budget cut keeps. Only called
    when the budget cuts (a sort: the mapper calls it on the host, where the seeds are made;
    on a GPU its kernels would load into host memory, docs/benchmarks.md#host-memory)."""
    order = torch.argsort(priority[vs, us], stable=True)[: max(room, 0)]
    return vs[order], us[order]


def seed_spheres(obs: Observation, T_wc: torch.Tensor, vs: torch.Tensor, us: torch.Tensor, cfg: MappingConfig):
    """Spheres at pixels (vs, us) (``seed_pixels``) of keyframe ``obs`` (at the map's working
    resolution) seen from T_wc (4, 4) camera-to-world.

    Returns means (M, 3) metres world, radii (M,) metres (radius_scale * stride * z / f, the
    footprint of one grid cell), colors (M, 3) in [0, 1], opacities (M,).
    """
    z = obs.depth[vs, us]
    pts_c = backproject(z, obs.K, us.float(), vs.float())
    means = transform_points(T_wc.float(), pts_c)
    f = 0.5 * (obs.K[0, 0] + obs.K[1, 1])
    radii = cfg.radius_scale * cfg.densify_stride * z / f
    colors = obs.color[vs, us]
    opacities = torch.full_like(z, cfg.initial_opacity)
    return means, radii, colors, opacities
