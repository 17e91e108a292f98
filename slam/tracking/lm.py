"""The tracker's Gauss-Newton / Levenberg-Marquardt math: residuals, robust weights, pose
Jacobian rows and the normal equations, as public functions of tensors (the tracker's loop is in
``slam.tracking.tracker``).

The residual of a pixel has four channels, laid out as ``stacked``: three colour values after the
affine exposure (gain = exp(log_gain), bias) and one depth value times ``depth_weight``; pixels
outside the mask are zero. Parameters: 6 pose (rotation vector about a pivot (0, 0, z_pivot) of
the camera frame, then translation; applied on the left of the world-to-camera pose) and, with
exposure, 2 more (log gain, bias). Shapes: images (H, W, C) on the tracking device; K on the CPU.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np
import torch

from rasterizer import depth_edge_mask
from rasterizer.lm_state import clamp_exposure
from rasterizer.normal_equations import packed_size, robust_normal_equations, unpack
from rasterizer.point_motion import point_motion
from slam.observation import Observation

# The normal equations are reduced over bands of at most this many pixels: the float32 Jacobian
# buffer is 8 parameters x 4 channels x BAND_PIXELS floats (2.6 MB) instead of a whole image's
# (9.8 MB at 320x240). A memory/launch-count trade-off, not a tuning value: results do not depend
# on it beyond float rounding.
BAND_PIXELS = 20480
FP16_MAX = 65504.0   # finite-difference columns are stored as float16: clamp, never inf
# Numerical guards of the LM step, not tuning values: the damping never reaches 0 (a singular
# system), and parameters with no evidence (zero diagonal) still get a finite damping term.
MIN_DAMPING = 1e-6
MIN_DIAGONAL = 1e-9


def pyramid(obs: Observation, levels: int) -> list[tuple[Observation, torch.Tensor]]:
    """Coarse-to-fine levels of ``obs`` (finest = ``obs`` itself), each with its (H, W) bool mask
    of valid depth away from depth edges."""
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


def stacked(out, a: int = 0, b: Optional[int] = None) -> torch.Tensor:
    """(b - a, W, 4) a render's colour (3) and depth (1) of image rows [a, b) (default: all)."""
    return torch.cat([out.color[a:b], out.depth[a:b].unsqueeze(-1)], dim=-1)


def target(obs: Observation, depth_weight: float) -> torch.Tensor:
    """(H, W, 4) what a render is compared with: colour (3) and depth * depth_weight."""
    return torch.cat([obs.color, obs.depth.unsqueeze(-1) * depth_weight], dim=-1)


def affine(exposure: tuple[float, float], depth_weight: float, device) -> torch.Tensor:
    """(2, 4) per-channel scale and offset that map a render onto the target: colour gets the
    exposure (gain = exp(log_gain), bias; clamped to the plausible range,
    ``rasterizer.lm_state.clamp_exposure``), depth the depth weight."""
    log_gain, bias = clamp_exposure(*exposure)
    gain = math.exp(log_gain)
    return torch.tensor([[gain, gain, gain, depth_weight], [bias, bias, bias, 0.0]],
                        dtype=torch.float32).to(device)


def residual(out, target: torch.Tensor, m: torch.Tensor, affine: torch.Tensor) -> torch.Tensor:
    """Dense residual (H, W, 4), zero where the float mask ``m`` (H, W, 1) is 0. Fixed shapes: no
    boolean indexing, so no host sync."""
    return torch.addcmul(affine[1], stacked(out), affine[0]).sub_(target).mul_(m)


def huber_thresholds(color: float, depth: float, depth_weight: float, device) -> torch.Tensor:
    """(4,) Huber thresholds of the residual channels: colour (0-1 intensity) and depth (metres,
    times ``depth_weight`` like the depth residual)."""
    return torch.tensor([color, color, color, depth * depth_weight], dtype=torch.float32, device=device)


