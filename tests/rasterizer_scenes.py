"""Small scenes and comparison helpers shared by the rasterizer tests (tests/test_rasterizer_*.py)."""
from __future__ import annotations

import torch

import rasterizer
from rasterizer.gauss_newton import PACKED_SIZE


def intrinsics(width, height, f=None, dtype=torch.float32):
    f = f if f is not None else 0.9 * width
    return torch.tensor([[f, 0.0, (width - 1) / 2], [0.0, 1.05 * f, (height - 1) / 2],
                         [0.0, 0.0, 1.0]], dtype=dtype)


def random_scene(n, width=48, height=36, seed=0, z=(1.0, 4.0), r=(0.01, 0.12), opacity=(0.05, 1.0)):
    """n spheres in the view frustum with footprints of a few px to tens of px."""
    g = torch.Generator().manual_seed(seed)
    K = intrinsics(width, height)
    zs = torch.empty(n).uniform_(*z, generator=g)
    u = torch.empty(n).uniform_(-4, width + 4, generator=g)
    v = torch.empty(n).uniform_(-4, height + 4, generator=g)
    x = (u - K[0, 2]) * zs / K[0, 0]
    y = (v - K[1, 2]) * zs / K[1, 1]
    means = torch.stack([x, y, zs], 1)
    radii = torch.empty(n).uniform_(*r, generator=g)
    colors = torch.rand(n, 3, generator=g)
    opac = torch.empty(n).uniform_(*opacity, generator=g)
    return dict(means=means, radii=radii, colors=colors, opacities=opac, K=K, width=width,
                height=height)


def _scene(means, radii, colors, opac, width, height, f=None):
    def t(v):
        return torch.as_tensor(v, dtype=torch.float32)

    means = t(means).reshape(-1, 3)
    n = means.shape[0]
    return dict(means=means, radii=t(radii).reshape(n), colors=t(colors).reshape(n, 3),
                opacities=t(opac).reshape(n), K=intrinsics(width, height, f), width=width,
                height=height)


def adversarial_scenes():
    """Named edge-case scenes (dict name -> scene)."""
    s = {}
    base = random_scene(30, 40, 30, seed=1)
    # behind the camera, at and around the near plane, beyond the far plane
    m = base["means"].clone()
    m[:12, 2] = torch.tensor([-2.0, -0.5, 0.0, 0.005, 0.01, 0.0101, 0.011, 0.02, 0.05, 100.0,
                              100.5, 150.0])
    s["near_far_behind"] = dict(base, means=m)
    # off-screen centres, some with footprints reaching into the image
    m = base["means"].clone()
    m[:15, 0] = m[:15, 2] * torch.linspace(-3, 3, 15)
    s["off_screen"] = dict(base, means=m)
    # huge (covering the image) and sub-pixel spheres
    r = base["radii"].clone()
    r[:3] = torch.tensor([1.5, 3.0, 0.8])
    r[3:15] = 1e-4
    s["huge_and_subpixel"] = dict(base, radii=r)
    # zero and full opacity
    o = base["opacities"].clone()
    o[:10] = 0.0
    o[10:20] = 1.0
    s["zero_full_opacity"] = dict(base, opacities=o)
    # many spheres overlapping at one depth (ties broken by index)
    n = 25
    g = torch.Generator().manual_seed(5)
    m = torch.zeros(n, 3)
    m[:, 0] = torch.randn(n, generator=g) * 0.05
    m[:, 1] = torch.randn(n, generator=g) * 0.05
    m[:, 2] = 2.0
    s["equal_depth_overlap"] = _scene(m, torch.full((n,), 0.15), torch.rand(n, 3, generator=g),
                                      torch.full((n,), 0.35), 33, 27)
    s["empty"] = _scene(torch.zeros(0, 3), torch.zeros(0), torch.zeros(0, 3), torch.zeros(0), 20, 14)
    s["single"] = _scene([[0.05, -0.02, 1.5]], [0.1], [[0.2, 0.5, 0.9]], [0.8], 17, 19)
    s["odd_nonsquare"] = random_scene(40, 53, 17, seed=7)
    s["tall_odd"] = random_scene(40, 15, 41, seed=8)
    s["dense_opaque"] = random_scene(120, 40, 32, seed=9, opacity=(0.6, 1.0), r=(0.05, 0.3))
    return s


