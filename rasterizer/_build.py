"""Build parameters of the rasterizer's two kernel libraries, for both builds:

* ``_sphere_raster_cpu``: every ``csrc/*_cpu.cpp``: each op's schema (``TORCH_LIBRARY_FRAGMENT``)
  and its CPU kernel (``TORCH_LIBRARY_IMPL(sphere_raster, CPU, ...)``);
* ``_sphere_raster_cuda``: every ``csrc/*_cuda.cu`` (and ``*_cuda.cpp``): the CUDA kernels
  (``TORCH_LIBRARY_IMPL(sphere_raster, CUDA, ...)``), loaded after the CPU library.

Neither is a Python module: loading one (``torch.ops.load_library``, rasterizer/_ext.py) registers
its ops under ``torch.ops.sphere_raster``. The source lists come from the file names, so a new
kernel's sources are built without an edit here.

* just-in-time: :func:`load_jit` compiles with ``torch.utils.cpp_extension.load`` on first use and
  caches the result under ``$SPHERE_RASTER_CACHE`` (default ``~/.cache/sphere_rasterizer``);
* ahead-of-time: :func:`aot_extensions` returns ``(ext_modules, cmdclass)`` for setup.py
  (``SPHERE_RASTER_AOT=1 pip install --no-build-isolation .``), installed as
  ``rasterizer/_sphere_raster_cpu*.so`` (and ``_cuda``).

``TORCH_CUDA_ARCH_LIST`` and ``MAX_JOBS`` are honoured by torch's builder in both cases.
setup.py loads this file with runpy, so it must not import the ``rasterizer`` package.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

CSRC = Path(__file__).resolve().parent / "csrc"

CPU_NAME = "_sphere_raster_cpu"
CUDA_NAME = "_sphere_raster_cuda"


def sources(kind: str) -> list:
    """The source file names of the ``cpu`` (``*_cpu.cpp``) or ``cuda`` (``*_cuda.cu``,
    ``*_cuda.cpp``) library, sorted."""
    patterns = {"cpu": ("*_cpu.cpp",), "cuda": ("*_cuda.cu", "*_cuda.cpp")}[kind]
    return sorted(p.name for pattern in patterns for p in CSRC.glob(pattern))


def headers() -> list:
    """The headers the sources include (every .h / .cuh in csrc): a change to one rebuilds. The JIT
    build gets this from ninja's compiler-written dependency files; setuptools (AOT) only from the
    extensions' ``depends``."""
    return sorted(p.name for p in CSRC.iterdir() if p.suffix in (".h", ".cuh"))


def _openmp_flags():
    if sys.platform == "darwin":  # Apple clang has no -fopenmp; the kernel then runs serially
        return [], []
    if sys.platform == "win32":
        return ["/openmp"], []
    return ["-fopenmp"], ["-fopenmp"]


def cxx_flags():
    # -ffp-contract=off: no fused multiply-adds in host code, also where the target has them
    # (aarch64): an expression gives the same bits wherever it is inlined (the backward recomputes
    # the forward's splats), and the depth normalisation exactly what the PyTorch ops give.
    omp_c, _ = _openmp_flags()
    contract = [] if sys.platform == "win32" else ["-ffp-contract=off"]
    return ["-O3"] + contract + omp_c


def ld_flags():
    return _openmp_flags()[1]


def nvcc_flags():
    # Nothing newer than CUDA 11.4 allows; no --use_fast_math (the kernels call __expf where wanted).
    return ["-O3", "-lineinfo", "--expt-relaxed-constexpr"]


def _paths(names):
    return [str(CSRC / s) for s in names]


def source_key() -> str:
    """A short hash of where the kernel sources are and what they say: each checkout or installed
    copy (and each version of the sources) builds into a folder of its own. With one folder per
    Python and torch only, two copies of the package on one machine (a checkout and its installed
    copy, a clean clone) rebuilt each other's kernels on every switch (5-9 min on 2 cores) and
    waited on each other's build lock."""
    h = hashlib.sha1(str(CSRC).encode())
    for p in sorted(CSRC.iterdir()):
        if p.is_file():
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:12]


