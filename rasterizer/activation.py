"""The map's parametrisation, one kernel each way: packed sphere rows to render inputs, and the
rows' gradient back.

The model (every backend), for each row (an (N, 8) row: xyz, log radius, 3 colour logits, an
opacity logit, raw values):

    means = xyz                  radius = exp(log radius)
    colour = sigmoid(logits)     opacity = sigmoid(opacity logit)       (sigmoid(x) = 1 / (1 + e^-x))

and backward, from the outputs' gradients (an absent one counts as zero):

    g_row = [g_means, g_radius * radius, g_colour * (1 - colour) * colour,
             g_opacity * (1 - opacity) * opacity]

(the products in PyTorch's order: ``mul`` and ``sigmoid_backward``). With a world-to-camera pose
T_cw = [R t] (the mapper's step: the render takes camera-frame means) the means are moved too,

    means = R xyz + t            g_xyz = R^T g_means

each sum in the order of PyTorch's CPU reduction of ``(xyz[:, None] * R).sum(-1) + t``
(``slam.geometry.transform_points``) and its autograd, so CPU runs keep their figures; the pose
gets no gradient (the mapper refines a keyframe's pose through a delta applied after it).
``transform_means`` is that move alone, for points already activated (a published snapshot's). The
transform as PyTorch ops took five launches a step. The PyTorch formulation
(``reference``, the tests' oracle) takes three launches forward and four backward (plus a zero-filled
tensor per absent gradient); the mapper steps 40 times a keyframe, so on the GPU the kernels
(``cuda``, csrc/activation_cuda.cu: one thread per row) remove ~200 launches a keyframe. The ``cpu``
twin (csrc/activation_cpu.cpp) shares the per-row math (csrc/activation_math.h).
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _ext
from .adam import N_COLS  # the packed row: xyz, log radius, rgb, opacity (raw values)


def _moved(points: torch.Tensor, T_cw: torch.Tensor) -> torch.Tensor:
    """R p + t for points (N, 3) with PyTorch ops (the oracle of the move)."""
    return (points.unsqueeze(1) * T_cw[:3, :3]).sum(-1) + T_cw[:3, 3]


def reference(rows: torch.Tensor, T_cw: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, ...]:
    """The forward model with PyTorch ops: (means (N, 3), radii (N,), colors (N, 3), opacities (N,))."""
    xyz = rows[:, :3]
    means = xyz.contiguous() if T_cw is None else _moved(xyz, T_cw)
    return means, torch.exp(rows[:, 3]), torch.sigmoid(rows[:, 4:7]), torch.sigmoid(rows[:, 7])


def reference_backward(g_means, g_radii, g_colors, g_opacities, radii, colors, opacities,
                       T_cw: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The backward model with PyTorch ops: the rows' gradient (N, 8); None gradients count as zero."""
    n = radii.shape[0]
    zero = radii.new_zeros
    if g_means is not None and T_cw is not None:
        g_means = (g_means.unsqueeze(-1) * T_cw[:3, :3]).sum(1)     # R^T g, as autograd sums it
    g_means = zero(n, 3) if g_means is None else g_means
    g_radii = zero(n) if g_radii is None else g_radii
    g_colors = zero(n, 3) if g_colors is None else g_colors
    g_opacities = zero(n) if g_opacities is None else g_opacities
    sigmoid_backward = torch.ops.aten.sigmoid_backward
    return torch.cat([g_means, (g_radii * radii)[:, None], sigmoid_backward(g_colors, colors),
                      sigmoid_backward(g_opacities, opacities)[:, None]], dim=1)


