"""A ``FrameSource`` fed by middleware callbacks: bounded, with backpressure or drop-oldest."""
from __future__ import annotations

import dataclasses
import logging
import threading
from collections import deque
from typing import Iterator

from slam.data.frame import Frame, FrameSource
from slam.runtime.channel import Closed

log = logging.getLogger("slam.ros")


class LiveSource(FrameSource):
    """Frames put by callbacks, iterated by ``SlamSystem.run`` until ``close()``.

    policy 'block': ``put`` waits while ``maxsize`` frames wait (lossless replay; the middleware's
    own subscriber queue then drops). policy 'drop_oldest': ``put`` never waits; the oldest
    waiting frame is dropped (live: track the newest data). Frames are renumbered 0, 1, 2, ... in
    delivery order. Drops are counted in ``stats``.
    """

    name = "ros"

    def __init__(self, maxsize: int = 2, policy: str = "drop_oldest") -> None:
        super().__init__()
        if maxsize < 1:
            raise ValueError("queue size must be >= 1")
        if policy not in ("block", "drop_oldest"):
            raise ValueError(f"policy must be 'block' or 'drop_oldest', got {policy!r}")
        self.maxsize, self.policy = maxsize, policy
        self._items: deque = deque()
        self._closed = False
        self._cond = threading.Condition()

    def put(self, frame: Frame) -> None:
        """Queue a frame; raises ``Closed`` after ``close()``."""
        with self._cond:
            if self.policy == "block":
                while len(self._items) >= self.maxsize and not self._closed:
                    self._cond.wait()
            if self._closed:
                raise Closed()
            if len(self._items) >= self.maxsize:
                old = self._items.popleft()
                self.stats.skip(f"frame at {old.timestamp:.6f} s dropped: tracking is slower than the input "
                                f"(queue of {self.maxsize} full)")
                if self.stats.skipped <= 5 or self.stats.skipped % 100 == 0:
                    log.warning("tracking is slower than the input: dropped the oldest waiting frame "
                                "(%d so far)", self.stats.skipped)
            self._items.append(frame)
            self._cond.notify_all()

    def close(self) -> None:
        """End the stream: the frames already queued are still delivered."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def __len__(self) -> int:  # unknown length: a live stream
        raise TypeError("a live ROS stream has no known length")

    def _frames(self) -> Iterator[Frame]:
        index = 0
        while True:
            with self._cond:
                while not self._items and not self._closed:
                    self._cond.wait()
                if not self._items:
                    return
                frame = self._items.popleft()
                self._cond.notify_all()
            yield dataclasses.replace(frame, index=index)
            index += 1
