"""system.switch_interval_ms: Python's thread switch interval is the configured one during a
threaded run and Python's own again after it, also when the run fails."""
import sys
from types import SimpleNamespace

import pytest

from slam.runtime import threads


def test_switch_interval_inside_and_restored():
    before = sys.getswitchinterval()
    with threads.switch_interval(0.5):
        assert sys.getswitchinterval() == pytest.approx(0.0005)
    assert sys.getswitchinterval() == before
    with threads.switch_interval(None):
        assert sys.getswitchinterval() == before
    with pytest.raises(RuntimeError):
        with threads.switch_interval(2.0):
            raise RuntimeError("a stage failed")
    assert sys.getswitchinterval() == before


def test_a_threaded_run_uses_the_configured_interval(monkeypatch):
    seen = []

    def fake_run(system, frames, progress):
        seen.append(sys.getswitchinterval())
        raise KeyboardInterrupt

    monkeypatch.setattr(threads, "_run_threaded", fake_run)
    before = sys.getswitchinterval()
    system = SimpleNamespace(cfg=SimpleNamespace(system=SimpleNamespace(switch_interval_ms=0.25)))
    with pytest.raises(KeyboardInterrupt):
        threads.run_threaded(system, [], None)
    assert seen == [pytest.approx(0.00025)]
    assert sys.getswitchinterval() == before
