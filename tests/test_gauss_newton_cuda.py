"""The fused Gauss-Newton pass on CUDA against the PyTorch oracle and the CPU kernel.

Skipped without CUDA (CI); run on a GPU machine with scripts/gpu_check.sh.
"""
import pytest
import torch

from rasterizer_scenes import (
    _scene,
    adversarial_scenes,
    assert_gn_close,
    awkward_scenes,
    gn_errors,
    gn_observation,
    gn_run,
    random_scene,
)

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="CUDA is not available: the CUDA Gauss-Newton tests need a GPU (scripts/gpu_check.sh)")

ADV = adversarial_scenes()
AWK = awkward_scenes()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cuda_matches_oracle_random(seed):
    s = random_scene(80, 64, 48, seed=seed)
    obs = gn_observation(s, seed=seed)
    a, b = gn_run(s, "cuda", obs, device="cuda"), gn_run(s, "reference", obs)
    assert_gn_close(a, b, rel=1e-4, rel_cost=1e-5, name=f"seed {seed}")


@pytest.mark.parametrize("name", sorted(ADV) + sorted(AWK))
def test_cuda_matches_oracle_adversarial(name):
    s = ADV.get(name) or AWK[name]
    obs = gn_observation(s, seed=1)
    a, b = gn_run(s, "cuda", obs, device="cuda"), gn_run(s, "reference", obs)
    assert_gn_close(a, b, rel=1e-4, rel_cost=1e-5, name=name)


@pytest.mark.parametrize("kw", [dict(background=torch.tensor([0.3, 0.6, 0.9])),
                                dict(exposure=False)], ids=["background", "no_exposure"])
def test_cuda_matches_oracle_options(kw):
    s = random_scene(80, 64, 48, seed=4)
    obs = gn_observation(s, seed=2)
    a, b = gn_run(s, "cuda", obs, device="cuda", **kw), gn_run(s, "reference", obs, **kw)
    assert_gn_close(a, b, rel=1e-4, rel_cost=1e-5)


@pytest.mark.parametrize("seed, weight", [(0, 0.5), (1, 1.0)])
def test_cuda_observation_term_matches_oracle(seed, weight):
    s = random_scene(80, 64, 48, seed=seed)
    obs = gn_observation(s, seed=seed)
    a = gn_run(s, "cuda", obs, device="cuda", obs_weight=weight)
    b = gn_run(s, "reference", obs, obs_weight=weight)
    assert_gn_close(a, b, rel=1e-4, rel_cost=1e-5, name=f"seed {seed}")


@pytest.mark.parametrize("name", ["near_far_behind", "huge_and_subpixel", "odd_nonsquare", "empty"])
def test_cuda_observation_term_awkward(name):
    s = ADV.get(name) or AWK[name]
    obs = gn_observation(s, seed=1)
    a = gn_run(s, "cuda", obs, device="cuda", obs_weight=0.5)
    b = gn_run(s, "reference", obs, obs_weight=0.5)
    assert_gn_close(a, b, rel=1e-4, rel_cost=1e-5, name=name)


def test_cuda_observation_term_matches_cpu_larger():
    s = random_scene(20000, 320, 240, seed=21)
    obs = gn_observation(s, seed=21)
    a = gn_run(s, "cuda", obs, device="cuda", obs_weight=0.5)
    b = gn_run(s, "cpu", obs, obs_weight=0.5)
    assert_gn_close(a, b, rel=1e-4, rel_cost=1e-5, counts=max(2, 320 * 240 // 10000))


@pytest.mark.parametrize("n, w, h", [(2000, 160, 120), (3000, 203, 97), (20000, 320, 240)])
def test_cuda_matches_cpu_larger(n, w, h):
    s = random_scene(n, w, h, seed=n)
    obs = gn_observation(s, seed=3)
    a, b = gn_run(s, "cuda", obs, device="cuda"), gn_run(s, "cpu", obs)
    # thresholds (alpha, inliers) may flip at float rounding on a few of the w * h pixels
    assert_gn_close(a, b, rel=1e-4, rel_cost=1e-5, counts=max(2, w * h // 10000))


def test_cuda_long_tile_lists():
    # ~9,000 spheres over 3 x 2 tiles: tile lists longer than the shared-memory sort (merged in
    # global memory), with transmittance left for the back of the lists (low opacities)
    s = random_scene(9000, 40, 30, seed=17, r=(0.05, 0.3), opacity=(0.01, 0.05))
    obs = gn_observation(s, seed=17)
    a, b = gn_run(s, "cuda", obs, device="cuda"), gn_run(s, "cpu", obs)
    assert_gn_close(a, b, rel=1e-4, rel_cost=1e-5, counts=2)


@pytest.mark.parametrize("opacity", [(0.01, 0.05), (0.6, 1.0)], ids=["translucent", "opaque"])
def test_cuda_list_walked_in_parts_equals_one_walk(opacity, monkeypatch):
    """A tile's list walked by 1, 2 or 4 segments (SPHERE_GN_SEGMENTS; gn_cuda.cu segments_for)
    gives the same pass: translucent spheres leave transmittance for the back of long lists (every
    part counts: no pixel stops, mean transmittance 0.01); opaque ones stop every pixel part-way
    (the parts behind a stop must not count; both fractions from a NumPy walk of these scenes)."""
    s = random_scene(4000, 48, 32, seed=5, r=(0.05, 0.3), opacity=opacity)
    obs = gn_observation(s, seed=5)
    cpu = gn_run(s, "cpu", obs)
    for k in ("1", "2", "4"):
        monkeypatch.setenv("SPHERE_GN_SEGMENTS", k)
        for deriv in (True, False):
            a = gn_run(s, "cuda", obs, device="cuda", derivatives=deriv)
            if deriv:
                assert_gn_close(a, cpu, rel=1e-4, rel_cost=1e-5, counts=2, name=f"{k} segments")
            else:
                assert abs(a.cost - cpu.cost) <= 1e-5 * abs(cpu.cost), (k, a.cost, cpu.cost)


def test_cuda_cost_only_equals_full_mode():
    s = random_scene(3000, 160, 120, seed=9)
    obs = gn_observation(s, seed=9)
    full = gn_run(s, "cuda", obs, device="cuda")
    cheap = gn_run(s, "cuda", obs, device="cuda", derivatives=False)
    assert (cheap.H == 0).all() and (cheap.g == 0).all()
    e = gn_errors(cheap, full)
    # the float64 atomics add the block sums in any order: equal up to the last bits
    assert e["cost"] <= 1e-12 and e["l1"] <= 1e-12, e
    assert max(e[k] for k in ("n_valid", "n_covered", "n_depth_in", "n_color_in")) == 0, e


def test_cuda_no_pairs():
    # N > 0 but nothing in view (behind the camera, beyond the far plane, off-screen)
    s = _scene([[0.0, 0.0, -1.0], [0.1, 0.0, 150.0], [50.0, 0.0, 1.0]], [0.1] * 3,
               [[0.5, 0.5, 0.5]] * 3, [0.9] * 3, 24, 18)
    color, depth = torch.rand(18, 24, 3), torch.rand(18, 24) + 0.5
    valid = torch.ones(18, 24, dtype=torch.bool)
    a = gn_run(s, "cuda", (color, depth, valid), device="cuda")
    assert a.n_valid == 24 * 18 and a.n_covered == 0 and a.cost == 0 and (a.H == 0).all()
