"""The map's parametrisation, one kernel each way: packed sphere rows to render inputs, and the
rows' gradient back.

The model (every backend), for each row (an (N, 8) row: xyz, log radius, 3 colour logits, an
opacity logit, raw values):

    means = xyz                  radius = exp(log radius)
    colour = sigmoid(logits)     opacity = sigmoid(opacity logit)       (sigmoid(x) = 1 / (1 + e^-x))

and backward, from the outputs' gradients (an absent one counts as zero):

    g_row = [g_means, g_radius * radius, g_colour * (1 - colour) * colour,
             g_opacity * (1 - opacity) * opacity]

(the products in PyTorch's order: ``mul`` and ``sigmoid_backward``). The PyTorch formulation
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


def reference(rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The forward model with PyTorch ops: (means (N, 3), radii (N,), colors (N, 3), opacities (N,))."""
    return rows[:, :3].contiguous(), torch.exp(rows[:, 3]), torch.sigmoid(rows[:, 4:7]), torch.sigmoid(rows[:, 7])


def reference_backward(g_means, g_radii, g_colors, g_opacities, radii, colors, opacities) -> torch.Tensor:
    """The backward model with PyTorch ops: the rows' gradient (N, 8); None gradients count as zero."""
    n = radii.shape[0]
    zero = radii.new_zeros
    g_means = zero(n, 3) if g_means is None else g_means
    g_radii = zero(n) if g_radii is None else g_radii
    g_colors = zero(n, 3) if g_colors is None else g_colors
    g_opacities = zero(n) if g_opacities is None else g_opacities
    sigmoid_backward = torch.ops.aten.sigmoid_backward
    return torch.cat([g_means, (g_radii * radii)[:, None], sigmoid_backward(g_colors, colors),
                      sigmoid_backward(g_opacities, opacities)[:, None]], dim=1)


def activate_rows(rows: torch.Tensor, backend: str = "auto") -> tuple[torch.Tensor, ...]:
    """Packed rows -> render inputs (the model above), without autograd.

    rows: (N, 8) float32 contiguous (any float dtype with 'reference'). Returns new tensors: means (N, 3) (the rows' xyz, metres),
    radii (N,) metres, colors (N, 3) in [0, 1], opacities (N,) in [0, 1], on rows' device.
    backend: 'auto' (the kernel of rows' device) | 'cuda' | 'cpu' | 'reference'.
    """
    backend = _ext.resolve_backend(backend, rows, what="rows")
    _check_rows(rows, float32=backend != "reference")
    if backend == "reference":
        return reference(rows)
    return tuple(_ext.ops(backend).activate_rows(rows))


def activate_rows_backward(g_means: Optional[torch.Tensor], g_radii: Optional[torch.Tensor],
                           g_colors: Optional[torch.Tensor], g_opacities: Optional[torch.Tensor],
                           radii: torch.Tensor, colors: torch.Tensor, opacities: torch.Tensor,
                           backend: str = "auto") -> torch.Tensor:
    """The rows' gradient (N, 8) float32 from the outputs' gradients (each the shape of its output,
    or None: zero) and the forward's radii (N,), colors (N, 3), opacities (N,) (the model above).
    backend: as ``activate_rows``."""
    backend = _ext.resolve_backend(backend, radii, what="radii")
    if backend == "reference":
        return reference_backward(g_means, g_radii, g_colors, g_opacities, radii, colors, opacities)
    empty = radii.new_empty(0)
    grads = [empty if g is None else g.contiguous() for g in (g_means, g_radii, g_colors, g_opacities)]
    return _ext.ops(backend).activate_rows_backward(*grads, radii, colors, opacities)


def _check_rows(rows: torch.Tensor, float32: bool) -> None:
    if rows.dim() != 2 or rows.shape[1] != N_COLS or (float32 and rows.dtype != torch.float32):
        raise ValueError(f"rows must be (N, {N_COLS}) float32, got {tuple(rows.shape)} {rows.dtype}")
