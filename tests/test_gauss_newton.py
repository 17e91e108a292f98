"""The fused Gauss-Newton pass (rasterizer.gauss_newton): the CPU kernel against the PyTorch oracle
(jacfwd through the reference render), against central differences of real renders, against the
render-difference oracle's definitions (tests/render_oracle.py), and the cost-only mode."""
import math
from types import SimpleNamespace

import pytest
import torch

import rasterizer
from rasterizer.gn_reference import pack
from rasterizer_scenes import (
    GN_SETTINGS,
    adversarial_scenes,
    assert_gn_close,
    awkward_scenes,
    cosine,
    gn_observation,
    gn_run,
    random_scene,
    rel_l2,
)

ADV = adversarial_scenes()
AWK = awkward_scenes()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cpu_matches_oracle_random(seed):
    s = random_scene(80, 64, 48, seed=seed)
    obs = gn_observation(s, seed=seed)
    a, b = gn_run(s, "cpu", obs), gn_run(s, "reference", obs)
    # measured: H, g <= 1.5e-7, cost and l1 <= 2e-8, counts exact
    assert_gn_close(a, b, rel=1e-5, rel_cost=1e-6, counts=0)
    assert b.n_covered > 300 and b.H.diagonal()[:6].min() > 0


@pytest.mark.parametrize("name", sorted(ADV) + sorted(AWK))
def test_cpu_matches_oracle_adversarial(name):
    s = ADV.get(name) or AWK[name]
    obs = gn_observation(s, seed=1)
    a, b = gn_run(s, "cpu", obs), gn_run(s, "reference", obs)
    # measured: H, g <= 7e-7 (near_far_behind), cost and l1 <= 1e-7, counts exact
    assert_gn_close(a, b, rel=1e-5, rel_cost=1e-6, name=name)
    if name == "empty":
        assert a.n_covered == 0 and a.cost == 0 and (a.H == 0).all() and (a.g == 0).all()


@pytest.mark.parametrize("case", ["background", "large_offset", "no_exposure"])
def test_cpu_matches_oracle_options(case):
    s = random_scene(80, 64, 48, seed=4)
    delta = (0.1, -0.05, 0.08, 0.1, 0.05, -0.2) if case == "large_offset" else (0.01,) * 6
    obs = gn_observation(s, delta=delta, seed=2)
    kw = {"background": dict(background=torch.tensor([0.3, 0.6, 0.9])),
          "no_exposure": dict(exposure=False), "large_offset": {}}[case]
    a, b = gn_run(s, "cpu", obs, **kw), gn_run(s, "reference", obs, **kw)
    assert_gn_close(a, b, rel=1e-5, rel_cost=1e-6, name=case)
    assert a.H.shape == ((6, 6) if case == "no_exposure" else (8, 8))


@pytest.mark.parametrize("seed, weight", [(0, 0.5), (1, 1.0), (2, 0.25)])
def test_observation_term_matches_oracle(seed, weight):
    s = random_scene(80, 64, 48, seed=seed)
    obs = gn_observation(s, seed=seed)
    a, b = gn_run(s, "cpu", obs, obs_weight=weight), gn_run(s, "reference", obs, obs_weight=weight)
    assert_gn_close(a, b, rel=1e-5, rel_cost=1e-6, counts=0)
    exact = gn_run(s, "cpu", obs)
    # the blend changes the pose rows only: cost, l1, counts and the exposure block stay
    assert a.cost == exact.cost and a.l1 == exact.l1 and a.n_covered == exact.n_covered
    assert torch.equal(a.H[6:, 6:], exact.H[6:, 6:])
    assert rel_l2(a.H[:6, :6], exact.H[:6, :6]) > 0.05


@pytest.mark.parametrize("name", ["near_far_behind", "huge_and_subpixel", "odd_nonsquare", "empty",
                                  "tall_odd", "clamped_and_terminated"])
def test_observation_term_matches_oracle_awkward(name):
    s = ADV.get(name) or AWK[name]
    obs = gn_observation(s, seed=1)
    a, b = gn_run(s, "cpu", obs, obs_weight=0.5), gn_run(s, "reference", obs, obs_weight=0.5)
    assert_gn_close(a, b, rel=1e-5, rel_cost=1e-6, name=name)


