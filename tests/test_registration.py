"""Colour-to-depth registration (slam.data.registration) on a synthetic two-camera scene with a
known colour camera, and through the config on the real 7-Scenes data."""
import numpy as np
import pytest

from slam.config import DataConfig
from slam.data import open_source
from slam.data.errors import CalibrationError
from slam.data.preprocess import K_from_params
from slam.data.registration import ColorRegistration, _edge_samples, edge_alignment, estimate_registration

W, H = 160, 120
K_DEPTH = K_from_params([146.0, 146.0, 80.0, 60.0])
K_COLOR = K_from_params([131.0, 131.0, 82.0, 59.0])   # 10 % wider field of view, shifted centre
T = np.array([-0.03, 0.0, 0.0])                      # 3 cm baseline


def _texture(X, Y, near):
    """Colour of a world point (depth-camera frame): a smooth pattern, brighter on the box."""
    base = 0.5 + 0.25 * np.sin(9 * X) * np.cos(7 * Y)
    return np.clip(np.where(near, base + 0.4, base * 0.6), 0, 1)


def _scene(box: tuple, z_near: float = 1.0, z_far: float = 2.0):
    """A box face (x0, x1, y0, y1 in metres at z_near) in front of a wall at z_far. Returns the
    depth image (depth camera), the colour image (colour camera, ray-cast) and the ideal
    registered colour (the texture seen from the depth camera)."""
    x0, x1, y0, y1 = box
    v, u = np.mgrid[0:H, 0:W].astype(np.float64)
    # depth camera
    xr, yr = (u - K_DEPTH[0, 2]) / K_DEPTH[0, 0], (v - K_DEPTH[1, 2]) / K_DEPTH[1, 1]
    near = (xr * z_near >= x0) & (xr * z_near <= x1) & (yr * z_near >= y0) & (yr * z_near <= y1)
    depth = np.where(near, z_near, z_far)
    ideal = _texture(xr * depth, yr * depth, near)
    # colour camera: its centre is at -T in the depth frame; cast each pixel's ray
    xc, yc = (u - K_COLOR[0, 2]) / K_COLOR[0, 0], (v - K_COLOR[1, 2]) / K_COLOR[1, 1]
    Xn, Yn = xc * (z_near + T[2]) - T[0], yc * (z_near + T[2]) - T[1]
    hit = (Xn >= x0) & (Xn <= x1) & (Yn >= y0) & (Yn <= y1)
    Xf, Yf = xc * (z_far + T[2]) - T[0], yc * (z_far + T[2]) - T[1]
    seen = np.where(hit, _texture(Xn, Yn, True), _texture(Xf, Yf, False))
    to8 = lambda g: np.repeat((g * 255).round().astype(np.uint8)[..., None], 3, axis=2)  # noqa: E731
    return depth.astype(np.float32), to8(seen), to8(ideal), near


def test_registration_resamples_colour_into_the_depth_camera():
    depth, color, ideal, near = _scene((-0.2, 0.15, -0.15, 0.1))
    reg = ColorRegistration(K_DEPTH, K_COLOR, T)(color, depth)
    assert reg.shape == color.shape and reg.dtype == np.uint8
    # away from the box outline (occlusion boundaries differ between the cameras) it matches
    from scipy.ndimage import binary_erosion
    inner = binary_erosion(near, iterations=3) | binary_erosion(~near, iterations=6)
    inner[:4], inner[-4:], inner[:, :8], inner[:, -8:] = False, False, False, False
    err_reg = np.abs(reg.astype(int) - ideal.astype(int))[inner].mean()
    err_raw = np.abs(color.astype(int) - ideal.astype(int))[inner].mean()
    assert err_reg < 2.0 and err_raw > 5 * err_reg


def test_estimate_recovers_the_colour_camera():
    scenes = [_scene(b) for b in ((-0.2, 0.15, -0.15, 0.1), (-0.35, -0.05, -0.2, 0.2), (0.0, 0.3, -0.1, 0.25))]
    frames = [(color, depth) for depth, color, _, _ in scenes]
    est = estimate_registration(frames, K_DEPTH)
    fx, fy, cx, cy = est["color_intrinsics"]
    assert fx == pytest.approx(K_COLOR[0, 0], rel=0.02)
    assert cx == pytest.approx(K_COLOR[0, 2], abs=1.5) and cy == pytest.approx(K_COLOR[1, 2], abs=1.5)
    assert est["color_translation"][0] == pytest.approx(T[0], abs=0.015)
    assert est["score"] > est["score_identity"]


def test_config_errors_name_the_keys():
    with pytest.raises(CalibrationError, match="color_intrinsics is not"):
        ColorRegistration.from_config(K_DEPTH, None, [0.01, 0, 0])
    with pytest.raises(CalibrationError, match="color_intrinsics"):
        ColorRegistration.from_config(K_DEPTH, [1, 2], None)
    with pytest.raises(CalibrationError, match="color_translation"):
        ColorRegistration.from_config(K_DEPTH, [130, 130, 80, 60], [0.1, 0.2])
    assert ColorRegistration.from_config(K_DEPTH, None, None) is None


def test_real_redkitchen_registration_aligns_edges(seven_scenes_path):
    """The shipped 7-Scenes config's colour camera doubles the colour gradient found at depth
    edges on real frames (the images are otherwise delivered unchanged in size and type)."""
    from slam.config import load_config

    cfg = load_config("7scenes.yaml", [f"data.path={seven_scenes_path}", "data.stride=100"])
    assert cfg.data.color_intrinsics is not None
    raw = list(open_source(DataConfig(dataset="7scenes", path=str(seven_scenes_path), stride=100)))
    reg = list(open_source(cfg.data))
    assert len(raw) == len(reg) == 5
    K = raw[0].K
    score_raw = np.mean([edge_alignment([_edge_samples(f.color, f.depth, K)], [K[0, 0], K[0, 2], K[1, 2], 0.0])
                         for f in raw])
    score_reg = np.mean([edge_alignment([_edge_samples(f.color, f.depth, K)], [K[0, 0], K[0, 2], K[1, 2], 0.0])
                         for f in reg])
    assert reg[0].color.shape == raw[0].color.shape and reg[0].color.dtype == np.uint8
    assert score_reg > 1.5 * score_raw
