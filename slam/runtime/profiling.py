"""Machine-independent cost figures of tracking: renders, host time and, on CUDA, GPU time and
kernel launches per tracked frame (what a Jetson projection needs; FPS alone depends on the
machine). Renders and host CPU time are counted on every frame during the run. GPU time and
launches come from ``torch.profiler`` after the run (profiling during the run cost the H200 run a
third of its frame rate): the last tracked frame is tracked again ``system.profile_frames`` times
by a fresh tracker started from the frame before, against the final map."""
from __future__ import annotations

from typing import Optional

import torch

from slam.map.snapshot import MapSnapshot
from slam.observation import Observation
from slam.tracking.fused import CAPTURE_AFTER
from slam.tracking.tracker import Tracker


# Host calls that put work on the GPU (the CUDA runtime's names as the profiler records them); a
# graph launch puts a whole captured frame there with one call.
HOST_LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                     "cudaGraphLaunch", "cudaMemcpyAsync", "cudaMemsetAsync")


def summarise(prof, frames: int) -> dict:
    """Per frame: host ms (operators' own CPU time), GPU ms (kernel time), ``launches`` (the GPU
    operations run: kernels, memsets and copies, also those of a CUDA graph) and
    ``host_launches`` (the host calls that queued them: launches, copies, memsets, graph launches)."""
    host_us = gpu_us = 0.0
    launches = host_launches = 0
    for e in prof.key_averages():
        host_us += e.self_cpu_time_total
        if "CUDA" in str(getattr(e, "device_type", "")):
            gpu_us += getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0))
            launches += e.count
        elif e.key in HOST_LAUNCH_CALLS:
            host_launches += e.count
    return {"frames": frames, "host_ms": host_us / 1e3 / frames, "gpu_ms": gpu_us / 1e3 / frames,
            "launches": launches / frames, "host_launches": host_launches / frames}


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

    for _ in range(CAPTURE_AFTER):   # warm-up; the fused solver's CUDA graph is captured here
        once()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            once()
        torch.cuda.synchronize()
    return summarise(prof, repeats)
