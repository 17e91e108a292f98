"""The tracker follows the map's estimate of its reference keyframe (``TrackingFrontend.follow_map``):
a refined or loop-corrected pose of a mapped reference keyframe, and, while the reference keyframe
is not mapped yet (the tracker runs ahead of the mapper), the loop corrections applied since it
was made (``MapSnapshot.loop_later``), exactly once."""
from __future__ import annotations

import numpy as np
import torch

from slam.config import load_config
from slam.geometry import pivot_increment
from slam.map.snapshot import MapSnapshot
from slam.tracking.frontend import TrackingFrontend

T_REF = pivot_increment(np.array([0.02, -0.01, 0.03, 0.1, 0.0, -0.05]), 0.0)   # the reference keyframe
C = pivot_increment(np.array([0.0, 0.05, 0.0, 0.04, -0.02, 0.0]), 0.0)        # a loop correction


def snapshot(poses: dict, later: tuple = ()) -> MapSnapshot:
    empty = torch.zeros(0, 3)
    return MapSnapshot(empty, torch.zeros(0), empty, torch.zeros(0), 1, None, dict(poses),
                       tuple((0, 1) for _ in later), loop_later=tuple(later))


def frontend_tracking_from(T_wc: np.ndarray) -> TrackingFrontend:
    frontend = TrackingFrontend(load_config("default.yaml", ["system.device=cpu", "raster.backend=cpu"]), lambda: [])
    frontend.tracker.initialise(T_wc, 0.0)
    return frontend


def test_a_mapped_reference_keyframe_moves_the_pose_history():
    frontend = frontend_tracking_from(T_REF)
    frontend.set_reference(5, T_REF, 0)
    frontend.follow_map(snapshot({5: C @ T_REF}))
    assert np.allclose(frontend.tracker.last_good, C @ T_REF, atol=1e-9)
    frontend.follow_map(snapshot({5: C @ T_REF}))          # the same estimate again: no second move
    assert frontend.rebases == 1 and np.allclose(frontend.tracker.last_good, C @ T_REF, atol=1e-9)


def test_a_correction_before_the_reference_keyframe_is_mapped_moves_the_history_once():
    """The map applied a loop correction whose graph ends before the reference keyframe (5): the
    history moves by the correction's ``later`` transform; when keyframe 5 is mapped at the pose
    the mapper gives it (C @ its tracked pose) nothing moves again."""
    frontend = frontend_tracking_from(T_REF)
    frontend.set_reference(5, T_REF, 0)
    frontend.follow_map(snapshot({0: np.eye(4)}, (C,)))
    assert frontend.rebases == 1
    assert np.allclose(frontend.tracker.last_good, C @ T_REF, atol=1e-9)
    frontend.follow_map(snapshot({0: np.eye(4)}, (C,)))     # the same correction again
    frontend.follow_map(snapshot({0: np.eye(4), 5: C @ T_REF}, (C,)))   # now mapped, moved by the mapper
    assert frontend.rebases == 1
    assert np.allclose(frontend.tracker.last_good, C @ T_REF, atol=1e-9)


def test_corrections_the_reference_keyframe_was_tracked_after_do_not_move_it():
    frontend = frontend_tracking_from(T_REF)
    frontend.set_reference(5, T_REF, 1)                     # tracked on a map that had applied C
    frontend.follow_map(snapshot({0: np.eye(4)}, (C,)))
    assert frontend.rebases == 0 and np.allclose(frontend.tracker.last_good, T_REF)
