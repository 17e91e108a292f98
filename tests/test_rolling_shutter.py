"""Rolling-shutter unrolling (slam/tracking/rolling_shutter.py): a frame rendered row by row from a
turning camera, unrolled, matches the frame a global shutter takes at the middle row's time."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rasterizer.frame import row_times
from slam.config import ConfigError, load_config
from slam.geometry import so3_exp
from slam.observation import Observation
from slam.tracking.rolling_shutter import body_rate, unroll

H, W = 120, 160
K = np.array([[130.0, 0.0, 80.0], [0.0, 130.0, 60.0], [0.0, 0.0, 1.0]])
PLANE_Z = 2.0                        # a wall 2 m in front of the middle row's camera


def texture(d: np.ndarray) -> np.ndarray:
    """Colour of the wall point hit by middle-row-camera rays d (..., 3): smooth stripes."""
    p = PLANE_Z * d[..., :2] / d[..., 2:3]
    return np.stack([0.5 + 0.4 * np.sin(9 * p[..., 0]), 0.5 + 0.4 * np.cos(7 * p[..., 1]),
                     0.5 + 0.2 * np.sin(5 * (p[..., 0] + p[..., 1]))], -1)


def frame(omega: np.ndarray, readout: float, bottom_up: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Colour (H, W, 3) and depth (H, W) of the wall, row v taken at tau(v) (camera turned by
    exp(omega tau) from the middle row's orientation); ``bottom_up``: the sensor reads its rows
    from the last to the first over ``readout`` s (row v read (H - 1 - v + 0.5) / H of the way)."""
    v, u = np.mgrid[0:H, 0:W].astype(np.float64)
    rays = np.stack([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1], np.ones_like(u)], -1)
    if bottom_up:
        tau = readout * ((H - 1 - np.arange(H) + 0.5) / H - 0.5)
    else:
        tau = row_times(H, readout, torch.arange(H, dtype=torch.float64)).numpy()
    color, depth = np.zeros((H, W, 3)), np.zeros((H, W))
    for r in range(H):
        R = so3_exp(omega * tau[r])                        # row camera -> middle-row camera
        d_mid = rays[r] @ R.T
        color[r] = texture(d_mid)
        X_mid = PLANE_Z * d_mid / d_mid[:, 2:3]
        depth[r] = (X_mid @ R)[:, 2]                       # the point in the row's camera: its z
    return color, depth


def as_obs(color: np.ndarray, depth: np.ndarray) -> Observation:
    return Observation(torch.tensor(color, dtype=torch.float32), torch.tensor(depth, dtype=torch.float32),
                       torch.tensor(K, dtype=torch.float32))


@pytest.mark.parametrize("omega", [np.radians([60.0, 0.0, 0.0]), np.radians([0.0, 60.0, 0.0]),
                                   np.radians([35.0, -40.0, 25.0])])
def test_unrolled_frame_matches_the_global_shutter_frame(omega):
    readout = 0.03
    still_color, still_depth = frame(omega, 0.0)
    rolled = as_obs(*frame(omega, readout))
    out = unroll(rolled, omega, readout)
    inner = (slice(6, H - 6), slice(6, W - 6))              # rows and columns that stay inside
    err_before = np.abs(rolled.color.numpy() - still_color)[inner].mean()
    err_after = np.abs(out.color.numpy() - still_color)[inner].mean()
    assert err_after < 0.2 * err_before and err_after < 0.01
    depth = out.depth.numpy()[inner]
    assert (depth > 0).all()
    assert np.abs(depth - still_depth[inner]).max() < 2e-3     # metres, the wall at 2 m
    assert np.abs(rolled.depth.numpy()[inner] - still_depth[inner]).max() > 5e-3


