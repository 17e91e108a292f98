"""SphereMap: add/remove/budget/chunked growth/optimiser-state consistency/snapshots/PLY."""
import numpy as np
import pytest
import torch

from slam.map.map_io import MapFormatError, load_map_rows, save_map
from slam.map.sphere_map import COLOR, LOG_RADIUS, MEANS, OPACITY, PARAM_DIM, SphereMap, activate, bytes_per_sphere


def spheres(n, offset=0.0):
    g = torch.Generator().manual_seed(int(offset * 100) + n)
    means = torch.rand(n, 3, generator=g) + offset
    radii = torch.full((n,), 0.01) + 0.001 * torch.arange(n)
    colors = torch.rand(n, 3, generator=g) * 0.8 + 0.1
    opac = torch.full((n,), 0.7)
    return means, radii, colors, opac


def test_add_grows_in_chunks_and_activates_exactly():
    m = SphereMap(chunk=8)
    means, radii, colors, opac = spheres(10)
    assert m.add(means, radii, colors, opac) == 10
    assert m.n == 10 and m.capacity == 16
    mu, r, c, o = m.activated()
    assert torch.allclose(mu, means) and torch.allclose(r, radii, rtol=1e-6)
    assert torch.allclose(c, colors, atol=1e-5) and torch.allclose(o, opac, atol=1e-5)
    m.add(*spheres(7, 1.0))
    assert m.n == 17 and m.capacity == 24


def test_budget_is_never_exceeded():
    m = SphereMap(max_spheres=12, chunk=5)
    assert m.add(*spheres(10)) == 10
    assert m.add(*spheres(10, 2.0)) == 2          # only what fits, in priority order
    assert m.n == 12 and m.capacity == 12
    assert m.add(*spheres(3)) == 0
    mb_map = SphereMap(max_mb=50 * bytes_per_sphere() / 1e6)
    assert mb_map.budget == 50


def test_remove_compacts_params_and_optimizer_state_together():
    m = SphereMap(chunk=4)
    m.add(*spheres(6))
    grad = torch.zeros(m.capacity, PARAM_DIM)
    grad[:6] = torch.arange(6, dtype=torch.float32)[:, None] + 1
    m.adam_step(grad, torch.full((PARAM_DIM,), 1e-3))
    before_params = m.active().clone()
    before_m = m.exp_avg[:6].clone()
    m.stats["contribution"][:6] = torch.arange(6, dtype=torch.float32)
    mask = torch.tensor([True, False, True, False, False, True])
    assert m.remove(mask) == 3
    keep = torch.tensor([1, 3, 4])
    assert torch.equal(m.active(), before_params[keep])
    assert torch.equal(m.exp_avg[:3], before_m[keep])
    assert torch.equal(m.stats["contribution"][:3], keep.float())
    assert torch.all(m.params[3:6] == 0) and torch.all(m.exp_avg[3:6] == 0)


def test_adam_moves_only_touched_rows_with_per_row_bias_correction():
    m = SphereMap()
    lr = torch.tensor([0.1] * 3 + [5e-3] * 4 + [5e-2])
    m.add(*spheres(3))
    start = m.active().clone()
    grad = torch.zeros(3, PARAM_DIM)
    grad[1, 0] = 5.0
    m.adam_step(grad, lr)
    delta = m.active() - start
    assert delta[0].abs().sum() == 0 and delta[2].abs().sum() == 0
    # Adam's first step is lr * sign(grad) whatever the gradient's size.
    assert delta[1, 0].item() == pytest.approx(-0.1, rel=1e-4)
    assert m.steps[:3].tolist() == [0, 1, 0]


def test_snapshot_is_detached_copy_and_versions_increase():
    m = SphereMap()
    m.add(*spheres(4))
    s1 = m.publish()
    m.params[:4, 0] += 1.0  # the mapper keeps optimising
    assert not torch.allclose(s1.means[:, 0], m.active()[:, 0])
    s2 = m.publish()
    assert s2.version == s1.version + 1 and m.latest() is s2
    assert not s1.means.requires_grad


def test_ply_round_trip(tmp_path):
    m = SphereMap()
    m.add(*spheres(50))
    path = tmp_path / "map.ply"
    save_map(path, m.active())
    rows = load_map_rows(path)
    assert rows.shape == (50, PARAM_DIM)
    assert torch.equal(rows[:, :4], m.active()[:, :4])      # means, log radius: bit-exact
    assert torch.equal(rows[:, 7], m.active()[:, 7])        # opacity logit: bit-exact
    assert torch.allclose(torch.sigmoid(rows[:, 4:7]), torch.sigmoid(m.active()[:, 4:7]), atol=1e-6)
    from plyfile import PlyData
    names = PlyData.read(str(path))["vertex"].data.dtype.names
    for f in ["x", "f_dc_0", "opacity", "scale_2", "rot_3"]:
        assert f in names


def test_ply_bad_inputs(tmp_path):
    from plyfile import PlyData, PlyElement
    m = SphereMap()
    m.add(*spheres(20))
    good = tmp_path / "good.ply"
    save_map(good, m.active())
    truncated = tmp_path / "trunc.ply"
    truncated.write_bytes(good.read_bytes()[:-100])
    with pytest.raises(MapFormatError, match="trunc.ply"):
        load_map_rows(truncated)
    data = PlyData.read(str(good))["vertex"].data.copy()
    data["scale_1"] += 0.5
    aniso = tmp_path / "aniso.ply"
    PlyData([PlyElement.describe(data, "vertex")]).write(str(aniso))
    with pytest.raises(MapFormatError, match="anisotropic"):
        load_map_rows(aniso)
    pts = np.zeros(3, dtype=[("x", "f4"), ("y", "f4"), ("z", "f4")])
    cloud = tmp_path / "cloud.ply"
    PlyData([PlyElement.describe(pts, "vertex")]).write(str(cloud))
    with pytest.raises(MapFormatError, match="missing fields"):
        load_map_rows(cloud)
    with pytest.raises(FileNotFoundError):
        load_map_rows(tmp_path / "none.ply")


