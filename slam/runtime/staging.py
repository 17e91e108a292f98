"""Frames moved to the device ahead of the tracker (threaded mode on CUDA).

The caller's thread reads the source; with a ``FrameStager`` it also uploads each frame and
downsamples it to the tracking resolution (``SlamSystem.observation``) on a stream of its own,
before the frame enters the bounded ``frames`` channel. The tracking thread then starts from
images already on the device: the host copy into page-locked memory, the copies' queueing and the
downscale's launch leave the critical path (the host time it saves:
docs/benchmarks.md#why-the-defaults-are-what-they-are). The tracking stream waits for the upload
on the device (an event), never the host.

Memory: at most ``system.queue_size`` staged frames at the tracking resolution on the device.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from slam.data.frame import Frame
from slam.observation import Observation


@dataclass
class StagedFrame:
    """A source frame and, when staged, its observation on the device and the event after which
    the observation's images are written (recorded on the staging stream)."""

    frame: Frame
    obs: Optional[Observation] = None
    ready: Optional[torch.cuda.Event] = None

    def observation(self) -> Optional[Observation]:
        """The staged observation, usable on the calling thread's current stream (which waits for
        the upload on the device; the images are marked as used there, so the allocator does not
        hand their memory out before that stream is done with them). None when not staged."""
        if self.obs is None:
            return None
        stream = torch.cuda.current_stream(self.obs.depth.device)
        stream.wait_event(self.ready)
        self.obs.color.record_stream(stream)
        self.obs.depth.record_stream(stream)
        return self.obs


class FrameStager:
    """Stages frames on its own CUDA stream with ``observe(frame) -> Observation`` (the system's
    upload and downscale). Not thread-safe: one staging thread."""

    def __init__(self, observe: Callable[[Frame], Observation], device: torch.device) -> None:
        if device.type != "cuda":
            raise ValueError(f"frames are staged ahead only on CUDA, not on {device}")
        self.observe = observe
        self.stream = torch.cuda.Stream(device)

    def __call__(self, frame: Frame) -> StagedFrame:
        with torch.cuda.stream(self.stream):
            obs = self.observe(frame)
            ready = torch.cuda.Event()
            ready.record(self.stream)
        return StagedFrame(frame, obs, ready)
