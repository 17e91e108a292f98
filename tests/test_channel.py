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


def _put_in_thread(ch: Channel, item) -> tuple[threading.Thread, threading.Event]:
    """Start a writer thread putting ``item``; the event is set once the put returned."""
    done = threading.Event()

    def writer():
        ch.put(item)
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    return t, done


def test_put_blocks_when_full_until_a_get():
    ch = Channel(1)
    ch.put("a")
    t, done = _put_in_thread(ch, "b")
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


def test_until_done_counts_an_item_until_the_reader_is_done_with_it():
    ch = Channel(1, until_done=True)
    ch.put("kf0")
    assert ch.get() == "kf0"           # taken, but not done: the place is still held
    t, handed = _put_in_thread(ch, "kf1")
    assert not handed.wait(0.1)        # the writer waits for the reader to finish kf0
    ch.done()
    assert handed.wait(2.0)
    t.join()
    assert ch.get() == "kf1"
    ch.done()
    with pytest.raises(RuntimeError):
        ch.done()                      # nothing in progress
