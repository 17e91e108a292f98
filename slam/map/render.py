"""Render the sphere map from a camera pose: the one place SLAM code calls the rasterizer."""
from __future__ import annotations

from typing import Optional

import torch

import rasterizer
from slam.geometry import transform_points


def render_spheres(
    means_w: torch.Tensor,
    radii: torch.Tensor,
    colors: torch.Tensor,
    opacities: torch.Tensor,
    T_cw: torch.Tensor,
    K: torch.Tensor,
    width: int,
    height: int,
    backend: str = "auto",
    stats: Optional["rasterizer.SphereStats"] = None,
):
    """Render world-frame spheres seen from world-to-camera pose ``T_cw`` (4, 4).

    means_w: (N, 3) metres, world; radii: (N,) metres; colors: (N, 3) in [0, 1];
    opacities: (N,) in [0, 1]; K: (3, 3) of the target resolution.
    Returns the rasterizer output (color (H, W, 3), depth (H, W) metres, alpha (H, W)).
    Gradients reach ``T_cw`` through the camera-frame means when it requires grad. (The mapper's
    step differentiates its own chain: ``slam.mapping.step``.)
    """
    means_c = transform_points(T_cw, means_w)
    return rasterizer.rasterize_spheres(
        means_c, radii, colors, opacities, K.float(), int(width), int(height), backend=backend, stats=stats
    )
