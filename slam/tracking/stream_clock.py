"""The input stream's pace, from the frames' timestamps: its usual frame interval (the median of
the last ones), gaps (dropped frames) and whether the stream is slow.

A slow stream (usual interval above ``system.slow_stream_interval_s``) gives the system time
between frames that a camera-rate stream does not: the re-initialiser searches features before
the refinement after a large predicted motion (``slam.tracking.reinit``), and the threaded
runner lets each keyframe be mapped before the next frame is tracked
(``slam.runtime.threads``), as a live mapper would have done by the time the next frame came.
"""
from __future__ import annotations

import statistics
from collections import deque
from typing import Optional

INTERVAL_HISTORY = 30     # frame intervals whose median is "the usual interval"


class StreamClock:
    """Frame timestamps seen so far; owned by the tracking thread (``slow`` may be read by any)."""

    def __init__(self, gap_factor: float, slow_interval_s: float) -> None:
        """``gap_factor``: a frame more than this x the usual interval after the last one comes
        after a gap; ``slow_interval_s`` (s): a usual interval above this makes the stream slow."""
        self.gap_factor = gap_factor
        self.slow_interval_s = slow_interval_s
        self._intervals: deque = deque(maxlen=INTERVAL_HISTORY)
        self._last_stamp: Optional[float] = None
        self.slow = False

    def tick(self, timestamp: float) -> Optional[float]:
        """Record the frame at ``timestamp`` (s); returns the gap before it (s) when it comes
        more than ``gap_factor`` x the usual interval after the previous frame, else None."""
        gap = None
        if self._last_stamp is not None:
            dt = timestamp - self._last_stamp
            if self._intervals and dt > self.gap_factor * statistics.median(self._intervals):
                gap = dt
            if dt > 0:
                self._intervals.append(dt)
        self._last_stamp = timestamp
        usual = self.usual_interval()
        self.slow = usual is not None and usual > self.slow_interval_s
        return gap

    def usual_interval(self) -> Optional[float]:
        """The median of the recent frame intervals (s), or None before the second frame."""
        return statistics.median(self._intervals) if self._intervals else None
