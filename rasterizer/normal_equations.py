"""Robust (Huber) Gauss-Newton normal equations of a residual vector, reduced in one kernel.

The model (every backend):

    w_m = k_c / max(|r_m|, k_c)               c = m mod C: element m's channel, k (C,) > 0
    H   = sum_m w_m J[:, m] J[:, m]^T         (P, P), P = 6 or 8 rows of J (P, M)
    g   = sum_m w_m r_m J[:, m]               (P,)
    cost = sum_m w_m r_m^2

These are the IRLS normal equations of the Huber loss with thresholds k. The result is packed
as (P(P+1)/2 + P + 1,) float64: H's upper triangle row by row, then g, then the cost, and ADDED
into ``out`` so that a caller can reduce an image band by band and read one result. The CUDA
kernel sums in float per thread and block and adds blocks in float64; the CPU twin sums fixed
chunks in float64 (the same result for any thread count). Neither calls cuBLAS: the tracker's
normal equations were its only use of cuBLAS on the GPU, whose first call costs the process host
memory (docs/benchmarks.md#host-memory).
"""
from __future__ import annotations

import numpy as np
import torch

from . import _ext

BACKENDS = ("auto", "cpu", "cuda", "reference")


def packed_size(n_params: int) -> int:
    """Length of the packed result for ``n_params`` (P) Jacobian rows."""
    return n_params * (n_params + 1) // 2 + n_params + 1


_TRIU = {p: np.triu_indices(p) for p in (6, 8)}   # H's packed order, built once


def unpack(packed: torch.Tensor, n_params: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """packed (P(P+1)/2 + P + 1,) CPU -> (H (P, P) symmetric, g (P,), cost ()), same dtype. Also
    reads the first P(P+1)/2 + P + 1 values of ``rasterizer.gauss_newton``'s result (same layout).
    Built in NumPy: a handful of PyTorch index operations per LM iteration cost more host time
    than the 8x8 numbers are worth."""
    n_tri = n_params * (n_params + 1) // 2
    p = packed.numpy()
    H = np.empty((n_params, n_params), dtype=p.dtype)
    i, j = _TRIU[n_params]
    H[i, j] = p[:n_tri]
    H[j, i] = p[:n_tri]
    return torch.from_numpy(H), torch.from_numpy(p[n_tri : n_tri + n_params].copy()), torch.tensor(p[n_tri + n_params])


def reference(J: torch.Tensor, r: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The model with PyTorch ops in float64 (the oracle of the tests): the packed result."""
    J, r, k = J.double(), r.double(), k.double()
    kk = k.repeat(r.numel() // k.numel() + 1)[: r.numel()]
    w = kk / torch.maximum(r.abs(), kk)
    H = (J * w) @ J.T
    g = J @ (w * r)
    iu = torch.triu_indices(J.shape[0], J.shape[0], device=J.device)
    return torch.cat([H[iu[0], iu[1]], g, (w * r * r).sum().reshape(1)])


def robust_normal_equations(J: torch.Tensor, r: torch.Tensor, k: torch.Tensor, out: torch.Tensor,
                            backend: str = "auto") -> torch.Tensor:
    """Add the robust normal equations of residuals ``r`` into ``out`` (the model above).

    J: (P, M) float32 with unit column stride (a column slice of a wider buffer is fine), P = 6
        or 8: the Jacobian rows, one column per residual.
    r: (M,) float32 residuals (any shape with M elements, e.g. (rows, W, 4) flattened in order).
    k: (C,) float32 Huber thresholds, element m uses k[m % C] (C = 4: colour x3, depth).
    out: (P(P+1)/2 + P + 1,) float64 on the same device, accumulated into (zero it first).
    Returns ``out``.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if J.dim() != 2 or J.shape[0] not in (6, 8):
        raise ValueError(f"J must be (6 or 8, M), got {tuple(J.shape)}")
    if r.numel() != J.shape[1]:
        raise ValueError(f"r has {r.numel()} elements, J has {J.shape[1]} columns")
    if out.dtype != torch.float64 or out.numel() != packed_size(J.shape[0]):
        raise ValueError(f"out must be float64 with {packed_size(J.shape[0])} elements")
    if backend == "auto":
        backend = "cuda" if J.is_cuda else "cpu"
    if backend == "reference":
        return out.add_(reference(J, r.reshape(-1), k))
    if J.stride(1) != 1:
        J = J.contiguous()
    _ext.get(backend).robust_normal_equations(J, r.reshape(-1).contiguous(), k.contiguous(), out)
    return out
