"""The map's parametrisation kernels (rasterizer/activation.py) against their PyTorch oracle, on the
CPU here and on CUDA where present (scripts/gpu_check.sh); the map's autograd through them:
tests/test_sphere_map.py."""
from __future__ import annotations

import pytest
import torch

from rasterizer.activation import activate_rows, activate_rows_backward, reference, reference_backward

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
ULP = 1.2e-7   # one float32 unit in the last place, relative (CUDA: the device's expf in both, checked as close)


def _rows(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(n, 8, generator=g) * 3.0
    rows[:, 3] = torch.empty(n).uniform_(-6.0, 2.0, generator=g)      # log radii of 2.5 mm .. 7 m
    return rows


def _grads(n: int, seed: int = 1) -> list:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, 3, generator=g), torch.randn(n, generator=g), torch.randn(n, 3, generator=g),
            torch.randn(n, generator=g)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [0, 1, 37, 70_001])
def test_forward_matches_the_oracle(device, n):
    rows = _rows(n).to(device)
    got, want = activate_rows(rows), reference(rows)
    assert [tuple(t.shape) for t in got] == [(n, 3), (n,), (n, 3), (n,)]
    for name, a, b in zip(("means", "radii", "colors", "opacities"), got, want):
        assert a.is_contiguous() and a.device == rows.device and a.dtype == torch.float32, name
        rtol = 0.0 if device == "cpu" else ULP      # the CPU kernel's exp is PyTorch's own
        torch.testing.assert_close(a, b, rtol=rtol, atol=0.0, msg=name)
    assert torch.equal(got[0], rows[:, :3])
    assert got[0].data_ptr() != rows.data_ptr() or n == 0      # a new tensor, not a view of the rows


@pytest.mark.parametrize("device", DEVICES)
def test_backward_matches_the_oracle_also_without_some_gradients(device):
    n = 5000
    _, radii, colors, opacities = reference(_rows(n).to(device))
    grads = [g.to(device) for g in _grads(n)]
    for present in [(1, 1, 1, 1), (0, 1, 0, 1), (1, 0, 1, 0), (0, 0, 0, 0)]:
        gs = [g if keep else None for g, keep in zip(grads, present)]
        got = activate_rows_backward(*gs, radii, colors, opacities)
        want = reference_backward(*gs, radii, colors, opacities)
        assert got.shape == (n, 8)
        torch.testing.assert_close(got, want, rtol=0.0, atol=0.0, msg=str(present))   # the same products


def test_bad_rows_are_refused_with_their_shape():
    with pytest.raises(ValueError, match=r"rows must be \(N, 8\) float32, got \(4, 7\)"):
        activate_rows(torch.zeros(4, 7))
    with pytest.raises(ValueError, match="float32"):
        activate_rows(torch.zeros(4, 8, dtype=torch.float64))
    assert activate_rows(torch.zeros(4, 8, dtype=torch.float64), backend="reference")[1].dtype == torch.float64
