"""The machine's speed on two fixed workloads, so that suite tables from different machines of one
kind can be set side by side (lent H200s differ by up to ~30 % in the suite's FPS, and a run's
frame rate leans on the host's single-thread speed as much as on the GPU):

* ``python_ms``: a fixed pure-Python loop (the interpreter's single-thread speed: what the
  threads' Python between kernels runs at), best of 3;
* ``render_ms``: render + backward of a fixed scene (``rasterizer.bench.render.make_scene``,
  20,000 spheres at 320x240) on the runs' device (CUDA where torch sees a GPU, else the CPU
  kernels), median of 10 after 3 warm-ups.

``slam_suite`` runs it in a subprocess (``python -m slam.batch.speed_probe``: one JSON line) after
building the kernels and writes the figures into its table's header line.
"""
from __future__ import annotations

import json
import statistics
import time

PYTHON_LOOP = 2_000_000
SCENE = (20000, 320, 240)      # spheres, width, height


def python_ms() -> float:
    """ms of the fixed Python loop, best of 3."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        s = 0
        for i in range(PYTHON_LOOP):
            s += i * i
        best = min(best, (time.perf_counter() - t0) * 1e3)
    return best


def render_ms(device: str) -> float:
    """ms of one render + backward of the fixed scene on ``device`` ('cuda' or 'cpu'), median of 10
    after 3 warm-ups (on CUDA the render benchmark's own timing, CUDA events)."""
    from rasterizer.bench.render import make_scene, run_once, time_gpu

    n, w, h = SCENE
    params, K = make_scene(n, w, h, device)
    for p in params:
        p.requires_grad_(True)

    def once():
        run_once(params, K, w, h, "auto", True)

    if device == "cuda":
        return time_gpu(once, 3, 10)
    times = []
    for k in range(13):
        t0 = time.perf_counter()
        once()
        if k >= 3:
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def probe() -> dict:
    """{'device', 'python_ms', 'render_ms'} of this machine."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return {"device": device, "python_ms": python_ms(), "render_ms": render_ms(device)}


def describe(speed: dict) -> str:
    """The probe's figures in words, for a table's header line."""
    n, w, h = SCENE
    return (f"Python loop {speed['python_ms']:.0f} ms, render + backward of {n:,} spheres at {w}x{h} "
            f"{speed['render_ms']:.2f} ms ({speed['device']}) (slam.batch.speed_probe)")


def main() -> int:
    """Prints the probe as one JSON line; 0."""
    print(json.dumps(probe()))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
