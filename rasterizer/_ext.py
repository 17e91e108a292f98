"""The compiled kernels' one dispatch point: which backends there are, which one a call runs on, and
the ops themselves.

Every op is declared once (its schema, in its ``csrc/*_cpu.cpp``) and has a CPU and a CUDA kernel
(``TORCH_LIBRARY_IMPL`` in its ``*_cpu.cpp`` and ``*_cuda.cu``); torch's dispatcher picks the
kernel by the tensors' device. The ops in ``HOST_ONLY`` have a CPU kernel only: what they work on
lives on the host. ``ops(kind)`` loads the libraries that ``kind`` needs (the CPU one
always: it declares the ops; the CUDA one after it for ``'cuda'``) and returns
``torch.ops.sphere_raster``. ``resolve_backend`` is the one place a wrapper's ``backend`` argument
is checked and ``'auto'`` resolved.

Each library is the ahead-of-time build installed beside this file (``rasterizer/_sphere_raster_*``,
setup.py) when there is one that loads, else the just-in-time build (rasterizer/_build.py, cached).
"""
from __future__ import annotations

import importlib.util
import threading

import torch

from . import _build

NAMESPACE = "sphere_raster"
# Every backend of the package, once: 'auto' (the kernels of the tensors' device), the compiled
# kernels ('cuda', 'cpu'), the PyTorch oracles ('reference') and gsplat (rasterize_spheres only).
BACKENDS = ("auto", "cuda", "cpu", "reference", "gsplat")
OP_BACKENDS = BACKENDS[:4]   # every other wrapper's: gsplat has no counterpart of them
KERNELS = ("cpu", "cuda")
# Ops without a CUDA kernel: the loop stage's ICP (rasterizer/icp.py) aligns keyframe depths and
# the occupancy grid (rasterizer/grid.py) scans keyframes and casts the scans, all kept on the host;
# they are kernels to run without the interpreter lock beside the tracker, not to run on a GPU.
HOST_ONLY = ("grid_cast", "grid_scan", "icp_point_to_plane")

_lock = threading.Lock()
_loaded: dict = {}


def _load(kind: str) -> None:
    """Load the ``kind`` library into the process (its ops and kernels register), once."""
    if kind in _loaded:
        return
    with _lock:
        if kind in _loaded:
            return
        path = None
        spec = importlib.util.find_spec(f"rasterizer.{_build.CPU_NAME if kind == 'cpu' else _build.CUDA_NAME}")
        if spec is not None and spec.origin:
            try:
                torch.ops.load_library(spec.origin)
                path = spec.origin
            except OSError:   # an ahead-of-time build that does not load (e.g. built for another torch)
                path = None
        _loaded[kind] = path or _build.load_jit(kind)


def ops(kind: str = "cpu"):
    """``torch.ops.sphere_raster`` with the ``kind`` ('cpu' or 'cuda') kernels loaded (built on
    first use). A call runs the kernel of its tensors' device."""
    if kind not in KERNELS:
        raise ValueError(f"kernels are 'cpu' or 'cuda', got {kind!r}")
    _load("cpu")
    if kind == "cuda":
        _load("cuda")
    return torch.ops.sphere_raster


def resolve_backend(backend: str, t: torch.Tensor, allowed: tuple = OP_BACKENDS, what: str = "means") -> str:
    """The backend a call on tensor ``t`` (named ``what`` in errors) runs on: 'auto' becomes the
    kernels of ``t``'s device; an explicit 'cpu' / 'cuda' / 'gsplat' must match that device.
    ``allowed``: the caller's backends (``OP_BACKENDS``, or ``BACKENDS`` for the render)."""
    if backend not in allowed:
        raise ValueError(f"backend must be one of {allowed}, got {backend!r}")
    if backend == "auto":
        return "cuda" if t.is_cuda else "cpu"
    if backend in ("cuda", "gsplat") and not t.is_cuda:
        raise ValueError(f"backend={backend!r} needs CUDA tensors ({what} is on {t.device})")
    if backend == "cpu" and t.device.type != "cpu":
        raise ValueError(f"backend='cpu' needs CPU tensors ({what} is on {t.device})")
    return backend
