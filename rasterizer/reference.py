"""Pure-PyTorch reference backend: dense over pixels x spheres, front-to-back with cumprod.

Slow and memory-hungry (O(H*W*N) per chunk of pixels) but short and obviously correct: it is the
oracle for the tiled CPU and CUDA kernels. Works in float32 and float64 (for gradcheck).
"""
from __future__ import annotations

import torch

from . import _model as M

# Upper bound on pixels x spheres per chunk, to bound memory.
_CHUNK_ELEMS = 1 << 22


def project(means: torch.Tensor, radii: torch.Tensor, K: torch.Tensor):
    """Screen-space splat of each sphere.

    Returns (visible (N,) bool, u (N,), v (N,), ia (N,), ic (N,)) where (u, v) is the centre in px
    and ia = 1/sx^2, ic = 1/sy^2 with sx^2 = (fx*r/z)^2 + LOW_PASS (px^2). Values of culled
    spheres are finite but meaningless.
    """
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    z = means[:, 2]
    visible = (z > M.NEAR) & (z <= M.FAR)
    iz = 1.0 / torch.where(visible, z, torch.ones_like(z))
    u = fx * means[:, 0] * iz + cx
    v = fy * means[:, 1] * iz + cy
    s2 = (radii * iz) ** 2
    ia = 1.0 / (fx * fx * s2 + M.LOW_PASS)
    ic = 1.0 / (fy * fy * s2 + M.LOW_PASS)
    return visible, u, v, ia, ic


def depth_order(means: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """Indices of the visible spheres sorted by ascending z, ties by index."""
    key = torch.where(visible, means[:, 2].detach(), torch.full_like(means[:, 2], float("inf")))
    order = torch.sort(key, stable=True).indices
    return order[visible[order]]


def _composite_chunk(px, py, u, v, ia, ic, o):
    """Blend weights (P, S) and final transmittance (P,) for pixel centres (px, py)."""
    du = px[:, None] - u[None, :]
    dv = py[:, None] - v[None, :]
    q = du * du * ia + dv * dv * ic
    a = torch.clamp(o[None, :] * torch.exp(-0.5 * q), max=M.ALPHA_MAX)
    keep = (q <= M.CUTOFF_Q) & (a >= M.ALPHA_MIN)
    a = torch.where(keep, a, torch.zeros_like(a))
    with torch.no_grad():  # a sphere is blended only if T stays above T_MIN after it
        blended = torch.cumprod(1.0 - a, dim=1) > M.T_MIN
    a = torch.where(blended, a, torch.zeros_like(a))
    one_minus = 1.0 - a  # >= 1 - ALPHA_MAX > 0: cumprod backward is safe
    t_incl = torch.cumprod(one_minus, dim=1)
    T = torch.cat([torch.ones_like(t_incl[:, :1]), t_incl[:, :-1]], dim=1)
    t_final = t_incl[:, -1] if a.shape[1] > 0 else torch.ones_like(px)
    return a * T, t_final


def render_reference(means, radii, colors, opacities, K, width, height, background, stats=None):
    """Dense render. Returns (color (H,W,3), depth (H,W) metres, alpha (H,W)), depth normalised
    with PyTorch ops (accumulated depth / max(alpha, DEPTH_EPS); autograd differentiates it).

    If ``stats`` is given, the backward pass of these outputs adds the per-sphere statistics
    (weight_sum, error_sum with stats.pixel_error, count) into it.
    """
    dev, dt = means.device, means.dtype
    K = K.to(dt)
    visible, u, v, ia, ic = project(means, radii, K)
    order = depth_order(means, visible)
    u, v, ia, ic = u[order], v[order], ia[order], ic[order]
    o, c, z = opacities[order], colors[order], means[order, 2]
    bg = background.to(dt)
    ys, xs = torch.meshgrid(torch.arange(height, device=dev, dtype=dt),
                            torch.arange(width, device=dev, dtype=dt), indexing="ij")
    px, py = xs.reshape(-1), ys.reshape(-1)
    n_pix = px.shape[0]
    step = max(1, _CHUNK_ELEMS // max(1, order.numel()))
    cols, deps, alps, weights = [], [], [], []
    for s in range(0, n_pix, step):
        w, t_final = _composite_chunk(px[s:s + step], py[s:s + step], u, v, ia, ic, o)
        cols.append(w @ c + t_final[:, None] * bg[None, :])
        deps.append(w @ z)
        alps.append(1.0 - t_final)
        if stats is not None:
            weights.append(w.detach())
    color = torch.cat(cols).reshape(height, width, 3)
    dacc = torch.cat(deps).reshape(height, width)
    alpha = torch.cat(alps).reshape(height, width)
    depth = dacc / alpha.clamp_min(M.DEPTH_EPS)
    if stats is not None and torch.is_grad_enabled():
        color, depth, alpha = _StatsTap.apply(stats, order, weights, color, depth, alpha)
    return color, depth, alpha


class _StatsTap(torch.autograd.Function):
    """Identity on the outputs whose backward adds the per-sphere statistics into ``stats``."""

    @staticmethod
    def forward(ctx, stats, order, weights, color, depth, alpha):
        ctx.stats, ctx.order, ctx.weights = stats, order, weights
        return color.view_as(color), depth.view_as(depth), alpha.view_as(alpha)

    @staticmethod
    def backward(ctx, g_color, g_depth, g_alpha):
        stats, order = ctx.stats, ctx.order
        w = torch.cat(ctx.weights) if ctx.weights else None
        if w is not None and order.numel() > 0:
            sd = stats.weight_sum.dtype
            stats.weight_sum.index_add_(0, order, w.sum(0).to(sd))
            stats.count.index_add_(0, order, (w > 0).sum(0).to(sd))
            if stats.pixel_error is not None:
                e = stats.pixel_error.reshape(-1).to(w.dtype)
                stats.error_sum.index_add_(0, order, (w * e[:, None]).sum(0).to(sd))
        return None, None, None, g_color, g_depth, g_alpha
