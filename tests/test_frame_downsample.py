"""The image downsampling kernel (rasterizer/frame.py) against its PyTorch oracle and the loaders'
rule, on the CPU here and on CUDA where present (scripts/gpu_check.sh), and the keyframes made
from it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rasterizer.frame import MAX_FACTOR, downsample, reference
from slam.data.frame import Frame
from slam.data.preprocess import downscale_color, downscale_depth
from slam.map.keyframes import Keyframe
from slam.observation import Observation

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _images(h: int, w: int, seed: int = 0):
    """Colour in [0, 1]; depth 0.5-4.5 m with 30 % invalid pixels, a NaN, an inf, a negative
    value and an all-invalid corner."""
    g = torch.Generator().manual_seed(seed)
    color = torch.rand(h, w, 3, generator=g)
    depth = torch.rand(h, w, generator=g) * 4 + 0.5
    depth[torch.rand(h, w, generator=g) < 0.3] = 0.0
    depth[0, 0], depth[0, 1], depth[1, 0] = float("nan"), float("inf"), -1.0
    depth[-4:, -4:] = 0.0
    return color, depth


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape,factor", [((480, 640), 2), ((240, 320), 4), ((37, 53), 3), ((64, 64), 16),
                                          ((48, 80), 8), ((5, 7), 1), ((3, 3), 4)])
def test_matches_the_oracle(device, shape, factor):
    color, depth = (t.to(device) for t in _images(*shape))
    got_c, got_d = downsample(color, depth, factor)
    want_c, want_d = reference(color, depth, factor)
    assert got_c.shape == (shape[0] // factor, shape[1] // factor, 3) and got_d.shape == got_c.shape[:2]
    torch.testing.assert_close(got_c, want_c, rtol=0, atol=1e-6)
    assert torch.equal(got_d, want_d)          # the same sorted values, the same two-value mean
    assert bool(torch.isfinite(got_d).all()) and bool((got_d >= 0).all())


def test_depth_is_the_loaders_median_and_invalid_blocks_stay_invalid():
    color, depth = _images(24, 32)
    d = depth.numpy().copy()
    d[~np.isfinite(d) | (d < 0)] = 0.0         # the loaders never pass NaN / inf / negative depth
    for s in (2, 3, 4):
        _, got = downsample(color, torch.from_numpy(d), s)
        np.testing.assert_array_equal(got.numpy(), downscale_depth(d, s))
    _, got = downsample(color, depth, 4)
    assert got[-1, -1] == 0.0


def test_bad_arguments_are_refused():
    color, depth = _images(8, 8)
    with pytest.raises(ValueError, match="factor"):
        downsample(color, depth, 0)
    with pytest.raises(ValueError, match="float32"):
        downsample(color.double(), depth, 2)
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        downsample(color[..., :2], depth, 2)
    with pytest.raises(ValueError, match="backend"):
        downsample(color, depth, 2, backend="gsplat")
    got = downsample(*_images(40, 40), MAX_FACTOR + 4)     # beyond the kernels' block: the oracle
    assert got[0].shape == (2, 2, 3)


@pytest.mark.parametrize("device", DEVICES)
def test_keyframe_from_the_tracking_frame_equals_the_keyframe_from_the_frame(device):
    rng = np.random.default_rng(5)
    color = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
    depth = (rng.random((48, 64)) * 3 + 0.5).astype(np.float32)
    depth[rng.random((48, 64)) < 0.2] = 0.0
    K = np.array([[50.0, 0, 31.5], [0, 50.0, 23.5], [0, 0, 1]])
    frame = Frame(index=7, timestamp=0.25, color=color, depth=depth, K=K)
    obs = Observation.from_numpy(color, depth, K, torch.device(device)).downsampled(2)
    a = Keyframe.from_observation(frame, obs, np.eye(4), 2, kf_id=3)
    b = Keyframe.from_frame(frame, np.eye(4), 2, kf_id=3)
    assert a.color.dtype == np.uint8 and a.depth.dtype == np.float16 and a.color.shape == (24, 32, 3)
    np.testing.assert_array_equal(a.depth, b.depth)
    # colour: the block mean rounded; a mean half-way between two levels may round either way on
    # another device (CUDA divides by 255 as a multiplication by its reciprocal)
    assert np.abs(a.color.astype(int) - b.color.astype(int)).max() <= 1
    if device == "cpu":
        np.testing.assert_array_equal(a.color, b.color)
    np.testing.assert_array_equal(a.K, b.K)
    np.testing.assert_array_equal(a.depth.astype(np.float32), downscale_depth(depth, 2).astype(np.float16))
    # colour: the mean of each block rounded, within one level of OpenCV's area resampling
    assert np.abs(a.color.astype(int) - downscale_color(color, 2).astype(int)).max() <= 1
    full = Keyframe.from_frame(frame, np.eye(4), 1)
    np.testing.assert_array_equal(full.color, color)     # no downscale: the frame's own pixels


def test_keyframe_colour_is_rounded_as_torch_rounds_on_the_device():
    # from_observation rounds on the host (np.rint): the same uint8 as torch's round on the
    # device, ties to even included (x.5 levels reached exactly by the multiplication by 255)
    levels = torch.arange(0, 256, dtype=torch.float32)
    ties = (torch.arange(0, 255, dtype=torch.float32) + 0.5) / 255.0
    rand = torch.rand(4000, generator=torch.Generator().manual_seed(1))
    values = torch.cat([levels / 255.0, ties, rand, torch.tensor([0.0, 1.0])])
    n = values.numel() // 3 * 3
    color = values[:n].reshape(1, -1, 3)
    obs = Observation(color, torch.ones(color.shape[:2]), torch.eye(3))
    frame = Frame(index=0, timestamp=0.0, color=np.zeros((1, n // 3, 3), np.uint8),
                  depth=np.ones((1, n // 3), np.float32), K=np.eye(3))
    kf = Keyframe.from_observation(frame, obs, np.eye(4), 1)
    np.testing.assert_array_equal(kf.color, (color * 255.0).round().to(torch.uint8).numpy())
    assert (np.rint(((ties * 255.0).numpy())) % 2 == 0).all()      # the ties went to even
