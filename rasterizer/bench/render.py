"""Benchmark of the sphere rasterizer: ours (CUDA) vs gsplat on the same spheres, and the CPU
kernel vs the PyTorch reference. Prints markdown tables.

    slam_bench_rasterizer            # GPU section (if CUDA) + CPU section
    slam_bench_rasterizer --cpu-only
    slam_bench_rasterizer --sizes 200000 --res 640x480 --reps 50

GPU timings: median over --reps iterations after --warmup, each timed with CUDA events (forward:
the render call; forward+backward: render + loss.backward() with loss = sum of colour, depth and
alpha). Peak memory: torch.cuda.max_memory_allocated() over one forward+backward after
reset_peak_memory_stats(), reported both as the absolute peak and as the extra over what was
allocated before (the inputs).
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time

import torch

import rasterizer


def make_scene(n, width, height, device, seed=0):
    """n spheres in the frustum, 1-5 m away, footprints sigma = 0.7..8 px (3-sigma 2..24 px).
    -> ([means (n, 3) m, radii (n,) m, colors (n, 3), opacities (n,)] on ``device``, K (3, 3) on the CPU)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    f = 0.82 * width
    K = torch.tensor([[f, 0, (width - 1) / 2], [0, f, (height - 1) / 2], [0, 0, 1.0]])
    z = torch.empty(n).uniform_(1.0, 5.0, generator=g)
    u = torch.empty(n).uniform_(-10, width + 10, generator=g)
    v = torch.empty(n).uniform_(-10, height + 10, generator=g)
    sigma_px = torch.exp(torch.empty(n).uniform_(math.log(0.7), math.log(8.0), generator=g))
    means = torch.stack([(u - K[0, 2]) * z / f, (v - K[1, 2]) * z / f, z], 1)
    radii = sigma_px * z / f
    colors = torch.rand(n, 3, generator=g)
    opac = torch.empty(n).uniform_(0.1, 0.9, generator=g)
    return [t.to(device) for t in (means, radii, colors, opac)], K


def run_once(params, K, w, h, backend, backward):
    out = rasterizer.rasterize_spheres(*params, K, w, h, backend=backend)
    if backward:
        (out.color.sum() + out.depth.sum() + out.alpha.sum()).backward()
        for p in params:
            p.grad = None
    return out


def time_gpu(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def peak_gpu(fn):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    return peak / 2**20, (peak - base) / 2**20


def gpu_section(sizes, resolutions, warmup, reps, backends):
    dev = torch.device("cuda")
    print(f"\n### GPU: {torch.cuda.get_device_name()} (torch {torch.__version__}, "
          f"CUDA {torch.version.cuda})\n")
    print("| N | image | backend | fwd ms | fwd+bwd ms | peak MB (abs / extra) |")
    print("|---|---|---|---|---|---|")
    rows = {}
    for n in sizes:
        for (w, h) in resolutions:
            params, K = make_scene(n, w, h, dev)
            params = [p.requires_grad_() for p in params]
            for be in backends:
                try:
                    fwd = time_gpu(lambda p=params: run_once(p, K, w, h, be, False), warmup, reps)
                    fb = time_gpu(lambda p=params: run_once(p, K, w, h, be, True), warmup, reps)
                    pk = peak_gpu(lambda p=params: run_once(p, K, w, h, be, True))
                except Exception as e:  # keep the table going (e.g. gsplat missing)
                    print(f"| {n} | {w}x{h} | {be} | failed: {type(e).__name__}: {e} | | |")
                    continue
                rows[(n, w, h, be)] = (fwd, fb, pk)
                print(f"| {n} | {w}x{h} | {be} | {fwd:.3f} | {fb:.3f} | {pk[0]:.1f} / {pk[1]:.1f} |",
                      flush=True)
            del params
    if "gsplat" in backends:
        print("\n| N | image | fwd speed-up | fwd+bwd speed-up | peak memory ratio (abs / extra) |")
        print("|---|---|---|---|---|")
        for n in sizes:
            for (w, h) in resolutions:
                a, b = rows.get((n, w, h, "cuda")), rows.get((n, w, h, "gsplat"))
                if a and b:
                    print(f"| {n} | {w}x{h} | {b[0] / a[0]:.2f}x | {b[1] / a[1]:.2f}x | "
                          f"{a[2][0] / b[2][0]:.2f} / {a[2][1] / b[2][1]:.2f} |")


def profile_case(n, w, h, backend="cuda"):
    """torch.profiler table of one forward+backward (kernel and CPU-side cost)."""
    from torch.profiler import ProfilerActivity, profile

    params, K = make_scene(n, w, h, "cuda")
    params = [p.requires_grad_() for p in params]
    for _ in range(3):
        run_once(params, K, w, h, backend, True)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            run_once(params, K, w, h, backend, True)
        torch.cuda.synchronize()
    print(f"\n### Profile: {backend}, N={n}, {w}x{h}, 5 x forward+backward\n")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25))


def cpu_section(n, w, h, reps):
    print(f"\n### CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch threads {torch.get_num_threads()}\n")
    params, K = make_scene(n, w, h, "cpu")
    params = [p.requires_grad_() for p in params]
    print("| N | image | backend | fwd ms | fwd+bwd ms |")
    print("|---|---|---|---|---|")
    res = {}
    for be in ("cpu", "reference"):
        run_once(params, K, w, h, be, True)  # warm-up (and JIT load)
        r = reps if be == "cpu" else max(1, reps // 5)
        t = []
        for backward in (False, True):
            ts = []
            for _ in range(r):
                t0 = time.perf_counter()
                run_once(params, K, w, h, be, backward)
                ts.append((time.perf_counter() - t0) * 1e3)
            t.append(statistics.median(ts))
        res[be] = t
        print(f"| {n} | {w}x{h} | {be} | {t[0]:.2f} | {t[1]:.2f} |", flush=True)
    print(f"\ncpu kernel speed-up over reference: forward {res['reference'][0] / res['cpu'][0]:.1f}x, "
          f"forward+backward {res['reference'][1] / res['cpu'][1]:.1f}x")


def main(argv=None) -> int:
    """slam_bench_rasterizer: prints the tables; 0 when done."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,200000,1000000")
    ap.add_argument("--res", default="640x480,1280x720")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--no-gsplat", action="store_true")
    ap.add_argument("--cpu-only", action="store_true")
    ap.add_argument("--cpu-n", type=int, default=2000)
    ap.add_argument("--cpu-res", default="160x120")
    ap.add_argument("--cpu-reps", type=int, default=10)
    ap.add_argument("--profile", action="store_true", help="also profile 200k at 640x480")
    ap.add_argument("--no-cpu", action="store_true")
    a = ap.parse_args(argv)
    print(f"sphere rasterizer benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{platform.node()}")
    if torch.cuda.is_available() and not a.cpu_only:
        backends = ["cuda"] + ([] if a.no_gsplat else ["gsplat"])
        res = [tuple(int(x) for x in r.split("x")) for r in a.res.split(",")]
        gpu_section([int(s) for s in a.sizes.split(",")], res, a.warmup, a.reps, backends)
    if torch.cuda.is_available() and a.profile:
        profile_case(200000, 640, 480)
    if not a.no_cpu:
        cw, ch = (int(x) for x in a.cpu_res.split("x"))
        cpu_section(a.cpu_n, cw, ch, a.cpu_reps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
