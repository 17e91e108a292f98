"""Downscale and intrinsics scaling: pixel-centre convention, validity-aware depth."""
import numpy as np
import pytest

from slam.camera import scale_K
from slam.data.preprocess import K_from_params, downscale_color, downscale_depth


def _project(K, X):
    x = K @ X
    return x[:2] / x[2]


@pytest.mark.parametrize("s", [2, 3, 4])
def test_scaled_K_projects_to_the_same_block(s):
    K = K_from_params([500.0, 510.0, 319.5, 239.5])
    K2 = scale_K(K, s)
    X = np.array([0.3, -0.2, 2.0])
    u = _project(K, X)
    # pixel-centre convention: full-res coordinate u maps to (u + 0.5)/s - 0.5
    np.testing.assert_allclose(_project(K2, X), (u + 0.5) / s - 0.5, atol=1e-12)
    assert K2[0, 0] == 500.0 / s and K2[1, 1] == 510.0 / s


def test_colour_downscale_is_area_average_and_crops_remainder():
    img = np.zeros((5, 7, 3), np.uint8)
    img[0:2, 0:2] = [0, 100, 200]
    img[0, 0] = [100, 100, 100]
    out = downscale_color(img, 2)
    assert out.shape == (2, 3, 3)
    np.testing.assert_array_equal(out[0, 0], [25, 100, 175])


def test_depth_downscale_never_mixes_invalid_pixels():
    d = np.array([[0.0, 2.0, 1.0, 1.0],
                  [0.0, 0.0, 1.0, 3.0],
                  [0.0, 0.0, 4.0, 4.0],
                  [0.0, 0.0, 4.0, 4.0]], np.float32)
    out = downscale_depth(d, 2)
    assert out.dtype == np.float32 and out.shape == (2, 2)
    assert out[0, 0] == 2.0          # the only valid pixel, not 0.5
    assert out[0, 1] == 1.0          # median of 1, 1, 1, 3
    assert out[1, 0] == 0.0          # no valid pixel stays invalid
    assert out[1, 1] == 4.0


def test_downscale_one_is_identity():
    d = np.ones((4, 4), np.float32)
    assert downscale_depth(d, 1) is d
    assert scale_K(np.eye(3), 1).tolist() == np.eye(3).tolist()


def test_tracker_pyramid_downsamples_depth_like_the_loaders():
    """Observation.downsampled (the tracker's pyramid) and Keyframe.from_frame use the loaders'
    median-of-valid-pixels rule: a pyramid level equals the frame loaded at that resolution."""
    import torch

    from slam.data.frame import Frame
    from slam.data.preprocess import downscale_depth
    from slam.map.keyframes import Keyframe
    from slam.observation import Observation

    rng = np.random.default_rng(3)
    depth = (rng.random((24, 32)) + 0.5).astype(np.float32)
    depth[rng.random((24, 32)) < 0.3] = 0.0
    depth[:4, :4] = 0.0                                   # an all-invalid block stays invalid
    color = np.zeros((24, 32, 3), np.uint8)
    obs = Observation.from_numpy(color, depth, np.eye(3), torch.device("cpu"))
    for s in (2, 4):
        np.testing.assert_array_equal(obs.downsampled(s).depth.numpy(), downscale_depth(depth, s))
    assert obs.downsampled(4).depth[0, 0] == 0
    frame = Frame(index=0, timestamp=0.0, color=color, depth=depth, K=np.eye(3))
    kf = Keyframe.from_frame(frame, np.eye(4), downscale=2)
    np.testing.assert_allclose(kf.depth.astype(np.float32), downscale_depth(depth, 2), rtol=1e-3)
