"""Where the tracker's time goes: build a map on the first frames of a sequence (single-thread
mode), then track the next frames against that frozen map under torch.profiler and print the
wall time per frame, the renders per frame and the top operators by host and device time.
``--json FILE`` also writes the profile that ``slam_jetson_projection`` projects to Jetsons:
``{"tracking": {...}}`` with wall, host and GPU ms per frame, kernel launches per frame and GPU
ms per kernel class.

``--mapping-keyframes K`` then runs the system on from where the map stopped (sequential, as
``system.threaded: false`` does) until 2K more keyframes are mapped: every other keyframe's
mapping, and its loop step, under torch.profiler, the others timed without it. The JSON gains
``mapping`` (the same figures per keyframe, ``wall_ms`` the un-profiled mapper's ms),
``keyframe_rate`` (keyframes per tracked frame over every frame the profile's system tracked),
``loop`` (thread CPU and wall ms per keyframe, GPU figures from the profiled steps) and ``grid``
(the grid's CPU ms per keyframe): what the whole-system projection needs.

    slam_profile --config 7scenes.yaml --map-frames 60 --frames 20 \
        --set data.path=/path/to/7scenes-redkitchen-0000-0499 [--mapping-keyframes 10]
"""
from __future__ import annotations

import argparse
import itertools
import json
import platform
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from slam.config import load_config
from slam.data.sources import open_source


def map_first_frames(config: str, overrides: list, map_frames: int, timing: Optional[dict] = None):
    """Runs SLAM on frames [first, first + map_frames) of the configured sequence (``first``:
    its ``data.first``). -> (cfg, system, snapshot of the map, first). ``timing``: gets
    ``first_frame_ms``, from the system's start (its recorder's clock, which a run's FPS counts
    from) to its first frame read and staged as a threaded run's caller thread stages it before the
    tracker can start (on CUDA: uploaded and downscaled on a stream of its own,
    ``slam.runtime.staging``)."""
    from slam.runtime.staging import FrameStager
    from slam.runtime.system import SlamSystem

    first = load_config(config, overrides).data.first
    cfg = load_config(config, [*overrides, "system.threaded=false", "system.progress=false",
                               f"data.last={first + map_frames}", "mapping.final_iters=0"])
    source = open_source(cfg.data)     # before the system, as run_slam opens it (index files only)
    system = SlamSystem(cfg)
    frames = iter(source)
    head = next(frames, None)
    if head is not None and system.device.type == "cuda":
        FrameStager(system.observation, system.device)(head)
    if timing is not None:
        timing["first_frame_ms"] = (time.perf_counter() - system.recorder.started) * 1e3
    system.run(itertools.chain([] if head is None else [head], frames))
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
    ap.add_argument("--rows", type=int, default=25, help="operators listed (0: none)")
    ap.add_argument("--mapping-keyframes", type=int, default=0, metavar="K",
                    help="then map 2K more keyframes, K of them under the profiler (the whole-system profile)")
    ap.add_argument("--json", default=None, help="write the profile summary (for slam_jetson_projection)")
    args = ap.parse_args(argv)

    timing: dict = {}
    cfg, system, snap, first = map_first_frames(args.config, args.set, args.map_frames, timing)
    print(f"map: {snap.means.shape[0]:,} spheres after {args.map_frames} frames on {system.device}; "
          f"the first frame staged {timing['first_frame_ms']:.0f} ms after the start")

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
    summary = {"machine": machine_name(system.device), "config": args.config, "overrides": args.set,
               "max_unmapped_keyframes": cfg.system.max_unmapped_keyframes,   # the system model's pace
               "tracking": profile_summary(prof, n, wall_ms, renders_per_frame, system.device.type == "cuda")}
    if args.rows > 0:
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))
    if args.rows > 0 and system.device.type == "cuda":
        try:
            print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=args.rows))
        except (KeyError, AttributeError, RuntimeError):  # older torch names it cuda_time
            print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=args.rows))
    if args.mapping_keyframes > 0:
        more = map_further(args.config, args.set, system, first + args.map_frames, args.mapping_keyframes)
        summary["tracking"]["thread_cpu_ms"] = more.pop("tracking_thread_cpu_ms")
        summary["tracking"]["run_wall_ms"] = more.pop("tracking_run_wall_ms")
        summary.update(more, first_frame_ms=timing["first_frame_ms"])
        print_system_parts(summary)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
        print(f"profile summary written to {args.json}")
    return 0


