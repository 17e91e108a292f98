"""Fused Gauss-Newton pass for camera tracking: one pass over the image at a camera pose that
renders the spheres, differentiates the render with respect to a pose increment, compares it with
an observed RGB-D frame and reduces the robust normal equations, all in the kernel.

Usage::

    packed = rasterizer.gauss_newton(means_c, radii, colors, opacities, K, W, H, obs_color,
                                     obs_depth, valid, pivot_z=1.5, gain=1.0, bias=0.0,
                                     depth_weight=1.0, huber=(0.1, 0.05), alpha_threshold=0.9,
                                     depth_noise=(0.01, 0.005), color_tol=0.1)
    res = rasterizer.GaussNewtonResult.unpack(packed)   # one host transfer
    step = -torch.linalg.solve(res.H, res.g)

The model (identical in the backends ``cpu``, ``cuda`` and ``reference``)
--------------------------------------------------------------------------
* Render: exactly ``rasterize_spheres`` (rasterizer/__init__.py) of the spheres as given (camera
  frame, metres) with the background given (black by default): colour C, alpha = 1 - T_final,
  depth D = sum(w z) / max(alpha, 1e-6); same culling and cut-offs.
* Parameters theta: 6 pose parameters (w (3, rad), t (3, m)) and, with ``exposure=True``, log gain
  and bias. The pose increment acts on camera-frame points as X' = R(w) (X - p) + p + t with the
  pivot p = (0, 0, pivot_z) (slam.geometry.pivot_increment); derivatives are taken at theta = 0:
  dX/dw = -[X - p]_x (dX = w x (X - p)), dX/dt = I. Radii, colours and opacities do not depend on
  the pose.
* Derivatives (forward mode, through the front-to-back compositing): per sphere, once, the
  closed-form derivatives of its centre (u, v), depth z and inverse screen variances
  ia = 1/sx^2, ic = 1/sy^2 (functions of z); per pixel, with q = du^2 ia + dv^2 ic:
  da = -a/2 dq (0 where o G > 0.99: the clamped alpha is constant), dw_i = da_i T_i + a_i dT_i,
  dT_{i+1} = dT_i (1 - a_i) - T_i da_i, dC = sum dw_i c_i + dT_final bg and
  dD = (d sum(w z) + D dT_final) / alpha (the normalisation's derivative; where alpha < 1e-6 the
  denominator is the constant 1e-6). The cut-offs (q > 9, a < 1/255, T <= 1e-4, culling) are
  constants, as in the render's backward.
* Residuals: colour r_c = (bias + gain C) - obs_color (3 channels),
  depth r_d = depth_weight D - depth_weight obs_depth. A pixel counts (is *covered*) where
  ``valid`` is true and alpha > alpha_threshold. Huber IRLS weights per channel
  w = k / max(|r|, k), k = (hc, hc, hc, hd * depth_weight) for ``huber = (hc, hd)``.
* Jacobian rows per covered pixel: colour gain dC/dtheta_pose, gain C (log gain), 1 (bias);
  depth depth_weight dD/dtheta_pose, 0 (exposure).
* ``obs_weight`` b > 0 (an ESM-style blend): at a covered pixel whose observed depth z > 0 has a
  neighbour with valid depth on each axis, the pose rows are (1 - b) x the exact rows above + b x
  the observation's: colour -grad obs_c . (du, dv), depth depth_weight (dz - grad obs_d . (du, dv)),
  where grad is the central difference over the axis' two neighbours with valid depth inside the
  image (one-sided with one), and (du, dv, dz) the pixel motion and depth change per pose parameter
  of the point z (xn, yn, 1) (xn = (px - cx) / fx at pixel centres px = 0, 1, ..). At the optimum
  the render matches the observation, so these are the render's derivatives there; the blend
  widens the basin of convergence. The cost, l1 and counts do not depend on b.
* Reduced over covered pixels: H = J^T W J (8x8; the exposure rows and columns are 0 without
  exposure), g = J^T W r, cost = sum w r^2, l1 = sum |r| (colour channels summed, plus the depth
  channel), and the counts (as tests/render_oracle.py's pixel_counts):
  valid pixels, covered pixels, depth inliers (covered and |D - obs_depth| <= floor + quad
  obs_depth^2 with ``depth_noise = (floor, quad)``) and colour inliers (covered and the mean over
  the 3 channels of |r_c| <= color_tol).
* ``derivatives=False``: cost, l1 and the counts only (H and g are 0): an LM trial step.

Result: one float64 tensor of PACKED_SIZE (50) values on the spheres' device: the upper triangle
of H (36, row-major: (0,0) (0,1) .. (0,7) (1,1) ..), g (8), cost, l1, n_valid, n_covered,
n_depth_in, n_color_in. No image-sized buffer is allocated besides the render's tiling.

Kernels: CUDA (csrc/gn_cuda.cu: the render's projection, sorting and binning on 8x8 tiles (the
render's are 16x16: shorter lists, see there), one block per tile; per-block float sums added into
the float64 result with atomics), CPU (csrc/gn_cpu.cpp, OpenMP over tiles, double per tile),
sharing the per-sphere and per-pixel math (csrc/gn_math.h); ``reference``
(rasterizer/gn_reference.py): torch.func.jacfwd through the PyTorch reference render, normal
equations in float64 (the oracle of the tests).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import _ext
from ._inputs import check_spheres, zeros3
from ._model import DEPTH_EPS
from .functions import _camera
from .gn_reference import N_PARAMS, N_TRI, PACKED_SIZE, gauss_newton_reference, increment_points, unpack

__all__ = ["gauss_newton", "GaussNewtonResult", "increment_points", "PACKED_SIZE", "N_TRI"]


@dataclass
class GaussNewtonResult:
    """The packed result on the host. H: (P, P) float64, g: (P,) float64 with P = 8 (pose, log
    gain, bias) or 6 (pose only); cost, l1: floats; counts: ints (pixels)."""

    H: torch.Tensor
    g: torch.Tensor
    cost: float
    l1: float
    n_valid: int
    n_covered: int
    n_depth_in: int
    n_color_in: int

    @classmethod
    def unpack(cls, packed: torch.Tensor, exposure: bool = True) -> "GaussNewtonResult":
        """From ``gauss_newton``'s (50,) tensor (any device: one host copy)."""
        p = packed.detach().to("cpu", torch.float64)
        H, g, cost = unpack(p)
        n = N_PARAMS if exposure else 6
        l1, nv, nc, nd, nk = p.numpy()[N_TRI + N_PARAMS + 1:].tolist()
        return cls(H[:n, :n].contiguous(), g[:n].contiguous(), float(cost), l1, int(round(nv)), int(round(nc)),
                   int(round(nd)), int(round(nk)))