def awkward_scenes():
    """Scenes that stress the derivatives: spheres just past the near plane in view (huge and
    fast-moving footprints), clamped alphas (opacity 1 over many pixels), early termination."""
    s = {}
    base = random_scene(60, 64, 48, seed=3)
    m = base["means"].clone()
    m[:6] = torch.tensor([[0.0, 0.0, 0.0102], [0.002, -0.001, 0.012], [-0.003, 0.002, 0.015],
                          [0.005, 0.004, 0.03], [-0.01, 0.0, 0.05], [0.0, 0.0, -0.5]])
    r = base["radii"].clone()
    r[:6] = torch.tensor([0.0005, 0.001, 0.0008, 0.002, 0.003, 0.1])
    o = base["opacities"].clone()
    o[:6] = 0.3
    s["near_plane_in_view"] = dict(base, means=m, radii=r, opacities=o)
    n = 40
    g = torch.Generator().manual_seed(4)
    m = torch.stack([torch.randn(n, generator=g) * 0.25, torch.randn(n, generator=g) * 0.2,
                     torch.linspace(1.5, 3.0, n)], 1)
    s["clamped_and_terminated"] = _scene(m, torch.full((n,), 0.25), torch.rand(n, 3, generator=g),
                                         torch.ones(n), 64, 48)
    return s


def render(scene, backend, device="cpu", cotangent_seed=0, background=(0.1, 0.2, 0.3),
           pixel_error=True, with_stats=True, pair_room=None):
    """Forward + backward with random output cotangents (``pair_room``: the binning's
    ``rasterizer.PairRoom``). Returns (outputs, grads, stats)."""
    ps = [scene[k].to(device).clone().requires_grad_() for k in
          ("means", "radii", "colors", "opacities")]
    n = ps[0].shape[0]
    stats = rasterizer.SphereStats(n, device) if with_stats else None
    out = rasterizer.rasterize_spheres(*ps, scene["K"], scene["width"], scene["height"],
                                       background=torch.tensor(background, device=device),
                                       backend=backend, stats=stats, pair_room=pair_room)
    g = torch.Generator().manual_seed(cotangent_seed)
    cots = [torch.randn(o.shape, generator=g).to(device) for o in out]
    if pixel_error and stats is not None:
        stats.pixel_error = torch.rand(out.alpha.shape, generator=g).to(device)
    loss = sum((o * c).sum() for o, c in zip(out, cots))
    if n > 0:
        loss.backward()
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in ps]
    def cpu(ts):
        return [t.detach().cpu() for t in ts]

    st = [stats.weight_sum, stats.error_sum, stats.count] if stats is not None else []
    return cpu(out), cpu(grads), cpu(st)


def rel_l2(a, b):
    a, b = a.double().flatten(), b.double().flatten()
    den = b.norm()
    return float((a - b).norm() / den) if den > 0 else float((a - b).norm())


def cosine(a, b):
    a, b = a.double().flatten(), b.double().flatten()
    if a.norm() == 0 and b.norm() == 0:
        return 1.0
    return float(torch.dot(a, b) / (a.norm() * b.norm()).clamp_min(1e-300))


def assert_images_close(a, b, atol=1e-4, max_bad_frac=0.01, rel=1e-3, name=""):
    """Elementwise within atol except a small fraction (alpha cut-off flips), and rel. L2 small."""
    bad = ((a - b).abs() > atol).double().mean().item() if a.numel() else 0.0
    assert bad <= max_bad_frac, f"{name}: {bad:.4f} of elements differ by > {atol}"
    assert rel_l2(a, b) <= rel, f"{name}: relative L2 {rel_l2(a, b):.2e} > {rel}"


def assert_grads_close(a, b, rel=2e-3, cos=0.9999, name=""):
    r, c = rel_l2(a, b), cosine(a, b)
    assert r <= rel and c >= cos, f"{name}: relative L2 {r:.2e} (max {rel}), cosine {c:.6f}"