def profiled(fn: Callable[[], object], cuda: bool) -> dict:
    """``fn()`` once under torch.profiler (the GPU drained before and inside): ``summarise``'s
    figures for that one call (host ms, waits, GPU ms by kernel class, launches; host CPU us by
    operation)."""
    from slam.runtime.profiling import summarise
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    sync()
    with torch.profiler.profile(activities=acts) as prof:
        fn()
        sync()
    return summarise(prof, 1, kernel_class if cuda else None, by_kernel=cuda, by_host_op=True)


def average(summaries: list) -> dict:
    """The mean of ``profiled`` figures over several calls; ``count``: how many. ``gpu_by_kernel``
    (on CUDA): per kernel, [GPU us, runs] per call, averaged over the calls (0 where a call did
    not run it), largest first; ``host_by_op`` alike: per host operation, [CPU us, calls]."""
    nested = ("frames", "gpu_ms_by_class", "gpu_by_kernel", "host_by_op")
    out = {k: float(np.mean([s[k] for s in summaries])) for k in summaries[0] if k not in nested}
    if any("gpu_ms_by_class" in s for s in summaries):
        classes = sorted({c for s in summaries for c in s.get("gpu_ms_by_class", {})})
        out["gpu_ms_by_class"] = {c: float(np.mean([s.get("gpu_ms_by_class", {}).get(c, 0.0) for s in summaries]))
                                  for c in classes}
    for key in ("gpu_by_kernel", "host_by_op"):
        if any(key in s for s in summaries):
            names = {k for s in summaries for k in s.get(key, {})}
            mean = {k: [float(np.mean([s.get(key, {}).get(k, (0.0, 0.0))[i] for s in summaries]))
                        for i in (0, 1)] for k in names}
            out[key] = dict(sorted(mean.items(), key=lambda kv: -kv[1][0]))
    out["count"] = len(summaries)
    return out


def map_further(config: str, overrides: list, system, start: int, keyframes: int) -> dict:
    """Runs ``system`` on from frame ``start`` (absolute) as the sequential runner does (track;
    map the keyframe; its loop step) until ``2 * keyframes`` more keyframes are mapped or the
    sequence ends. Keyframes alternate: timed without the profiler (the mapper's own ms, the loop
    step's thread CPU and wall ms), then under it (``profiled``: mapping and loop step apart).
    -> ``mapping`` (per keyframe; ``wall_ms``: un-profiled), ``keyframe_rate`` (keyframes per
    tracked frame over every frame ``system`` tracked), ``start_ms`` (its first frame's tracking
    and first keyframe's mapping ms), ``loop`` (None without a loop stage),
    ``grid`` (None without the grid), the tracking thread's CPU and wall ms per frame here
    (``tracking_thread_cpu_ms``, ``tracking_run_wall_ms``: the whole ``track_frame``)."""
    cuda = system.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    more = load_config(config, [*overrides, f"data.first={start}"])
    timed_ms: list = []
    loop_cpu: list = []
    loop_wall: list = []
    mapping_prof: list = []
    loop_prof: list = []
    cpu_per_frame: list = []
    wall_per_frame: list = []
    for frame in open_source(more.data):
        if len(mapping_prof) >= keyframes:
            break
        rec, kf = system.track_frame(frame)
        cpu_per_frame.append(rec.host_ms)
        wall_per_frame.append(rec.track_ms)
        if kf is None:
            continue
        timed = len(timed_ms) <= len(mapping_prof)
        sync()
        if timed:
            system.map_keyframe(kf)
            timed_ms.append(system.recorder.mapping[-1].ms)   # the mapper's own ms, as metrics.json's stage_ms
        else:
            mapping_prof.append(profiled(lambda: system.map_keyframe(kf), cuda))
        message = system.loop_message(kf)
        if message is None:
            continue
        if timed:
            sync()
            t0, c0 = time.perf_counter(), time.thread_time()
            system.loop_step(message)
            sync()
            loop_wall.append((time.perf_counter() - t0) * 1e3)
            loop_cpu.append((time.thread_time() - c0) * 1e3)
        else:
            loop_prof.append(profiled(lambda: system.loop_step(message), cuda))
    system.end_tracking()
    if not mapping_prof:
        raise SystemExit(f"slam_profile: no keyframe to profile after frame {start}: the sequence ended")
    records = system.recorder.frames
    mapping = average(mapping_prof)
    mapping.update(wall_ms=float(np.mean(timed_ms)), timed=len(timed_ms), spheres=int(system.smap.n))
    # A threaded run's start: its tracker waits for the first keyframe to be mapped (kernel loading,
    # first allocations) before it goes on; this system's own first frame and keyframe.
    start_ms = records[0].track_ms + system.recorder.mapping[0].ms
    out = {"mapping": mapping, "keyframe_rate": sum(r.keyframe for r in records) / len(records), "start_ms": start_ms,
           "rate_frames": len(records), "rate_keyframes": sum(r.keyframe for r in records),
           "tracking_thread_cpu_ms": float(np.nanmean(cpu_per_frame)),
           "tracking_run_wall_ms": float(np.nanmean(wall_per_frame)), "loop": None, "grid": None}
    if loop_prof:
        loop = average(loop_prof)
        loop.update(cpu_ms=float(np.mean(loop_cpu)) if loop_cpu else None,
                    wall_ms=float(np.mean(loop_wall)) if loop_wall else None, timed=len(loop_cpu))
        out["loop"] = loop
    if system.grid is not None:
        stats = system.grid.stats()
        out["grid"] = {"cpu_ms": stats["cpu_ms_per_keyframe_mean"], "keyframes": stats["keyframes"]}
    return out


