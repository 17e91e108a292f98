"""A bounded, closable channel between pipeline stages (backpressure without polling)."""
from __future__ import annotations

import threading
from collections import deque
from typing import Any


class Closed(Exception):
    """The channel was closed: no more items will come (or be accepted)."""


class Channel:
    """FIFO of at most ``maxsize`` items. ``put`` blocks while full, ``get`` while empty.

    ``close()`` ends the stream: readers drain what is queued, then get ``Closed``.
    ``abort()`` also drops what is queued: every blocked reader and writer wakes with ``Closed``.
    """

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError("channel size must be >= 1")
        self.maxsize = maxsize
        self._items: deque = deque()
        self._closed = False
        self._cond = threading.Condition()

    def put(self, item: Any) -> None:
        with self._cond:
            while len(self._items) >= self.maxsize and not self._closed:
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
            if len(self._items) >= self.maxsize:
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
            self._cond.notify_all()
            return item

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