def f32(t: torch.Tensor) -> torch.Tensor:
    """``t`` as the kernels read it: float32, contiguous, detached (no copy or dispatch when it
    already is: this runs for eight inputs on every LM evaluation)."""
    if t.dtype != torch.float32:
        t = t.to(torch.float32)
    if not t.is_contiguous():
        t = t.contiguous()
    return t.detach() if t.requires_grad else t


def _settings(pivot_z, gain, bias, depth_weight, huber, alpha_threshold, depth_noise, color_tol,
              exposure, obs_weight=0.0):
    """The kernels' settings list (order: csrc/gn_math.h make_gn_settings)."""
    hc, hd = (float(h) for h in huber)
    floor, quad = (float(x) for x in depth_noise)
    dw = float(depth_weight)
    if not 0.0 <= float(obs_weight) <= 1.0:
        raise ValueError(f"obs_weight must be in [0, 1], got {obs_weight!r}")
    return [float(gain), float(bias), dw, hc, hc, hc, hd * dw, float(alpha_threshold), floor, quad,
            float(color_tol), DEPTH_EPS, float(pivot_z), 1.0 if exposure else 0.0, float(obs_weight)]


def _validate(means, radii, colors, opacities, K, width, height, obs_color, obs_depth, valid,
              reference: bool, huber, depth_noise):
    """The pass's inputs (float64 only for the ``reference`` backend)."""
    check_spheres(means, radii, colors, opacities, K, width, height, reference)
    for name, t, shape in (("obs_color", obs_color, (height, width, 3)),
                           ("obs_depth", obs_depth, (height, width)),
                           ("valid", valid, (height, width))):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
        if t.device != means.device:
            raise ValueError(f"{name} is on {t.device} but means is on {means.device}")
    if valid.dtype != torch.bool:
        raise TypeError(f"valid must be a bool tensor, got {valid.dtype}")
    for name, t in (("obs_color", obs_color), ("obs_depth", obs_depth)):
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
    if len(huber) != 2 or min(huber) <= 0:
        raise ValueError(f"huber must be two positive thresholds (colour, depth), got {huber!r}")
    if len(depth_noise) != 2:
        raise ValueError(f"depth_noise must be (floor, quad), got {depth_noise!r}")


