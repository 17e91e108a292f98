"""A compact frame's float images (``rasterizer.unpack_frame``: uint8 colour / 255, invalid depth
to 0) against the PyTorch oracle, on the CPU here and on CUDA where present (scripts/gpu_check.sh),
and the two places a run unpacks frames: a camera frame's upload and a stored keyframe's view."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rasterizer.frame import unpack_frame, unpack_reference
from slam.map.keyframes import Keyframe, KeyframeView
from slam.observation import Observation

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _compact(h: int, w: int, dtype=torch.float32, seed: int = 0):
    """Every uint8 value in the colour; depth 0.5-4.5 m with 20 % zeros and NaN, inf, -inf and a
    negative value."""
    g = torch.Generator().manual_seed(seed)
    color = torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=g)
    k = min(256, color.numel())
    color.view(-1)[:k] = torch.arange(k, dtype=torch.uint8)
    depth = torch.rand(h, w, generator=g) * 4 + 0.5
    depth[torch.rand(h, w, generator=g) < 0.2] = 0.0
    k = min(4, depth.numel())
    depth.view(-1)[:k] = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.5])[:k]
    return color, depth.to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(48, 64), (7, 5), (1, 1)])
def test_matches_the_oracle(device, dtype, shape):
    color, depth = (t.to(device) for t in _compact(*shape, dtype=dtype))
    got_c, got_d = unpack_frame(color, depth)
    want_c, want_d = unpack_reference(color.cpu(), depth.cpu())    # the CPU's rounded division
    assert got_c.dtype == got_d.dtype == torch.float32 and got_c.device.type == device
    assert torch.equal(got_c.cpu(), want_c) and torch.equal(got_d.cpu(), want_d)
    assert not torch.isnan(got_d).any() and float(got_d.min()) >= 0.0
    if color.numel() >= 256:
        assert float(got_c.max()) == 1.0 and float(got_c.min()) == 0.0


def test_half_depth_is_widened_exactly():
    _, depth = _compact(16, 16, dtype=torch.float16)
    _, got = unpack_frame(torch.zeros(16, 16, 3, dtype=torch.uint8), depth)
    finite = torch.isfinite(depth) & (depth > 0)
    assert torch.equal(got[finite], depth[finite].float())


@pytest.mark.parametrize("color,depth,match", [
    (torch.zeros(4, 5, 3), torch.zeros(4, 5), "uint8"),
    (torch.zeros(4, 5, 3, dtype=torch.uint8), torch.zeros(4, 5, dtype=torch.float64), "float32 or float16"),
    (torch.zeros(4, 5, dtype=torch.uint8), torch.zeros(4, 5), r"\(H, W, 3\)"),
    (torch.zeros(4, 5, 3, dtype=torch.uint8), torch.zeros(5, 4), r"\(H, W, 3\)"),
])
def test_bad_images_are_named(color, depth, match):
    with pytest.raises(ValueError, match=match):
        unpack_frame(color, depth)


@pytest.mark.parametrize("device", DEVICES)
def test_camera_frames_and_keyframe_views_unpack_alike(device):
    """A frame's observation and its stored keyframe's view give the same float colour (the
    keyframe rounds colour to uint8 and depth to float16; here both are exact in those)."""
    color, depth = _compact(24, 32, dtype=torch.float16)
    depth_np = depth.float().numpy()
    obs = Observation.from_numpy(color.numpy(), depth_np, np.eye(3), torch.device(device))
    kf = Keyframe(0, 0.0, np.eye(4), color.numpy(), depth.numpy(), np.eye(3))
    view = KeyframeView.upload(kf, torch.device(device)).observation()
    assert torch.equal(obs.color, view.color)
    assert torch.equal(obs.depth, view.depth)
    host = kf.observation()                   # the keyframe's own images on the host
    assert torch.equal(host.color, view.color.cpu()) and torch.equal(host.depth, view.depth.cpu())
    assert float(obs.depth.min()) == 0.0 and not torch.isnan(obs.depth).any()


@pytest.mark.parametrize("device", DEVICES)
def test_a_keyframe_view_s_masks_are_those_of_its_own_images(device):
    """The view's depth masks (the mapping loss's and densify's) follow ``observation()``'s
    depth: NaN, infinite and negative depth are invalid there, not only in the float images."""
    from rasterizer import depth_edge_mask

    color, depth = _compact(24, 32, dtype=torch.float16)
    kf = Keyframe(0, 0.0, np.eye(4), color.numpy(), depth.numpy(), np.eye(3))
    view = KeyframeView.upload(kf, torch.device(device))
    d = view.observation().depth
    assert torch.equal(view.valid, d > 0) and torch.equal(view.depth_ok, depth_edge_mask(d))
    assert not bool(view.valid.view(-1)[:4].any()) and not bool(view.depth_ok.view(-1)[:4].any())


def test_float_colour_frames_are_refused():
    with pytest.raises(ValueError, match="uint8"):
        Observation.from_numpy(np.zeros((4, 5, 3), np.float32), np.zeros((4, 5), np.float32), np.eye(3),
                               torch.device("cpu"))


@pytest.mark.parametrize("device", DEVICES)
def test_a_keyframe_view_s_valid_depth_is_finite_and_positive(device):
    """KeyframeView.derive's masks: valid depth is finite and positive (unpack_frame's rule, read as
    a cast, not a comparison); edge-free depth lies inside it."""
    raw = torch.tensor([[0.0, -1.0, float("nan"), float("inf")], [1.5, 1.5, 1.5, 1e-3]], dtype=torch.float16)
    color = torch.zeros(2, 4, 3, dtype=torch.uint8)
    view = KeyframeView.derive(color.to(device), raw.to(device), torch.eye(3), torch.eye(4, device=device))
    want = torch.tensor([[False, False, False, False], [True, True, True, True]])
    assert view.valid.dtype == torch.bool and torch.equal(view.valid.cpu(), want)
    assert not bool((view.depth_ok.cpu() & ~want).any())
