"""The CUDA kernels against the reference and the CPU kernels, and loosely against gsplat.

Skipped without CUDA (CI); run on a GPU machine with scripts/gpu_check.sh.
"""
import pytest
import torch

import rasterizer
from rasterizer_scenes import adversarial_scenes, assert_grads_close, compare, cosine, random_scene, rel_l2, render

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="CUDA is not available: the CUDA rasterizer tests need a GPU (scripts/gpu_check.sh)")

ADV = adversarial_scenes()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_scene_matches_reference(seed):
    compare(random_scene(60, 48, 36, seed=seed), "reference", "cuda", "cpu", "cuda")


@pytest.mark.parametrize("name", sorted(ADV))
def test_adversarial_scene_matches_reference(name):
    compare(ADV[name], "reference", "cuda", "cpu", "cuda")


@pytest.mark.parametrize("n, w, h", [(2000, 160, 120), (3000, 203, 97)])
def test_larger_scene_matches_cpu(n, w, h):
    compare(random_scene(n, w, h, seed=n), "cpu", "cuda", "cpu", "cuda")


def test_many_tiles():
    # > 65536 tiles: the tile scan's block takes 65 tiles a thread
    s = random_scene(300, 16 * 300, 16 * 220, seed=12, r=(0.005, 0.05))
    compare(s, "cpu", "cuda", "cpu", "cuda")


@pytest.mark.parametrize("n, every_tile", [(100, True), (512, True), (513, True), (2500, False),
                                            (4096, True), (9000, False)])
def test_long_tile_lists(n, every_tile):
    # n spheres over 2 x 2 tiles. Every sphere in every tile: all four lists exactly n long, on each
    # side of the sorts' limits (the small block's 512 keys, the large block's radix sort's
    # 4,096); else lists of ~2,500 (radix-sorted, padded) and ~9,000 (radix-sorted runs of 4,096
    # and a bitonic-sorted rest merged in global memory)
    s = random_scene(n, 32, 32, seed=n, r=(0.05, 0.3), opacity=(0.01, 0.05))
    if every_tile:
        s["means"][:, :2] = 0.0
        s["radii"][:] = 0.5
    compare(s, "cpu", "cuda", "cpu", "cuda")


@pytest.mark.parametrize("opacity", [(0.01, 0.05), (0.6, 1.0)], ids=["translucent", "opaque"])
def test_backward_in_parts_equals_one_walk(opacity, monkeypatch):
    """Each tile's list replayed in 1, 2 or 4 parts at once (SPHERE_RENDER_PARTS; raster_cuda.cu
    parts_for), each from the state the forward saved where the part behind it begins, gives the
    CPU kernel's gradients and statistics: translucent spheres leave transmittance for the back of
    long lists (every part counts), opaque ones stop the pixels part-way (the parts behind a stop
    must add nothing). Long lists over 12 tiles, and one tile of 5 spheres (a part left empty)."""
    s = random_scene(3000, 64, 48, seed=31, r=(0.05, 0.3), opacity=opacity)
    for k in ("1", "2", "4"):
        monkeypatch.setenv("SPHERE_RENDER_PARTS", k)
        compare(s, "cpu", "cuda", "cpu", "cuda")
        compare(random_scene(5, 16, 16, seed=32, opacity=opacity), "cpu", "cuda", "cpu", "cuda")


def test_all_spheres_culled():
    # N > 0 but no (tile, sphere) pair: behind the camera, beyond the far plane, off-screen
    s = random_scene(6, 24, 18, seed=5)
    m = s["means"].clone()
    m[0:2, 2] = -1.0
    m[2:4, 2] = 150.0
    m[4:6, 0] = 50.0 * m[4:6, 2]
    s["means"] = m
    oa, _, _ = compare(s, "reference", "cuda", "cpu", "cuda")
    assert (oa[2] == 0).all()


@pytest.mark.parametrize("which", [0, 1, 2])
def test_single_output_gradients(which):
    # gradients of one output at a time: the others get no gradient at all (None in the autograd
    # Function); depth alone exercises the in-kernel normalisation's backward and its alpha path
    s = random_scene(300, 61, 45, seed=21)
    grads = []
    for backend, device in (("reference", "cpu"), ("cuda", "cuda")):
        ps = [s[k].to(device).clone().requires_grad_() for k in
              ("means", "radii", "colors", "opacities")]
        out = rasterizer.rasterize_spheres(*ps, s["K"], 61, 45, backend=backend)
        out[which].sum().backward()
        grads.append([p.grad.cpu() if p.grad is not None else torch.zeros(p.shape) for p in ps])
    for name, x, y in zip(("means", "radii", "colors", "opacities"), *grads):
        assert_grads_close(y, x, name=f"output {which} grad {name}")


def test_strided_and_absent_output_gradients():
    # expanded gradients (loss = sum) are read through their strides; an output outside the loss
    # gives what a zero cotangent gives (up to the order of the atomic additions)
    s = random_scene(400, 64, 48, seed=4)

    def grads(loss_fn):
        ps = [s[k].cuda().requires_grad_() for k in ("means", "radii", "colors", "opacities")]
        out = rasterizer.rasterize_spheres(*ps, s["K"], 64, 48, backend="cuda")
        loss_fn(out).backward()
        return [p.grad.cpu() for p in ps]

    a = grads(lambda o: o.color.sum() + o.depth.sum() + o.alpha.sum())
    b = grads(lambda o: sum((x * torch.ones_like(x)).sum() for x in o))
    c = grads(lambda o: (o.depth * 2.0).sum())
    d = grads(lambda o: (o.depth * 2.0).sum() + (o.color * 0.0).sum() + (o.alpha * 0.0).sum())
    for name, (x, y) in zip(("means", "radii", "colors", "opacities") * 2,
                            list(zip(a, b)) + list(zip(c, d))):
        assert_grads_close(x, y, rel=1e-4, cos=0.99999, name=name)


