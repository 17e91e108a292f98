"""Adam over packed parameter rows, one kernel per step: the map's optimiser update.

The model (every backend), for each row i of (N, 8) packed rows (a sphere: xyz, radius, rgb,
opacity, raw values) with gradient row g_i:

    touched_i = any(g_i != 0)              untouched rows (not rendered, frozen) keep everything
    s_i += 1                               (touched rows only: per-row step counts, so a sphere
                                           added late takes full-size bias-corrected first steps)
    m_i = b1 m_i + (1 - b1) g_i            v_i = b2 v_i + (1 - b2) g_i^2
    p_i -= lr * (m_i / (1 - b1^s_i)) / (sqrt(v_i / (1 - b2^s_i)) + eps)      lr (8,): per column

The PyTorch formulation (``reference``, the tests' oracle) takes about twenty element-wise launches
and two (N, 8) temporaries per step; the mapper steps 40 times per keyframe, so on the GPU the
kernel (``cuda``, csrc/adam_cuda.cu: one thread per row) removes ~800 launches per keyframe. The
``cpu`` twin (csrc/adam_cpu.cpp) shares the per-row math (csrc/adam_math.h).
"""
from __future__ import annotations

import torch

from . import _ext

N_COLS = 8


def reference(params, exp_avg, exp_avg_sq, steps, grad, lr, beta1, beta2, eps) -> None:
    """The model with PyTorch ops, in place (the oracle of the tests)."""
    touched = (grad != 0).any(dim=1)
    steps += touched.to(steps.dtype)
    t = touched[:, None]
    m_new = beta1 * exp_avg + (1 - beta1) * grad
    v_new = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    s = steps.clamp_min(1)[:, None]
    update = lr * (m_new / (1 - beta1 ** s)) / ((v_new / (1 - beta2 ** s)).sqrt() + eps)
    exp_avg.copy_(torch.where(t, m_new, exp_avg))
    exp_avg_sq.copy_(torch.where(t, v_new, exp_avg_sq))
    params.sub_(torch.where(t, update, torch.zeros_like(update)))


def adam_rows(params: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, steps: torch.Tensor,
              grad: torch.Tensor, lr: torch.Tensor, beta1: float = 0.9, beta2: float = 0.999,
              eps: float = 1e-15, backend: str = "auto") -> None:
    """One Adam step of packed rows, in place (the model above).

    params, exp_avg, exp_avg_sq: (N, 8) float32 contiguous (row ranges of larger buffers are
        fine), updated in place; steps: (N,) float32 per-row step counts, updated in place;
    grad: (N, 8) float32; lr: (8,) float32 per-column learning rates; all on one device.
    backend: 'auto' (the kernel of params' device) | 'cuda' | 'cpu' | 'reference'.
    """
    n = params.shape[0] if params.dim() == 2 else -1
    for name, t, shape in (("params", params, (n, N_COLS)), ("exp_avg", exp_avg, (n, N_COLS)),
                           ("exp_avg_sq", exp_avg_sq, (n, N_COLS)), ("grad", grad, (n, N_COLS)),
                           ("steps", steps, (n,)), ("lr", lr, (N_COLS,))):
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape} (N rows of {N_COLS}), got {tuple(t.shape)}")
        if t.dtype != torch.float32 or t.device != params.device:
            raise ValueError(f"{name} must be float32 on {params.device}, got {t.dtype} on {t.device}")
    backend = _ext.resolve_backend(backend, params, what="params")
    if backend == "reference":
        reference(params, exp_avg, exp_avg_sq, steps, grad, lr, beta1, beta2, eps)
        return
    _ext.ops(backend).adam_rows(params, exp_avg, exp_avg_sq, steps, grad.contiguous(), lr.contiguous(),
                                float(beta1), float(beta2), float(eps))