def robust_weights(r: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """IRLS weights of the Huber loss per residual (H, W, 4): 1 inside the thresholds ``k`` (4,),
    k/|r| outside."""
    return k / torch.maximum(r.abs(), k)


def robust_cost(r: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """sum of w r^2 with the Huber IRLS weights (a 0-d device tensor)."""
    return (robust_weights(r, k) * r * r).sum()


def analytic_pose_rows(out, obs: Observation, mask: torch.Tensor, affine: torch.Tensor, z_pivot: float,
                       a: int, b: int, J6: torch.Tensor) -> None:
    """Pose rows of the residual Jacobian of image rows [a, b) from the rendered image's own
    gradients (no extra render): moving the camera by a small increment shifts the rendered
    surface point seen at pixel u by du, so I_new(u) ~ I(u) - grad I . du and
    D_new(u) ~ D(u) - grad D . du + dz (the dense RGB-D odometry linearisation, with the render as
    the reference frame). Disocclusions and footprint changes are ignored; the LM accept test
    still uses true renders. ``mask``: (H, W) bool; ``affine``: the residual's (2, 4) scale and
    offset (its scale row carries the exposure gain and the depth weight). Writes J6:
    (6, b - a, W, 4) float32 (rotation about the pivot (0, 0, z_pivot) x/y/z, then translation
    x/y/z), zero outside ``mask``. Only the band (plus one halo row each side for the vertical
    gradient) is ever expanded."""
    (fx, _, cx), (_, fy, cy), _ = obs.K.tolist()
    H, W = obs.height, obs.width
    band_mask = mask[a:b]
    z = torch.where(band_mask, out.depth[a:b], torch.ones_like(out.depth[a:b]))
    iz = 1.0 / z
    dev = z.device
    xn = ((torch.arange(W, device=dev, dtype=z.dtype) - cx) / fx).view(1, W).expand(b - a, W)
    yn = ((torch.arange(a, b, device=dev, dtype=z.dtype) - cy) / fy).view(b - a, 1).expand(b - a, W)
    rz = 1.0 - z_pivot * iz          # (z - z_pivot) / z
    # Central differences (one-sided at the image borders), as over the whole image: the halo rows
    # make the band's vertical gradient exact, then are cut off.
    a0, b0 = max(a - 1, 0), min(b + 1, H)
    gy, gx = torch.gradient(stacked(out, a0, b0), dim=(0, 1))
    gy, gx = gy[a - a0 : a - a0 + b - a], gx[a - a0 : a - a0 + b - a]
    # Pixel motion (du, dv) and depth change dz per unit of each parameter (None = identically
    # zero), one parameter at a time: (band, W) temporaries only, not (6, band, W) stacks.
    for k in range(6):
        du, dv, dz = point_motion(k, xn, yn, z, iz, rz, fx, fy)
        row = J6[k]
        if du is None:
            torch.mul(gy, dv.unsqueeze(-1), out=row)
        else:
            torch.mul(gx, du.unsqueeze(-1), out=row)
            if dv is not None:
                row.addcmul_(gy, dv.unsqueeze(-1))
        row.neg_()
        if dz is not None:
            row[..., 3].add_(dz)
    J6.mul_(affine[0]).mul_(band_mask.unsqueeze(-1).to(J6.dtype))


def copy_rows(cols: torch.Tensor, a: int, b: int, J6: torch.Tensor) -> None:
    """J6 (6, b - a, W, 4) float32 <- image rows [a, b) of stored columns (6, H, W, 4)."""
    J6.copy_(cols[:, a:b])


def fd_pose_columns(render: Callable[[np.ndarray], object], target: torch.Tensor, m: torch.Tensor,
                    affine: torch.Tensor, r: torch.Tensor, T_cw: np.ndarray,
                    moved: Callable[[np.ndarray, np.ndarray], np.ndarray], steps: list[float]) -> torch.Tensor:
    """Pose rows of the residual Jacobian by forward differences of real renders (6 extra renders:
    ``render(T_cw)`` -> RasterOutput; ``moved(T_cw, delta6)`` applies an increment; ``steps`` (6,)
    rad / m): exact for the render, footprint changes and disocclusions included. Returns
    (6, H, W, 4) float16 (half the memory of float32; the normal equations accumulate in float32),
    zero where ``m`` is 0."""
    cols = torch.empty((6,) + tuple(r.shape), dtype=torch.float16, device=r.device)
    for k in range(6):
        delta = np.zeros(6)
        delta[k] = steps[k]
        r_k = residual(render(moved(T_cw, delta)), target, m, affine)
        cols[k].copy_(r_k.sub_(r).div_(steps[k]).clamp_(-FP16_MAX, FP16_MAX))
    return cols


def normal_equations(r: torch.Tensor, out, m: torch.Tensor, exposure: tuple[float, float],
                     pose_rows: Callable[[int, int, torch.Tensor], None], k: torch.Tensor,
                     with_exposure: bool) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Gauss-Newton normal equations of the Huber-weighted (thresholds ``k`` (4,)) residual ``r``
    (H, W, 4): H = J^T W J and g = J^T W r over 6 pose (+ 2 exposure with ``with_exposure``)
    parameters, and the robust cost, copied to the host in one sync as float64
    (Hd (P, P), gd (P,), cost). ``pose_rows(a, b, J6)`` fills the six pose rows of image rows
    [a, b) into J6 (6, b - a, W, 4). The Jacobian is built and reduced one band of rows at a time
    (``BAND_PIXELS``), so no image-sized Jacobian exists; every temporary dies with this call."""
    n_params = 8 if with_exposure else 6
    H, W = r.shape[:2]
    band = max(1, min(H, BAND_PIXELS // W))
    J = torch.empty(n_params, band * W * 4, device=r.device)
    packed = torch.zeros(packed_size(n_params), dtype=torch.float64, device=r.device)
    gain = math.exp(clamp_exposure(*exposure)[0])
    for a in range(0, H, band):
        b = min(H, a + band)
        Jb = J[:, : (b - a) * W * 4]
        pose_rows(a, b, Jb[:6].view(6, b - a, W, 4))
        if with_exposure:
            # d r_colour / d log_gain = gain * colour; d r_colour / d bias = 1 (masked).
            ex = Jb[6:8].view(2, b - a, W, 4)
            ex[..., 3] = 0
            torch.mul(out.color[a:b], m[a:b], out=ex[0, ..., :3]).mul_(gain)
            ex[1, ..., :3] = m[a:b]
        robust_normal_equations(Jb, r[a:b], k, packed)   # Huber weights, H, g, cost: one kernel
    Hd, gd, cost = unpack(packed.cpu(), n_params)
    return Hd, gd, float(cost)


def damped_step(H, g, damping: float) -> np.ndarray:
    """The Levenberg-Marquardt step -(H + damping diag(H))^-1 g of host normal equations H (P, P),
    g (P,) (float64 CPU tensors or arrays), the diagonal floored at MIN_DIAGONAL: (P,) float64;
    zero (no move) when the system is singular or the step not finite (NaN / inf normal equations),
    as the device LM's step (csrc/lm_math.h). Solved in NumPy: an 8x8 system, where PyTorch's
    dispatch costs more than the solve."""
    Hn, gn = np.asarray(H, dtype=np.float64), np.asarray(g, dtype=np.float64)
    try:
        step = -np.linalg.solve(Hn + damping * np.diag(np.maximum(np.diag(Hn), MIN_DIAGONAL)), gn)
    except np.linalg.LinAlgError:
        return np.zeros_like(gn)
    return step if np.all(np.isfinite(step)) else np.zeros_like(gn)
