"""The depth-edge mask kernel (rasterizer.depth_edge_mask, CPU and, with a GPU, CUDA) against its
PyTorch oracle: equal on real-looking depth with holes, NaN, inf and edges, at odd sizes."""
from __future__ import annotations

import pytest
import torch

from rasterizer.frame import depth_edge_mask, edge_mask_reference

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _depth(h: int, w: int, seed: int = 0) -> torch.Tensor:
    """Planes at 1-4 m with steps (depth edges), 10 % holes, a few NaN, inf and negative values."""
    g = torch.Generator().manual_seed(seed)
    y, x = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij")
    d = 1.0 + 0.01 * x + 0.005 * y + (x > w / 3).float() * 1.5 + 0.002 * torch.randn(h, w, generator=g)
    u = torch.rand(h, w, generator=g)
    d[u < 0.1] = 0.0
    d[(u > 0.5) & (u < 0.505)] = float("nan")
    d[(u > 0.6) & (u < 0.605)] = float("inf")
    d[(u > 0.7) & (u < 0.705)] = -1.0
    return d


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(480, 640), (37, 53), (1, 1), (1, 7), (5, 1)])
@pytest.mark.parametrize("max_jump", [0.1, 0.02])
def test_matches_the_oracle(device, shape, max_jump):
    d = _depth(*shape, seed=shape[0] + shape[1]).to(device)
    got = depth_edge_mask(d, max_jump)
    want = edge_mask_reference(d.cpu(), max_jump).to(device)
    assert got.dtype == torch.bool and got.shape == d.shape
    assert torch.equal(got, want)


def test_empty_depth_gives_an_empty_mask():
    assert depth_edge_mask(torch.ones(0, 4)).shape == (0, 4)


def test_edges_and_holes_are_masked():
    d = torch.full((8, 8), 2.0)
    d[:, 4:] = 3.0           # a 1 m step between columns 3 and 4
    d[0, 0] = 0.0            # a hole: ignored by its neighbours, itself invalid
    m = depth_edge_mask(d)
    assert not m[:, 3:5].any() and m[1:, 1:3].all() and m[:, 5:].all()
    assert not m[0, 0] and m[0, 1] and m[1, 1]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="float32"):
        depth_edge_mask(torch.ones(4, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\(H, W\)"):
        depth_edge_mask(torch.ones(4, 4, 1))
    with pytest.raises(ValueError, match="backend"):
        depth_edge_mask(torch.ones(4, 4), backend="gsplat")
