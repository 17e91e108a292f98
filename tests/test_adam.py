"""The packed-row Adam kernel (rasterizer/adam.py) against its PyTorch oracle, on the CPU here and
on CUDA where present (scripts/gpu_check.sh), and the map's use of it."""
from __future__ import annotations

import pytest
import torch

from rasterizer.adam import adam_rows, reference

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
LR = torch.tensor([1e-3, 1e-3, 1e-3, 5e-4, 2e-3, 2e-3, 2e-3, 5e-2])


def _state(n: int, seed: int = 0):
    """Rows at different points of their history: step counts 0..9, moments from earlier steps."""
    g = torch.Generator().manual_seed(seed)
    params = torch.randn(n, 8, generator=g)
    m = torch.randn(n, 8, generator=g) * 1e-2
    v = torch.rand(n, 8, generator=g) * 1e-3
    steps = torch.randint(0, 10, (n,), generator=g).float()
    m[steps == 0] = 0
    v[steps == 0] = 0
    grad = torch.randn(n, 8, generator=g) * 0.1
    grad[::5] = 0                       # rows the render did not touch
    grad[1::5, :3] = 0                  # touched through some columns only
    return params, m, v, steps, grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [1, 37, 70_001])
def test_matches_the_oracle_over_several_steps(device, n):
    state = [t.to(device) for t in _state(n)]
    oracle = [t.clone().double() for t in _state(n)]
    lr = LR.to(device)
    for step in range(3):
        grad = state[4] * (1.0 + 0.5 * step)
        adam_rows(*state[:4], grad, lr)
        reference(*oracle[:4], oracle[4] * (1.0 + 0.5 * step), LR.double(), 0.9, 0.999, 1e-15)
    for name, got, want in zip(("params", "exp_avg", "exp_avg_sq", "steps"), state, oracle):
        err = (got.cpu().double() - want).abs().max().item()
        scale = want.abs().max().item() + 1e-12
        assert err <= 1e-5 * scale, (name, err, scale)


@pytest.mark.parametrize("device", DEVICES)
def test_untouched_rows_keep_everything_and_counts_are_per_row(device):
    params, m, v, steps, grad = (t.to(device) for t in _state(50, seed=3))
    before = [t.clone() for t in (params, m, v, steps)]
    adam_rows(params, m, v, steps, grad, LR.to(device))
    idle = (grad == 0).all(dim=1)
    assert idle.sum() == 10
    for got, old in zip((params, m, v, steps), before):
        assert torch.equal(got[idle], old[idle])
    assert torch.equal(steps[~idle], before[3][~idle] + 1)
    assert not torch.equal(params[~idle], before[0][~idle])


def test_first_step_moves_by_the_learning_rate():
    """Bias correction: a fresh row's first step is lr * sign(g) (|m/bc1| = |g| = sqrt(v/bc2))."""
    params, m, v, steps = torch.zeros(2, 8), torch.zeros(2, 8), torch.zeros(2, 8), torch.zeros(2)
    grad = torch.tensor([[1.0, -2.0, 0.5, 3.0, -1.0, 1.0, 1.0, -0.1], [0.0] * 8])
    adam_rows(params, m, v, steps, grad, LR)
    torch.testing.assert_close(params[0], -LR * grad[0].sign())
    assert torch.equal(params[1], torch.zeros(8)) and steps.tolist() == [1.0, 0.0]


def test_bad_shapes_are_refused():
    params, m, v, steps, grad = _state(4)
    with pytest.raises(ValueError, match="grad"):
        adam_rows(params, m, v, steps, grad[:, :7], LR)
    with pytest.raises(ValueError, match="lr"):
        adam_rows(params, m, v, steps, grad, LR[:4])
    with pytest.raises(ValueError, match="steps"):
        adam_rows(params, m, v, steps.double(), grad, LR)
