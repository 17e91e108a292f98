"""The mapper's render loss in one kernel each way: a render against an observed RGB-D frame.

The model (every backend), for (H, W) images, valid and depth_ok (H, W) bool masks (valid depth;
valid depth away from depth edges) and depth_weight w:

    e_p    = valid_p * mean_c |color_pc - obs_color_pc|          (the pixel's colour error)
    loss   = sum_p e_p / max(#valid, 1)  +  w * sum_p depth_ok_p |depth_p - obs_depth_p| / max(#depth_ok, 1)

    d loss / d color_pc = valid_p    sign(color_pc - obs_color_pc) / (3 max(#valid, 1))
    d loss / d depth_p  = w depth_ok_p sign(depth_p - obs_depth_p)  / max(#depth_ok, 1)

(sign(0) = 0: ``torch.abs``'s gradient). ``e`` (the pixel errors) is returned too: the pruner's
per-pixel error (``SphereStats.pixel_error``). The PyTorch formulation (``reference``, the tests'
oracle) takes about thirty element-wise launches forward and back; the kernels (``cuda``,
csrc/loss_cuda.cu) two: the forward's sums in a fixed order (the last block adds the blocks'
partials), the backward's scales read on the device (no host wait: the mapper's CUDA graph captures
both). The ``cpu`` twin (csrc/loss_cpu.cpp) shares the per-pixel math (csrc/loss_math.h). The sums
are float64: the loss's value may differ from the reference's float32 sums in the last digits, its
gradient only by the rounding of the scale.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from . import _ext


class RenderLoss(NamedTuple):
    loss: torch.Tensor          # () float32, differentiable with respect to the render's colour and depth
    pixel_error: torch.Tensor   # (H, W) float32: e_p, detached


def reference(color, depth, obs_color, obs_depth, valid, depth_ok, depth_weight: float) -> RenderLoss:
    """The model with PyTorch ops (the oracle of the tests; autograd gives its gradient)."""
    err_c = (color - obs_color).abs().mean(-1)
    m = valid.to(color.dtype)
    l_color = (err_c * m).sum() / m.sum().clamp_min(1.0)
    dm = depth_ok.to(depth.dtype)
    l_depth = ((depth - obs_depth).abs() * dm).sum() / dm.sum().clamp_min(1.0)
    return RenderLoss(l_color + depth_weight * l_depth, (err_c * m).detach())


class _L1Loss(torch.autograd.Function):
    """The kernels' loss; its backward runs the backward kernel (no gradient for the observation)."""

    @staticmethod
    def forward(ctx, kind, depth_weight, color, depth, obs_color, obs_depth, valid, depth_ok):
        loss, totals, pixel_error = _ext.ops(kind).render_l1_loss(color, depth, obs_color, obs_depth, valid,
                                                                  depth_ok, depth_weight)
        ctx.set_materialize_grads(False)      # pixel_error's absent gradient: no zero image made
        ctx.kind, ctx.depth_weight = kind, depth_weight
        ctx.save_for_backward(color, depth, obs_color, obs_depth, valid, depth_ok, totals)
        ctx.mark_non_differentiable(pixel_error)
        return loss, pixel_error

    @staticmethod
    def backward(ctx, g_loss, _g_pixel_error):
        if g_loss is None:
            return (None,) * 8
        color, depth, obs_color, obs_depth, valid, depth_ok, totals = ctx.saved_tensors
        g_color, g_depth = _ext.ops(ctx.kind).render_l1_loss_backward(
            color, depth, obs_color, obs_depth, valid, depth_ok, totals, g_loss.float(), ctx.depth_weight)
        return None, None, g_color, g_depth, None, None, None, None


def render_l1_loss(color: torch.Tensor, depth: torch.Tensor, obs_color: torch.Tensor, obs_depth: torch.Tensor,
                   valid: torch.Tensor, depth_ok: torch.Tensor, depth_weight: float,
                   backend: str = "auto") -> RenderLoss:
    """The render loss (the model above) and the pixel errors.

    color: (H, W, 3) float32 render, [0, 1]; depth: (H, W) float32 metres (render);
    obs_color, obs_depth: the observation, the same shapes; valid, depth_ok: (H, W) bool; all on
    one device. depth_weight: w (dimensionless). backend: 'auto' (the kernel of color's device) |
    'cuda' | 'cpu' | 'reference'."""
    if color.dim() != 3 or color.shape[2] != 3 or depth.shape != color.shape[:2]:
        raise ValueError(f"color must be (H, W, 3) and depth (H, W), got {tuple(color.shape)} and {tuple(depth.shape)}")
    for name, t, shape in (("obs_color", obs_color, color.shape), ("obs_depth", obs_depth, depth.shape),
                           ("valid", valid, depth.shape), ("depth_ok", depth_ok, depth.shape)):
        if t.shape != shape or t.device != color.device:
            raise ValueError(f"{name} must be {tuple(shape)} on {color.device}, got {tuple(t.shape)} on {t.device}")
    if valid.dtype != torch.bool or depth_ok.dtype != torch.bool:
        raise ValueError(f"valid and depth_ok must be bool, got {valid.dtype} and {depth_ok.dtype}")
    for name, t in (("color", color), ("depth", depth), ("obs_color", obs_color), ("obs_depth", obs_depth)):
        if not t.is_floating_point():
            raise ValueError(f"{name} must be floating point (colours in [0, 1], depths in metres), got {t.dtype}")
    kind = _ext.resolve_backend(backend, color, what="color")
    if kind == "reference":
        return reference(color, depth, obs_color, obs_depth, valid, depth_ok, depth_weight)
    images = [t.contiguous() if t.dtype == torch.bool else t.float().contiguous()
              for t in (color, depth, obs_color, obs_depth, valid, depth_ok)]
    loss, pixel_error = _L1Loss.apply(kind, float(depth_weight), *images)
    return RenderLoss(loss, pixel_error)