def compare(scene, backend_a, backend_b, device_a="cpu", device_b="cpu", img_rel=1e-3,
            grad_rel=2e-3, grad_cos=0.9999):
    """Asserts that two backends agree on one scene: outputs, gradients and statistics."""
    oa, ga, sa = render(scene, backend_a, device_a)
    ob, gb, sb = render(scene, backend_b, device_b)
    for name, x, y in zip(("color", "depth", "alpha"), oa, ob):
        assert x.shape == y.shape, name
        assert_images_close(x, y, rel=img_rel, name=name)
    for name, x, y in zip(("means", "radii", "colors", "opacities"), ga, gb):
        assert torch.isfinite(x).all(), f"{backend_a} grad {name} not finite"
        assert_grads_close(x, y, rel=grad_rel, cos=grad_cos, name=f"grad {name}")
    for name, x, y in zip(("weight_sum", "error_sum", "count"), sa, sb):
        assert_grads_close(x, y, rel=grad_rel, cos=grad_cos, name=f"stats {name}")
    return oa, ga, sa


# ------------------------------------------------------------------ fused Gauss-Newton pass
# Tracker-like settings: exposure off the identity, Huber thresholds that clip part of the pixels.
GN_SETTINGS = dict(pivot_z=2.0, gain=1.1, bias=-0.02, depth_weight=0.7, huber=(0.05, 0.03),
                   alpha_threshold=0.5, depth_noise=(0.01, 0.01), color_tol=0.08)
GN_DELTA = (0.01, -0.02, 0.005, 0.02, -0.01, 0.03)   # rad, m


def gn_observation(scene, delta=GN_DELTA, seed=0, noise=(0.03, 0.02), holes=0.1):
    """An observed frame for ``scene``: its CPU render at the pose increment ``delta`` (about the
    pivot of GN_SETTINGS) plus noise, with depth holes. Returns (obs_color (H, W, 3),
    obs_depth (H, W), valid (H, W) bool) on the CPU."""
    W, H = scene["width"], scene["height"]
    d = torch.tensor(delta, dtype=torch.float64)
    moved = rasterizer.increment_points(scene["means"].double(), d, GN_SETTINGS["pivot_z"]).float()
    out = rasterizer.rasterize_spheres(moved, scene["radii"], scene["colors"], scene["opacities"],
                                       scene["K"], W, H, backend="cpu")
    g = torch.Generator().manual_seed(seed)
    color = (out.color + noise[0] * torch.randn(H, W, 3, generator=g)).clamp(0, 1)
    depth = out.depth + noise[1] * torch.randn(H, W, generator=g)
    depth = torch.where(out.alpha > 0.05, depth, torch.zeros_like(depth))
    valid = (depth > 0) & (torch.rand(H, W, generator=g) >= holes)
    return color, depth, valid


def gn_run(scene, backend, obs, device="cpu", **overrides):
    """``rasterizer.gauss_newton`` on ``scene`` against ``obs`` with GN_SETTINGS (``overrides``
    replace settings or pass exposure / derivatives / background) -> GaussNewtonResult."""
    kw = dict(GN_SETTINGS, **overrides)
    exposure = kw.get("exposure", True)
    def to(t):
        return t.to(device)

    sph = [to(scene[k]) for k in ("means", "radii", "colors", "opacities")]
    if kw.get("background") is not None:
        kw["background"] = to(kw["background"])
    packed = rasterizer.gauss_newton(*sph, scene["K"], scene["width"], scene["height"],
                                     *(to(o) for o in obs), backend=backend, **kw)
    assert packed.shape == (PACKED_SIZE,)
    assert packed.dtype == torch.float64 and packed.device.type == torch.device(device).type
    return rasterizer.GaussNewtonResult.unpack(packed, exposure=exposure)


def gn_errors(a, b):
    """Relative errors of a against b (H: Frobenius, g: L2, cost, l1) and the count differences."""
    def rel(x, y):
        return abs(x - y) / abs(y) if y != 0 else abs(x - y)

    return dict(H=rel_l2(a.H, b.H), g=rel_l2(a.g, b.g), cost=rel(a.cost, b.cost),
                l1=rel(a.l1, b.l1), n_valid=abs(a.n_valid - b.n_valid),
                n_covered=abs(a.n_covered - b.n_covered),
                n_depth_in=abs(a.n_depth_in - b.n_depth_in),
                n_color_in=abs(a.n_color_in - b.n_color_in))