def cache_dir(name: str) -> Path:
    """The build folder of extension ``name``: $SPHERE_RASTER_CACHE (default
    ~/.cache/sphere_rasterizer) / Python and torch versions / ``source_key()`` / name."""
    import torch

    root = Path(os.environ.get("SPHERE_RASTER_CACHE", Path.home() / ".cache" / "sphere_rasterizer"))
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}-torch{torch.__version__}"
    d = root / tag.replace("+", "_") / source_key() / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def load_jit(kind: str) -> str:
    """Compile (first use) or load from the cache the ``cpu`` or ``cuda`` library; loads it into
    the process (``torch.ops.load_library``: its ops register) and returns its path. The ``cuda``
    library's kernels belong to ops the ``cpu`` library declares: load that one first."""
    from torch.utils import cpp_extension

    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        raise RuntimeError(
            f"sphere rasterizer: no C++ compiler found ('{cxx}' is not on PATH). Install g++ "
            "(e.g. apt-get install g++) or set CXX, or use backend='reference'.")
    if kind == "cpu":
        name, cuda_flags = CPU_NAME, None
    elif kind == "cuda":
        nvcc = Path(cpp_extension.CUDA_HOME or "", "bin", "nvcc")
        if cpp_extension.CUDA_HOME is None or not nvcc.exists():
            raise RuntimeError(
                "sphere rasterizer: nvcc not found (set CUDA_HOME to the CUDA toolkit, e.g. "
                "/usr/local/cuda) - needed to compile the CUDA kernels; use backend='cpu' otherwise.")
        name, cuda_flags = CUDA_NAME, nvcc_flags()
    else:
        raise ValueError(kind)
    build_dir = cache_dir(name)
    if not any(build_dir.glob(f"{name}*.so")) and not any(build_dir.glob(f"{name}*.pyd")):
        took = "about 1-2 min on 2 cores, less with more" if kind == "cpu" else "a few minutes"
        print(f"sphere rasterizer: compiling the {kind.upper()} kernels (first use, {took}; cached "
              f"in {build_dir})...", file=sys.stderr, flush=True)
    return cpp_extension.load(
        name=name, sources=_paths(sources(kind)), extra_cflags=cxx_flags(),
        extra_cuda_cflags=cuda_flags, extra_ldflags=ld_flags(), extra_include_paths=[str(CSRC)],
        build_directory=str(build_dir), is_python_module=False,
        verbose=os.environ.get("SPHERE_RASTER_VERBOSE", "0") == "1")


def aot_extensions():
    """(ext_modules, cmdclass) for setup.py: the CPU extension always, the CUDA one when torch
    was built with CUDA and a CUDA toolkit is found (or SPHERE_RASTER_CUDA=1 forces it).
    Source paths are relative to the repository root (setup.py's directory)."""
    import torch
    from torch.utils import cpp_extension

    root = CSRC.parent.parent

    def rel(names):
        return [os.path.relpath(CSRC / s, root) for s in names]

    inc = [str(CSRC)]
    deps = rel(headers())
    exts = [cpp_extension.CppExtension(
        name=f"rasterizer.{CPU_NAME}", sources=rel(sources("cpu")), include_dirs=inc, depends=deps,
        extra_compile_args={"cxx": cxx_flags()}, extra_link_args=ld_flags())]
    want_cuda = os.environ.get("SPHERE_RASTER_CUDA")
    if want_cuda == "1" or (want_cuda != "0" and torch.version.cuda is not None
                            and cpp_extension.CUDA_HOME is not None):
        exts.append(cpp_extension.CUDAExtension(
            name=f"rasterizer.{CUDA_NAME}", sources=rel(sources("cuda")), include_dirs=inc, depends=deps,
            extra_compile_args={"cxx": ["-O3"], "nvcc": nvcc_flags()}))
    return exts, {"build_ext": cpp_extension.BuildExtension}
