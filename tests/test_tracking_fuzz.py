"""The tracker never crashes on data: adversarial observations against a small generated map, on
the CPU, on both raster backends the tracker's solver runs on there (``cpu``: the kernels;
``reference``: the PyTorch oracles of the Gauss-Newton pass and the LM phases), driven through
``Tracker.track`` and through ``TrackingFrontend.process`` (whose failures reach
re-initialisation from features and relocalisation).

Every case's frames must give no exception, and each result is either ok with a finite pose or
a flagged failure (ok False with a reason); a NaN pose is never ok. Frames that only carry bad
pixels (scattered NaN / inf depth: invalid at the observation boundary) must track, frames with
nothing to track must fail, and a clean frame after the bad ones must track again.

The map is a textured wall with two boxes in front (generated spheres); the frames are its
renders, so a clean frame must track. 40x30 pixels (20x15 on the dense reference backend) and one
thread keep the file fast.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import pytest
import torch

from slam.geometry import so3_exp
from slam.map.keyframes import Keyframe
from slam.observation import Observation
from slam.tracking.frontend import TrackingFrontend
from slam.tracking.tracker import Tracker
from tracking_world import (
    DT,
    T0,
    T1,
    frame_obs,
    intrinsics,
    make_world,
    one_thread,  # noqa: F401 (an autouse fixture: one CPU thread)
    tracking_config,
)

NAN, INF = float("nan"), float("inf")

OK, FAILS, EITHER = "tracks", "fails", "either"   # what a case's bad frames must give


@dataclass
class Case:
    """obs(colour (H, W, 3) uint8, depth (H, W) float32) -> the bad frame's Observation; prior:
    the motion prior given for the bad frames (None: the tracker's own); dark: the map's colours
    x 1e-4 for the bad frames; same_stamp: the bad frames repeat the previous frame's timestamp."""

    obs: Callable[[np.ndarray, np.ndarray], Observation]
    expect: str
    prior: Optional[np.ndarray] = None
    dark: bool = False
    same_stamp: bool = False


def raw_obs(color: np.ndarray, depth: np.ndarray) -> Observation:
    """Device images handed to the tracker as they are (float colour in [0, 1] may hold NaN)."""
    h, w = depth.shape
    return Observation(torch.from_numpy(np.asarray(color, np.float32)), torch.from_numpy(depth.astype(np.float32)),
                       torch.from_numpy(intrinsics(w, h)).float())


def scatter(shape) -> np.ndarray:
    """(h, w) bool: a fifth of the pixels, the same ones every call."""
    return np.random.default_rng(1).random(shape[:2]) < 0.2


def scattered(a: np.ndarray, value: float) -> np.ndarray:
    a = a.astype(np.float32)
    a[scatter(a.shape)] = value
    return a


def exposed(color: np.ndarray, gain: float) -> np.ndarray:
    return np.clip(np.round(color * gain), 0, 255).astype(np.uint8)


JUMP = T1.copy()
JUMP[:3, :3] = so3_exp(np.array([0.0, math.pi / 2, 0.0])) @ T1[:3, :3]
JUMP[:3, 3] += (1.0, 0.0, 0.0)

CASES = {
    "clean": Case(frame_obs, OK),
    "nan_depth_scattered": Case(lambda c, d: frame_obs(c, scattered(d, NAN)), OK),
    "inf_depth_scattered": Case(lambda c, d: frame_obs(c, scattered(d, INF)), OK),
    "negative_depth_scattered": Case(lambda c, d: frame_obs(c, np.where(scatter(d.shape), -d, d)), OK),
    "nan_depth_all": Case(lambda c, d: frame_obs(c, np.full_like(d, NAN)), FAILS),
    "inf_depth_all": Case(lambda c, d: frame_obs(c, np.full_like(d, INF)), FAILS),
    "no_valid_depth": Case(lambda c, d: frame_obs(c, np.zeros_like(d)), FAILS),
    "negative_depth": Case(lambda c, d: frame_obs(c, -d), FAILS),
    "saturated": Case(lambda c, d: frame_obs(np.full_like(c, 255), d), EITHER),
    "black": Case(lambda c, d: frame_obs(np.zeros_like(c), d), EITHER),
    "exposure_x20": Case(lambda c, d: frame_obs(exposed(c, 20.0), d), EITHER),
    "exposure_x0.01": Case(lambda c, d: frame_obs(exposed(c, 0.01), d), EITHER),
    # past the boundary: device images with non-finite values reach the tracker as they are
    "raw_nan_color": Case(lambda c, d: raw_obs(np.full(c.shape, NAN), d), FAILS),
    "raw_nan_color_scattered": Case(lambda c, d: raw_obs(np.where(scatter(d.shape)[..., None], NAN, c / 255.0), d),
                                    EITHER),
    "raw_nonfinite_depth_scattered": Case(
        lambda c, d: raw_obs(c / 255.0, np.where(scatter(d.shape), NAN, np.where(np.roll(scatter(d.shape), 1), INF, d))),
        EITHER),
    "repeated_frame": Case(frame_obs, OK, same_stamp=True),
    "jump_prior_1m_90deg": Case(frame_obs, EITHER, prior=JUMP),
    "nan_prior": Case(frame_obs, EITHER, prior=np.full((4, 4), NAN)),
    # the reported crash: little colour evidence (a nearly black map under a lit frame) made the
    # exposure's log gain step past exp()'s range
    "dark_map": Case(frame_obs, EITHER, dark=True),
}
BACKENDS = ["cpu", "reference"]   # raster.backend: the tracker's one solver on the kernels and on the oracles
# Through the frontend on the (slow) reference backend: the cases whose bad frames may fail, so
# reach re-initialisation and relocalisation; the others are tracker-level cases there.
FRONTEND = [(name, backend) for backend in BACKENDS for name, case in CASES.items()
            if backend == "cpu" or case.expect != OK]


@pytest.fixture(scope="module")
def worlds():
    """Per backend: the map, its dark twin, and the clean frames at T0, T1, T2
    (``tests.tracking_world``): at 40x30 for the kernels, at 20x15 (a quarter of the spheres) for
    the dense PyTorch oracles."""
    return {"cpu": make_world(), "reference": make_world(width=20)}


def config(backend: str):
    return tracking_config(backend=backend)


def check(r, what: str) -> None:
    """Ok with a finite pose, or a flagged failure; never a NaN pose reported as ok."""
    finite = bool(np.all(np.isfinite(r.T_wc)))
    if r.ok:
        assert finite, f"{what}: a non-finite pose reported ok: {r.T_wc}"
        assert math.isfinite(r.loss), f"{what}: ok with loss {r.loss}"
    else:
        assert isinstance(r.reason, str) and r.reason, f"{what}: failed without a reason"


def check_case(case: Case, results: list, n_bad: int) -> None:
    """results: the clean frame, ``n_bad`` bad frames, then the clean frames after them."""
    for i, r in enumerate(results):
        check(r, f"frame {i}")
    bad = results[1:1 + n_bad]
    assert results[0].ok, results[0].reason
    if case.expect == OK:
        assert all(r.ok for r in bad), [r.reason for r in bad]
    elif case.expect == FAILS:
        assert not any(r.ok for r in bad)
    assert results[-1].ok, f"no recovery after the bad frames: {results[-1].reason}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_tracker_survives(worlds, name, backend):
    snap, dark, frames = worlds[backend]
    case, cfg = CASES[name], config(backend)
    tracker = Tracker(cfg.tracking, cfg.quality, cfg.raster.backend)
    tracker.initialise(T0, 0.0)
    results = [tracker.track(frame_obs(*frames[1]), snap, timestamp=DT)]
    for k in range(2):
        stamp = DT if case.same_stamp else (2 + k) * DT
        results.append(tracker.track(case.obs(*frames[1]), dark if case.dark else snap, prior=case.prior,
                                     timestamp=stamp))
    results.append(tracker.track(frame_obs(*frames[2]), snap, timestamp=4 * DT))
    check_case(case, results, 2)


@pytest.mark.parametrize("name, backend", FRONTEND)
def test_frontend_survives(worlds, name, backend, monkeypatch):
    """Three bad frames: the second failure makes the camera lost (a relocalisation attempt,
    inline in sequential mode), a failed frame makes the next prior untrusted (coarse poses from
    ORB + PnP against the keyframe); then two clean frames."""
    snap, dark, frames = worlds[backend]
    case = CASES[name]
    color0, depth0 = frames[0]
    kf = Keyframe(0, 0.0, T0.copy(), color0, depth0.astype(np.float16), intrinsics(*depth0.shape[::-1]), kf_id=0)
    frontend = TrackingFrontend(config(backend), lambda: [kf])
    frontend.process(frame_obs(*frames[0]), None, 0, 0.0, gt_pose=T0)
    results = [frontend.process(frame_obs(*frames[1]), snap, 1, DT)]
    if case.prior is not None:
        monkeypatch.setattr(frontend.tracker, "guess", lambda timestamp=None: case.prior.copy())
    for k in range(3):
        stamp = DT if case.same_stamp else (2 + k) * DT
        results.append(frontend.process(case.obs(*frames[1]), dark if case.dark else snap, 2 + k, stamp))
    monkeypatch.undo()
    for k in range(2):
        results.append(frontend.process(frame_obs(*frames[2]), snap, 5 + k, (5 + k) * DT))
    check_case(case, results, 3)