def _first_step(scene, delta, weight):
    """The Gauss-Newton pose step at the identity against the noise-free render at ``delta``."""
    obs = gn_observation(scene, delta=tuple(delta.tolist()), seed=7, noise=(0.0, 0.0), holes=0.0)
    r = gn_run(scene, "cpu", obs, obs_weight=weight, gain=1.0, bias=0.0, exposure=False)
    return -torch.linalg.solve(r.H, r.g)


def test_observation_term_steps_towards_the_true_pose():
    """Observed = the render at a known increment (no noise): every blend's first step points at
    it from nearby; from 3x further (5.3 cm, 1.3 deg) the exact derivative's step falls short and
    the blend's does not (the reason for the blend)."""
    s = random_scene(1500, 96, 72, seed=7)
    delta = torch.tensor([0.004, -0.006, 0.003, 0.01, -0.008, 0.012], dtype=torch.float64)
    for weight in (0.0, 0.5, 1.0):
        step = _first_step(s, delta, weight)
        # measured: cosine 0.993 (exact), 0.998 (blend), 0.993 (observation alone)
        assert cosine(step, delta) > 0.95, (weight, cosine(step, delta))
    far = 3 * delta
    exact, blend = _first_step(s, far, 0.0), _first_step(s, far, 0.5)
    # measured: length ratio 0.66 (exact) vs 1.05 (blend), cosine 0.950 vs 0.990
    assert blend.norm() / far.norm() > exact.norm() / far.norm() + 0.2
    assert cosine(blend, far) > cosine(exact, far)


def test_exposure_rows_only_extend_the_pose_block():
    s = random_scene(80, 64, 48, seed=5)
    obs = gn_observation(s, seed=5)
    full, pose = gn_run(s, "cpu", obs), gn_run(s, "cpu", obs, exposure=False)
    assert torch.equal(full.H[:6, :6], pose.H) and torch.equal(full.g[:6], pose.g)
    assert full.cost == pose.cost and full.H[6, 6] > 0 and full.H[7, 7] > 0


def test_cost_only_equals_full_mode():
    for s in (random_scene(80, 64, 48, seed=6), ADV["dense_opaque"], AWK["near_plane_in_view"]):
        obs = gn_observation(s, seed=6)
        full, cheap = gn_run(s, "cpu", obs), gn_run(s, "cpu", obs, derivatives=False)
        assert (cheap.H == 0).all() and (cheap.g == 0).all()
        assert (cheap.cost, cheap.l1, cheap.n_valid, cheap.n_covered, cheap.n_depth_in,
                cheap.n_color_in) == (full.cost, full.l1, full.n_valid, full.n_covered,
                                      full.n_depth_in, full.n_color_in)


def _residuals(scene, obs, delta):
    """(H, W, 4) float64 residual of the CPU render at the pose increment ``delta`` and its alpha."""
    S = GN_SETTINGS
    m = rasterizer.increment_points(scene["means"].double(), torch.tensor(delta, dtype=torch.float64),
                                   S["pivot_z"]).float()
    out = rasterizer.rasterize_spheres(m, scene["radii"], scene["colors"], scene["opacities"],
                                       scene["K"], scene["width"], scene["height"], backend="cpu")
    rc = (S["bias"] + out.color * S["gain"]) - obs[0]
    rd = out.depth * S["depth_weight"] - obs[1] * S["depth_weight"]
    return torch.cat([rc, rd.unsqueeze(-1)], -1).double(), out.alpha


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pose_terms_match_central_differences_of_renders(seed):
    # Central differences of real (tiled CPU) renders with the mask and the Huber weights fixed at
    # the pose. Step 5e-3 rad / m: smaller steps make the cut-off crossings (alpha jumping at
    # q = 9, a = 1/255, T = 1e-4; the model treats them as constants) large spikes of size
    # jump / step, larger ones curvature. Measured: cosines >= 0.99998 (g) and >= 0.9998
    # (H's columns); relative errors <= 0.5 % (g) and <= 1 % (H).
    s = random_scene(80, 64, 48, seed=seed)
    obs = gn_observation(s, seed=seed)
    res = gn_run(s, "cpu", obs)
    r0, alpha = _residuals(s, obs, [0.0] * 6)
    cov = (obs[2] & (alpha > GN_SETTINGS["alpha_threshold"])).unsqueeze(-1).double()
    r0 = r0 * cov
    hc, hd = GN_SETTINGS["huber"]
    k = torch.tensor([hc, hc, hc, hd * GN_SETTINGS["depth_weight"]], dtype=torch.float64)
    w = (k / torch.maximum(r0.abs(), k)).reshape(-1, 1)
    h, cols = 5e-3, []
    for i in range(6):
        d = [0.0] * 6
        d[i] = h
        rp = _residuals(s, obs, d)[0]
        d[i] = -h
        rm = _residuals(s, obs, d)[0]
        cols.append(((rp - rm) / (2 * h) * cov).reshape(-1))
    J = torch.stack(cols, 1)
    g_fd, H_fd = (J * w).T @ r0.reshape(-1), (J * w).T @ J
    assert cosine(res.g[:6], g_fd) >= 0.999 and rel_l2(res.g[:6], g_fd) <= 0.02
    for i in range(6):
        assert cosine(res.H[:6, i], H_fd[:, i]) >= 0.999, i
    assert rel_l2(res.H[:6, :6], H_fd) <= 0.03


