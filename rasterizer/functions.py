"""Thin autograd wrappers: one torch.autograd.Function for the tiled kernels (CPU and CUDA; the
CUDA kernels also normalise the depth) and the gsplat adapter."""
from __future__ import annotations

import weakref

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

    Outputs (color (H,W,3), depth (H,W), alpha (H,W)). The CPU kernels return the accumulated
    depth sum(w z) (normalised by :class:`NormalizeDepth` on top); the CUDA kernels normalise it
    themselves (the same arithmetic, fused: no extra kernels or autograd node per render) and
    take its gradient directly. The backward adds the per-sphere statistics into ``stats`` when
    one is given.
    """

    @staticmethod
    def forward(ctx, kind, cam, width, height, stats, means, radii, colors, opacities, background):
        ext = _ext.get(kind)
        fx, fy, cx, cy = cam
        ctx.kind, ctx.cam, ctx.size, ctx.stats = kind, cam, (width, height), stats
        if kind == "cuda":
            color, depth, alpha, last, ids, ranges = ext.forward(
                means, radii, colors, opacities, background, fx, fy, cx, cy, width, height,
                DEPTH_EPS)
            ctx.save_for_backward(means, radii, colors, opacities, background, alpha, depth, last,
                                  ids, ranges)
            return color, depth, alpha
        outs = ext.forward(means, radii, colors, opacities, background, fx, fy, cx, cy, width, height)
        color, dacc, alpha, last, splats, ids, ranges = outs
        ctx.save_for_backward(means, radii, colors, opacities, background, alpha, last, splats,
                              ids, ranges)
        return color, dacc, alpha

    @staticmethod
    def backward(ctx, g_color, g_depth, g_alpha):
        ext = _ext.get(ctx.kind)
        fx, fy, cx, cy = ctx.cam
        width, height = ctx.size
        stats = ctx.stats
        if ctx.kind == "cuda":
            (means, radii, colors, opacities, background, alpha, depth, last, ids,
             ranges) = ctx.saved_tensors
        else:
            (means, radii, colors, opacities, background, alpha, last, splats, ids,
             ranges) = ctx.saved_tensors
        empty = means.new_empty(0)
        if stats is not None:
            sw, se, sn = stats.weight_sum, stats.error_sum, stats.count
            err = stats.pixel_error
            err = empty if err is None else err.detach().to(means.device, torch.float32).contiguous()
        else:
            sw = se = sn = err = empty
        if ctx.kind == "cuda":  # the CUDA kernel reads strided (e.g. expanded) gradients directly
            g_means, g_radii, g_colors, g_opac = ext.backward(
                means, radii, colors, opacities, background, fx, fy, cx, cy, width, height,
                DEPTH_EPS, ids, ranges, alpha, depth, last, g_color, g_depth, g_alpha, err, sw, se,
                sn)
        else:
            g_color, g_depth, g_alpha = g_color.contiguous(), g_depth.contiguous(), g_alpha.contiguous()
            g_means, g_radii, g_colors, g_opac = ext.backward(
                means, radii, colors, opacities, background, fx, fy, cx, cy, width, height, splats,
                ids, ranges, alpha, last, g_color, g_depth, g_alpha, err, sw, se, sn)
        return None, None, None, None, None, g_means, g_radii, g_colors, g_opac, None


class NormalizeDepth(torch.autograd.Function):
    """depth = accumulated depth / alpha where alpha > eps, else 0 (the same for every backend).

    Equivalent to ``where(alpha > eps, dacc / alpha, 0)`` because dacc is exactly 0 wherever no
    sphere was blended (and alpha >= 1/255 wherever one was); written out to keep the backward to
    three small kernels and two image-sized temporaries.

    ``apply`` returns its input unchanged when it is a depth that :func:`tiled` got already
    normalised (with the same eps and alpha) from the CUDA kernels."""

    @classmethod
    def apply(cls, dacc, alpha, eps):
        done = getattr(dacc, _NORMALISED, None)
        if done is not None and done[0] == eps and done[1]() is alpha:
            return dacc
        return super().apply(dacc, alpha, eps)

    @staticmethod
    def forward(ctx, dacc, alpha, eps):
        depth = dacc / alpha.clamp_min(eps)
        ctx.eps = eps
        ctx.save_for_backward(alpha, depth)
        return depth

    @staticmethod
    def backward(ctx, g):
        alpha, depth = ctx.saved_tensors
        g_dacc = g / alpha.clamp_min(ctx.eps)
        # d/d alpha = -g * dacc / alpha^2 = -g_dacc * depth where alpha > eps; where alpha <= eps
        # the clamp makes it 0, and so does depth (= 0 there): no mask needed.
        g_alpha = torch.mul(g_dacc, depth).neg_()
        return g_dacc, g_alpha, None


# Attribute that marks a depth image as normalised already: (eps, weakref to its alpha).
_NORMALISED = "_sphere_raster_normalised"


def tiled(kind, means, radii, colors, opacities, K, width, height, background, stats):
    """(color, depth, alpha) from the compiled ``kind`` kernels, differentiable. The depth is the
    accumulated depth for 'cpu' and the normalised one for 'cuda' (marked so that
    ``NormalizeDepth.apply(depth, alpha, DEPTH_EPS)`` passes it through)."""
    color, depth, alpha = TiledRaster.apply(kind, _camera(K), int(width), int(height), stats,
                                            means.contiguous(), radii.contiguous(),
                                            colors.contiguous(), opacities.contiguous(),
                                            background.contiguous())
    if kind == "cuda":
        setattr(depth, _NORMALISED, (DEPTH_EPS, weakref.ref(alpha)))
    return color, depth, alpha


def gsplat_render(means, radii, colors, opacities, K, width, height, background):
    """The same spheres through ``gsplat.rasterization`` as equal-scale Gaussians (GPU only).

    Differences from our model: gsplat projects with the full perspective Jacobian (off-axis
    footprints become slightly elliptical and rotated), clamps alpha at 0.999 instead of 0.99 and
    has no 3-sigma ellipse test. Returns (color, accumulated depth, alpha).
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
    return color, img[..., 3], alpha