def activate_rows(rows: torch.Tensor, T_cw: Optional[torch.Tensor] = None,
                  backend: str = "auto") -> tuple[torch.Tensor, ...]:
    """Packed rows -> render inputs (the model above), without autograd.

    rows: (N, 8) float32 contiguous (any float dtype with 'reference'). T_cw: optional (4, 4) float32
    world-to-camera pose on rows' device (no gradient). Returns new tensors: means (N, 3) metres (the
    rows' xyz; in the camera frame with T_cw), radii (N,) metres, colors (N, 3) in [0, 1],
    opacities (N,) in [0, 1], on rows' device.
    backend: 'auto' (the kernel of rows' device) | 'cuda' | 'cpu' | 'reference'.
    """
    backend = _ext.resolve_backend(backend, rows, what="rows")
    _check_rows(rows, float32=backend != "reference")
    _check_pose(T_cw, rows, float32=backend != "reference")
    if backend == "reference":
        return reference(rows, T_cw)
    return tuple(_ext.ops(backend).activate_rows(rows, _pose_arg(T_cw, rows)))


def activate_rows_backward(g_means: Optional[torch.Tensor], g_radii: Optional[torch.Tensor],
                           g_colors: Optional[torch.Tensor], g_opacities: Optional[torch.Tensor],
                           radii: torch.Tensor, colors: torch.Tensor, opacities: torch.Tensor,
                           T_cw: Optional[torch.Tensor] = None, backend: str = "auto") -> torch.Tensor:
    """The rows' gradient (N, 8) float32 from the outputs' gradients (each the shape of its output,
    or None: zero), the forward's radii (N,), colors (N, 3), opacities (N,) and its pose T_cw (the
    model above). backend: as ``activate_rows``."""
    backend = _ext.resolve_backend(backend, radii, what="radii")
    _check_pose(T_cw, radii, float32=backend != "reference")
    if backend == "reference":
        return reference_backward(g_means, g_radii, g_colors, g_opacities, radii, colors, opacities, T_cw)
    empty = radii.new_empty(0)
    grads = [empty if g is None else g.contiguous() for g in (g_means, g_radii, g_colors, g_opacities)]
    return _ext.ops(backend).activate_rows_backward(*grads, radii, colors, opacities, _pose_arg(T_cw, radii))


def transform_means(means: torch.Tensor, T_cw: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """World-frame points (N, 3) float32 metres -> camera frame (N, 3) (new tensor), R p + t with
    T_cw (4, 4) float32 on the points' device: the activation's move of the means (the model
    above, its sums in the same order, so bit-identical on the CPU to
    ``slam.geometry.transform_points``), for points already activated (a published snapshot's
    renders), one kernel, no autograd. backend: as ``activate_rows``."""
    backend = _ext.resolve_backend(backend, means, what="means")
    if means.dim() != 2 or means.shape[1] != 3 or (backend != "reference" and means.dtype != torch.float32):
        raise ValueError(f"means must be (N, 3) float32, got {tuple(means.shape)} {means.dtype}")
    if T_cw is None:
        raise ValueError("transform_means needs a (4, 4) pose T_cw")
    _check_pose(T_cw, means, float32=backend != "reference")
    if backend == "reference":
        return _moved(means, T_cw)
    return _ext.ops(backend).transform_means(means.contiguous(), T_cw.contiguous())


def _check_rows(rows: torch.Tensor, float32: bool) -> None:
    if rows.dim() != 2 or rows.shape[1] != N_COLS or (float32 and rows.dtype != torch.float32):
        raise ValueError(f"rows must be (N, {N_COLS}) float32, got {tuple(rows.shape)} {rows.dtype}")


def _check_pose(T_cw: Optional[torch.Tensor], like: torch.Tensor, float32: bool) -> None:
    if T_cw is None:
        return
    if T_cw.shape != (4, 4) or T_cw.device != like.device or (float32 and T_cw.dtype != torch.float32):
        raise ValueError(f"T_cw must be (4, 4) float32 on {like.device}, got {tuple(T_cw.shape)} {T_cw.dtype} "
                         f"on {T_cw.device}")
    if T_cw.requires_grad:
        raise ValueError("T_cw gets no gradient here (refine a pose through a delta applied after it)")


def _pose_arg(T_cw: Optional[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """T_cw as the kernels take it: contiguous, or an empty tensor for none."""
    return like.new_empty(0) if T_cw is None else T_cw.contiguous()
