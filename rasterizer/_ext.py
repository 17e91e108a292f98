"""Loads the compiled kernels: an ahead-of-time built module if importable, else a JIT build."""
from __future__ import annotations

import importlib
import threading

from . import _build

_lock = threading.Lock()
_modules: dict = {}


def get(kind: str):
    """The extension module for ``kind`` ('cpu' or 'cuda'), built on first use."""
    mod = _modules.get(kind)
    if mod is not None:
        return mod
    with _lock:
        if kind not in _modules:
            name = _build.CPU_NAME if kind == "cpu" else _build.CUDA_NAME
            try:
                mod = importlib.import_module(f"rasterizer.{name}")
            except ImportError:
                mod = _build.load_jit(kind)
            _modules[kind] = mod
    return _modules[kind]
