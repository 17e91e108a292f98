"""Differentiable rasterizer for isotropic 3D Gaussians ("spheres").

Usage::

    import rasterizer
    out = rasterizer.rasterize_spheres(means, radii, colors, opacities, K, width, height)
    out.color  # (H, W, 3)   out.depth  # (H, W)   out.alpha  # (H, W)

The model (identical in every backend: ``reference``, ``cpu``, ``cuda``; ``gsplat`` differs as
noted below)
--------------------------------------------------------------------------------------------------
Inputs are in the camera frame (OpenCV: x right, y down, z forward, metres). Sphere i has centre
(x, y, z), radius r > 0 (its one scale: the standard deviation of the 3D Gaussian, metres),
colour c (3 values) and opacity o in [0, 1].

* Projection: u = fx*x/z + cx, v = fy*y/z + cy. Pixel centres follow OpenCV: pixel (column i,
  row j) has its centre at (u, v) = (i, j).
* Footprint: a circle-like Gaussian with per-axis screen-space variance
  sx^2 = (fx*r/z)^2 + 0.3,  sy^2 = (fy*r/z)^2 + 0.3  (px^2; 0.3 is a low-pass term, as gsplat's
  eps2d). No covariance matrices, no rotation.
* Culling: spheres with z <= 0.01 m or z > 100 m are dropped, as are spheres whose 3-sigma box
  (|du| <= 3 sx, |dv| <= 3 sy) contains no pixel centre of the image.
* At pixel centre p: q = du^2/sx^2 + dv^2/sy^2 with (du, dv) = p - (u, v). The sphere is skipped
  where q > 9 (outside its 3-sigma ellipse; this makes the result independent of tiling).
  Otherwise a = min(0.99, o * exp(-q/2)), and the sphere is skipped where a < 1/255.
* Compositing, front to back in ascending z (ties: lower sphere index first): T_1 = 1,
  w_i = a_i T_i, T_{i+1} = T_i (1 - a_i); a pixel stops at the first sphere that would take T to
  <= 1e-4 (that sphere is not blended; gsplat's rule).
* Outputs: color = sum_i w_i c_i + T_final * background; alpha = 1 - T_final;
  depth = (sum_i w_i z_i) / max(alpha, 1e-6) (expected depth of the blended spheres; 0 where
  nothing was blended, as the sum is 0 there). Every backend returns this depth: the tiled
  kernels (CPU and CUDA) normalise it in the kernel and take its gradient directly (the
  normalisation's backward runs per pixel in the kernel), the reference backend and the gsplat
  adapter normalise it with PyTorch ops.
* Gradients reach means, radii, colors and opacities (not K or background). Where o*G > 0.99
  (clamped alpha) the gradient through that alpha is zero. The cut-offs (q > 9, a < 1/255,
  T <= 1e-4) are treated as constants.

Per-sphere statistics (for the pruner): pass ``stats=SphereStats(N, device)``; set
``stats.pixel_error = err.detach()`` ((H, W), e.g. the L1 error) after the forward and before
``loss.backward()``. The backward pass of that render ADDS into ``stats.weight_sum`` (sum over
pixels of w_ip), ``stats.error_sum`` (sum over pixels of w_ip * e_p) and ``stats.count`` (number of
pixels where the sphere was blended). At least one input must require grad for the backward (and so
the statistics) to run. Not available with backend='gsplat'.

Renders inside a CUDA graph: the binning's pair count M (the (tile, sphere) pairs) sizes a list,
and the exact size costs a host wait per render. Pass ``pair_room=PairRoom(device, capacity)``:
the CUDA kernels then bin with room for ``capacity`` pairs and no host wait, and record on the
device the most pairs seen and whether a render overflowed (then the pairs beyond the room were
dropped: that render is wrong, and the caller redoes it with more room). With ``capacity=None``
they bin exactly and record M (how a caller learns the room to give). The CPU kernel always bins
exactly and records the same. Not available with backend='reference' or 'gsplat'.

Camera tracking: ``gauss_newton(...)`` renders at a pose, differentiates the render with respect to
a pose increment and reduces the robust normal equations against an observed RGB-D frame in one
fused pass; its model is in rasterizer/gauss_newton.py.

Mapping: ``adam_rows(params, exp_avg, exp_avg_sq, steps, grad, lr)`` is the map's Adam update of
packed sphere rows in one kernel (per-row step counts, per-column learning rates; rasterizer/adam.py);
``activate_rows(rows)`` the rows' parametrisation (means, exp radius, sigmoid colours and opacity) and
``activate_rows_backward`` its gradient, one kernel each, and ``transform_means`` their move of points
into a camera (rasterizer/activation.py);
``render_l1_loss(color, depth, obs_color, obs_depth, valid, depth_ok, depth_weight)`` its loss (masked
L1 colour and depth of a render against a frame) and the pixel errors, one kernel each way
(rasterizer/loss.py).

Frames: ``unpack_frame(color, depth)`` a compact frame (uint8 colour, float32 or float16 depth) as
float images (colour / 255, invalid depth 0) in one kernel: a camera frame's upload, a stored
keyframe's step; ``downsample(color, depth, factor)`` is an image at 1/factor resolution (mean colour, median
valid depth) in one kernel: the tracking resolution and the tracker's pyramid; ``depth_edge_mask(depth,
max_jump)`` the valid depth away from depth edges, in one kernel; ``unroll(color, depth, intrinsics,
omega, color_readout_s, depth_readout_s, depth_offset_s)`` a rolling-shutter frame (and a depth
image taken after its colour) in the camera of the colour's middle row, in one kernel
(rasterizer/frame.py). ``median_depth(depth)`` the lower median of the valid depths (the tracker's
pivot) and ``lower_median(x)`` a tensor's, one kernel each (rasterizer/median.py).

Backends: ``auto`` (cuda for CUDA tensors, else cpu), ``cuda`` and ``cpu`` (tiled kernels compiled
on first use, see rasterizer/_build.py), ``reference`` (dense PyTorch, float32 or float64), and
``gsplat`` (gsplat.rasterization with scales = r, identity rotations; for comparison only: it
projects with the full perspective Jacobian, so off-axis footprints differ slightly, clamps alpha at
0.999 and has no 3-sigma ellipse test).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from ._ext import BACKENDS, OP_BACKENDS, resolve_backend
from ._inputs import check_spheres, zeros3
from .activation import activate_rows, activate_rows_backward, transform_means
from .adam import adam_rows
from .frame import depth_edge_mask, downsample, unpack_frame, unroll
from .gauss_newton import GaussNewtonResult, gauss_newton, increment_points
from .loss import RenderLoss, render_l1_loss
from .median import lower_median, median_depth

__all__ = ["rasterize_spheres", "RasterOutput", "SphereStats", "PairRoom", "BACKENDS", "OP_BACKENDS", "gauss_newton",
           "GaussNewtonResult", "increment_points", "adam_rows", "activate_rows", "activate_rows_backward",
           "transform_means", "render_l1_loss", "RenderLoss", "unpack_frame", "downsample", "depth_edge_mask", "unroll",
           "median_depth", "lower_median"]


class RasterOutput(NamedTuple):
    color: torch.Tensor  # (H, W, 3)
    depth: torch.Tensor  # (H, W) expected depth, 0 where alpha <= DEPTH_EPS
    alpha: torch.Tensor  # (H, W)


class SphereStats:
    """Per-sphere statistics accumulated by the backward pass of a render (see module docstring).

    Fields: ``weight_sum``, ``error_sum``, ``count`` - (N,) float32 on ``device``;
    ``pixel_error`` - (H, W) tensor or None, set by the caller before ``backward()``.
    """

    def __init__(self, n: int, device="cpu"):
        self.weight_sum = torch.zeros(n, device=device, dtype=torch.float32)
        self.error_sum = torch.zeros(n, device=device, dtype=torch.float32)
        self.count = torch.zeros(n, device=device, dtype=torch.float32)
        self.pixel_error: Optional[torch.Tensor] = None

    def zero_(self) -> "SphereStats":
        self.weight_sum.zero_()
        self.error_sum.zero_()
        self.count.zero_()
        return self


class PairRoom:
    """Room for a render's (tile, sphere) pairs, for renders without a host wait (module docstring).

    ``capacity``: pairs the CUDA binning has room for (None: bin exactly, one host wait, and record
    the count); ``counts``: (2,) float64 on ``device``, [most pairs seen, overflowed (0 or 1)],
    updated on the device by every render given this room."""

    def __init__(self, device, capacity: Optional[int] = None):
        if capacity is not None and int(capacity) <= 0:
            raise ValueError(f"capacity must be a positive number of pairs or None, got {capacity}")
        self.capacity = None if capacity is None else int(capacity)
        self.counts = torch.zeros(2, dtype=torch.float64, device=device)

    def read(self) -> tuple[int, bool]:
        """(most pairs seen, whether a render overflowed): a host wait on CUDA."""
        most, overflowed = self.counts.tolist()
        return int(most), bool(overflowed)

    def reset(self) -> "PairRoom":
        """Forget the counts (in place: a captured graph keeps its tensor)."""
        self.counts.zero_()
        return self


def _validate(means, radii, colors, opacities, K, width, height, background, backend, stats):
    check_spheres(means, radii, colors, opacities, K, width, height, backend == "reference")
    n = means.shape[0]
    if background is not None and (not isinstance(background, torch.Tensor)
                                   or background.shape != (3,)):
        raise ValueError("background must be a (3,) tensor or None")
    if stats is not None:
        if not isinstance(stats, SphereStats):
            raise TypeError("stats must be a rasterizer.SphereStats")
        if stats.weight_sum.shape != (n,) or stats.weight_sum.device != means.device:
            raise ValueError(f"stats must hold ({n},) buffers on {means.device}")


def rasterize_spheres(means, radii, colors, opacities, K, width, height, background=None,
                      backend="auto", stats=None, pair_room=None) -> RasterOutput:
    """Render spheres into colour, expected depth and alpha images.

    Args:
        means: (N, 3) camera-frame centres, metres (float32; float64 with backend='reference').
        radii: (N,) radii (3D standard deviation), metres, > 0.
        colors: (N, 3) colours.  opacities: (N,) in [0, 1].
        K: (3, 3) pinhole intrinsics (any device). width, height: image size in px.
        background: (3,) colour behind the spheres, or None for black.
        backend: 'auto' | 'cuda' | 'cpu' | 'reference' | 'gsplat'.
        stats: optional SphereStats that the backward pass adds into.
        pair_room: optional PairRoom: bin with its room, record the pair count (module docstring).
    Returns:
        RasterOutput(color (H, W, 3), depth (H, W) metres, alpha (H, W)).
    """
    _validate(means, radii, colors, opacities, K, width, height, background, backend, stats)
    backend = resolve_backend(backend, means, BACKENDS)
    if background is None:
        background = zeros3(means.device, means.dtype)
    else:
        background = background.detach().to(means.device, means.dtype)
    K = K.detach()
    if pair_room is not None:
        if not isinstance(pair_room, PairRoom):
            raise TypeError("pair_room must be a rasterizer.PairRoom")
        if backend in ("reference", "gsplat"):
            raise NotImplementedError(f"pair_room is not available with backend={backend!r}")
        if pair_room.counts.device != means.device:
            raise ValueError(f"pair_room's counts must be on {means.device}, got {pair_room.counts.device}")
    if backend == "reference":
        from .reference import render_reference
        color, depth, alpha = render_reference(means, radii, colors, opacities,
                                               K.to(means.device), width, height, background,
                                               stats)
    elif backend == "gsplat":
        if stats is not None:
            raise NotImplementedError("per-sphere statistics are not available with backend='gsplat'")
        from .functions import gsplat_render
        color, depth, alpha = gsplat_render(means, radii, colors, opacities, K.to(means.device),
                                            width, height, background)
    else:
        from .functions import tiled
        color, depth, alpha = tiled(backend, means, radii, colors, opacities, K, width, height,
                                    background, stats, pair_room)
    return RasterOutput(color, depth, alpha)
