"""Medians in one op each, exact and without a host wait: the lower median of a tensor (the
pruner's normalisers) and of a depth image's valid values (the tracker's rotation pivot).

    lower_median(x):     of the n values of x sorted, value (n - 1) // 2 (``torch.median``'s choice:
                         the lower middle for an even count); NaN when x holds a NaN or is empty
    median_depth(depth): the same over the valid values (0 < d < inf, metres) of a depth image;
                         1 m when none is valid

CUDA (csrc/median_cuda.cu): a radix select on the values' float bits as ordered keys (digits of
11, 11 and 10 bits: three passes, each a grid's histogram then one block's choice of the digit);
the CPU twin (csrc/median_cpu.cpp) an ``nth_element``; they share the rules (csrc/median_math.h).
The PyTorch formulations (``*_reference``: a sort, the tests' oracles) take about ten launches; on
CUDA each torch operation family also loads its kernels into host memory on first use
(docs/benchmarks.md#host-memory), and with these kernels neither the tracker nor the pruner sorts.
"""
from __future__ import annotations

import torch

from . import _ext


def lower_median_reference(x: torch.Tensor) -> torch.Tensor:
    """``lower_median`` with PyTorch ops (the oracle of the tests)."""
    ranked = torch.sort(x.reshape(-1))[0]          # NaN sorts last
    if ranked.numel() == 0 or torch.isnan(ranked[-1]):
        return torch.full((), float("nan"), dtype=x.dtype, device=x.device)
    return ranked[(ranked.numel() - 1) // 2].clone()


def median_depth_reference(depth: torch.Tensor) -> torch.Tensor:
    """``median_depth`` with PyTorch ops (the oracle of the tests)."""
    d = depth.reshape(-1)
    values = d[(d > 0) & (d < float("inf"))]
    if values.numel() == 0:
        return torch.ones((), dtype=depth.dtype, device=depth.device)
    return lower_median_reference(values)


def _check(x: torch.Tensor, name: str) -> None:
    if x.dtype != torch.float32:
        raise ValueError(f"{name} must be float32, got {x.dtype}")


def lower_median(x: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """The lower median of ``x`` (float32, any shape) as a 0-d float32 tensor on its device (NaN
    when ``x`` holds a NaN or is empty; the model above). ``backend``: 'auto' | 'cuda' | 'cpu' |
    'reference'."""
    _check(x, "x")
    kind = _ext.resolve_backend(backend, x, what="x")
    if kind == "reference":
        return lower_median_reference(x)
    return _ext.ops(kind).lower_median(x.contiguous(), False)


def median_depth(depth: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """The lower median of the valid values (0 < d < inf) of ``depth`` (H, W) float32 metres, as a
    0-d float32 tensor on its device, metres (1 m when none is valid; the model above).
    ``backend``: 'auto' | 'cuda' | 'cpu' | 'reference'."""
    if depth.dim() != 2:
        raise ValueError(f"depth must be (H, W), got {tuple(depth.shape)}")
    _check(depth, "depth")
    kind = _ext.resolve_backend(backend, depth, what="depth")
    if kind == "reference":
        return median_depth_reference(depth)
    return _ext.ops(kind).lower_median(depth.contiguous(), True)
