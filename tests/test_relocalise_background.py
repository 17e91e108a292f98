"""Relocalisation attempts off the tracking thread: one at a time, handed over at the next poll."""
import threading

import numpy as np
import pytest
import torch

from slam.tracking.background import BackgroundAttempts
from slam.tracking.relocalise import RelocResult


def _result(ok=True) -> RelocResult:
    return RelocResult(np.eye(4), ok, 0.9, 0.1, 0, 10, 5.0)


def test_inline_attempt_is_handed_out_at_the_next_poll_once():
    bg = BackgroundAttempts(threaded=False)
    bg.submit(7, 0.25, _result, torch.device("cpu"))
    assert not bg.busy
    done = bg.poll()
    assert (done.frame, done.timestamp, done.result.ok) == (7, 0.25, True)
    assert bg.poll() is None


def test_threaded_attempt_runs_off_the_calling_thread_and_one_at_a_time():
    bg = BackgroundAttempts(threaded=True)
    release = threading.Event()
    seen = {}

    def slow():
        seen["thread"] = threading.current_thread().name
        release.wait(10)
        return _result(False)

    bg.submit(3, 0.1, slow, torch.device("cpu"))
    assert bg.busy and bg.poll() is None                    # the caller goes on while it runs
    bg.submit(4, 0.13, _result, torch.device("cpu"))        # ignored: one attempt at a time
    release.set()
    bg._thread.join(10)
    done = bg.poll()
    assert done.frame == 3 and not done.result.ok and seen["thread"] == "relocalise"
    assert bg.poll() is None


def test_an_attempts_exception_reaches_the_polling_thread():
    bg = BackgroundAttempts(threaded=True)

    def broken():
        raise RuntimeError("render failed")

    bg.submit(1, 0.0, broken, torch.device("cpu"))
    bg._thread.join(10)
    with pytest.raises(RuntimeError, match="render failed"):
        bg.poll()
    assert bg.poll() is None