def test_frozen_rows_are_never_optimised_removed_or_cut_for_budget():
    """localize mode: the saved map's rows stay bit-exact under Adam, pruning and make_room."""
    from slam.config import PrunerConfig
    from slam.mapping.pruner import Pruner

    m = SphereMap(max_spheres=10, chunk=4)
    m.add(*spheres(4))
    m.frozen = 4
    m.add(*spheres(3, 1.0))
    saved = m.params[:4].clone()
    m.adam_step(torch.ones(m.n, PARAM_DIM), torch.full((PARAM_DIM,), 1e-3))
    assert torch.equal(m.params[:4], saved)
    assert not torch.equal(m.params[4:7], m.params[4:7].detach() * 0)  # the local rows moved
    assert m.steps[:4].tolist() == [0, 0, 0, 0] and m.steps[4:7].tolist() == [1, 1, 1]
    assert m.remove(torch.tensor([True, True, False, False, True, False, False])) == 1
    assert m.n == 6 and torch.equal(m.params[:4], saved)
    m.stats["age"][: m.n] = 1
    assert Pruner(PrunerConfig()).make_room(m, incoming=9) == 2        # only the 2 local rows can go
    assert m.n == 4 and torch.equal(m.params[:4], saved)


def _autograd_activate(rows):
    return rows[:, MEANS], torch.exp(rows[:, LOG_RADIUS]), torch.sigmoid(rows[:, COLOR]), torch.sigmoid(rows[:, OPACITY])


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
@pytest.mark.parametrize("used", [(0, 1, 2, 3), (1, 2), (0,), (3,)])
def test_activate_gradient_equals_autograds_own(used, device):
    """activate's kernels (rasterizer.activate_rows both ways) give autograd's values, with every
    output or only some of them reaching the loss (the others' gradients absent): to the bit on the
    CPU (its radius from PyTorch's own exp); on CUDA the radius and its gradient column within one
    unit in the last place."""
    rows = torch.randn(257, PARAM_DIM, generator=torch.Generator().manual_seed(len(used))).to(device)
    weights = [torch.randn(o.shape, generator=torch.Generator().manual_seed(i)).to(device)
               for i, o in enumerate(_autograd_activate(rows))]

    def grad_of(fn):
        leaf = rows.clone().requires_grad_(True)
        outs = fn(leaf)
        loss = sum((outs[i] * weights[i]).sum() for i in used)
        return outs, torch.autograd.grad(loss, leaf)[0]

    got, g = grad_of(activate)
    want, w = grad_of(_autograd_activate)
    ulp = 0.0 if device == "cpu" else 1.2e-7
    for k, (a, b) in enumerate(zip(got, want)):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=ulp if k == 1 else 0.0, atol=0.0)
    torch.testing.assert_close(g[:, LOG_RADIUS], w[:, LOG_RADIUS], rtol=2 * ulp, atol=0.0)
    others = [c for c in range(PARAM_DIM) if c != LOG_RADIUS]
    assert torch.equal(g[:, others], w[:, others])


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_activate_in_a_camera_frame_equals_the_transform_after_it(device):
    """activate(rows, T_cw) (the mapper's step: the move to the camera in the activation's kernels)
    gives the means and the rows' gradient of activate then slam.geometry.transform_points: to the
    bit on the CPU, within rounding on CUDA (its products are not fused either; its sums' order
    may differ from PyTorch's reduction)."""
    from slam.geometry import transform_points
    rows = torch.randn(300, PARAM_DIM, generator=torch.Generator().manual_seed(5)).to(device)
    T = torch.eye(4)
    T[:3, :3] = torch.tensor([[0.36, 0.48, -0.8], [-0.8, 0.6, 0.0], [0.48, 0.64, 0.6]])
    T[:3, 3] = torch.tensor([0.2, -0.5, 1.5])
    T = T.to(device)
    weights = [torch.randn(k, generator=torch.Generator().manual_seed(9)).to(device) for k in [(300, 3), (300,)]]

    def grad_of(fn):
        leaf = rows.clone().requires_grad_(True)
        means, radii, _, _ = fn(leaf)
        loss = (means * weights[0]).sum() + (radii * weights[1]).sum()
        return means.detach(), torch.autograd.grad(loss, leaf)[0]

    got = grad_of(lambda r: activate(r, T))
    want = grad_of(lambda r: (lambda m, *rest: (transform_points(T, m), *rest))(*activate(r)))
    tol = 0.0 if device == "cpu" else 2e-6
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0.0, atol=tol)


def test_activate_without_gradients_makes_no_graph():
    rows = torch.randn(5, PARAM_DIM)
    assert all(t.grad_fn is None for t in activate(rows))
    with torch.no_grad():
        assert all(t.grad_fn is None for t in activate(rows.requires_grad_(True)))


def test_mapper_refuses_a_render_backend_without_loss_and_adam_kernels():
    from slam.config import MappingConfig, PrunerConfig
    from slam.mapping.keyframes import KeyframeStore
    from slam.mapping.mapper import Mapper
    with pytest.raises(ValueError, match="gsplat"):
        Mapper(MappingConfig(), PrunerConfig(), SphereMap(), KeyframeStore(4), backend="gsplat")
    assert Mapper(MappingConfig(), PrunerConfig(), SphereMap(), KeyframeStore(4), backend="reference").backend == "reference"
