"""The tracker's one solver on the small generated world of ``tests/tracking_world.py``: on the
reference raster backend (the PyTorch / NumPy oracles of the Gauss-Newton pass and the LM phases)
it tracks as on the CPU kernels."""
from __future__ import annotations

import numpy as np
import pytest

from slam.geometry import invert, pivot_increment, relative_motion
from slam.tracking.tracker import Tracker
from tracking_world import DT, T2, frame_obs, make_world, tracking_config
from tracking_world import one_thread  # noqa: F401 (an autouse fixture: one CPU thread)

# Starts: the true pose moved by these increments about a pivot 2 m ahead (rad, m): 12-29 mm and
# 0-0.4 degrees off, in several directions.
OFFSETS = [np.array(d) for d in ((0.003, -0.004, 0.002, 0.01, -0.005, 0.008),
                                 (-0.004, 0.002, -0.003, -0.008, 0.01, -0.006),
                                 (0.006, 0.0, 0.004, 0.0, 0.015, 0.01),
                                 (0.0, 0.0, 0.0, 0.02, 0.0, 0.0),
                                 (0.0, 0.006, 0.0, 0.0, 0.0, 0.0))]


def start_near(T_wc: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """(4, 4) camera-to-world: ``T_wc`` moved by the increment ``offset`` (6,) about z = 2 m."""
    return invert(pivot_increment(offset, 2.0) @ invert(T_wc))


def test_the_tracker_on_the_reference_backend_tracks_as_on_the_kernels():
    """``raster.backend: reference`` runs the same solver through the oracles (no compiled code in
    the LM): the same pose to 1e-6 m / 1e-6 rad (measured: 1.1e-7 m, 4e-8 rad), the same verdict
    and passes, on the 20x15 world (the dense oracle takes ~0.2 s an evaluation there)."""
    snap, _, frames = make_world(width=20, jitter=0.02)
    obs = frame_obs(*frames[2])
    start = start_near(T2, OFFSETS[0])
    results = {}
    for backend in ("cpu", "reference"):
        cfg = tracking_config(backend=backend)
        tracker = Tracker(cfg.tracking, cfg.quality, cfg.raster.backend)
        tracker.initialise(start, DT)
        results[backend] = tracker.track(obs, snap, prior=start, timestamp=2 * DT)
    cpu, ref = results["cpu"], results["reference"]
    shift, turn = relative_motion(cpu.T_wc, ref.T_wc)
    assert shift < 1e-6 and turn < 1e-6, (shift, turn)
    assert (cpu.ok, cpu.reason, cpu.renders) == (ref.ok, ref.reason, ref.renders)
    assert ref.loss == pytest.approx(cpu.loss, rel=1e-4)
    assert relative_motion(ref.T_wc, T2)[0] < relative_motion(start, T2)[0] / 3   # it did track
