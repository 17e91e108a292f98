"""The compiled ops' one registration (rasterizer/_ext.py, docs/RASTERIZER.md "Adding a kernel"):
every op is declared once (its schema, in a csrc/*_cpu.cpp), has a CPU and a CUDA kernel (a CPU
kernel only for the ops in ``_ext.HOST_ONLY``), is
registered in ``torch.ops.sphere_raster`` and called by a wrapper; every wrapper resolves its
backend through ``_ext.resolve_backend``: an explicit backend that does not match the tensors'
device, or one the wrapper lacks, is a clear error."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

import rasterizer
from rasterizer import _build, _ext
from rasterizer import lm_state as L
from rasterizer_scenes import GN_SETTINGS, LM_ROBUST, LM_SETTINGS, gn_observation, random_scene

PACKAGE = Path(rasterizer.__file__).parent
DEF = re.compile(r'm\.def\(\s*"(\w+)\(')
IMPL = re.compile(r'm\.impl\(\s*"(\w+)"')


def _found(pattern, names):
    return sorted(m for n in names for m in pattern.findall((_build.CSRC / n).read_text()))


def declared() -> list:
    """The ops as the sources declare them (the one list: each schema in its *_cpu.cpp)."""
    return _found(DEF, _build.sources("cpu"))


def test_every_op_is_declared_once_with_a_cpu_and_a_cuda_kernel():
    ops = declared()
    assert len(ops) == len(set(ops)) >= 8, ops
    every_source = sorted(p.name for p in _build.CSRC.iterdir() if p.suffix in (".cpp", ".cu", ".h", ".cuh"))
    assert _found(DEF, every_source) == ops, "schemas are declared in *_cpu.cpp sources only"
    assert _found(IMPL, _build.sources("cpu")) == ops, "a CPU kernel per op (TORCH_LIBRARY_IMPL ... CPU)"
    device_ops = [op for op in ops if op not in _ext.HOST_ONLY]
    assert set(_ext.HOST_ONLY) <= set(ops)
    assert _found(IMPL, _build.sources("cuda")) == device_ops, "a CUDA kernel per op (TORCH_LIBRARY_IMPL ... CUDA)"


def test_the_registry_holds_every_op():
    namespace = _ext.ops("cpu")
    registered = sorted(n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names()
                        if n.startswith(f"{_ext.NAMESPACE}::"))
    assert registered == declared()
    keys = ["CPU"] + (["CUDA"] if torch.cuda.is_available() else [])
    if torch.cuda.is_available():
        _ext.ops("cuda")
    for name in registered:
        assert hasattr(namespace, name)
        for key in keys:
            has = torch._C._dispatch_has_kernel_for_dispatch_key(f"{_ext.NAMESPACE}::{name}", key)
            assert has == (key == "CPU" or name not in _ext.HOST_ONLY), (name, key)


def test_every_op_is_called_by_a_wrapper():
    text = "\n".join(p.read_text() for p in PACKAGE.glob("*.py"))
    for name in declared():
        assert re.search(rf"_ext\.ops\([^()]*\)\.{name}\(", text), f"no wrapper calls {name}"


def _wrappers(device):
    """Each wrapper of a compiled op, called on small valid inputs on ``device``: name -> f(backend)."""
    s = random_scene(20, 16, 12, seed=1)
    sph = [s[k].to(device) for k in ("means", "radii", "colors", "opacities")]
    obs = [o.to(device) for o in gn_observation(s)]
    state = L.new_state(np.eye(4), device)
    rows = [torch.zeros(4, 8, device=device) for _ in range(3)]
    adam = (*rows, torch.zeros(4, device=device), torch.ones(4, 8, device=device), torch.ones(8, device=device))
    return {
        "rasterize_spheres": lambda b: rasterizer.rasterize_spheres(*sph, s["K"], 16, 12, backend=b),
        "gauss_newton": lambda b: rasterizer.gauss_newton(*sph, s["K"], 16, 12, *obs, **GN_SETTINGS, backend=b),
        "gauss_newton_lm": lambda b: L.gauss_newton_lm(*sph, s["K"], 16, 12, *obs, state, level=0, capacity=4096,
                                                       **LM_ROBUST, backend=b),
        "lm_phase": lambda b: L.lm_phase(state, L.BEGIN, L.lm_settings(**LM_SETTINGS, exposure=True), backend=b),
        "adam_rows": lambda b: rasterizer.adam_rows(*adam, backend=b),
        "downsample": lambda b: rasterizer.downsample(obs[0], obs[1], 2, backend=b),
        "depth_edge_mask": lambda b: rasterizer.depth_edge_mask(obs[1], backend=b),
    }


def test_explicit_cuda_needs_cuda_tensors_and_only_the_render_has_gsplat():
    for name, call in _wrappers("cpu").items():
        call("auto")
        call("cpu")
        with pytest.raises(ValueError, match="backend='cuda' needs CUDA tensors"):
            call("cuda")
        if name == "rasterize_spheres":
            with pytest.raises(ValueError, match="backend='gsplat' needs CUDA tensors"):
                call("gsplat")
        else:
            with pytest.raises(ValueError, match="backend must be one of .*got 'gsplat'"):
                call("gsplat")
        with pytest.raises(ValueError, match="backend must be one of"):
            call("vulkan")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA; run by scripts/gpu_check.sh")
def test_explicit_cpu_needs_cpu_tensors():
    for name, call in _wrappers("cuda").items():
        with pytest.raises(ValueError, match="backend='cpu' needs CPU tensors"):
            call("cpu")
        call("cuda")
