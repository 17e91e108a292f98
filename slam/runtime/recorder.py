"""What a run records while it goes: poses, timings, map size, failures (thread-safe appends), and
the process memory probes it records them with."""
from __future__ import annotations

import resource
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch


@dataclass
class FrameRecord:
    """One tracked frame: its pose (T_wc (4, 4) float64, camera-to-world) and ground truth if known,
    whether tracking passed (``ok``) and needed a recovery or relocalisation (``recovered``), the
    final residual, the tracking time (ms), whether it became a keyframe, the quality evidence
    (``slam.tracking.quality.TrackQuality``, None where not tracked), why it failed, and whether
    (why, at what cost) it was re-initialised from coarse poses."""

    index: int
    timestamp: float
    T_wc: np.ndarray
    gt_pose: Optional[np.ndarray]
    ok: bool
    recovered: bool
    loss: float
    track_ms: float
    keyframe: bool
    quality: Optional[object] = None
    reason: Optional[str] = None
    reinit: Optional[str] = None     # why coarse poses were searched (an untrusted motion prior)
    reinit_ms: float = 0.0
    renders: int = 0                 # map renders the tracker made for this frame
    host_ms: float = float("nan")    # CPU time of the tracking thread for this frame
    keyframe_id: int = -1            # the reference keyframe the pose was tracked against
    T_kc: Optional[np.ndarray] = None         # the pose relative to it (4, 4)
    T_wc_tracked: Optional[np.ndarray] = None # the pose as tracked, once T_wc was re-expressed
                                              # through the refined keyframe pose at the end

    @property
    def T_wc_as_tracked(self) -> np.ndarray:
        """(4, 4) camera-to-world as the tracker gave it (what live consumers saw): ``T_wc``
        unless it was re-expressed through a refined keyframe pose at the end."""
        return self.T_wc if self.T_wc_tracked is None else self.T_wc_tracked

    @property
    def status(self) -> str:
        """'ok', 'recovered' (ok after a recovery or relocalisation) or 'lost'."""
        return ("recovered" if self.recovered else "ok") if self.ok else "lost"


@dataclass
class RunRecorder:
    """Appended to by the tracking thread (frames) and the mapping thread (keyframe reports)."""

    frames: list = field(default_factory=list)
    mapping: list = field(default_factory=list)
    sphere_counts: list = field(default_factory=list)   # (frame_index, spheres)
    # (frame_index, process RSS MB, keyframe store MB, GPU allocated MB, GPU peak MB so far);
    # the GPU columns are NaN on the CPU
    memory_mb: list = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    finished: Optional[float] = None
    stop_reason: str = "end of input"
    refine_s: float = 0.0                                # final map refinement after the stream
    map_wait_s: float = 0.0      # threaded: the tracking thread's time blocked on the mapper
                                 # (system.max_unmapped_keyframes keyframes not yet mapped)
    frame_wait_s: float = 0.0    # threaded: the tracking thread's time blocked on the next frame
                                 # (the source and the caller's thread behind; the first included)
    first_frame_wait_s: float = 0.0  # threaded: that wait for the first frame alone (the source's
                                     # opening, the first decode and upload)
    # perf_counter when the second / the latest frame's record was added (tracking thread)
    second_frame_done: Optional[float] = None
    last_frame_done: Optional[float] = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_frame(self, rec: FrameRecord) -> None:
        now = time.perf_counter()
        with self._lock:
            self.frames.append(rec)
            if len(self.frames) == 2:
                self.second_frame_done = now
            self.last_frame_done = now

    def timeline_s(self) -> Optional[dict]:
        """Where the run's wall time went, s: ``start`` (construction to the second frame's
        record: the source's opening, the first frame's wait and tracking, the first keyframe's
        mapping, which the tracker waits for, and the second frame), ``frames`` (that record to
        the last: one frame fewer than the run's), ``end`` (the last record to the end, the final
        refinement left out: the last keyframes' mapping, the loop stage's last work, the threads'
        ends). They add up to the time ``fps_system`` divides by. None before a second frame."""
        if self.second_frame_done is None or self.last_frame_done is None:
            return None
        end = self.finished if self.finished is not None else time.perf_counter()
        return {"start": self.second_frame_done - self.started,
                "frames": self.last_frame_done - self.second_frame_done,
                "end": max(end - self.last_frame_done - self.refine_s, 0.0)}

    def add_mapping(self, report, rss_mb: float = float("nan"), store_mb: float = float("nan"),
                    gpu_mb: tuple = (float("nan"), float("nan"))) -> None:
        with self._lock:
            self.mapping.append(report)
            self.sphere_counts.append((report.frame_index, report.spheres))
            self.memory_mb.append((report.frame_index, rss_mb, store_mb, *gpu_mb))

    def snapshot(self) -> tuple[list, list, list]:
        """Copies of the lists, safe to read while threads still append."""
        with self._lock:
            return list(self.frames), list(self.mapping), list(self.sphere_counts)

    def finish(self, reason: Optional[str] = None) -> None:
        if self.finished is None:
            self.finished = time.perf_counter()
        if reason:
            self.stop_reason = reason

    @property
    def wall_s(self) -> float:
        end = self.finished if self.finished is not None else time.perf_counter()
        return end - self.started


def current_rss_mb() -> float:
    """Resident memory of this process now (MB); NaN where /proc is unavailable."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 1e6
    except (OSError, ValueError, IndexError):
        return float("nan")


def peak_rss_mb() -> float:
    """Peak resident memory of this program (MB, 10^6 bytes, as every memory figure of a run; before
    3fe543d this one was MiB, 4.9 % less): ``VmHWM`` of /proc/self/status, which starts
    afresh when the program is exec'd. getrusage's ``ru_maxrss`` (the fallback where /proc is
    missing) keeps the high-water mark across fork + exec, so a run started by a big process
    (pytest, a launcher) would report that parent's memory as its own."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e6     # kB (KiB) -> MB
    except (OSError, ValueError, IndexError):
        pass
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # KiB on Linux, bytes on macOS
    return ru * 1024 / 1e6 if sys.platform != "darwin" else ru / 1e6


def gpu_memory_sample(device: torch.device) -> tuple[float, float]:
    """(allocated now, peak so far) in MB on a CUDA device; NaNs elsewhere."""
    if device.type != "cuda":
        return float("nan"), float("nan")
    return torch.cuda.memory_allocated(device) / 1e6, torch.cuda.max_memory_allocated(device) / 1e6
