"""The median kernels (rasterizer.median_depth: the tracker's rotation pivot; rasterizer.lower_median:
the pruner's normalisers; CPU and, with a GPU, CUDA) against their PyTorch oracles and torch.median:
exactly equal on depth with holes, NaN, inf, negative values, ties, odd and even counts, nothing
valid, and sizes up to 640x480."""
from __future__ import annotations

import pytest
import torch

from rasterizer.median import lower_median, lower_median_reference, median_depth, median_depth_reference

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _depth(h: int, w: int, holes: float, seed: int) -> torch.Tensor:
    """Depth at 0.5-3.5 m with a share ``holes`` of 0, and a few NaN, inf and negative values."""
    g = torch.Generator().manual_seed(seed)
    d = torch.rand(h, w, generator=g) * 3 + 0.5
    u = torch.rand(h, w, generator=g)
    d[u < holes] = 0.0
    d[(u > 0.95) & (u < 0.952)] = float("nan")
    d[(u > 0.96) & (u < 0.962)] = float("inf")
    d[(u > 0.97) & (u < 0.972)] = -2.0
    return d


def _median_of_valid(d: torch.Tensor) -> float:
    v = d[(d > 0) & torch.isfinite(d)]
    return float(v.median()) if v.numel() else 1.0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(240, 320), (480, 640), (37, 51), (1, 1), (3, 1)])
@pytest.mark.parametrize("holes", [0.0, 0.3, 0.999])
def test_matches_the_oracle_and_torch_median(device, shape, holes):
    d = _depth(*shape, holes, seed=shape[0] * 7 + int(holes * 1000)).to(device)
    got = median_depth(d)
    assert got.shape == () and got.dtype == torch.float32 and got.device == d.device
    assert float(got) == float(median_depth_reference(d.cpu())) == _median_of_valid(d.cpu())


@pytest.mark.parametrize("device", DEVICES)
def test_small_cases(device):
    def med(rows):
        return float(median_depth(torch.tensor(rows, dtype=torch.float32, device=device)))
    assert med([[0.0, 0.0], [0.0, 0.0]]) == 1.0                   # nothing valid: 1 m
    assert med([[float("nan"), float("inf"), -1.0]]) == 1.0
    assert med([[0.0, 4.0, 1.0], [3.0, 0.0, 2.0]]) == 2.0          # an even count: the lower middle
    assert med([[0.0, 5.0]]) == 5.0                                # one valid pixel
    assert med([[2.5, 2.5, 2.5, 1.0, 7.0]]) == 2.5                 # ties
    assert med([[1e-30, 3e38, 1e-30]]) == pytest.approx(1e-30)     # the float range's ends
    assert float(median_depth(torch.zeros(0, 4, device=device))) == 1.0   # empty


@pytest.mark.parametrize("device", DEVICES)
def test_values_differing_in_the_last_bit(device):
    """Every one of the value's 32 bits decides: neighbours one ulp apart are told apart."""
    base = torch.tensor(1.7, dtype=torch.float32)
    vals = torch.stack([torch.nextafter(base, torch.tensor(2.0)), base, torch.nextafter(base, torch.tensor(0.0))])
    d = torch.cat([vals, vals[:1]]).reshape(2, 2).to(device)       # sorted: lo, base, hi, hi
    assert float(median_depth(d)) == float(base)


def test_backends_agree_and_bad_arguments_are_refused():
    d = _depth(30, 40, 0.2, seed=3)
    assert float(median_depth(d, backend="cpu")) == float(median_depth(d, backend="reference"))
    with pytest.raises(ValueError, match="float32"):
        median_depth(d.double())
    with pytest.raises(ValueError, match=r"\(H, W\)"):
        median_depth(d[None])
    with pytest.raises(ValueError, match="backend"):
        median_depth(d, backend="gsplat")
    with pytest.raises(ValueError, match="float32"):
        lower_median(d.double())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [1, 2, 7, 10, 1001, 300_000])
def test_lower_median_is_torch_median(device, n):
    g = torch.Generator().manual_seed(n)
    x = (torch.randn(n, generator=g) * 10).to(device)              # negative values too
    got = lower_median(x)
    assert got.shape == () and got.dtype == torch.float32 and got.device == x.device
    assert float(got) == float(x.cpu().median()) == float(lower_median_reference(x.cpu()))


@pytest.mark.parametrize("device", DEVICES)
def test_lower_median_small_cases(device):
    def med(values):
        return lower_median(torch.tensor(values, dtype=torch.float32, device=device))
    assert float(med([3.0, 1.0, 2.0, 2.0])) == 2.0
    assert med([1.0, float("nan"), 0.5]).isnan()                    # as torch.median: NaN
    assert med([]).isnan()
    assert float(med([float("inf"), 1.0, 2.0])) == 2.0
    assert float(med([float("-inf"), 1.0, 2.0, float("-inf")])) == float("-inf")
    assert float(med([float("-inf")])) == float("-inf")
    assert float(med([-3.0, -1.0, -2.0])) == -2.0
    assert float(med([-0.0, 0.0, 1.0])) == 0.0
    x = torch.rand(4, 5, 6, device=device)                          # any shape
    assert float(lower_median(x)) == float(x.cpu().median())
