"""Element-wise helpers written with the operations a run already uses (comparisons, ``where``).

On CUDA every PyTorch operation family loads its kernels into host memory the first time any of
them runs: 5-50 MB each with the x86 wheels, which carry seven GPU architectures
(docs/benchmarks.md#host-memory; ``python -m slam.tools.memory_stages --first-use`` lists what a
run loads and where). ``~mask`` (bitwise_not: 28 MB on an H100) and ``clamp`` / ``clamp_min``
(27 MB) were loaded by a few lines each; these helpers give the same values through ``torch.where``
and the comparison kernels that a run loads anyway. Use them on the mapping and tracking paths;
code that runs once (tools, tests, the end-of-run evaluation on the host) need not."""
from __future__ import annotations

import torch


def logical_not(mask: torch.Tensor) -> torch.Tensor:
    """``~mask`` for a bool tensor (a new tensor, same shape and device)."""
    return torch.where(mask, False, True)


def at_least(x: torch.Tensor, floor: float) -> torch.Tensor:
    """``x.clamp_min(floor)`` for float values that are not NaN (a NaN becomes ``floor``)."""
    return torch.where(x > floor, x, floor)


def clipped(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """``x.clamp(low, high)`` (low <= high) for float values that are not NaN."""
    return torch.where(x < low, low, torch.where(x > high, high, x))
