"""slam.tensor_ops (element-wise helpers through kernels a run loads anyway) give PyTorch's own
values: ``~``, ``clamp_min`` and ``clamp`` on every kind of value they meet, and the colour's
host rounding equals ``round`` on the device."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from slam.observation import Observation
from slam.tensor_ops import at_least, clipped, logical_not

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _values(device) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1000, generator=g) * 2
    special = torch.tensor([0.0, -0.0, 1e-12, 1e-6, 0.05, 1e-4, 1 - 1e-4, 1.0, float("inf"), float("-inf"), 1e-45])
    return torch.cat([x, special]).to(device)


@pytest.mark.parametrize("device", DEVICES)
def test_logical_not_is_bitwise_not(device):
    mask = torch.rand(7, 9, generator=torch.Generator().manual_seed(1)).to(device) > 0.5
    got = logical_not(mask)
    assert got.dtype == torch.bool and torch.equal(got, ~mask)
    empty = torch.zeros(0, dtype=torch.bool, device=device)
    assert torch.equal(logical_not(empty), empty)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("floor", [1e-12, 1e-6, 0.05, 0.0])
def test_at_least_is_clamp_min(device, floor):
    x = _values(device)
    got = at_least(x, floor)
    assert got.dtype == x.dtype and torch.equal(got, x.clamp_min(floor))


@pytest.mark.parametrize("device", DEVICES)
def test_clipped_is_clamp(device):
    x = _values(device)
    assert torch.equal(clipped(x, 1e-4, 1 - 1e-4), x.clamp(1e-4, 1 - 1e-4))
    assert torch.equal(clipped(x, -1.0, -1.0), x.clamp(-1.0, -1.0))


@pytest.mark.parametrize("device", DEVICES)
def test_colour_rounds_on_the_host_as_round_does_on_the_device(device):
    levels = torch.arange(256, dtype=torch.float32) / 255.0
    halves = (torch.arange(255, dtype=torch.float32) + 0.5) / 255.0        # ties: to even
    values = torch.cat([levels, halves, torch.rand(2000, generator=torch.Generator().manual_seed(2))])
    color = values[: 3 * (values.numel() // 3)].reshape(-1, 1, 3).to(device)
    obs = Observation(color, torch.ones(color.shape[:2], device=device), torch.eye(3))
    want = (color * 255).round().to(torch.uint8).cpu().numpy()
    got = obs.color_uint8()
    assert got.dtype == np.uint8 and np.array_equal(got, want)


def test_broken_colour_rounds_to_defined_bytes():
    """NaN colour becomes 0 and values outside [0, 1] saturate (no undefined cast, no warning)."""
    import warnings
    color = torch.tensor([[[float("nan"), -0.5, 1.7]]])
    obs = Observation(color, torch.ones(1, 1), torch.eye(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert obs.color_uint8().tolist() == [[[0, 0, 255]]]
