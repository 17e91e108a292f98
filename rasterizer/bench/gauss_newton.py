"""Benchmark of the fused Gauss-Newton pass (rasterizer.gauss_newton) against one
rasterize_spheres forward on the same spheres; CUDA and CPU. Prints markdown tables.

    slam_bench_gauss_newton                    # GPU (if CUDA) + CPU sections
    slam_bench_gauss_newton --sizes 200000 --res 640x480 --no-cpu

GPU: median over --reps calls after --warmup, each timed with CUDA events around the call (it
includes the render's one host wait for the pair count) and with the host clock; launches per call
counted with torch.profiler (kernels, and memset/memcpy operations). CPU: median host time.
Scenes: ``rasterizer.bench.render.make_scene``; the observation is the render at a small pose
offset plus noise, valid where its depth is. How far CUDA, CPU and the oracle agree is asserted by
tests/test_gauss_newton_cuda.py (on a GPU: scripts/gpu_check.sh), not measured here.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

import rasterizer
from rasterizer.bench.render import make_scene

SETTINGS = dict(pivot_z=3.0, gain=1.05, bias=0.01, depth_weight=1.0, huber=(0.1, 0.05),
                alpha_threshold=0.5, depth_noise=(0.01, 0.0014), color_tol=0.1)


def observation(params, K, w, h):
    """(obs_color, obs_depth, valid) on the spheres' device: the render at a small pose offset."""
    delta = torch.tensor([0.01, -0.01, 0.005, 0.02, -0.01, 0.03], dtype=torch.float64)
    moved = rasterizer.increment_points(params[0].double(), delta.to(params[0].device),
                                       SETTINGS["pivot_z"]).float()
    out = rasterizer.rasterize_spheres(moved, *params[1:], K, w, h)
    g = torch.Generator(device="cpu").manual_seed(1)
    noise = torch.randn(h, w, 4, generator=g).to(moved.device)
    color = (out.color + 0.02 * noise[..., :3]).clamp(0, 1)
    depth = torch.where(out.alpha > 0.5, out.depth + 0.01 * noise[..., 3], torch.zeros_like(out.depth))
    return color, depth, depth > 0


def calls(params, K, w, h, obs):
    """The timed calls: name -> zero-argument function."""

    def gn(derivatives: bool):
        return rasterizer.gauss_newton(*params, K, w, h, *obs, derivatives=derivatives, **SETTINGS)

    return {"forward": lambda: rasterizer.rasterize_spheres(*params, K, w, h),
            "gauss_newton": lambda: gn(True), "cost_only": lambda: gn(False)}


def time_gpu(fn, warmup, reps):
    """(median GPU ms by CUDA events, median host ms)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    gpu, host = [], []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        a.record()
        fn()
        b.record()
        b.synchronize()
        host.append((time.perf_counter() - t0) * 1e3)
        gpu.append(a.elapsed_time(b))
    return statistics.median(gpu), statistics.median(host)


def launches(fn, reps=5):
    """(kernels, memset/memcpy operations) per call, by torch.profiler."""
    from torch.profiler import ProfilerActivity, profile  # lazy: only the GPU section profiles

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    kernels = copies = 0
    for e in prof.key_averages():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if e.key.startswith(("Memset", "Memcpy")):
            copies += e.count
        else:
            kernels += e.count
    return kernels / reps, copies / reps


def extra_peak_mb(fn):
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def cases(sizes, resolutions, device):
    """(n, w, h, call name, zero-argument function) for every scene size, resolution and timed call
    (a scene and its observation are made once per size and resolution, on ``device``)."""
    for n in sizes:
        for w, h in resolutions:
            params, K = make_scene(n, w, h, device)
            obs = observation(params, K, w, h)
            for name, fn in calls(params, K, w, h, obs).items():
                yield n, w, h, name, fn
            del params, obs


def gpu_section(sizes, resolutions, warmup, reps) -> list:
    """Prints the GPU table; returns its rows as dicts (n, image, call, gpu_ms, host_ms)."""
    print(f"\n### GPU: {torch.cuda.get_device_name()} (torch {torch.__version__}, "
          f"CUDA {torch.version.cuda})\n")
    print("| N | image | call | GPU ms | host ms | kernels + memset/copy per call | extra peak MB |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for n, w, h, name, fn in cases(sizes, resolutions, "cuda"):
        g, t = time_gpu(fn, warmup, reps)
        k, c = launches(fn)
        print(f"| {n} | {w}x{h} | {name} | {g:.3f} | {t:.3f} | {k:g} + {c:g} | "
              f"{extra_peak_mb(fn):.1f} |", flush=True)
        rows.append({"n": n, "image": f"{w}x{h}", "call": name, "gpu_ms": g, "host_ms": t})
    return rows


def cpu_section(sizes, resolutions, reps):
    print(f"\n### CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch threads {torch.get_num_threads()}\n")
    print("| N | image | call | ms |")
    print("|---|---|---|---|")
    for n, w, h, name, fn in cases(sizes, resolutions, "cpu"):
        fn()  # warm-up (and JIT load)
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
        print(f"| {n} | {w}x{h} | {name} | {statistics.median(ts):.1f} |", flush=True)


def main(argv=None) -> int:
    """slam_bench_gauss_newton: prints the tables; 0 when done."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="50000,100000,200000")
    ap.add_argument("--res", default="320x240,640x480")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--cpu-sizes", default="50000,200000")
    ap.add_argument("--cpu-res", default="320x240,640x480")
    ap.add_argument("--cpu-reps", type=int, default=3)
    ap.add_argument("--no-cpu", action="store_true")
    ap.add_argument("--cpu-only", action="store_true")
    ap.add_argument("--json", default=None, help="also write the GPU rows to this file (slam.tools.ab_compare)")
    a = ap.parse_args(argv)

    def parse_res(s: str) -> list:   # "160x120,320x240" -> [(160, 120), (320, 240)]
        return [tuple(int(x) for x in r.split("x")) for r in s.split(",")]

    print(f"fused Gauss-Newton benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{platform.node()}")
    if torch.cuda.is_available() and not a.cpu_only:
        rows = gpu_section([int(s) for s in a.sizes.split(",")], parse_res(a.res), a.warmup, a.reps)
        if a.json:
            Path(a.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1) + "\n")
    if not a.no_cpu:
        cpu_section([int(s) for s in a.cpu_sizes.split(",")], parse_res(a.cpu_res), a.cpu_reps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