def test_a_sensor_reading_bottom_to_top_is_unrolled_by_a_negative_readout():
    """A camera mounted upside down (its image turned 180 deg) reads its rows bottom to top:
    ``data.rolling_shutter_s`` negative. The positive readout bends such a frame further."""
    omega, readout = np.radians([40.0, -50.0, 0.0]), 0.03
    still_color, _ = frame(omega, 0.0)
    rolled = as_obs(*frame(omega, readout, bottom_up=True))
    inner = (slice(6, H - 6), slice(6, W - 6))
    err = {r: np.abs(unroll(rolled, omega, r).color.numpy() - still_color)[inner].mean() for r in (-readout, readout)}
    err_before = np.abs(rolled.color.numpy() - still_color)[inner].mean()
    assert err[-readout] < 0.2 * err_before and err[-readout] < 0.01
    assert err[readout] > err_before
    assert load_config("default.yaml", ["data.rolling_shutter_s=-0.028"]).data.rolling_shutter_s == -0.028


def test_no_turn_or_no_readout_leaves_the_frame_as_it_is():
    obs = as_obs(*frame(np.zeros(3), 0.0))
    assert unroll(obs, np.zeros(3), 0.03) is obs
    assert unroll(obs, np.radians([50.0, 0.0, 0.0]), 0.0) is obs


def test_body_rate_from_two_poses():
    T0, T1 = np.eye(4), np.eye(4)
    T0[:3, :3] = so3_exp(np.array([0.3, -0.2, 0.1]))
    w = np.radians([20.0, -50.0, 10.0])
    T1[:3, :3] = T0[:3, :3] @ so3_exp(w / 30.0)
    assert np.allclose(body_rate(T0, T1, 1 / 30.0), w, atol=1e-9)
    assert body_rate(None, T1, 1 / 30.0) is None and body_rate(T0, T1, 0.0) is None


def test_turn_rate_is_the_mean_of_the_last_two_motions():
    """The unroll's rate feeds the next pose, whose motion feeds the next rate: from one motion
    alone a pose error came back amplified, with its sign flipped, frame after frame (TUM played
    backwards); over two motions such an alternation cancels."""
    from slam.tracking.quality import TrackQuality
    from slam.tracking.result import TrackResult
    from slam.tracking.tracker import Tracker

    cfg = load_config("tum.yaml")
    tracker = Tracker(cfg.tracking, cfg.quality, backend="cpu")
    tracker.initialise(np.eye(4), 0.0)
    rates = [np.radians([0.0, 60.0, 0.0]), np.radians([0.0, 60.0, 0.0]), np.radians([20.0, 30.0, -10.0]),
             np.radians([-10.0, 90.0, 40.0])]
    T, seen = np.eye(4), []
    for i, w in enumerate(rates, start=1):
        T = T.copy()
        T[:3, :3] = T[:3, :3] @ so3_exp(w / 30.0)
        tracker._update_history(TrackResult(T, 0.1, 0.9, True, False, 5, quality=TrackQuality(0.9, 0.9, 0.9)), i / 30)
        seen.append(tracker.turn_rate())
    assert seen[0] is None                                 # the first motion starts at a set pose
    assert np.allclose(seen[1], rates[1], atol=1e-9)       # one motion between tracked poses
    assert np.allclose(seen[2], (rates[1] + rates[2]) / 2, atol=1e-9)
    assert np.allclose(seen[3], (rates[2] + rates[3]) / 2, atol=1e-9)
    tracker.initialise(T, 1.0)
    assert tracker.turn_rate() is None


def test_readout_is_checked():
    with pytest.raises(ConfigError, match="rolling_shutter_s"):
        load_config("default.yaml", ["data.rolling_shutter_s=-1.0"])
    with pytest.raises(ConfigError, match="depth_rolling_shutter_s"):
        load_config("default.yaml", ["data.depth_rolling_shutter_s=1.5"])


