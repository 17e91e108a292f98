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
    pose_delta: Optional[torch.Tensor] = None,
    pair_room: Optional["rasterizer.PairRoom"] = None,
):
    """Render world-frame spheres seen from world-to-camera pose ``T_cw`` (4, 4).

    means_w: (N, 3) metres, world; radii: (N,) metres; colors: (N, 3) in [0, 1];
    opacities: (N,) in [0, 1]; K: (3, 3) of the target resolution.
    Returns the rasterizer output (color (H, W, 3), depth (H, W) metres, alpha (H, W)).
    Gradients reach ``T_cw`` and ``means_w`` through the camera-frame means when they require grad
    (the move as PyTorch ops); without, the move is one kernel (``rasterizer.transform_means``, the
    same sums: on a GPU the ops' kernel families would load into host memory for the snapshot's
    renders alone, docs/benchmarks.md#host-memory).
    The other arguments: as ``render_camera_spheres``.
    """
    if torch.is_grad_enabled() and (T_cw.requires_grad or means_w.requires_grad):
        means_c = transform_points(T_cw, means_w)
    else:
        kernel = backend if backend in rasterizer.OP_BACKENDS else "auto"   # gsplat: the device's kernel
        means_c = rasterizer.transform_means(means_w.detach(), T_cw.detach(), backend=kernel)
    return render_camera_spheres(means_c, radii, colors, opacities, K, width, height,
                                 backend=backend, stats=stats, pose_delta=pose_delta, pair_room=pair_room)


def render_camera_spheres(
    means_c: torch.Tensor,
    radii: torch.Tensor,
    colors: torch.Tensor,
    opacities: torch.Tensor,
    K: torch.Tensor,
    width: int,
    height: int,
    backend: str = "auto",
    stats: Optional["rasterizer.SphereStats"] = None,
    pose_delta: Optional[torch.Tensor] = None,
    pair_room: Optional["rasterizer.PairRoom"] = None,
):
    """Render spheres already in the camera frame (``means_c``: (N, 3) metres; the mapper's step
    moves them there in its activation kernel, ``SphereMap.activated(rows, T_cw)``); the rest as
    ``render_spheres``.
    pose_delta: optional (6,) = (omega rad, v m), a small increment applied left of the camera's
    pose to first order, X' = X + omega x X + v (pass zeros that require grad: its gradient is then
    the exact pose gradient at that pose, ``slam.mapping.pose_refine``).
    pair_room: optional ``rasterizer.PairRoom`` (the binning's room and pair count: renders inside
    a CUDA graph, ``slam.mapping.step_graph``).
    """
    if pose_delta is not None:
        omega = pose_delta[:3].expand_as(means_c)
        means_c = means_c + torch.cross(omega, means_c, dim=1) + pose_delta[3:]
    return rasterizer.rasterize_spheres(
        means_c, radii, colors, opacities, K.float(), int(width), int(height), backend=backend, stats=stats,
        pair_room=pair_room
    )