def assert_gn_close(a, b, rel=1e-4, rel_cost=1e-5, counts=2, name=""):
    """H and g within ``rel``, cost and l1 within ``rel_cost`` (relative), the valid count exact
    and the other counts within ``counts`` pixels (thresholds hit at float rounding)."""
    e = gn_errors(a, b)
    msg = f"{name}: {e}"
    assert torch.isfinite(a.H).all() and torch.isfinite(a.g).all(), msg
    assert e["H"] <= rel and e["g"] <= rel, msg
    assert e["cost"] <= rel_cost and e["l1"] <= rel_cost, msg
    assert e["n_valid"] == 0, msg
    assert max(e["n_covered"], e["n_depth_in"], e["n_color_in"]) <= counts, msg
    return e


# ------------------------------------------------------------------ device LM (rasterizer.lm_state)
LM_SETTINGS = dict(damping=1e-3, damping_up=10.0, damping_down=0.3, min_damping=1e-6,
                   min_diagonal=1e-9, converged_step=1e-5, attempts=3)
# A world-to-camera pose off the identity: the scenes' camera-frame means are moved to a world
# frame with its inverse, so the LM's on-device transform has real work to do.
LM_T_CW = ((0.9950, -0.0998, 0.0, 0.05), (0.0998, 0.9950, 0.0, -0.10), (0.0, 0.0, 1.0, 0.20),
           (0.0, 0.0, 0.0, 1.0))


def lm_pose():
    """LM_T_CW orthonormalised, (4, 4) float64 numpy."""
    import numpy as np
    T = np.array(LM_T_CW, dtype=np.float64)
    U, _, Vt = np.linalg.svd(T[:3, :3])
    T[:3, :3] = U @ Vt
    return T


def world_means(scene, T_cw):
    """The scene's camera-frame means expressed in the world frame of ``T_cw`` (N, 3) float32."""
    import numpy as np
    Tw = torch.from_numpy(np.linalg.inv(T_cw))
    m = scene["means"].double()
    return (m @ Tw[:3, :3].T + Tw[:3, 3]).float()


def lm_random_state(rng, exposure=True, done=0.0):
    """A (STATE_SIZE,) float64 numpy LM state with a random well-posed packed result at CUR (H
    SPD), a random trial result, pose, exposure, pivot and damping."""
    import numpy as np

    from rasterizer import lm_state as L
    from rasterizer.gn_reference import N_TRI
    s = np.zeros(L.STATE_SIZE)
    A = rng.normal(size=(8, 8))
    H = A @ A.T + 0.1 * np.eye(8)
    for slot in (L.CUR, L.TRIAL):
        s[slot:slot + N_TRI] = H[np.triu_indices(8)]
        s[slot + L.G:slot + L.G + 8] = rng.normal(size=8)
        s[slot + L.COST] = rng.uniform(1.0, 2.0)
        s[slot + L.N_VALID] = 100.0
    T = lm_pose()
    T[:3, 3] += rng.normal(scale=0.1, size=3)
    s[L.T:L.T + 16] = T.reshape(16)
    s[L.EXP:L.EXP + 2] = rng.normal(scale=0.1, size=2)
    s[L.PIVOT] = rng.uniform(1.0, 3.0)
    s[L.DAMPING] = 10.0 ** rng.uniform(-4, 0)
    s[L.DONE] = done
    return s


def lm_eval_inputs(scene, obs, device):
    """(world means, radii, colors, opacities, K, W, H, obs_color, obs_depth, valid) on ``device``
    for rasterizer.lm_state.gauss_newton_lm, with the world frame of lm_pose()."""
    wm = world_means(scene, lm_pose())
    def to(t):
        return t.to(device)

    return (to(wm), to(scene["radii"]), to(scene["colors"]), to(scene["opacities"]), scene["K"],
            scene["width"], scene["height"], *(to(o) for o in obs))


LM_ROBUST = {k: GN_SETTINGS[k] for k in ("depth_weight", "huber", "alpha_threshold", "depth_noise",
                                           "color_tol")}