def test_a_depth_image_taken_after_its_colour_is_turned_to_the_colour_time():
    """Global shutter, the camera panning at 60 deg/s, the depth taken 12 ms after the colour:
    its depth of the wall is what the colour's camera would measure once turned back."""
    omega, offset = np.radians([0.0, 60.0, 0.0]), 0.012
    still_color, still_depth = frame(omega, 0.0)
    R = so3_exp(omega * offset)                              # the depth's camera -> the colour's
    v, u = np.mgrid[0:H, 0:W].astype(np.float64)
    rays = np.stack([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1], np.ones_like(u)], -1)
    d_col = rays @ R.T
    late_depth = ((PLANE_Z * d_col / d_col[..., 2:3]) @ R)[..., 2]
    obs = as_obs(still_color, late_depth)
    out = unroll(obs, omega, 0.0, offset)
    inner = (slice(4, H - 4), slice(10, W - 10))
    assert np.allclose(out.color.numpy(), obs.color.numpy())        # the colour is the frame's time
    depth = out.depth.numpy()[inner]
    assert (depth > 0).all() and np.abs(depth - still_depth[inner]).max() < 2e-3


@pytest.mark.parametrize("overrides", [[], ["data.rolling_shutter_s=-0.028"]], ids=["top-down", "bottom-up"])
def test_the_frontend_unrolls_only_with_a_rate_from_two_tracked_frames(overrides):
    """The first frame's pose is set, not tracked: no turn rate (no unroll) until two frames were
    tracked; a relocalisation (``initialise``) starts the count again. A negative readout (rows
    read bottom to top) unrolls too."""
    from slam.tracking.frontend import TrackingFrontend
    from slam.tracking.quality import TrackQuality
    from slam.tracking.result import TrackResult

    cfg = load_config("tum.yaml", overrides)
    assert cfg.data.rolling_shutter_s != 0
    fe = TrackingFrontend(cfg, lambda: [])
    obs = as_obs(*frame(np.zeros(3), 0.0))
    fe.tracker.initialise(np.eye(4), 0.0)
    unrolled = []
    for i in (1, 2):
        T = np.eye(4)
        T[:3, :3] = so3_exp(np.radians([0.0, 2.0 * i, 0.0]))     # 60 deg/s at 30 Hz
        res = TrackResult(T, 0.1, 0.9, True, False, 5, quality=TrackQuality(0.9, 0.9, 0.9))
        fe.tracker._update_history(res, i / 30)
        unrolled.append(fe.unroller()(obs) is not obs)
    assert unrolled == [False, True]
    fe.tracker.initialise(np.eye(4), 1.0)
    assert fe.unroller()(obs) is obs


def test_a_keyframe_at_another_resolution_is_unrolled_as_the_tracked_frame():
    """``mapping.keyframe_downscale`` apart from ``tracking.downscale``: the keyframe is made from
    the frame again, at its own resolution, and must be the same camera as the tracked images
    (unrolled at the same turn rate), not the raw rolling-shutter frame."""
    from slam.data.frame import Frame
    from slam.runtime.system import SlamSystem

    omega, readout = np.radians([0.0, 60.0, 0.0]), 0.03
    color, depth = frame(omega, readout)
    cfg = load_config("tum.yaml", ["data.path=sample", "tracking.downscale=1", "mapping.keyframe_downscale=2",
                                   "loop.enabled=false", "grid.enabled=false", f"data.rolling_shutter_s={readout}"])
    system = SlamSystem(cfg, torch.device("cpu"))
    f = Frame(0, 0.0, np.rint(color * 255).astype(np.uint8), depth.astype(np.float32), K)
    obs = system.observation(f)
    unroll_now = lambda o: unroll(o, omega, readout)                     # noqa: E731
    kf = system._keyframe(f, unroll_now(obs), np.eye(4), 0, unroll_now)
    expected = unroll_now(Observation.from_numpy(f.color, f.depth, f.K, torch.device("cpu")).downsampled(2))
    assert kf.color.shape == (H // 2, W // 2, 3)
    assert np.abs(kf.color.astype(np.float32) - np.rint(expected.color.numpy() * 255)).max() <= 1
    assert np.allclose(kf.depth.astype(np.float32), expected.depth.numpy(), atol=2e-3)
    raw = Observation.from_numpy(f.color, f.depth, f.K, torch.device("cpu")).downsampled(2)
    assert np.abs(kf.depth.astype(np.float32) - raw.depth.numpy()).max() > 0.01   # the unroll moved it
