"""The mapping loss on one keyframe and its gradients, with the chain rule written out.

The loss (one keyframe view, the map's live rows, the rasterizer's render at the view's pose):

    L = sum_valid mean_rgb |C - C_obs| / n_valid  +  depth_weight * sum_ok |D - D_obs| / n_ok

(valid: pixels with depth; ok: valid depth away from depth edges). Only the rasterizer runs
under autograd, from the output-image gradients written out here (dL/dC = sign / (3 n_valid) on
valid pixels, dL/dD = depth_weight sign / n_ok on ok pixels) to the camera-frame sphere
parameters; the activations (exp radius, sigmoid colour and opacity) and the rigid transform are
differentiated by hand. Autograd through the whole step (about sixty small operators forward and
backward per step, forty steps per keyframe) made the mapper host-bound: H200 profile, 4,177 GPU
operations and ~56 ms of host time per keyframe for 16 ms of GPU work (docs/benchmarks.md, tenth
session). ``tests/test_mapping_step.py`` checks the gradients against autograd through the same
loss.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

import rasterizer
from slam.geometry import transform_points
from slam.map.sphere_map import COLOR, LOG_RADIUS, MEANS, OPACITY
from slam.mapping.pose_refine import pose_gradient_from_points


@dataclass
class StepGradients:
    """loss: () float32 tensor (device); rows: (N, 8) dL/d(parameter rows); pose: (6,) dL/d
    (omega rad, v m) of a pose increment left of the view's T_cw (``pose_refine``), or None."""

    loss: torch.Tensor
    rows: torch.Tensor
    pose: Optional[torch.Tensor]


def loss_and_gradients(rows: torch.Tensor, view, depth_weight: float, backend: str = "auto",
                       stats: Optional["rasterizer.SphereStats"] = None, pose: bool = False) -> StepGradients:
    """The loss above for the map's parameter rows ``rows`` (N, 8) (raw: xyz m, log radius, colour
    and opacity logits) on ``view`` (``KeyframeView``: its float images, pose and masks) and its
    gradients; ``stats`` (optional) receives the backward pass's per-sphere statistics; ``pose``:
    also the gradient of the view's pose."""
    o = view.observation()
    with torch.no_grad():
        radii = torch.exp(rows[:, LOG_RADIUS])
        colors = torch.sigmoid(rows[:, COLOR])
        opacities = torch.sigmoid(rows[:, OPACITY])
        means_c = transform_points(view.T_cw, rows[:, MEANS])
    leaves = [t.requires_grad_(True) for t in (means_c, radii, colors, opacities)]
    out = rasterizer.rasterize_spheres(*leaves, o.K, o.width, o.height, backend=backend, stats=stats)
    with torch.no_grad():
        valid, ok = view.valid.to(torch.float32), view.depth_ok.to(torch.float32)
        w_color = valid / (3.0 * valid.sum().clamp_min(1.0))
        w_depth = ok * (depth_weight / ok.sum().clamp_min(1.0))
        d_color, d_depth = out.color - o.color, out.depth - o.depth
        loss = (d_color.abs() * w_color[..., None]).sum() + (d_depth.abs() * w_depth).sum()
        if stats is not None:
            stats.pixel_error = d_color.abs().mean(-1) * valid
        g_color = torch.sign(d_color) * w_color[..., None]
        g_depth = torch.sign(d_depth) * w_depth
    torch.autograd.backward([out.color, out.depth], [g_color, g_depth])
    with torch.no_grad():
        g_c, g_r, g_k, g_o = (t.grad if t.grad is not None else torch.zeros_like(t) for t in leaves)
        # means_c = R means + t: dL/dmeans = R^T dL/dmeans_c (broadcast and sum: no cuBLAS)
        g_means = (g_c.unsqueeze(-1) * view.T_cw[:3, :3]).sum(1)
        grad = torch.cat([g_means, (g_r * radii)[:, None], g_k * colors * (1.0 - colors),
                          (g_o * opacities * (1.0 - opacities))[:, None]], dim=1)
        g_pose = pose_gradient_from_points(means_c.detach(), g_c) if pose else None
    return StepGradients(loss, grad, g_pose)
