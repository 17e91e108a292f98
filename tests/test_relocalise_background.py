"""Relocalisation attempts off the tracking thread: one at a time, handed over at the next poll."""
import threading
import time

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


def test_stop_tells_a_running_attempt_to_give_up_and_waits_for_it():
    bg = BackgroundAttempts(threaded=True)
    ended = threading.Event()

    def until_told():                                       # an attempt that checks bg.stopping
        told = bg.stopping.wait(30)
        time.sleep(0.2)                                     # its last step, after the check
        ended.set()
        return _result(told)

    bg.submit(5, 0.2, until_told, torch.device("cpu"))
    t0 = time.perf_counter()
    bg.stop()
    assert ended.is_set() and not bg.busy and time.perf_counter() - t0 < 10
    bg.stop()                                               # nothing running: returns at once
    assert bg.poll().result.ok                              # it was told (its result stays unread)
    bg.submit(6, 0.3, lambda: _result(not bg.stopping.is_set()), torch.device("cpu"))
    bg._thread.join(10)
    assert bg.poll().result.ok                              # a new attempt is not told to stop


def test_a_relocalisation_told_to_stop_gives_up_before_its_costly_steps(monkeypatch):
    """With ``stop`` set, ``Relocaliser.relocalise`` scores the keyframe poses (cheap coarse
    renders) but neither matches features nor refines a candidate: a result that is not ok."""
    import slam.tracking.relocalise as reloc
    from slam.config import load_config
    from slam.map.snapshot import MapSnapshot
    from slam.observation import Observation
    from test_relocalise import _keyframes

    def costly(*_a, **_k):
        raise AssertionError("a costly step ran after stop was set")

    monkeypatch.setattr(reloc, "Tracker", costly)
    monkeypatch.setattr(reloc, "orb_features", costly)
    cfg = load_config(None, ["system.device=cpu", "raster.backend=cpu"])
    kfs = _keyframes(2)
    relocaliser = reloc.Relocaliser(kfs, cfg.relocalise, cfg.tracking, cfg.quality, "cpu")
    empty = torch.zeros(0, 3)
    snap = MapSnapshot(empty, torch.zeros(0), empty, torch.zeros(0), 1, None, {}, ())
    kf = kfs[0]
    obs = Observation.from_numpy(kf.color, kf.depth.astype(np.float32), kf.K, torch.device("cpu"))
    stop = threading.Event()
    stop.set()
    res = relocaliser.relocalise(obs, snap, stop)
    assert not res.ok and res.loss == float("inf") and res.candidates > 0


def test_a_threaded_run_ends_only_after_an_attempt_started_at_its_last_frame(sample_run):
    """An attempt still running when the stream ends is waited for before the run returns: a
    daemon worker left inside torch's C++ code at interpreter exit aborts the process
    ("terminate called without an active exception", exit -6)."""
    cfg = sample_run.cfg(4)
    from slam.data.sources import open_source
    from slam.runtime.system import SlamSystem
    system = SlamSystem(cfg)
    ended = threading.Event()

    def slow():                                  # longer than the final refinement after it
        time.sleep(4.0)
        ended.set()
        return _result(False)

    def at_the_last_frame(frame, rec, snap):
        if frame.index == 3:
            system.frontend.attempts.submit(frame.index, frame.timestamp, slow, torch.device("cpu"))

    system.frame_hooks.append(at_the_last_frame)
    system.run(open_source(cfg.data))
    assert ended.is_set()
    assert not any(t.name == "relocalise" and t.is_alive() for t in threading.enumerate())
