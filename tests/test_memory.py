"""Host memory: what a run keeps out of the process (heavy optional imports, matrix products: on a
GPU the first one initialises cuBLAS, ~110 MB of host memory) and the keyframe side file written
without a stacked copy of the keyframe store."""
from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np

from slam.map.keyframes import Keyframe
from slam.map.map_io import load_keyframes, save_keyframes

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "RERUN_ANALYTICS": "0"}
# Imported only when asked for: mesh export (open3d), plots (matplotlib), the viewer (rerun), the
# gsplat comparison backend, bag datasets (rosbags), the ROS nodes, the browser test (selenium).
NOT_AT_RUN_TIME = ("open3d", "matplotlib", "rerun", "gsplat", "rosbags", "rclpy", "rospy", "selenium")


def _store(n: int, h: int = 240, w: int = 320) -> list:
    rng = np.random.default_rng(0)
    K = np.array([[260.0, 0, 159.5], [0, 260.0, 119.5], [0, 0, 1]])
    return [Keyframe(i, float(i), np.eye(4), rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
                     rng.random((h, w)).astype(np.float16), K) for i in range(n)]


def test_side_file_streams_the_keyframe_store(tmp_path):
    """Peak Python-side allocation while writing stays a small part of the store (np.savez of a
    stack would need two store-sized copies), and the file reads back exactly."""
    kfs = _store(40)
    store_bytes = sum(k.nbytes() for k in kfs)          # 40 x (230 KB + 154 KB) = 15.4 MB
    path = tmp_path / "map.keyframes.npz"
    for compress in (False, True):
        tracemalloc.start()
        save_keyframes(path, kfs, map_spheres=7, compress=compress)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < 0.1 * store_bytes, f"compress={compress}: peak {peak / 1e6:.1f} MB for a {store_bytes / 1e6:.1f} MB store"
        back = load_keyframes(path, map_spheres=7)
        assert len(back) == len(kfs)
        for a, b in zip(kfs, back):
            assert np.array_equal(a.color, b.color) and np.array_equal(a.depth, b.depth) and np.array_equal(a.K, b.K)


def test_a_run_imports_no_optional_heavy_package(tmp_path):
    code = ("import sys; from slam.cli import main; "
            f"rc = main(['--set', 'data.last=3', '--set', 'output.plots=false', '--set', 'mapping.final_iters=0', "
            f"'--out', r'{tmp_path / 'run'}', '--quiet']); assert rc == 0, rc; "
            f"bad = [m for m in {NOT_AT_RUN_TIME!r} if m in sys.modules]; assert not bad, bad")
    res = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]


def test_peak_rss_is_the_programs_own_not_its_parents():
    """A child started by a big process reports its own peak: getrusage's ru_maxrss would still
    hold the parent's RSS at fork time (Linux keeps it across exec)."""
    big = np.ones(800_000_000 // 8)                     # 800 MB, every page touched
    code = "from slam.runtime.recorder import peak_rss_mb; print(peak_rss_mb())"
    out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    child_peak = float(out.stdout.strip())
    assert big.sum() == big.size and 10 < child_peak < 600, child_peak   # imports torch: ~260 MB


# Matrix-product operators: on CUDA tensors each goes to cuBLAS.
MATRIX_PRODUCTS = {"mm", "addmm", "addmm_", "bmm", "baddbmm", "addmv", "addmv_", "mv", "dot", "vdot",
                   "matmul", "addr", "addbmm", "_addmm_activation"}


def test_a_run_makes_no_matrix_product(sample_run):
    """Tracking, mapping, pruning and loop detection (sequential, so every operator runs on this
    thread and is seen) dispatch no matrix product: the same code on a GPU never initialises cuBLAS.
    The LM step's 6x6/8x8 solve is on the host by design and is not a product."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from slam.data.sources import open_source
    from slam.runtime.system import SlamSystem

    seen = {}

    class Products(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.__name__.split(".")[0]
            if name in MATRIX_PRODUCTS:
                seen[name] = seen.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    cfg = sample_run.cfg(12, "system.threaded=false", "system.device=cpu", "mapping.final_iters=5")
    system = SlamSystem(cfg)
    with Products():
        system.run(open_source(cfg.data))
    assert len(system.recorder.frames) == 12
    assert not seen, seen
