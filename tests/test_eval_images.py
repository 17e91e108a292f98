"""Image metrics: PSNR, SSIM (pytorch_msssim), depth L1 over valid pixels."""
import math

import pytest
import torch

from slam.eval.images import depth_l1, psnr, ssim


def test_psnr_known_values():
    target = torch.rand(3, 16, 20, generator=torch.Generator().manual_seed(0)) * 0.8
    assert psnr(target + 0.1, target) == pytest.approx(20.0, abs=1e-4)          # MSE 0.01
    assert psnr(target * 255 + 2.55, target * 255, data_range=255.0) == pytest.approx(40.0, abs=1e-3)
    assert math.isinf(psnr(target, target))
    pred = target.clone()
    pred[:, :8] += 0.1
    mask = torch.zeros(16, 20, dtype=torch.bool)
    mask[:8] = True
    assert psnr(pred, target, mask=mask) == pytest.approx(20.0, abs=1e-4)       # only the masked half
    with pytest.raises(ValueError, match="differ in shape"):
        psnr(pred[:, :4], target)


def test_ssim_identity_and_monotone_in_noise():
    g = torch.Generator().manual_seed(1)
    img = torch.rand(1, 3, 32, 32, generator=g)
    assert ssim(img, img) == pytest.approx(1.0, abs=1e-6)
    n1 = (img + 0.05 * torch.randn(img.shape, generator=g)).clamp(0, 1)
    n2 = (img + 0.20 * torch.randn(img.shape, generator=g)).clamp(0, 1)
    assert 1.0 > ssim(n1, img) > ssim(n2, img) > 0.0
    small = torch.rand(3, 8, 9, generator=g)                                     # under the 11 px window
    assert ssim(small, small) == pytest.approx(1.0, abs=1e-6)
    # channels-last (H, W, 3), as the renderer outputs, gives the same numbers
    hwc, ref = n1[0].permute(1, 2, 0), img[0].permute(1, 2, 0)
    assert ssim(hwc, ref) == pytest.approx(ssim(n1, img), abs=1e-6)
    assert psnr(hwc, ref) == pytest.approx(psnr(n1, img), abs=1e-6)


def test_depth_l1_over_valid_target_pixels():
    target = torch.tensor([[1.0, 2.0], [0.0, float("nan")]])
    pred = torch.tensor([[1.5, 0.0], [7.0, 3.0]])
    # valid: (0,0) err 0.5, (0,1) err 2.0 (a hole in the prediction counts); invalid ignored
    assert depth_l1(pred, target) == pytest.approx(1.25)
    with pytest.raises(ValueError, match="no valid pixel"):
        depth_l1(pred, torch.zeros(2, 2))


def test_keyframe_psnr_over_valid_depth_leaves_out_pixels_no_sphere_can_explain():
    """The run's image metrics: ``psnr`` over every pixel, ``psnr_valid_depth`` over the pixels
    with valid observed depth. A map seeded from depth renders nothing where the depth is missing
    (here the right half): the whole-image figure counts that, the valid-depth one does not."""
    from types import SimpleNamespace

    import numpy as np

    from rasterizer import RasterOutput
    from slam.map.keyframes import Keyframe
    from slam.output.metrics import image_metrics

    rng = np.random.default_rng(0)
    color = rng.integers(50, 200, (12, 16, 3), dtype=np.uint8)
    depth = np.zeros((12, 16), np.float16)
    depth[:, :8] = 1.5
    K = np.array([[20.0, 0, 8], [0, 20.0, 6], [0, 0, 1]])
    kf = Keyframe(0, 0.0, np.eye(4), color, depth, K, kf_id=0)
    seen = torch.from_numpy(depth.astype(np.float32) > 0)

    def render(K, width, height, T_wc=None, backend="cpu"):
        """What a map seeded from the keyframe's depth renders: its colour + 0.01 where the depth
        is valid (MSE 1e-4: 40 dB), nothing elsewhere."""
        rgb = torch.from_numpy(color.astype(np.float32) / 255.0) + 0.01
        return RasterOutput(rgb * seen[..., None], torch.from_numpy(depth.astype(np.float32)), seen.float())

    result = SimpleNamespace(snapshot=SimpleNamespace(render=render), keyframes=[kf], backend="cpu")
    m = image_metrics(result)
    assert m["psnr_valid_depth"] == pytest.approx(40.0, abs=0.01)
    assert m["psnr"] < 15.0                       # the empty half: an error of the colour itself
    assert m["depth_l1_m"] == pytest.approx(0.0, abs=1e-6)
    assert m["keyframes"] == 1