def gauss_newton(means, radii, colors, opacities, K, width, height, obs_color, obs_depth, valid,
                 *, pivot_z: float, gain: float = 1.0, bias: float = 0.0, depth_weight: float,
                 huber, alpha_threshold: float, depth_noise, color_tol: float,
                 exposure: bool = True, derivatives: bool = True, background=None,
                 obs_weight: float = 0.0, backend: str = "auto") -> torch.Tensor:
    """One fused Gauss-Newton pass (the model is in this module's docstring).

    Args:
        means: (N, 3) camera-frame centres, m.  radii: (N,) m.  colors: (N, 3).  opacities: (N,).
            float32 (float64 only with backend='reference'); no gradients are taken.
        K: (3, 3) intrinsics (a CPU tensor costs no device sync).  width, height: px.
        obs_color: (H, W, 3) observed colour, 0-1.  obs_depth: (H, W) observed depth, m.
        valid: (H, W) bool, pixels allowed to count (valid, edge-free observed depth).
        pivot_z: m, the rotation pivot (0, 0, pivot_z).  gain, bias: the exposure (linear gain).
        depth_weight: scale of the depth residual.  huber: (colour, depth in m) thresholds.
        alpha_threshold: rendered alpha a pixel must exceed.  depth_noise: (floor m, quad 1/m).
        color_tol: colour-inlier tolerance.  exposure: 8 parameters (else 6).
        derivatives: False = cost and statistics only.  background: (3,) or None (black).
        obs_weight: 0-1, the observation-gradient share of the pose rows (see the model).
        backend: 'auto' (cuda for CUDA tensors, else cpu) | 'cuda' | 'cpu' | 'reference'.
    Returns:
        (50,) float64 on the spheres' device; ``GaussNewtonResult.unpack`` reads it.
    """
    _validate(means, radii, colors, opacities, K, width, height, obs_color, obs_depth, valid,
              backend == "reference", huber, depth_noise)
    backend = _ext.resolve_backend(backend, means)
    settings = _settings(pivot_z, gain, bias, depth_weight, huber, alpha_threshold, depth_noise,
                         color_tol, exposure, obs_weight)
    if background is None:
        bg = zeros3(means.device, means.dtype)
    elif isinstance(background, torch.Tensor) and background.shape == (3,):
        bg = background.detach().to(means.device, means.dtype)
    else:
        raise ValueError("background must be a (3,) tensor or None")
    if backend == "reference":
        return gauss_newton_reference(means.detach(), radii.detach(), colors.detach(),
                                      opacities.detach(), K.detach(), width, height, obs_color,
                                      obs_depth, valid, bg, settings, derivatives)
    return _ext.ops(backend).gauss_newton(
        f32(means), f32(radii), f32(colors), f32(opacities), f32(bg), f32(obs_color),
        f32(obs_depth), valid.contiguous(), *_camera(K), int(width), int(height), settings,
        bool(derivatives))