MAPPING_KERNELS_SHOWN = 12   # the mapper's largest GPU and host operations printed (all of them in --json)


def print_system_parts(summary: dict) -> None:
    """The mapping, loop and grid parts of a whole-system profile, one line each."""
    m, loop, grid = summary["mapping"], summary.get("loop"), summary.get("grid")
    print(f"mapping: {m['wall_ms']:.1f} ms/keyframe without the profiler ({m['timed']} keyframes); under it "
          f"({m['count']}): host {m['host_ms']:.1f} ms, GPU {m['gpu_ms']:.1f} ms, {m['launches']:.0f} GPU operations, "
          f"{m['host_waits']:.1f} host waits; {m['spheres']:,} spheres")
    print(f"keyframes: {summary['keyframe_rate']:.3f} per frame ({summary['rate_keyframes']} of "
          f"{summary['rate_frames']} tracked); tracking thread {summary['tracking']['thread_cpu_ms']:.2f} ms CPU, "
          f"{summary['tracking']['run_wall_ms']:.2f} ms wall a frame (the whole track_frame)")
    top = list((m.get("gpu_by_kernel") or {}).items())[:MAPPING_KERNELS_SHOWN]
    if top:
        from slam.tools.ab_compare import short_kernel_name
        print("mapping's GPU operations a keyframe (us, runs, class): " + "; ".join(
            f"{short_kernel_name(name)[:60]} {us:.0f}, {runs:.0f}, {kernel_class(name)}" for name, (us, runs) in top))
    host = list((m.get("host_by_op") or {}).items())[:MAPPING_KERNELS_SHOWN]
    if host:
        print("mapping's host operations a keyframe (own CPU us, calls): " + "; ".join(
            f"{name[:60]} {us:.0f}, {calls:.0f}" for name, (us, calls) in host))
    if loop is not None:
        cpu = "n/a" if loop["cpu_ms"] is None else f"{loop['cpu_ms']:.1f}"
        print(f"loop step: {cpu} ms CPU/keyframe, GPU {loop['gpu_ms']:.2f} ms")
    if grid is not None:
        print(f"grid: {grid['cpu_ms']:.1f} ms CPU/keyframe ({grid['keyframes']} keyframes)")


# Kernel classes of the projection: what bounds each on a smaller GPU (slam.tools.jetson_model).
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
    out = summarise(prof, frames, kernel_class if cuda else None, by_kernel=cuda)
    out.update(wall_ms=wall_ms, renders=renders)
    return out


def machine_name(device) -> str:
    """The GPU's name, or the CPU's with torch's thread count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


if __name__ == "__main__":
    raise SystemExit(main())
