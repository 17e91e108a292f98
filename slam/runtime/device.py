"""Process-wide device settings a run needs before its first kernel: which device, how many CPU
threads, how big the cuBLAS workspaces are."""
from __future__ import annotations

import os

import torch

# cuBLAS keeps one workspace per (handle, stream), allocated through PyTorch's allocator: 32 MiB
# each on recent GPUs by default, and the tracking and mapping threads each have their own stream.
# SLAM's matrix products are tiny (8 x 81920 normal-equation bands, N x 3 x 3 transforms) and need
# no split-K scratch to speak of, so 128 KiB is plenty (the cuBLAS documentation's small setting);
# cuBLASLt (addmm with a bias) gets the same cap. Must be set before the first cuBLAS call; values
# the user set are kept.
CUBLAS_WORKSPACE = ":16:8"
CUBLASLT_WORKSPACE_KIB = "128"


def resolve_device(name: str) -> torch.device:
    """'auto' -> cuda if available else cpu; anything else as given (checked)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"system.device is '{name}' but CUDA is not available on this machine")
    return dev


def limit_cublas_workspace() -> None:
    """Cap the per-stream cuBLAS and cuBLASLt workspaces (see ``CUBLAS_WORKSPACE``) unless already
    configured."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    os.environ.setdefault("CUBLASLT_WORKSPACE_SIZE", CUBLASLT_WORKSPACE_KIB)


def prepare_device(device: torch.device, threaded: bool, seed: int) -> None:
    """Seed torch and apply the settings above for a run on ``device``."""
    if device.type == "cuda":
        limit_cublas_workspace()
    torch.manual_seed(seed)
    if device.type == "cpu" and threaded:
        # Tracking and mapping each run CPU kernels at the same time: split the cores between
        # them. Oversubscribed OpenMP teams spin-wait on descheduled threads and run several times
        # slower than one thread each (measured: 3.5x on 2 cores).
        torch.set_num_threads(max(1, cpu_share() // 2))
    elif device.type == "cuda":
        # The host's share of a GPU run is bookkeeping on arrays of at most a few hundred thousand
        # elements (densify's seeds, keyframe images, the grid's and the loop's kernels) beside the run's
        # busy threads (tracker, mapper, loop, grid, input): an OpenMP team there waits at its
        # barrier for whichever member is descheduled (dev box, both cores busy: a comparison of
        # 76,800 floats 7 ms with two threads, 0.05 ms with one). One thread each: on a 16-core
        # H100 host a keyframe's mapping alone 39.8 -> 18.7 ms (its host indexing, log and frame
        # unpacking took 4-5 ms each on 16 threads; docs/benchmarks.md#the-other-threads-cost).
        torch.set_num_threads(1)


def cpu_share() -> int:
    """CPU cores this run may use: ``$OMP_NUM_THREADS`` when set to a positive integer (the share a
    scheduler gave the process, e.g. a Ray task's ``num_cpus`` under ``slam_batch``), else all of
    the machine's."""
    try:
        share = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        share = 0
    return share if share > 0 else (os.cpu_count() or 2)
