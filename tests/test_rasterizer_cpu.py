"""The CPU (C++/OpenMP) kernels against the reference: outputs, gradients, statistics."""
import pytest
import torch

import rasterizer
from rasterizer_scenes import adversarial_scenes, assert_grads_close, compare, random_scene, render

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


@pytest.mark.parametrize("which", [0, 1, 2])
def test_single_output_gradients(which):
    # one output at a time: the others get no gradient at all (None in the autograd Function);
    # depth alone exercises the in-kernel normalisation's backward, including its alpha path
    s = random_scene(300, 61, 45, seed=21)
    grads = []
    for backend in ("reference", "cpu"):
        ps = [s[k].clone().requires_grad_() for k in ("means", "radii", "colors", "opacities")]
        out = rasterizer.rasterize_spheres(*ps, s["K"], 61, 45, backend=backend)
        out[which].sum().backward()
        grads.append([p.grad if p.grad is not None else torch.zeros(p.shape) for p in ps])
    for name, x, y in zip(("means", "radii", "colors", "opacities"), *grads):
        assert_grads_close(y, x, name=f"output {which} grad {name}")


def test_depth_gradient_matches_reference_tightly():
    # the gradient of the normalised depth alone, on a scene without alpha cut-off flips
    s = random_scene(8, 40, 30, seed=11, opacity=(0.3, 0.6))
    g = torch.Generator().manual_seed(2)
    cot = torch.randn(30, 40, generator=g)
    grads = []
    for backend in ("reference", "cpu"):
        ps = [s[k].clone().requires_grad_() for k in ("means", "radii", "colors", "opacities")]
        out = rasterizer.rasterize_spheres(*ps, s["K"], 40, 30, backend=backend)
        (out.depth * cot).sum().backward()
        grads.append([p.grad if p.grad is not None else torch.zeros(p.shape) for p in ps])
    for x, y in zip(*grads):
        assert torch.allclose(y, x, rtol=1e-3, atol=1e-3 * x.abs().max().item())
    assert grads[1][0].abs().sum() > 0 and grads[1][1].abs().sum() > 0


def test_strided_and_absent_output_gradients_are_exact():
    # expanded gradients (loss = sum) are read through their strides: the same bits as
    # contiguous ones; an output outside the loss gives what a zero cotangent gives
    s = random_scene(150, 48, 36, seed=4)

    def grads(loss_fn):
        ps = [s[k].clone().requires_grad_() for k in ("means", "radii", "colors", "opacities")]
        out = rasterizer.rasterize_spheres(*ps, s["K"], 48, 36, backend="cpu")
        loss_fn(out).backward()
        return [p.grad for p in ps]

    a = grads(lambda o: o.color.sum() + o.depth.sum() + o.alpha.sum())
    b = grads(lambda o: sum((x * torch.ones_like(x)).sum() for x in o))
    c = grads(lambda o: (o.depth * 2.0).sum())
    d = grads(lambda o: (o.depth * 2.0).sum() + (o.color * 0.0).sum() + (o.alpha * 0.0).sum())
    for x, y in list(zip(a, b)) + list(zip(c, d)):
        assert torch.equal(x, y)


def test_one_code_path_for_both_extensions(monkeypatch):
    """functions.TiledRaster makes the same op calls for 'cpu' and 'cuda' (the kind only says which
    kernel libraries to load; torch picks the kernel by the tensors' device). Checked on the CPU
    with a stand-in for the 'cuda' ops that records its arguments and runs the CPU kernels:
    identical argument lists (types, shapes, strides) and bitwise identical results, also when only
    some outputs get a gradient."""
    import types

    from rasterizer import _ext
    from rasterizer import functions as F

    cpu = _ext.ops("cpu")
    calls = {"cpu": [], "cuda": []}

    def recorder(kind, fn):
        def call(*args):
            calls[kind].append([(type(a).__name__, tuple(a.shape), a.stride(), a.dtype)
                                if isinstance(a, torch.Tensor) else a for a in args])
            return fn(*args)
        return call

    stand_ins = {kind: types.SimpleNamespace(forward=recorder(kind, cpu.forward), backward=recorder(kind, cpu.backward))
                 for kind in ("cpu", "cuda")}
    monkeypatch.setattr(_ext, "ops", lambda kind="cpu": stand_ins[kind])

    def run(scene, kind, use):
        ps = [scene[k].clone().requires_grad_() for k in ("means", "radii", "colors", "opacities")]
        stats = rasterizer.SphereStats(ps[0].shape[0])
        outs = F.tiled(kind, *ps, scene["K"], scene["width"], scene["height"],
                       torch.tensor([0.1, 0.2, 0.3]), stats)
        g = torch.Generator().manual_seed(1)
        stats.pixel_error = torch.rand(outs[2].shape, generator=g)
        sum((outs[i] * torch.randn(outs[i].shape, generator=g)).sum() for i in use).backward()
        return [o.detach() for o in outs] + [p.grad for p in ps] + [stats.weight_sum,
                                                                    stats.error_sum, stats.count]

    scenes = [random_scene(150, 48, 36, seed=4), ADV["huge_and_subpixel"], ADV["dense_opaque"]]
    for s in scenes:
        for use in ((0, 1, 2), (1,), (2,), (0, 1)):
            for x, y in zip(run(s, "cpu", use), run(s, "cuda", use)):
                assert torch.equal(x, y)
    assert calls["cpu"] == calls["cuda"] and len(calls["cpu"]) == 2 * 3 * 4


def _pair_count(scene, device="cpu") -> int:
    """M of ``scene``'s exact binning, from the forward op itself."""
    from rasterizer import _ext
    from rasterizer.functions import _camera
    ps = [scene[k].to(device) for k in ("means", "radii", "colors", "opacities")]
    out = _ext.ops("cuda" if device == "cuda" else "cpu").forward(
        *ps, torch.zeros(3, device=device), *_camera(scene["K"]), scene["width"], scene["height"], 1e-6)
    return int(out[4].shape[0])


def test_a_pair_room_records_the_pair_count_and_the_cpu_still_bins_exactly():
    s = random_scene(200, 48, 36, seed=4)
    m = _pair_count(s)
    exact = render(s, "cpu")
    room = rasterizer.PairRoom("cpu")
    recorded = render(s, "cpu", pair_room=room)
    assert room.read() == (m, False) and m > 200
    for a, b in zip(exact, recorded):
        for x, y in zip(a, b):
            assert torch.equal(x, y)
    small = rasterizer.PairRoom("cpu", capacity=m - 1)
    render(s, "cpu", pair_room=small)
    assert small.read() == (m, True)
    assert small.reset().read() == (0, False)


def test_a_pair_room_is_refused_where_it_means_nothing():
    s = random_scene(10, 24, 18, seed=1)
    with pytest.raises(NotImplementedError, match="pair_room"):
        render(s, "reference", pair_room=rasterizer.PairRoom("cpu"))
    with pytest.raises(ValueError, match="capacity"):
        rasterizer.PairRoom("cpu", capacity=0)
    with pytest.raises(TypeError, match="PairRoom"):
        render(s, "cpu", pair_room=object())
