"""The CPU (C++/OpenMP) kernels against the reference: outputs, gradients, statistics."""
import pytest
import torch

import rasterizer
from rasterizer_scenes import adversarial_scenes, compare, random_scene, render

ADV = adversarial_scenes()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_scene_matches_reference(seed):
    compare(random_scene(60, 48, 36, seed=seed), "reference", "cpu")


@pytest.mark.parametrize("name", sorted(ADV))
def test_adversarial_scene_matches_reference(name):
    compare(ADV[name], "reference", "cpu")


def test_tight_elementwise_on_well_separated_scene():
    # few, mid-opacity spheres: no alpha cut-off flips, so outputs agree to float rounding
    s = random_scene(8, 40, 30, seed=11, opacity=(0.3, 0.6))
    (oa, ga, sa), (ob, gb, sb) = render(s, "reference"), render(s, "cpu")
    for x, y in zip(oa + sa, ob + sb):
        assert torch.allclose(x, y, rtol=1e-4, atol=1e-5)
    for x, y in zip(ga, gb):
        assert torch.allclose(x, y, rtol=1e-3, atol=1e-3 * y.abs().max().item())


def test_deterministic_across_runs_and_threads():
    s = random_scene(200, 64, 48, seed=3)
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = render(s, "cpu")
        torch.set_num_threads(max(2, n))
        b = render(s, "cpu")
    finally:
        torch.set_num_threads(n)
    for x, y in zip(sum(a, []), sum(b, [])):
        assert torch.equal(x, y)


def test_auto_backend_is_cpu_for_cpu_tensors():
    s = random_scene(10, 20, 16)
    args = [s[k] for k in ("means", "radii", "colors", "opacities")] + [s["K"], 20, 16]
    a = rasterizer.rasterize_spheres(*args)
    b = rasterizer.rasterize_spheres(*args, backend="cpu")
    assert torch.equal(a.color, b.color) and torch.equal(a.depth, b.depth)


def test_gradient_reaches_pose_through_means():
    s = random_scene(30, 32, 24, seed=6)
    t = torch.zeros(3, requires_grad=True)
    out = rasterizer.rasterize_spheres(s["means"] + t, s["radii"], s["colors"], s["opacities"],
                                       s["K"], 32, 24, backend="cpu")
    (out.color.sum() + out.depth.sum()).backward()
    assert torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0


def test_no_stats_and_no_pixel_error():
    s = random_scene(20, 24, 18, seed=2)
    _, _, st = render(s, "cpu", pixel_error=False)
    assert st[1].abs().sum() == 0 and st[0].sum() > 0


def test_aot_extensions_description():
    # setup.py loads rasterizer/_build.py with runpy (without importing the package)
    import runpy
    from pathlib import Path

    build = Path(rasterizer.__file__).parent / "_build.py"
    exts, cmdclass = runpy.run_path(str(build))["aot_extensions"]()
    names = [e.name for e in exts]
    assert "rasterizer._sphere_raster_cpu" in names and "build_ext" in cmdclass
    if torch.version.cuda is None:
        assert "rasterizer._sphere_raster_cuda" not in names
    root = build.parent.parent
    for e in exts:
        assert all((root / s).is_file() for s in e.sources), e.sources


def test_clear_error_without_compiler(monkeypatch):
    from rasterizer import _build

    monkeypatch.setenv("CXX", "no-such-compiler-xyz")
    with pytest.raises(RuntimeError, match="no C\\+\\+ compiler"):
        _build.load_jit("cpu")


def test_fused_depth_normalisation_wiring(monkeypatch):
    """The CUDA path (functions.TiledRaster with kind 'cuda') takes the normalised depth from the
    kernels and its gradient straight to them; NormalizeDepth.apply passes such a depth through.
    Checked on the CPU with a stand-in 'cuda' module that does the normalisation with the same
    PyTorch ops as NormalizeDepth: outputs, gradients and statistics must be bitwise those of
    the 'cpu' path (kernels + NormalizeDepth), also when only some outputs get a gradient."""
    import types

    from rasterizer import _ext
    from rasterizer import functions as F
    from rasterizer._model import DEPTH_EPS

    cpu = _ext.get("cpu")
    splats = {}

    def forward(means, radii, colors, opac, bg, fx, fy, cx, cy, w, h, eps):
        color, dacc, alpha, last, sp, ids, ranges = cpu.forward(means, radii, colors, opac, bg,
                                                                fx, fy, cx, cy, w, h)
        splats["last"] = sp
        return [color, dacc / alpha.clamp_min(eps), alpha, last, ids, ranges]

    def backward(means, radii, colors, opac, bg, fx, fy, cx, cy, w, h, eps, ids, ranges, alpha,
                 depth, last, g_color, g_depth, g_alpha, err, sw, se, sn):
        g_dacc = g_depth / alpha.clamp_min(eps)
        g_alpha = g_alpha + torch.mul(g_dacc, depth).neg_()
        return cpu.backward(means, radii, colors, opac, bg, fx, fy, cx, cy, w, h, splats["last"],
                            ids, ranges, alpha, last, g_color.contiguous(), g_dacc.contiguous(),
                            g_alpha.contiguous(), err, sw, se, sn)

    monkeypatch.setitem(_ext._modules, "cuda", types.SimpleNamespace(forward=forward,
                                                                     backward=backward))

    def run(scene, kind, use):
        ps = [scene[k].clone().requires_grad_() for k in ("means", "radii", "colors", "opacities")]
        stats = rasterizer.SphereStats(ps[0].shape[0])
        color, d, alpha = F.tiled(kind, *ps, scene["K"], scene["width"], scene["height"],
                                  torch.tensor([0.1, 0.2, 0.3]), stats)
        depth = F.NormalizeDepth.apply(d, alpha, DEPTH_EPS)
        assert (depth is d) == (kind == "cuda")
        outs = (color, depth, alpha)
        g = torch.Generator().manual_seed(1)
        stats.pixel_error = torch.rand(alpha.shape, generator=g)
        sum((outs[i] * torch.randn(outs[i].shape, generator=g)).sum() for i in use).backward()
        return [o.detach() for o in outs] + [p.grad for p in ps] + [stats.weight_sum,
                                                                    stats.error_sum, stats.count]

    scenes = [random_scene(150, 48, 36, seed=4), ADV["huge_and_subpixel"], ADV["dense_opaque"]]
    for s in scenes:
        for use in ((0, 1, 2), (1,), (2,), (0, 1)):
            for x, y in zip(run(s, "cpu", use), run(s, "cuda", use)):
                assert torch.equal(x, y)
    # another alpha or eps is not passed through
    _, d, alpha = F.tiled("cuda", *(scenes[0][k] for k in ("means", "radii", "colors",
                                                           "opacities")),
                          scenes[0]["K"], 48, 36, torch.zeros(3), None)
    assert F.NormalizeDepth.apply(d, alpha, DEPTH_EPS) is d
    assert F.NormalizeDepth.apply(d, alpha.clone(), DEPTH_EPS) is not d
    assert F.NormalizeDepth.apply(d, alpha, 2 * DEPTH_EPS) is not d
