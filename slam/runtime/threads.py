"""Running a ``SlamSystem``'s two steps: threaded (a tracking and a mapping thread joined by
bounded channels) or sequentially in the caller's thread.

On CUDA the caller's thread uploads each frame (``slam.runtime.staging``) before it enters the
``frames`` channel, so the tracking thread starts from images on the device.
End of input closes the channels in order (the mapper drains, then runs the final refinement).
An error of the source (a bad image, a truncated recording) is an end of input too: every frame
read before it is tracked and mapped, the map is refined, and then the runner re-raises the
source's error. An exception in a stage aborts every channel (every blocked stage wakes with
``Closed``), every thread ends, and the runner re-raises the first error; Ctrl-C stops the same
way. Each thread has its own CUDA stream. Both runners behave alike.
"""
from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from contextlib import contextmanager, nullcontext
from typing import Callable, Iterable, Iterator, Optional

import torch

from slam.runtime.channel import Channel, Closed
from slam.runtime.staging import FrameStager, StagedFrame

log = logging.getLogger("slam.system")

Progress = Optional[Callable[[object], None]]
# ``extra`` of the log records of errors that the runner also re-raises to its caller: a caller
# that prints the error itself (run_slam) keeps them out of the terminal, not out of log.txt.
RERAISED = {"reraised": True}


class SourceFailed(Exception):
    """Internal: the frame source raised ``error`` (kept apart from the stages' own errors)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def read_frames(frames: Iterable) -> Iterator:
    """``frames``, with an exception of the source itself re-raised as ``SourceFailed``."""
    it = iter(frames)
    while True:
        try:
            frame = next(it)
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001 - any source error ends the input
            raise SourceFailed(exc) from exc
        yield frame


def input_error_reason(exc: Exception, frames_done: int) -> str:
    """The run's stop reason after the source failed (metrics.json ``stop_reason``)."""
    return f"input error after {frames_done} frames: {type(exc).__name__}: {exc}"


def _map_in_order(system, kf) -> None:
    """Map ``kf``, then give its loop message to the loop stage (sequential order)."""
    system.map_keyframe(kf)
    message = system.loop_message(kf)
    if message is not None:
        system.loop_step(message)


def run_sequential(system, frames: Iterable, progress: Progress) -> None:
    """Track each frame, map its keyframe, refine at the end: one thread, fixed order. With
    ``system.max_unmapped_keyframes`` N > 0 a keyframe is mapped only when N newer ones wait
    (the threaded runner's case of a mapper slower than the tracker, as on a Jetson: the
    tracker then tracks against a map N keyframes old); as the threaded runner does, the ones
    waiting are mapped at once while there is no map yet and in a slow stream
    (``SlamSystem.slow_stream``); end of input maps the ones left. A source error ends the
    input: the keyframes left are mapped, the map is refined, then the error is re-raised."""
    ahead = system.cfg.system.max_unmapped_keyframes
    pending: deque = deque()
    source_error: Optional[Exception] = None
    try:
        try:
            for frame in read_frames(frames):
                rec, kf = system.track_frame(frame)
                if kf is not None:
                    pending.append(kf)
                while pending and (len(pending) > ahead or system.slow_stream() or system.latest_map() is None):
                    _map_in_order(system, pending.popleft())
                if progress:
                    progress(rec)
        except SourceFailed as failed:
            source_error = failed.error
        while pending:
            _map_in_order(system, pending.popleft())
        system.finish_map()
    except KeyboardInterrupt:
        system.recorder.finish("interrupted (Ctrl-C)")
        raise
    except Exception as exc:
        system.recorder.finish(f"error: {type(exc).__name__}: {exc}")
        raise
    if source_error is not None:
        system.recorder.finish(input_error_reason(source_error, len(system.recorder.frames)))
        raise source_error


