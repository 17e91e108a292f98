"""The robust normal-equations kernel (rasterizer/normal_equations.py) against its float64 oracle,
on the CPU here and on CUDA where present (scripts/gpu_check.sh), and the tracker's use of it
against the matrix-product form it replaced."""
from __future__ import annotations

import pytest
import torch

from rasterizer.normal_equations import packed_size, reference, robust_normal_equations, unpack

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _case(P: int, M: int, device: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    J = torch.randn(P, M, generator=g)
    r = torch.randn(M, generator=g) * 0.2
    J[:, ::7] = 0                       # masked pixels: zero rows and residuals
    r[::7] = 0
    k = torch.tensor([0.1, 0.1, 0.1, 0.05])
    return J.to(device), r.to(device), k.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("P,M", [(6, 4), (8, 1000), (8, 81_920), (6, 50_003 * 4)])
def test_matches_the_float64_oracle(device, P, M):
    J, r, k = _case(P, M, device)
    out = torch.zeros(packed_size(P), dtype=torch.float64, device=device)
    robust_normal_equations(J, r, k, out)
    ref = reference(J.cpu(), r.cpu(), k.cpu())
    rel = ((out.cpu() - ref).abs().max() / ref.abs().max()).item()
    assert rel < 1e-5, rel


@pytest.mark.parametrize("device", DEVICES)
def test_accumulates_bands_and_reads_column_slices(device):
    """Two bands added into one result equal the whole; a column slice of a wider buffer (the
    tracker's last, shorter band) is read in place."""
    J, r, k = _case(8, 4000, device, seed=1)
    whole = robust_normal_equations(J, r, k, torch.zeros(packed_size(8), dtype=torch.float64, device=device))
    wide = torch.zeros(8, 3000, device=device)
    acc = torch.zeros(packed_size(8), dtype=torch.float64, device=device)
    for a, b in ((0, 3000), (3000, 4000)):
        band = wide[:, : b - a]
        band.copy_(J[:, a:b])
        robust_normal_equations(band, r[a:b], k, acc)
    assert torch.allclose(acc, whole, rtol=1e-5, atol=1e-7)


def test_unpack_and_the_matrix_form():
    """H, g and the cost as the tracker formerly formed them: (sqrt(w) J)(sqrt(w) J)^T etc."""
    J, r, k = _case(8, 2000, "cpu", seed=2)
    H, g, cost = unpack(robust_normal_equations(J, r, k, torch.zeros(packed_size(8), dtype=torch.float64)), 8)
    kk = k.repeat(500)
    w = kk / torch.maximum(r.abs(), kk)
    sw = w.sqrt()
    Js = J * sw
    assert torch.allclose(H, (Js @ Js.T).double(), rtol=1e-4, atol=1e-5)
    assert torch.allclose(g, (Js @ (sw * r)).double(), rtol=1e-4, atol=1e-5)
    assert abs(float(cost) - float((w * r * r).sum())) < 1e-4 * float((w * r * r).sum())
    assert torch.equal(H, H.T)


def test_bad_arguments_are_named():
    J, r, k = _case(8, 100, "cpu")
    with pytest.raises(ValueError, match="J must be"):
        robust_normal_equations(J[:5], r, k, torch.zeros(packed_size(5), dtype=torch.float64))
    with pytest.raises(ValueError, match="r has"):
        robust_normal_equations(J, r[:50], k, torch.zeros(packed_size(8), dtype=torch.float64))
    with pytest.raises(ValueError, match="out must be"):
        robust_normal_equations(J, r, k, torch.zeros(packed_size(8)))
