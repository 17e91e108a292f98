"""Relocalisation attempts off the tracking thread: one at a time, in a worker thread of its own.

A relocalisation attempt renders the map at dozens of candidate poses and refines several of them
(0.5-2 s on an H200, ~5 s on two CPU cores): on the tracking thread it stalled the stream for tens
of frames while a lost camera kept moving. ``BackgroundAttempts`` runs an attempt on a daemon
thread (on CUDA with a stream of its own that first waits for the submitting thread's work) while
the tracker goes on with the next frames; the tracking front end polls for the result once per
frame and tracks the frame at hand from the pose found (``slam.tracking.frontend``). With
``threaded=False`` (the deterministic sequential mode) the attempt runs inline in ``submit``, and
``poll`` hands its result out at the next frame exactly as a worker that finished in time would:
the same decisions in both modes, only without the timing.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from slam.tracking.relocalise import RelocResult


@dataclass
class Finished:
    """A finished attempt: the frame it was run on (index, timestamp s) and its result."""

    frame: int
    timestamp: float
    result: RelocResult


class BackgroundAttempts:
    """One relocalisation attempt at a time, run off the calling thread (see module doc)."""

    def __init__(self, threaded: bool) -> None:
        self.threaded = threaded
        self._stream: Optional[torch.cuda.Stream] = None   # made on the first CUDA attempt
        self._thread: Optional[threading.Thread] = None
        self._done: Optional[Finished] = None
        self._error: Optional[BaseException] = None
        # Set by ``stop``: an attempt checks it between its costly steps and gives up (the
        # relocaliser's ``stop`` argument), so the end of a stream does not wait for a whole attempt.
        self.stopping = threading.Event()

    @property
    def busy(self) -> bool:
        """An attempt is running (no other can be submitted)."""
        return self._thread is not None and self._thread.is_alive()

    def submit(self, frame: int, timestamp: float, attempt: Callable[[], RelocResult], device: torch.device) -> None:
        """Start ``attempt`` (it relocalises the frame ``frame`` at ``timestamp`` s from tensors on
        ``device``, and holds every tensor it reads) unless one is running or unread."""
        if self.busy or self._done is not None:
            return
        self.stopping.clear()     # a stop before (an earlier stream's end) does not hold this one
        if not self.threaded:
            self._done = Finished(frame, timestamp, attempt())
            return
        producer = None
        if device.type == "cuda":
            producer = torch.cuda.current_stream(device)
            if self._stream is None:
                self._stream = torch.cuda.Stream(device)
        self._thread = threading.Thread(target=self._run, args=(frame, timestamp, attempt, producer),
                                        name="relocalise", daemon=True)
        self._thread.start()

    def _run(self, frame: int, timestamp: float, attempt: Callable[[], RelocResult], producer) -> None:
        try:
            if producer is None:
                result = attempt()
            else:
                with torch.cuda.stream(self._stream):
                    self._stream.wait_stream(producer)    # the frame's tensors are ready
                    result = attempt()
                self._stream.synchronize()                # before its tensors may be freed
            self._done = Finished(frame, timestamp, result)
        except BaseException as exc:  # noqa: BLE001 - handed to the tracking thread by poll()
            self._error = exc

    def stop(self) -> None:
        """Tell a running attempt to give up (``stopping``) and block until it has ended; its result
        stays unread. The tracking thread calls this as it ends: a daemon worker still inside
        torch's C++ code when the interpreter exits aborts the process ("terminate called without
        an active exception")."""
        self.stopping.set()
        if self._thread is not None:
            self._thread.join()

    def poll(self) -> Optional[Finished]:
        """The finished attempt not yet handed out, or None; re-raises an attempt's exception on
        the calling thread."""
        if self._error is not None:
            exc, self._error = self._error, None
            raise exc
        if self.busy:
            return None
        done, self._done = self._done, None
        return done
