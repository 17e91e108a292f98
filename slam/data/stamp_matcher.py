"""Pair colour and depth messages by header stamp (middleware-free, thread-safe): the one matcher
of the ROS bag loader (``slam.data.rosbag``) and the live ROS node's bridge.

Stamps are integer nanoseconds. A colour and a depth message pair when their stamps differ by at
most ``tol_ns``; the nearest partner wins, one-to-one. Everything is counted in ``counts``:

- ``duplicate``      a stamp equal to the previous one of the same stream: dropped
- ``out_of_order``   a stamp older than the previous one of the same stream: dropped
- ``late``           older than (or equal to) the last emitted pair: dropped
- ``unmatched_color`` / ``unmatched_depth``  no partner before a newer pair formed, pushed out of
  the bounded pending queue, older than ``horizon_ns`` behind the newest message, or still pending
  at ``flush()`` (a dropped frame on the sensor side)
- ``pairs``          emitted pairs

Each drop is reported to ``on_drop(kind, role, stamp_ns)`` when given; warnings are logged on
``logger`` (if any) for the first few drops of each kind, then every 100th (never a flood).
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any, Callable, Optional, Tuple

Pair = Tuple[int, Any, Any]   # (stamp_ns of the colour image, colour msg, depth msg)


class StampMatcher:
    """``push(role, stamp_ns, msg)`` -> a ``Pair`` when one forms, else None."""

    def __init__(self, tol_ns: int, max_pending: int = 30, horizon_ns: Optional[int] = None,
                 on_drop: Optional[Callable[[str, str, int], None]] = None, logger: Optional[str] = "slam.data") -> None:
        if tol_ns < 0:
            raise ValueError(f"pairing tolerance must be >= 0 ns, got {tol_ns}")
        self.tol_ns = int(tol_ns)
        self.max_pending = int(max_pending)
        self.horizon_ns = horizon_ns
        self.on_drop = on_drop
        self.log = logging.getLogger(logger) if logger else None
        self._pending = {"color": deque(), "depth": deque()}
        self._last = {"color": None, "depth": None}
        self._last_pair: Optional[int] = None
        self._lock = threading.Lock()
        self.counts = {k: 0 for k in ("pairs", "duplicate", "out_of_order", "late",
                                      "unmatched_color", "unmatched_depth")}

    def push(self, role: str, stamp_ns: int, msg: Any) -> Optional[Pair]:
        if role not in self._pending:
            raise ValueError(f"role must be 'color' or 'depth', got {role!r}")
        with self._lock:
            if self.horizon_ns is not None:
                self._drop_stale(stamp_ns - self.horizon_ns)
            last = self._last[role]
            if last is not None and stamp_ns <= last:
                kind = "duplicate" if stamp_ns == last else "out_of_order"
                self._drop(kind, role, stamp_ns, f"{role} image stamp {stamp_ns * 1e-9:.6f} s "
                                 f"{'repeats' if kind == 'duplicate' else 'is older than'} the previous one "
                                 f"({last * 1e-9:.6f} s)")
                return None
            self._last[role] = stamp_ns
            if self._last_pair is not None and stamp_ns <= self._last_pair:
                self._drop("late", role, stamp_ns, f"{role} image at {stamp_ns * 1e-9:.6f} s arrived after the pair at "
                                   f"{self._last_pair * 1e-9:.6f} s was formed")
                return None
            other = "depth" if role == "color" else "color"
            match = self._nearest(self._pending[other], stamp_ns)
            if match is None:
                q = self._pending[role]
                q.append((stamp_ns, msg))
                if len(q) > self.max_pending:
                    self._unmatched(role, q.popleft()[0], "pending queue full")
                return None
            q = self._pending[other]
            while q and q[0] is not match:   # older partners can no longer pair better
                self._unmatched(other, q.popleft()[0], "a newer pair formed")
            q.popleft()
            mine = self._pending[role]
            while mine and mine[0][0] < stamp_ns:
                self._unmatched(role, mine.popleft()[0], "a newer pair formed")
            if role == "color":
                pair = (stamp_ns, msg, match[1])
            else:
                pair = (match[0], match[1], msg)
            self._last_pair = max(stamp_ns, match[0])
            self.counts["pairs"] += 1
            return pair

    def flush(self) -> None:
        """End of the stream: every message still waiting for a partner is unmatched."""
        with self._lock:
            for role, q in self._pending.items():
                while q:
                    self._unmatched(role, q.popleft()[0], "end of the stream")

    def pending(self, role: str) -> int:
        """Messages of ``role`` waiting for a partner."""
        return len(self._pending[role])

    def _drop_stale(self, oldest_ns: int) -> None:
        for role, q in self._pending.items():
            while q and q[0][0] < oldest_ns:
                self._unmatched(role, q.popleft()[0], "too old")

    def _nearest(self, q: deque, t: int):
        best = None
        for item in q:
            d = abs(item[0] - t)
            if d <= self.tol_ns and (best is None or d < abs(best[0] - t)):
                best = item
        return best

    def _unmatched(self, role: str, stamp_ns: int, why: str) -> None:
        self._drop(f"unmatched_{role}", role, stamp_ns, f"{role} image at {stamp_ns * 1e-9:.6f} s has no "
                                        f"{'depth' if role == 'color' else 'colour'} partner within "
                                        f"{self.tol_ns * 1e-6:.1f} ms ({why}); dropped")

    def _drop(self, kind: str, role: str, stamp_ns: int, text: str) -> None:
        self.counts[kind] += 1
        n = self.counts[kind]
        if self.on_drop is not None:
            self.on_drop(kind, role, stamp_ns)
        if self.log is not None and (n <= 5 or n % 100 == 0):
            self.log.warning("%s [%s #%d]", text, kind, n)

    def dropped(self) -> int:
        """Colour frames lost before tracking (unmatched colour + colour drops)."""
        return sum(v for k, v in self.counts.items() if k != "pairs")