class _ThreadedRun:
    """One threaded run: the channels, the threads' loops and the shared error state."""

    def __init__(self, system, progress: Progress) -> None:
        self.system = system
        self.progress = progress
        self.frames = Channel(system.cfg.system.queue_size)
        # A keyframe counts until it is mapped and published: the tracker never runs more than
        # max_unmapped_keyframes keyframes ahead of the map it tracks against (none when it is 0
        # or in a slow stream: system.slow_stream_interval_s).
        self.ahead = system.cfg.system.max_unmapped_keyframes
        self.keyframes = Channel(max(self.ahead, 1), until_done=True)
        # Mapped keyframes for the loop stage: the mapper offers, never waits (a busy loop stage
        # skips keyframes, counted), so loop closure never slows mapping or tracking.
        self.loops = Channel(system.cfg.loop.queue_size) if system.loop is not None else None
        self.loops_done = threading.Event()
        self.map_ready = threading.Event()   # the first keyframe is mapped
        self.errors: list[BaseException] = []
        self.aborted = False

    def guard(self, loop) -> None:
        device = self.system.device
        stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        try:
            with torch.cuda.stream(stream) if stream is not None else nullcontext():
                loop()
        except Closed:
            pass
        except BaseException as exc:  # noqa: BLE001 - every stage error must reach the caller
            log.error("%s thread failed: %s: %s", threading.current_thread().name, type(exc).__name__, exc,
                      extra=RERAISED)
            self.errors.append(exc)
            self.abort()

    def abort(self) -> None:
        self.aborted = True
        self.frames.abort()
        self.keyframes.abort()
        if self.loops is not None:
            self.loops.abort()
        self.map_ready.set()

    def tracking_loop(self) -> None:
        system = self.system
        first = True
        try:
            while True:
                t0 = time.perf_counter()
                staged = self.frames.get()
                waited = time.perf_counter() - t0
                system.recorder.frame_wait_s += waited
                if first:
                    system.recorder.first_frame_wait_s, first = waited, False
                rec, kf = system.track_frame(staged.frame, staged.observation())
                if kf is not None:
                    t0 = time.perf_counter()
                    self.keyframes.put(kf)
                    if self.ahead == 0 or system.slow_stream():
                        # A live mapper finishes a keyframe between the frames of a slow stream:
                        # the next frame is tracked against a map that has it (sequential order).
                        self.keyframes.join()
                    system.recorder.map_wait_s += time.perf_counter() - t0
                    if system.latest_map() is None:
                        self.map_ready.wait()  # the first keyframe must be mapped before tracking
                if self.progress:
                    self.progress(rec)
        finally:
            system.end_tracking()
            self.keyframes.close()

    def mapping_loop(self) -> None:
        while True:
            try:
                kf = self.keyframes.get()
            except Closed:
                if self.loops is not None:
                    self.loops.close()
                    self.loops_done.wait()    # its last corrections, then the final refinement
                if not self.errors and not self.aborted:
                    self.system.finish_map()
                return
            self.system.map_keyframe(kf)
            self.keyframes.done()
            self.map_ready.set()
            message = self.system.loop_message(kf)
            if message is not None and not self.loops.offer(message):
                self.system.loop_skipped(message)

    def loop_loop(self) -> None:
        try:
            while True:
                self.system.loop_step(self.loops.get())
        finally:
            self.loops_done.set()


@contextmanager
def switch_interval(ms: Optional[float]) -> Iterator[None]:
    """Python's thread switch interval at ``ms`` milliseconds inside the block (None: unchanged),
    the previous one restored after it: the longest a thread ready to run Python waits while
    another holds the interpreter (``system.switch_interval_ms``)."""
    before = sys.getswitchinterval()
    if ms is not None:
        sys.setswitchinterval(ms / 1000.0)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def run_threaded(system, frames: Iterable, progress: Progress) -> None:
    """Feed ``frames`` to a tracking and a mapping thread; returns when both have ended."""
    with switch_interval(system.cfg.system.switch_interval_ms):
        _run_threaded(system, frames, progress)


def _run_threaded(system, frames: Iterable, progress: Progress) -> None:
    run = _ThreadedRun(system, progress)
    tracking = threading.Thread(target=run.guard, args=(run.tracking_loop,), name="tracking", daemon=True)
    mapping = threading.Thread(target=run.guard, args=(run.mapping_loop,), name="mapping", daemon=True)
    threads = [tracking, mapping]
    if run.loops is not None:
        threads.append(threading.Thread(target=run.guard, args=(run.loop_loop,), name="loop", daemon=True))
    # On CUDA this thread also moves each frame to the device ahead of the tracker.
    stage = FrameStager(system.observation, system.device) if system.device.type == "cuda" else StagedFrame
    for t in threads:
        t.start()
    source_error: Optional[Exception] = None
    try:
        try:
            for frame in read_frames(frames):
                if run.errors:
                    break
                run.frames.put(stage(frame))
        except SourceFailed as failed:  # an end of input: the frames read so far are still tracked
            source_error = failed.error
        run.frames.close()
    except Closed:
        pass  # a stage failed and aborted the channels
    except KeyboardInterrupt:
        system.recorder.finish("interrupted (Ctrl-C)")
        run.abort()
        for t in threads:
            t.join()
        raise
    except BaseException as exc:  # staging a frame failed
        run.errors.append(exc)
        run.abort()
    for t in threads:
        t.join()
    if run.errors:
        exc = run.errors[0]
        system.recorder.finish(f"error: {type(exc).__name__}: {exc}")
        raise exc
    if source_error is not None:
        system.recorder.finish(input_error_reason(source_error, len(system.recorder.frames)))
        raise source_error
