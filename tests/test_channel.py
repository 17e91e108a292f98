"""Bounded channel: backpressure, close (drain) and abort (wake everyone)."""
import threading
import time

import pytest

from slam.runtime.channel import Channel, Closed


def test_fifo_close_drains_then_raises():
    ch = Channel(3)
    for i in range(3):
        ch.put(i)
    ch.close()
    assert [ch.get(), ch.get(), ch.get()] == [0, 1, 2]
    with pytest.raises(Closed):
        ch.get()
    with pytest.raises(Closed):
        ch.put(4)


def test_put_blocks_when_full_until_a_get():
    ch = Channel(1)
    ch.put("a")
    done = threading.Event()

    def writer():
        ch.put("b")
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    assert not done.wait(0.1)          # backpressure: the writer waits
    assert ch.get() == "a"
    assert done.wait(2.0)
    t.join()


def test_abort_wakes_blocked_reader_and_writer():
    ch_r, ch_w = Channel(1), Channel(1)
    ch_w.put(0)
    errors = []

    def reader():
        try:
            ch_r.get()
        except Closed:
            errors.append("reader")

    def writer():
        try:
            ch_w.put(1)
        except Closed:
            errors.append("writer")

    ts = [threading.Thread(target=reader), threading.Thread(target=writer)]
    for t in ts:
        t.start()
    time.sleep(0.05)
    ch_r.abort()
    ch_w.abort()
    for t in ts:
        t.join(2.0)
    assert sorted(errors) == ["reader", "writer"]
    assert len(ch_w) == 0