def test_matches_the_render_difference_oracle_definitions():
    # The kernel against the render-difference oracle's own code (tests/render_oracle.py) on the
    # same render: its residual, Huber weights and normal equations (with exact pose rows from
    # jacfwd), its L1 and pixel counts.
    import render_oracle as ro

    S = GN_SETTINGS
    s = random_scene(80, 64, 48, seed=7)
    oc, od, valid = gn_observation(s, seed=7)
    W, H = s["width"], s["height"]
    sph = [s[k] for k in ("radii", "colors", "opacities")]

    def render(delta):
        m = rasterizer.increment_points(s["means"], delta, S["pivot_z"])
        out = rasterizer.rasterize_spheres(m, *sph, s["K"], W, H, backend="reference")
        return out.color, out.depth

    jc, jd = torch.func.jacfwd(render)(torch.zeros(6))
    out = rasterizer.rasterize_spheres(s["means"], *sph, s["K"], W, H, backend="cpu")
    exposure = (math.log(S["gain"]), S["bias"])
    affine = ro.affine(exposure, S["depth_weight"], "cpu")
    target = torch.cat([oc, (od * S["depth_weight"]).unsqueeze(-1)], -1)
    mask = valid & (out.alpha > S["alpha_threshold"])
    m = mask.unsqueeze(-1).float()
    r = ro.residual(out, target, m, affine)
    cols = torch.cat([jc, jd.unsqueeze(-2)], -2).permute(3, 0, 1, 2) * affine[0] * m
    k = ro.huber_thresholds(*S["huber"], S["depth_weight"], "cpu")
    Hd, gd, cost = ro.normal_equations(r, cols, out, m, S["gain"], k, True)
    a = r.abs().sum(dim=(0, 1))
    cfg = SimpleNamespace(depth_noise_floor=S["depth_noise"][0],
                          depth_noise_quad=S["depth_noise"][1], color_tol=S["color_tol"])
    counts = ro.pixel_counts(out, SimpleNamespace(depth=od), valid, mask, r, cfg)
    oracle = rasterizer.GaussNewtonResult.unpack(pack(torch.from_numpy(Hd), torch.from_numpy(gd), (
        cost, float(a[:3].sum() + a[3]), valid.sum(), *counts)))
    ours = gn_run(s, "cpu", (oc, od, valid), gain=math.exp(exposure[0]))
    # measured: H 2e-7, g 1.3e-7, cost and l1 1e-8, counts exact
    assert_gn_close(ours, oracle, rel=1e-5, rel_cost=1e-5, counts=0)


def test_deterministic_across_thread_counts():
    s = random_scene(400, 96, 64, seed=8)   # enough (tile, sphere) pairs for the parallel path
    obs = gn_observation(s, seed=8)
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = gn_run(s, "cpu", obs)
        torch.set_num_threads(max(2, n))
        b = gn_run(s, "cpu", obs)
    finally:
        torch.set_num_threads(n)
    assert torch.equal(a.H, b.H) and torch.equal(a.g, b.g) and a.cost == b.cost