def test_auto_backend_is_cuda_for_cuda_tensors():
    s = random_scene(50, 40, 30)
    args = [s[k].cuda() for k in ("means", "radii", "colors", "opacities")] + [s["K"], 40, 30]
    a = rasterizer.rasterize_spheres(*args)
    b = rasterizer.rasterize_spheres(*args, backend="cuda")
    assert a.color.is_cuda and torch.equal(a.color, b.color)


def test_stats_accumulate_over_renders():
    s = random_scene(80, 48, 36, seed=4)
    ps = [s[k].cuda().requires_grad_() for k in ("means", "radii", "colors", "opacities")]
    stats = rasterizer.SphereStats(80, "cuda")
    sums = []
    for _ in range(2):
        out = rasterizer.rasterize_spheres(*ps, s["K"], 48, 36, backend="cuda", stats=stats)
        stats.pixel_error = torch.ones(36, 48, device="cuda")
        out.color.sum().backward()
        sums.append(out.alpha.sum().item())
    assert stats.weight_sum.sum().item() == pytest.approx(sum(sums), rel=1e-4)
    assert torch.allclose(stats.error_sum, stats.weight_sum, rtol=1e-4, atol=1e-6)


def _near_axis_scene(n=300, w=96, h=72, seed=3):
    # near the optical axis (gsplat's full Jacobian ~ our circle there) and opacity <= 0.35
    # (so gsplat's missing 3-sigma ellipse test and its 0.999 alpha clamp do not matter)
    s = random_scene(n, w, h, seed=seed, z=(3.0, 5.0), opacity=(0.05, 0.35), r=(0.02, 0.08))
    m = s["means"].clone()
    m[:, 0] = m[:, 0] * 0.15
    m[:, 1] = m[:, 1] * 0.15
    s["means"] = m
    return s


def test_matches_gsplat_loosely():
    pytest.importorskip("gsplat")
    s = _near_axis_scene()
    oa, ga, _ = render(s, "cuda", "cuda", with_stats=False)
    ob, gb, _ = render(s, "gsplat", "cuda", with_stats=False)
    for name, x, y in zip(("color", "alpha"), (oa[0], oa[2]), (ob[0], ob[2])):
        assert rel_l2(x, y) < 3e-2, f"{name}: relative L2 {rel_l2(x, y):.3e}"
    # expected depth divides by alpha: compare it where both renders are clearly covered
    covered = (oa[2] > 0.3) & (ob[2] > 0.3)
    assert covered.sum() > 100
    assert rel_l2(oa[1][covered], ob[1][covered]) < 1e-2
    for name, x, y in zip(("means", "radii", "colors", "opacities"), ga, gb):
        assert cosine(x, y) > 0.98, f"grad {name}: cosine {cosine(x, y):.4f}"


def _pairs(s) -> int:
    room = rasterizer.PairRoom("cuda")
    render(s, "cuda", "cuda", pair_room=room)
    return room.read()[0]


@pytest.mark.parametrize("headroom", [1.0, 1.7])
def test_capped_binning_renders_as_the_exact_one(headroom):
    s = random_scene(2000, 160, 120, seed=21)
    m = _pairs(s)
    exact = render(s, "cuda", "cuda")
    room = rasterizer.PairRoom("cuda", capacity=int(m * headroom))
    capped = render(s, "cuda", "cuda", pair_room=room)
    assert room.read() == (m, False)
    for a, b in zip(exact[0], capped[0]):
        assert torch.equal(a, b)
    for a, b in zip(exact[1], capped[1]):
        assert_grads_close(a, b)


def test_capped_binning_flags_an_overflow():
    s = random_scene(2000, 160, 120, seed=22)
    m = _pairs(s)
    room = rasterizer.PairRoom("cuda", capacity=m // 2)
    render(s, "cuda", "cuda", pair_room=room)
    assert room.read() == (m, True)


def test_a_capped_render_and_its_backward_replay_in_a_cuda_graph():
    s = random_scene(1500, 96, 72, seed=23)
    leaves = [s[k].cuda().clone().requires_grad_() for k in ("means", "radii", "colors", "opacities")]
    room = rasterizer.PairRoom("cuda", capacity=2 * _pairs(s))

    def step():
        out = rasterizer.rasterize_spheres(*leaves, s["K"], s["width"], s["height"], pair_room=room)
        loss = out.color.sum() + out.depth.sum() + out.alpha.sum()
        return out, torch.autograd.grad(loss, leaves)

    step()   # warm-up
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        graph.capture_begin()
        out, grads = step()
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    with torch.no_grad():
        leaves[0][:, :2] += 0.02       # the spheres move: the replay bins them again
    graph.replay()
    eager_out, eager_grads = step()
    for a, b in zip(eager_out, out):
        assert torch.equal(a, b)
    for a, b in zip(eager_grads, grads):
        assert_grads_close(a.cpu(), b.cpu())
    assert not room.read()[1]
