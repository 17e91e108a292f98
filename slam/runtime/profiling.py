"""Machine-independent cost figures of tracking: renders, host time and, on CUDA, GPU time and
kernel launches per tracked frame (what a Jetson projection needs; FPS alone depends on the
machine). Renders and host CPU time are counted on every frame during the run. GPU time and
launches come from ``torch.profiler`` after the run (profiling during the run cost the H200 run a
third of its frame rate): the last tracked frame is tracked again ``system.profile_frames`` times
by a fresh tracker started from the frame before, against the final map."""
from __future__ import annotations

from typing import Callable, Optional

import torch

from slam.map.snapshot import MapSnapshot
from slam.observation import Observation
from slam.tracking.fused import CAPTURE_AFTER
from slam.tracking.tracker import Tracker

# Host calls that put work on the GPU (the CUDA runtime's names as the profiler records them); a
# graph launch puts a whole captured frame there with one call.
HOST_LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                     "cudaGraphLaunch", "cudaMemcpyAsync", "cudaMemsetAsync")
# Host calls that wait for the GPU: their time is waiting, not host work. A copy to pageable host
# memory waits too (inside the copy call, which cannot be split): counted as a wait, its time
# stays in host_ms.
HOST_WAIT_CALLS = ("cudaEventSynchronize", "cudaStreamSynchronize", "cudaDeviceSynchronize")
PAGEABLE_READ = "Memcpy DtoH (Device -> Pageable)"


def summarise(prof, frames: int, kernel_class: Optional[Callable[[str], str]] = None,
              by_kernel: bool = False, by_host_op: bool = False) -> dict:
    """Per frame, from a ``torch.profiler`` run over ``frames`` tracked frames: ``host_ms`` (the
    operators' and CUDA calls' own CPU time, without the explicit waits for the GPU),
    ``host_wait_ms`` (those waits), ``host_waits`` (how often the host waited: synchronise calls
    and reads into pageable memory), ``gpu_ms`` (kernel, memset and copy time), ``launches`` (the
    GPU operations run, also those of a CUDA graph), ``host_launches`` (the host calls that queued
    them: launches, copies, memsets, graph launches); with ``kernel_class`` (name -> class) also
    ``gpu_ms_by_class``; with ``by_kernel`` also ``gpu_by_kernel``: per GPU operation name (the
    profiler's), [GPU us per frame, runs per frame] (slam.tools.ab_compare compares them); with
    ``by_host_op`` also ``host_by_op``: per host operation or CUDA call, [its own CPU us per frame,
    calls per frame] (the explicit waits left out), largest first."""
    host_us = wait_us = gpu_us = 0.0
    launches = host_launches = waits = 0
    by_class: dict = {}
    kernels: dict = {}
    host_ops: dict = {}
    for e in prof.key_averages():
        if "CUDA" in str(getattr(e, "device_type", "")):
            dev = getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0))
            gpu_us += dev
            launches += e.count
            waits += e.count if e.key == PAGEABLE_READ else 0
            if kernel_class is not None and dev > 0:
                cls = kernel_class(e.key)
                by_class[cls] = by_class.get(cls, 0.0) + dev
            if by_kernel and dev > 0:
                us, runs = kernels.get(e.key, (0.0, 0))
                kernels[e.key] = (us + dev, runs + e.count)
            continue
        if e.key in HOST_WAIT_CALLS:
            wait_us += e.self_cpu_time_total
            waits += e.count
            continue
        host_us += e.self_cpu_time_total
        if by_host_op and e.self_cpu_time_total > 0:
            us, calls = host_ops.get(e.key, (0.0, 0))
            host_ops[e.key] = (us + e.self_cpu_time_total, calls + e.count)
        if e.key in HOST_LAUNCH_CALLS:
            host_launches += e.count
    out = {"frames": frames, "host_ms": host_us / 1e3 / frames, "host_wait_ms": wait_us / 1e3 / frames,
           "host_waits": waits / frames, "gpu_ms": gpu_us / 1e3 / frames, "launches": launches / frames,
           "host_launches": host_launches / frames}
    if kernel_class is not None:
        out["gpu_ms_by_class"] = {k: v / 1e3 / frames for k, v in sorted(by_class.items())}
    if by_kernel:
        out["gpu_by_kernel"] = _per_frame_largest_first(kernels, frames)
    if by_host_op:
        out["host_by_op"] = _per_frame_largest_first(host_ops, frames)
    return out


def _per_frame_largest_first(totals: dict, frames: int) -> dict:
    """name -> (us, count) totals as name -> [us, count] per frame, the largest time first."""
    return {k: [us / frames, n / frames] for k, (us, n) in sorted(totals.items(), key=lambda kv: -kv[1][0])}


@torch.no_grad()
def profile_replay(tracker: Tracker, obs: Observation, snap: MapSnapshot, start, before, repeats: int) -> Optional[dict]:
    """GPU ms, host ms and launches per frame of ``tracker`` (fresh) tracking ``obs`` against
    ``snap`` ``repeats`` times, each from ``start`` (T_wc of the frame before) with ``before`` (the
    one before that, for the motion model). None off CUDA or with ``repeats`` 0."""
    if not snap.means.is_cuda or repeats <= 0:
        return None

    def once():
        tracker.initialise(start)
        tracker.prev2 = before
        tracker.track(obs, snap)

    for _ in range(CAPTURE_AFTER):   # warm-up; the tracker's CUDA graph is captured here
        once()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            once()
        torch.cuda.synchronize()
    return summarise(prof, repeats)
