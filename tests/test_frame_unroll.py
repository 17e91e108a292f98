"""The rolling-shutter unroll kernel (rasterizer.unroll, CPU and, with a GPU, CUDA) against its
PyTorch oracle: colour and depth of a textured frame with holes and depth steps, turned about
every axis, with a depth image taken after its colour."""
from __future__ import annotations

import math

import pytest
import torch

from rasterizer.frame import unroll, unroll_reference

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _images(h: int, w: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Smooth colour with noise; depth planes at 1-4 m with a step and 10 % holes."""
    g = torch.Generator().manual_seed(seed)
    y, x = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij")
    color = torch.stack([0.5 + 0.4 * torch.sin(x / 5), 0.5 + 0.4 * torch.cos(y / 7), (x + y) / (w + h)], -1)
    color = (color + 0.05 * torch.rand(h, w, 3, generator=g)).clamp(0, 1)
    depth = 1.0 + 0.01 * x + 0.005 * y + (x > w / 3).float() * 1.5
    depth[torch.rand(h, w, generator=g) < 0.1] = 0.0
    return color, depth


def _intrinsics(h: int, w: int) -> tuple:
    return (0.8 * w, 0.8 * w, w / 2 - 0.3, h / 2 + 0.2)


CASES = [  # omega rad/s, colour readout s, depth readout s, depth offset s
    (math.radians(65.0), 0.0, 0.0, 0.028, 0.028, 0.0),
    (0.0, math.radians(-80.0), 0.0, 0.03, 0.03, 0.0),
    (math.radians(35.0), math.radians(-40.0), math.radians(25.0), 0.028, 0.028, 0.009),
    (0.0, math.radians(60.0), math.radians(10.0), 0.0, 0.0, 0.015),       # depth timing alone
    (math.radians(50.0), math.radians(30.0), 0.0, 0.028, 0.0, 0.0),       # colour alone
    (math.radians(2000.0), 0.0, 0.0, 0.03, 0.02, -0.02),                  # far outside the frame
    (math.radians(40.0), math.radians(-30.0), 0.0, -0.028, -0.028, 0.0),  # rows read bottom to top
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("shape", [(120, 160), (37, 53)])
def test_matches_the_oracle(device, case, shape):
    color, depth = _images(*shape, seed=sum(shape))
    K, omega, timing = _intrinsics(*shape), case[:3], case[3:]
    got_c, got_d = unroll(color.to(device), depth.to(device), K, omega, *timing)
    want_c, want_d = unroll_reference(color, depth, K, omega, *timing)
    assert got_c.shape == color.shape and got_d.shape == depth.shape and got_c.device.type == device
    # (CUDA's sinf / cosf differ from the host's by a few ulp: 6e-5 of colour at 35 rad/s)
    torch.testing.assert_close(got_c.cpu(), want_c, atol=1e-4, rtol=0)
    # Nearest depth: a source coordinate within float rounding of a half pixel may pick the other
    # neighbour; nearly every pixel is equal.
    same = torch.isclose(got_d.cpu(), want_d, atol=1e-5, rtol=1e-5)
    assert same.float().mean() > 0.999


def test_no_turn_is_the_identity():
    color, depth = _images(30, 40)
    c, d = unroll(color, depth, _intrinsics(30, 40), (0.0, 0.0, 0.0), 0.03, 0.03, 0.01)
    assert torch.equal(c, color) and torch.equal(d, depth)


def test_depth_offset_moves_the_depth_alone():
    """A depth image taken after the colour, the camera panning: the depth is resampled, the
    colour (taken at the frame's time, global shutter) is not."""
    color, depth = _images(60, 80)
    c, d = unroll(color, depth, _intrinsics(60, 80), (0.0, 1.0, 0.0), 0.0, 0.0, 0.01)
    assert torch.equal(c, color)
    assert not torch.equal(d, depth) and (d > 0).float().mean() > 0.8


def test_a_colour_readout_alone_leaves_the_depth():
    color, depth = _images(60, 80)
    c, d = unroll(color, depth, _intrinsics(60, 80), (1.0, 0.5, 0.0), 0.03, 0.0, 0.0)
    assert torch.equal(d, depth) and not torch.equal(c, color)


def test_bad_arguments_are_refused():
    color, depth = _images(8, 8)
    with pytest.raises(ValueError, match="color must be"):
        unroll(color[..., :2], depth, _intrinsics(8, 8), (0, 0, 1), 0.03, 0.03)
    with pytest.raises(ValueError, match="float32"):
        unroll(color.double(), depth, _intrinsics(8, 8), (0, 0, 1), 0.03, 0.03)
    with pytest.raises(ValueError, match="intrinsics"):
        unroll(color, depth, (1.0, 2.0), (0, 0, 1), 0.03, 0.03)
    with pytest.raises(RuntimeError, match="fx and fy"):
        unroll(color, depth, (0.0, 1.0, 4.0, 4.0), (0, 0, 1), 0.03, 0.03, backend="cpu")
