"""Where the tracker's time goes: build a map on the first frames of a sequence (single-thread
mode), then track the next frames against that frozen map under torch.profiler and print the
wall time per frame, the renders per frame and the top operators by host and device time.
``--json FILE`` also writes the profile that ``slam_jetson_projection`` projects to Jetsons:
wall, host and GPU ms per frame, kernel launches per frame and GPU ms per kernel class.

    slam_profile --config 7scenes.yaml --map-frames 60 --frames 20 \
        --set data.path=/path/to/7scenes-redkitchen-0000-0499
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from slam.config import load_config
from slam.data.sources import open_source


def map_first_frames(config: str, overrides: list, map_frames: int):
    """Runs SLAM on frames [first, first + map_frames) of the configured sequence (``first``:
    its ``data.first``). -> (cfg, system, snapshot of the map, first)."""
    from slam.runtime.system import SlamSystem

    first = load_config(config, overrides).data.first
    cfg = load_config(config, [*overrides, "system.threaded=false", "system.progress=false",
                               f"data.last={first + map_frames}", "mapping.final_iters=0"])
    system = SlamSystem(cfg)
    system.run(open_source(cfg.data))
    return cfg, system, system.latest_map(), first


def load_frames(config: str, overrides: list, first: int, last: int) -> list:
    """Frames [first, last) of the configured sequence (absolute frame numbers), as a list."""
    more = load_config(config, [*overrides, f"data.first={first}", f"data.last={last}"])
    return list(open_source(more.data))


def main(argv=None) -> int:
    """slam_profile: prints the profile; 0 when done."""
    from slam.tracking.tracker import Tracker

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="default.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--map-frames", type=int, default=60, help="frames mapped before profiling")
    ap.add_argument("--frames", type=int, default=20, help="frames tracked under the profiler")
    ap.add_argument("--rows", type=int, default=25, help="operators listed")
    ap.add_argument("--json", default=None, help="write the profile summary (for slam_jetson_projection)")
    args = ap.parse_args(argv)

    cfg, system, snap, first = map_first_frames(args.config, args.set, args.map_frames)
    print(f"map: {snap.means.shape[0]:,} spheres after {args.map_frames} frames on {system.device}")

    frames = load_frames(args.config, args.set, first + args.map_frames, first + args.map_frames + args.frames)
    records = system.recorder.snapshot()[0]
    obs = [system.observation(f) for f in frames]   # as the system hands them to its tracker
    renders = {"n": 0}

    def fresh_tracker() -> Tracker:
        tracker = Tracker(cfg.tracking, cfg.quality, cfg.raster.backend)
        tracker.initialise(records[-1].T_wc)
        tracker.prev2 = records[-2].T_wc if len(records) > 1 else None
        return tracker

    sync = torch.cuda.synchronize if system.device.type == "cuda" else (lambda: None)
    n = len(obs)

    def timed() -> float:
        tracker = fresh_tracker()
        renders["n"] = 0
        sync()
        t0 = time.perf_counter()
        for o in obs:
            renders["n"] += tracker.track(o, snap).renders
        sync()
        return (time.perf_counter() - t0) * 1000 / n

    fresh_tracker().track(obs[0], snap)  # warm-up (allocator, kernels)
    wall_ms = timed()
    renders_per_frame = renders["n"] / n
    print(f"tracking: {wall_ms:.1f} ms/frame, {renders_per_frame:.1f} renders/frame, "
          f"{wall_ms / max(renders_per_frame, 1e-9):.2f} ms per render (all included)")
    acts = [torch.profiler.ProfilerActivity.CPU]
    if system.device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        ms = timed()
    print(f"under the profiler: {ms:.1f} ms/frame")
    if args.json:
        summary = profile_summary(prof, n, wall_ms, renders_per_frame, system.device.type == "cuda")
        summary.update(config=args.config, overrides=args.set, machine=machine_name(system.device))
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
        print(f"profile summary written to {args.json}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))
    if system.device.type == "cuda":
        try:
            print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=args.rows))
        except (KeyError, AttributeError, RuntimeError):  # older torch names it cuda_time
            print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=args.rows))
    return 0


# Kernel classes of the projection: what bounds each on a smaller GPU (slam.tools.jetson_projection).
KERNEL_CLASSES = (("raster", ("sphere", "tile", "raster", "gauss_newton", "gn_")),   # our kernels: compute
                  ("sort", ("radix", "cub", "sort", "scan")),                         # memory
                  ("gemm", ("gemm", "gemv", "cublas", "cutlass")),                    # compute
                  ("copy", ("memcpy", "memset")))                                      # memory; else: elementwise


def kernel_class(name: str) -> str:
    """The projection's class of a GPU kernel (``KERNEL_CLASSES``) by its name; else 'elementwise'."""
    low = name.lower()
    for cls, keys in KERNEL_CLASSES:
        if any(k in low for k in keys):
            return cls
    return "elementwise"


def profile_summary(prof, frames: int, wall_ms: float, renders: float, cuda: bool) -> dict:
    """Per tracked frame: wall ms (without the profiler), renders, and ``slam.runtime.profiling
    .summarise``'s figures (host ms without the waits for the GPU, the waits, GPU ms by kernel
    class and in all, GPU operations and the host calls that queued them)."""
    from slam.runtime.profiling import summarise
    out = summarise(prof, frames, kernel_class if cuda else None)
    out.update(wall_ms=wall_ms, renders=renders)
    return out


def machine_name(device) -> str:
    """The GPU's name, or the CPU's with torch's thread count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


if __name__ == "__main__":
    raise SystemExit(main())
