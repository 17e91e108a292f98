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


def _pose(seed: int = 2) -> torch.Tensor:
    """A world-to-camera pose: a rotation about an oblique axis and a translation."""
    g = torch.Generator().manual_seed(seed)
    axis = torch.nn.functional.normalize(torch.randn(3, generator=g), dim=0)
    k = torch.tensor([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    T = torch.eye(4)
    T[:3, :3] = torch.linalg.matrix_exp(1.1 * k)
    T[:3, 3] = torch.tensor([0.4, -1.3, 2.2])
    return T


@pytest.mark.parametrize("device", DEVICES)
def test_a_pose_moves_the_means_as_transform_points_does(device):
    """With T_cw the means are R xyz + t: on the CPU bit for bit the PyTorch expression the mapper
    used (slam.geometry.transform_points, so CPU runs keep their figures), on CUDA within rounding;
    the other outputs do not change."""
    from slam.geometry import transform_points
    rows, T = _rows(20_000).to(device), _pose().to(device)
    got = activate_rows(rows, T)
    plain = activate_rows(rows)
    want = transform_points(T, rows[:, :3])
    if device == "cpu":
        assert torch.equal(got[0], want)
    else:
        torch.testing.assert_close(got[0], want, rtol=0.0, atol=2e-6)
    torch.testing.assert_close(got[0], reference(rows, T)[0], rtol=0.0, atol=0.0 if device == "cpu" else 2e-6)
    for a, b in zip(got[1:], plain[1:]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_a_pose_turns_the_means_gradient_back(device):
    """g_xyz = R^T g_means: on the CPU bit for bit autograd's gradient through transform_points."""
    from slam.geometry import transform_points
    n = 5000
    rows, T = _rows(n).to(device), _pose().to(device)
    _, radii, colors, opacities = reference(rows)
    grads = [g.to(device) for g in _grads(n)]
    got = activate_rows_backward(*grads, radii, colors, opacities, T)
    xyz = rows[:, :3].clone().requires_grad_(True)
    (want_xyz,) = torch.autograd.grad(transform_points(T, xyz), xyz, grads[0])
    tol = 0.0 if device == "cpu" else 2e-6
    torch.testing.assert_close(got[:, :3], want_xyz, rtol=0.0, atol=tol)
    torch.testing.assert_close(got, reference_backward(*grads, radii, colors, opacities, T), rtol=0.0, atol=tol)
    plain = activate_rows_backward(*grads, radii, colors, opacities)
    assert torch.equal(got[:, 3:], plain[:, 3:])
    absent = activate_rows_backward(None, *grads[1:], radii, colors, opacities, T)
    assert torch.equal(absent[:, :3], torch.zeros(n, 3, device=device))


def test_bad_poses_are_refused():
    rows = _rows(4)
    with pytest.raises(ValueError, match=r"T_cw must be \(4, 4\)"):
        activate_rows(rows, torch.eye(3))
    with pytest.raises(ValueError, match="no gradient"):
        activate_rows(rows, torch.eye(4).requires_grad_(True))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [0, 1, 20_000])
def test_transform_means_is_the_activation_s_move(device, n):
    """transform_means (a published snapshot's world means to a camera): on the CPU bit for bit
    slam.geometry.transform_points, on CUDA the activation's own move of the same points (its
    kernel's sums) to the bit and transform_points within rounding."""
    from rasterizer import transform_means
    from slam.geometry import transform_points
    rows, T = _rows(n).to(device), _pose().to(device)
    pts = rows[:, :3].contiguous()
    got = transform_means(pts, T)
    assert got.shape == (n, 3) and got.device == pts.device
    assert torch.equal(got, activate_rows(rows, T)[0])
    if device == "cpu":
        assert torch.equal(got, transform_points(T, pts))
    else:
        torch.testing.assert_close(got, transform_points(T, pts), rtol=0.0, atol=2e-6)
    torch.testing.assert_close(got, transform_means(pts.double(), T.double(), backend="reference").float(),
                               rtol=0.0, atol=2e-6)


def test_transform_means_refuses_bad_inputs():
    from rasterizer import transform_means
    with pytest.raises(ValueError, match=r"means must be \(N, 3\)"):
        transform_means(torch.zeros(4, 2), torch.eye(4))
    with pytest.raises(ValueError, match=r"T_cw must be \(4, 4\)"):
        transform_means(torch.zeros(4, 3), torch.eye(3))
    with pytest.raises(ValueError, match="needs a"):
        transform_means(torch.zeros(4, 3), None)
