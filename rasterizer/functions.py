"""Thin autograd wrappers around the kernels: one torch.autograd.Function for the compiled tiled
kernels (one code path for 'cpu' and 'cuda': the same ops, whose kernel torch picks by the
tensors' device), and the gsplat adapter.

The render's two ops, ``torch.ops.sphere_raster.forward`` and ``.backward`` (schemas in
csrc/raster_cpu.cpp; kernels in csrc/raster_cpu.cpp and csrc/raster_cuda.cu), take and return:

* ``forward(means, radii, colors, opacities, background, fx, fy, cx, cy, width, height, eps)``
  -> ``[color (H,W,3), depth (H,W), alpha (H,W), last (H,W) int32, ids (M,) int32,
  ranges (tiles,2) int32, parts]``; ``depth = sum(w z) / max(alpha, eps)`` is normalised in the
  kernel. ``parts``: for a backward that walks each tile's list in K parts at once (CUDA, when the
  tiles are too few to fill the GPU), each pixel's state where parts 2..K begin, ``(K-1, 5, H, W)``
  float32 (transmittance, then the colour and depth sums behind); empty for one part (the CPU).
* ``forward_capped(..., depth_eps, capacity, room)``: the forward with its (tile, sphere) pair
  count M recorded in ``room`` ((2,) float64, written: [most pairs seen, overflowed 0/1]); on CUDA
  ``capacity > 0`` bins with room for that many pairs and no host wait (a render inside a CUDA
  graph; ids then has ``capacity`` entries, and on overflow the pairs beyond are dropped);
  ``capacity <= 0``, and every CPU call, bins exactly.
* ``backward(means, radii, colors, opacities, background, fx, fy, cx, cy, width, height, eps,
  ids, ranges, alpha, depth, last, parts, g_color, g_depth, g_alpha, pixel_error, weight_sum,
  error_sum, count)`` -> ``[g_means (N,3), g_radii (N,), g_colors (N,3), g_opacities (N,)]``. ``g_depth`` is
  the gradient of the normalised depth (the kernel applies the normalisation's backward per
  pixel); output gradients may be strided, an empty tensor means "no gradient"; the statistics
  buffers (empty: none; three distinct tensors, as the schema marks each one written) are added
  into.
"""
from __future__ import annotations

import torch

from . import _ext
from ._model import DEPTH_EPS


def _camera(K: torch.Tensor):
    """(fx, fy, cx, cy) as Python floats. A CPU K costs no device sync."""
    k = K.detach()
    if k.device.type != "cpu":
        k = k.cpu()
    (fx, _, cx), (_, fy, cy), _ = k.tolist()
    return float(fx), float(fy), float(cx), float(cy)


class TiledRaster(torch.autograd.Function):
    """Forward/backward through the compiled tiled kernels ('cpu' or 'cuda').

    Outputs (color (H,W,3), depth (H,W) metres (normalised, 0 where alpha <= DEPTH_EPS),
    alpha (H,W)). The backward adds the per-sphere statistics into ``stats`` when one is given.
    Output gradients go to the kernels as they come: strided ones are read through their
    strides, absent ones (the output did not reach the loss) are passed as empty tensors.
    """

    @staticmethod
    def forward(ctx, kind, cam, width, height, stats, room, means, radii, colors, opacities, background):
        ctx.set_materialize_grads(False)
        ctx.kind, ctx.cam, ctx.size, ctx.stats = kind, cam, (width, height), stats
        if room is None:
            color, depth, alpha, last, ids, ranges, parts = _ext.ops(kind).forward(
                means, radii, colors, opacities, background, *cam, width, height, DEPTH_EPS)
        else:
            color, depth, alpha, last, ids, ranges, parts = _ext.ops(kind).forward_capped(
                means, radii, colors, opacities, background, *cam, width, height, DEPTH_EPS,
                room.capacity or 0, room.counts)
        ctx.save_for_backward(means, radii, colors, opacities, background, alpha, depth, last,
                              ids, ranges, parts)
        return color, depth, alpha

    @staticmethod
    def backward(ctx, g_color, g_depth, g_alpha):
        (means, radii, colors, opacities, background, alpha, depth, last, ids,
         ranges, parts) = ctx.saved_tensors
        empty = means.new_empty(0)
        stats = ctx.stats
        if stats is not None:
            sw, se, sn = stats.weight_sum, stats.error_sum, stats.count
            err = stats.pixel_error
            err = empty if err is None else err.detach().to(means.device, torch.float32).contiguous()
        else:
            sw, se, sn, err = means.new_empty(0), means.new_empty(0), means.new_empty(0), empty
        g_color, g_depth, g_alpha = (empty if g is None else g for g in (g_color, g_depth, g_alpha))
        g_means, g_radii, g_colors, g_opac = _ext.ops(ctx.kind).backward(
            means, radii, colors, opacities, background, *ctx.cam, *ctx.size, DEPTH_EPS, ids,
            ranges, alpha, depth, last, parts, g_color, g_depth, g_alpha, err, sw, se, sn)
        return None, None, None, None, None, None, g_means, g_radii, g_colors, g_opac, None


def tiled(kind, means, radii, colors, opacities, K, width, height, background, stats, room=None):
    """(color (H,W,3), depth (H,W) metres, alpha (H,W)) from the compiled ``kind`` ('cpu' or
    'cuda') kernels, differentiable; ``room``: an optional ``rasterizer.PairRoom``."""
    return TiledRaster.apply(kind, _camera(K), int(width), int(height), stats, room,
                             means.contiguous(), radii.contiguous(), colors.contiguous(),
                             opacities.contiguous(), background.contiguous())


def gsplat_render(means, radii, colors, opacities, K, width, height, background):
    """The same spheres through ``gsplat.rasterization`` as equal-scale Gaussians (GPU only).

    Differences from our model: gsplat projects with the full perspective Jacobian (off-axis
    footprints become slightly elliptical and rotated), clamps alpha at 0.999 instead of 0.99 and
    has no 3-sigma ellipse test. Returns (color (H,W,3), depth (H,W) metres, alpha (H,W)), depth
    normalised as in our kernels: accumulated depth / max(alpha, DEPTH_EPS).
    """
    from gsplat import rasterization  # lazy: never imported at package import

    n = means.shape[0]
    quats = means.new_zeros(n, 4)
    quats[:, 0] = 1.0
    Kg = K.detach().clone().to(means)
    Kg[0, 2] += 0.5  # gsplat puts pixel centres at i + 0.5
    Kg[1, 2] += 0.5
    viewmat = torch.eye(4, device=means.device, dtype=means.dtype)
    img, alpha, _ = rasterization(
        means, quats, radii[:, None].repeat(1, 3), opacities, colors, viewmat[None], Kg[None],
        width, height, near_plane=0.01, far_plane=100.0, eps2d=0.3, packed=False,
        render_mode="RGB+D", rasterize_mode="classic", radius_clip=0.0)
    img, alpha = img[0], alpha[0, ..., 0]
    color = img[..., :3] + (1.0 - alpha)[..., None] * background
    return color, img[..., 3] / alpha.clamp_min(DEPTH_EPS), alpha
