"""Machine-independent cost figures of tracking: renders, host time and, on CUDA, GPU time and
kernel launches per tracked frame (what a Jetson projection needs; FPS alone depends on the
machine). Renders and host CPU time are counted on every frame; GPU time and launches come from
``torch.profiler`` over a window of ``system.profile_frames`` frames after a warm-up, whose own
times are left out of the FPS figures."""
from __future__ import annotations

import contextlib
from typing import Optional

import torch

WARMUP_FRAMES = 20   # allocator and kernel caches settle; the window starts after these


class TrackingProfiler:
    """Owned by the tracking thread. ``around(n)`` wraps the n-th tracked frame (0-based)."""

    def __init__(self, device: torch.device, frames: int) -> None:
        self.enabled = device.type == "cuda" and frames > 0
        self.start, self.stop = WARMUP_FRAMES, WARMUP_FRAMES + frames
        self._prof: Optional[torch.profiler.profile] = None
        self.summary: Optional[dict] = None

    def profiled(self, n: int) -> bool:
        """Whether frame ``n`` is inside the profiling window."""
        return self.enabled and self.start <= n < self.stop

    @contextlib.contextmanager
    def around(self, n: int):
        if not self.profiled(n):
            yield
            return
        if self._prof is None:
            self._prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                            torch.profiler.ProfilerActivity.CUDA])
            self._prof.__enter__()
        try:
            yield
        finally:
            if n == self.stop - 1:
                torch.cuda.synchronize()
                self._prof.__exit__(None, None, None)
                self.summary = summarise(self._prof, self.stop - self.start)
                self._prof = None


def summarise(prof, frames: int) -> dict:
    """Per frame: host ms (operators' own CPU time), GPU ms (kernel time) and CUDA kernel launches."""
    host_us = gpu_us = 0.0
    launches = 0
    for e in prof.key_averages():
        host_us += e.self_cpu_time_total
        if "CUDA" in str(getattr(e, "device_type", "")):
            gpu_us += getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0))
            launches += e.count
    return {"frames": frames, "host_ms": host_us / 1e3 / frames, "gpu_ms": gpu_us / 1e3 / frames,
            "launches": launches / frames}
