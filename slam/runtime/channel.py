"""A bounded, closable channel between pipeline stages (backpressure without polling)."""
from __future__ import annotations

import threading
from collections import deque
from typing import Any


class Closed(Exception):
    """The channel was closed: no more items will come (or be accepted)."""


class Channel:
    """FIFO of at most ``maxsize`` items. ``put`` blocks while full, ``get`` while empty.

    ``until_done=True``: an item taken by ``get`` still counts against ``maxsize`` until the reader
    calls ``done()`` for it, so the writer is never more than ``maxsize`` items ahead of the
    reader's finished work (the tracker and the keyframes not yet in the map).
    ``close()`` ends the stream: readers drain what is queued, then get ``Closed``.
    ``abort()`` also drops what is queued: every blocked reader and writer wakes with ``Closed``.
    """

    def __init__(self, maxsize: int, until_done: bool = False) -> None:
        if maxsize < 1:
            raise ValueError("channel size must be >= 1")
        self.maxsize = maxsize
        self.until_done = until_done
        self._items: deque = deque()
        self._in_progress = 0        # taken and not yet done (until_done only)
        self._closed = False
        self._cond = threading.Condition()

    def _full(self) -> bool:
        return len(self._items) + self._in_progress >= self.maxsize

    def put(self, item: Any) -> None:
        with self._cond:
            while self._full() and not self._closed:
                self._cond.wait()
            if self._closed:
                raise Closed()
            self._items.append(item)
            self._cond.notify_all()

    def offer(self, item: Any) -> bool:
        """Put without waiting: False (item dropped) when full; raises ``Closed`` when closed."""
        with self._cond:
            if self._closed:
                raise Closed()
            if self._full():
                return False
            self._items.append(item)
            self._cond.notify_all()
            return True

    def get(self) -> Any:
        with self._cond:
            while not self._items and not self._closed:
                self._cond.wait()
            if not self._items:
                raise Closed()
            item = self._items.popleft()
            if self.until_done:
                self._in_progress += 1
            self._cond.notify_all()
            return item

    def done(self) -> None:
        """The reader finished the item it took last (``until_done`` channels): frees its place."""
        with self._cond:
            if not self.until_done or self._in_progress == 0:
                raise RuntimeError("done() without an item in progress")
            self._in_progress -= 1
            self._cond.notify_all()

    def join(self) -> None:
        """Block until every item put has been taken and, on ``until_done`` channels, done;
        raises ``Closed`` when the channel is closed or aborted first."""
        with self._cond:
            while (self._items or self._in_progress) and not self._closed:
                self._cond.wait()
            if self._closed:
                raise Closed()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def abort(self) -> None:
        with self._cond:
            self._closed = True
            self._items.clear()
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)