def test_unpack_layout_and_symmetry():
    H = torch.arange(64, dtype=torch.float64).reshape(8, 8)
    H = H + H.T
    res = rasterizer.GaussNewtonResult.unpack(pack(H, torch.arange(8.0), (1.5, 2.5, 10, 9, 8, 7)))
    assert torch.equal(res.H, H) and torch.equal(res.g, torch.arange(8.0, dtype=torch.float64))
    assert (res.cost, res.l1, res.n_valid, res.n_covered, res.n_depth_in, res.n_color_in) == \
        (1.5, 2.5, 10, 9, 8, 7)
    six = rasterizer.GaussNewtonResult.unpack(pack(H, torch.arange(8.0), (0,) * 6), exposure=False)
    assert torch.equal(six.H, H[:6, :6]) and six.g.shape == (6,)


def test_increment_points_is_exact_at_zero_and_rigid():
    m = random_scene(20)["means"]
    assert torch.equal(rasterizer.increment_points(m, torch.zeros(6), 2.0), m)
    d = torch.tensor([0.3, -0.2, 0.1, 0.5, 0.0, -0.4], dtype=torch.float64)
    a = rasterizer.increment_points(m.double(), d, 2.0)
    assert torch.allclose(torch.cdist(a, a), torch.cdist(m.double(), m.double()), atol=1e-12)
    p = torch.tensor([[0.0, 0.0, 2.0]], dtype=torch.float64)   # the pivot only translates
    assert torch.allclose(rasterizer.increment_points(p, d, 2.0), p + d[3:])


def test_rejects_bad_inputs():
    s = random_scene(10, 16, 12)
    obs = gn_observation(s)
    sph = [s[k] for k in ("means", "radii", "colors", "opacities")]

    def call(*o, **kw):
        return rasterizer.gauss_newton(*sph, s["K"], 16, 12, *o, **dict(GN_SETTINGS, **kw))

    with pytest.raises(ValueError, match="obs_color"):
        call(obs[0][:5], obs[1], obs[2])
    with pytest.raises(TypeError, match="valid"):
        call(obs[0], obs[1], obs[2].float())
    with pytest.raises(ValueError, match="backend"):
        call(*obs, backend="gsplat")
    with pytest.raises(ValueError, match="huber"):
        call(*obs, huber=(0.0, 0.1))
    with pytest.raises(TypeError, match="float32"):
        rasterizer.gauss_newton(sph[0].double(), *sph[1:], s["K"], 16, 12, *obs, **GN_SETTINGS)


@pytest.mark.parametrize("pivot_z", [0.0, 1.7])
def test_point_motion_is_the_derivative_of_the_moved_projection(pivot_z):
    """rasterizer.point_motion (the Python statement of csrc/gn_math.h point_motion, used by the
    oracle's observation rows) against central differences of the projection of points moved by
    increment_points, every parameter."""
    from rasterizer.point_motion import point_motion

    g = torch.Generator().manual_seed(3)
    X = torch.rand(50, 3, generator=g, dtype=torch.float64) * torch.tensor([2.0, 1.5, 3.0]) - torch.tensor([1.0, 0.75, -0.5])
    fx, fy = 300.0, 280.0
    z = X[:, 2]
    xn, yn = X[:, 0] / z, X[:, 1] / z
    project = lambda P: torch.stack([fx * P[:, 0] / P[:, 2], fy * P[:, 1] / P[:, 2], P[:, 2]], -1)  # noqa: E731
    eps = 1e-6
    for k in range(6):
        d = torch.zeros(6, dtype=torch.float64)
        d[k] = eps
        numeric = (project(rasterizer.increment_points(X, d, pivot_z))
                   - project(rasterizer.increment_points(X, -d, pivot_z))) / (2 * eps)
        motion = point_motion(k, xn, yn, z, 1.0 / z, (z - pivot_z) / z, fx, fy)
        analytic = torch.stack([torch.zeros_like(z) if m is None else torch.as_tensor(m, dtype=z.dtype).expand_as(z)
                                for m in motion], -1)
        torch.testing.assert_close(analytic, numeric, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="not in 0..5"):
        point_motion(6, xn, yn, z, 1.0 / z, z, fx, fy)
