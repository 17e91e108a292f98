"""Re-initialisation from features (``slam.tracking.reinit``) as the frontend uses it: after a gap
in the timestamps and at the first frame tracked after a pose was set the coarse poses are searched
before the refinement; after a large predicted motion only when the refinement from the prior fails
at camera rate, first in a slow stream. On the generated world of ``tests/tracking_world.py`` (CPU,
40x30)."""
from __future__ import annotations

import numpy as np
import pytest

from slam.geometry import invert, pivot_increment, relative_motion
from slam.map.keyframes import Keyframe
from slam.tracking.frontend import TrackingFrontend
from slam.tracking.reinit import NO_MOTION_YET
from tracking_world import (
    DT,
    T0,
    K,
    frame_obs,
    make_world,
    one_thread,  # noqa: F401 (an autouse fixture: one CPU thread)
    tracking_config,
)

# The camera turns 0.9 deg per frame about a point 2 m ahead (3 cm): 4 frames of constant motion.
TURN = np.array([0.0, 0.015, 0.0, 0.0, 0.0, 0.0])
POSES = [invert(pivot_increment(k * TURN, 2.0)) for k in range(5)]


@pytest.fixture(scope="module")
def world():
    return make_world(POSES)


def frontend_at(frames, cfg_extra=()):
    """A frontend that has tracked frames 0 and 1 (the map is the world's; one keyframe at 0)."""
    color0, depth0 = frames[0]
    kf = Keyframe(0, 0.0, T0.copy(), color0, depth0.astype(np.float16), K.copy(), kf_id=0)
    frontend = TrackingFrontend(tracking_config(*cfg_extra), lambda: [kf])
    return frontend


def run(frontend, snap, frames, stamps):
    frontend.process(frame_obs(*frames[0]), None, 0, stamps[0], gt_pose=POSES[0])
    return [frontend.process(frame_obs(*frames[k]), snap, k, stamps[k]) for k in range(1, len(stamps))]


def test_large_predicted_motion_searches_only_when_the_prior_fails(world):
    """0.9 deg per frame with the threshold at 0.5 deg: every prior from frame 2 on is 'large', the
    prior is right, so every frame tracks without a feature search."""
    snap, _, frames = world
    frontend = frontend_at(frames, ["reinit.max_prior_turn_deg=0.5"])
    judged = []
    untrusted = frontend.reinit.untrusted
    frontend.reinit.untrusted = lambda *a, **k: judged.append(untrusted(*a, **k)) or judged[-1]
    results = run(frontend, snap, frames, [k * DT for k in range(5)])
    assert all(r.ok for r in results), [r.reason for r in results]
    assert [d is not None and not d.eager for d in judged[2:]] == [True] * 3    # frames 2-4: large
    assert frontend.reinit.attempts == 1                       # frame 1's alone (no velocity yet)
    assert all(r.reinit is None for r in results[1:])
    shift, turn = relative_motion(POSES[4], results[-1].T_wc)
    assert shift < 0.05 and np.degrees(turn) < 3     # right by the suite's definition (40x30 pixels)


def test_large_predicted_motion_that_fails_searches(world, monkeypatch):
    """The same motion, but the prior of frame 3 is 90 degrees off (as a wrong velocity would
    make it) and large: its refinement fails, the features are searched, the frame is tracked."""
    snap, _, frames = world
    frontend = frontend_at(frames, ["reinit.max_prior_turn_deg=0.5"])
    run(frontend, snap, frames, [k * DT for k in range(3)])
    wrong = POSES[3].copy()
    wrong[:3, :3] = pivot_increment(np.array([0.0, 1.57, 0.0, 0.0, 0.0, 0.0]), 0.0)[:3, :3] @ wrong[:3, :3]
    monkeypatch.setattr(frontend.tracker, "guess", lambda timestamp=None: wrong.copy())
    res = frontend.process(frame_obs(*frames[3]), snap, 3, 3 * DT)
    assert frontend.reinit.attempts == 2                       # frame 1's, then frame 3's
    assert res.reinit is not None and res.reinit.startswith("large predicted motion")
    assert res.ok, res.reason


def test_a_gap_searches_before_the_refinement(world):
    """Frame 3 arrives 10 intervals after frame 2 (dropped frames): the features are searched
    although the prior's refinement alone would have held."""
    snap, _, frames = world
    frontend = frontend_at(frames)
    stamps = [0.0, DT, 2 * DT, 12 * DT]
    results = run(frontend, snap, frames[:4], stamps)
    assert frontend.reinit.attempts == 2                       # frame 1's, then the gap's
    assert results[-1].reinit is not None and results[-1].reinit.startswith("gap of")
    assert all(r.ok for r in results), [r.reason for r in results]


def test_large_predicted_motion_in_a_slow_stream_searches_first(world):
    """The same motion at 2 Hz (a frame every 0.5 s, above system.slow_stream_interval_s): a
    constant velocity over half a second is a poor guess, so the search runs before the refinement
    on every large prior (frames 2-4) although the prior would have held."""
    snap, _, frames = world
    frontend = frontend_at(frames, ["reinit.max_prior_turn_deg=0.5"])
    results = run(frontend, snap, frames, [k * 0.5 for k in range(5)])
    assert frontend.reinit.attempts == 4                       # frame 1's, then frames 2-4
    searched = [r.reinit is not None and r.reinit.startswith("large predicted motion") for r in results]
    assert searched == [False] + [True] * 3
    assert all(r.ok for r in results), [r.reason for r in results]


def test_the_first_frame_tracked_after_the_pose_was_set_searches_first(world, monkeypatch):
    """Frame 1 has no velocity to predict from: its prior is "no motion", however fast the camera
    moves, so the features are searched before the refinement (once; frame 2 has a velocity).
    When they offer no start the prior is refined with the usual iterations, not a recovery's."""
    snap, _, frames = world
    frontend = frontend_at(frames)
    results = run(frontend, snap, frames[:3], [0.0, DT, 2 * DT])
    assert results[0].reinit == NO_MOTION_YET and results[1].reinit is None
    assert frontend.reinit.attempts == 1
    assert all(r.ok for r in results), [r.reason for r in results]

    frontend = frontend_at(frames)
    monkeypatch.setattr(frontend.reinit, "coarse_poses", lambda obs, keyframes: [])
    iters = []
    track = frontend.tracker.track
    monkeypatch.setattr(frontend.tracker, "track", lambda obs, snap, coarse=None, **k: iters.append(coarse) or
                        track(obs, snap, coarse, **k))
    run(frontend, snap, frames[:2], [0.0, DT])
    assert iters == [None]          # no coarse list: tracked as any frame (tracking.iters)
