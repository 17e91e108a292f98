"""The pure-PyTorch reference rasterizer: gradcheck, basic properties, API validation."""
import re
from pathlib import Path

import pytest
import torch

import rasterizer
from rasterizer import _model
from rasterizer_scenes import intrinsics, random_scene

BG = torch.tensor([0.1, 0.2, 0.3])


def one_sphere(z=2.0, o=1.0, r=0.2, color=(1.0, 0.0, 0.0), w=21, h=15, x=0.0, y=0.0):
    return (torch.tensor([[x, y, z]]), torch.tensor([r]), torch.tensor([color]),
            torch.tensor([o]), intrinsics(w, h), w, h)


def test_constants_match_cpp_header():
    text = (Path(rasterizer.__file__).parent / "csrc" / "sphere_math.h").read_text()
    def const(name):
        m = re.search(rf"constexpr (?:float|int) {name} = ([^;]+);", text)
        return eval(m.group(1).replace("f", "").replace("1.0 / 255.0", "1/255"))
    assert const("kNear") == pytest.approx(_model.NEAR)
    assert const("kFar") == pytest.approx(_model.FAR)
    assert const("kLowPass") == pytest.approx(_model.LOW_PASS)
    assert const("kAlphaMax") == pytest.approx(_model.ALPHA_MAX)
    assert const("kAlphaMin") == pytest.approx(_model.ALPHA_MIN)
    assert const("kTMin") == pytest.approx(_model.T_MIN)
    assert const("kCutoffQ") == pytest.approx(_model.CUTOFF_Q)
    assert const("kTile") == _model.TILE


def test_gradcheck_float64():
    s = random_scene(5, 9, 7, seed=3, opacity=(0.2, 0.7), r=(0.08, 0.2))
    K = s["K"].double()
    inputs = [s[k].double().requires_grad_() for k in ("means", "radii", "colors", "opacities")]

    def f(m, r, c, o):
        out = rasterizer.rasterize_spheres(m, r, c, o, K, 9, 7, background=BG.double(),
                                           backend="reference")
        return out.color, out.depth, out.alpha

    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)


def test_empty_scene_gives_background():
    out = rasterizer.rasterize_spheres(torch.zeros(0, 3), torch.zeros(0), torch.zeros(0, 3),
                                       torch.zeros(0), intrinsics(8, 6), 8, 6, background=BG,
                                       backend="reference")
    assert out.color.shape == (6, 8, 3) and out.depth.shape == (6, 8)
    assert torch.equal(out.color, BG.expand(6, 8, 3))
    assert (out.alpha == 0).all() and (out.depth == 0).all()


def test_one_opaque_sphere_at_centre():
    m, r, c, o, K, w, h = one_sphere(z=2.0, o=1.0)
    out = rasterizer.rasterize_spheres(m, r, c, o, K, w, h, background=BG, backend="reference")
    cy, cx = (h - 1) // 2, (w - 1) // 2
    assert out.alpha[cy, cx].item() == pytest.approx(_model.ALPHA_MAX)
    expect = 0.99 * c[0] + 0.01 * BG
    assert torch.allclose(out.color[cy, cx], expect, atol=1e-6)
    assert out.depth[cy, cx].item() == pytest.approx(2.0, rel=1e-6)
    # symmetric footprint, decaying away from the centre
    assert out.alpha[cy, cx + 3] == pytest.approx(out.alpha[cy, cx - 3].item(), rel=1e-5)
    assert out.alpha[cy, cx + 3] < out.alpha[cy, cx + 1]


def test_front_sphere_wins_regardless_of_index():
    K = intrinsics(15, 15)
    means = torch.tensor([[0.0, 0.0, 3.0], [0.0, 0.0, 1.5]])
    colors = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    radii = torch.tensor([0.3, 0.15])
    opac = torch.tensor([0.9, 0.6])
    out = rasterizer.rasterize_spheres(means, radii, colors, opac, K, 15, 15, backend="reference")
    rev = rasterizer.rasterize_spheres(means.flip(0), radii.flip(0), colors.flip(0), opac.flip(0),
                                       K, 15, 15, backend="reference")
    assert torch.allclose(out.color, rev.color, atol=1e-6)
    px = out.color[7, 7]
    a_front = 0.6
    a_back = min(0.99, 0.9)
    assert px[0].item() == pytest.approx(a_front, rel=1e-5)
    assert px[1].item() == pytest.approx((1 - a_front) * a_back, rel=1e-5)
    d = (a_front * 1.5 + (1 - a_front) * a_back * 3.0) / (a_front + (1 - a_front) * a_back)
    assert out.depth[7, 7].item() == pytest.approx(d, rel=1e-5)


@pytest.mark.parametrize("z", [-2.0, 0.0, 0.005, 0.01, 100.5])
def test_culled_depths_render_nothing(z):
    m, r, c, o, K, w, h = one_sphere(z=z, r=0.01)
    out = rasterizer.rasterize_spheres(m, r, c, o, K, w, h, background=BG, backend="reference")
    assert (out.alpha == 0).all()


def test_near_plane_just_inside_renders():
    m, r, c, o, K, w, h = one_sphere(z=0.0101, r=0.0005)
    out = rasterizer.rasterize_spheres(m, r, c, o, K, w, h, backend="reference")
    assert out.alpha.max() > 0.5


def test_stats_weight_sum_equals_alpha_sum_and_accumulates():
    s = random_scene(20, 24, 18, seed=4)
    ps = [s[k].clone().requires_grad_() for k in ("means", "radii", "colors", "opacities")]
    stats = rasterizer.SphereStats(20)
    for i in range(2):
        out = rasterizer.rasterize_spheres(*ps, s["K"], 24, 18, backend="reference", stats=stats)
        stats.pixel_error = torch.ones(18, 24)
        out.color.sum().backward()
        assert stats.weight_sum.sum().item() == pytest.approx((i + 1) * out.alpha.sum().item(),
                                                              rel=1e-4)
    assert torch.allclose(stats.error_sum, stats.weight_sum, rtol=1e-5)
    assert stats.count.sum() > 0
    stats.zero_()
    assert stats.weight_sum.abs().sum() == 0


@pytest.mark.parametrize("kwargs, err", [
    (dict(means=torch.zeros(2, 2)), ValueError),
    (dict(radii=torch.ones(3)), ValueError),
    (dict(K=torch.eye(4)), ValueError),
    (dict(width=0), ValueError),
    (dict(height=-3), ValueError),
    (dict(colors=torch.ones(2, 3, dtype=torch.float64)), TypeError),
    (dict(backend="vulkan"), ValueError),
    (dict(background=torch.ones(4)), ValueError),
])
def test_validation(kwargs, err):
    args = dict(means=torch.ones(2, 3), radii=torch.ones(2), colors=torch.ones(2, 3),
                opacities=torch.ones(2), K=torch.eye(3), width=4, height=3, backend="reference")
    args.update(kwargs)
    with pytest.raises(err):
        rasterizer.rasterize_spheres(**args)


def test_float64_only_for_reference():
    with pytest.raises(TypeError):
        rasterizer.rasterize_spheres(torch.ones(1, 3).double(), torch.ones(1).double(),
                                     torch.ones(1, 3).double(), torch.ones(1).double(),
                                     torch.eye(3), 4, 3, backend="cpu")
