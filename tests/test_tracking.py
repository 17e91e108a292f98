"""Tracker internals on a map built from the start of the bundled sample: the analytic pose
Jacobian agrees with finite differences of real renders, and tracking with it stays accurate
with far fewer renders."""
import numpy as np
import pytest
import torch

from rasterizer import depth_edge_mask
from slam.data.sources import open_source
from slam.geometry import invert, pivot_increment
from slam.map.snapshot import MapSnapshot
from slam.observation import Observation
from slam.tracking import lm


@pytest.fixture(scope="module")
def sample_map(sample_run):
    # On the CPU wherever the tests run: the checks below build CPU tensors beside the map.
    cfg = sample_run.cfg(10, "system.threaded=false", "system.device=cpu")
    system = sample_run.run(cfg)
    frame = list(open_source(cfg.data))[9]
    return cfg, system, frame


def test_analytic_jacobian_matches_central_differences(sample_map):
    cfg, system, frame = sample_map
    obs, valid = lm.pyramid(Observation.from_numpy(frame.color, frame.depth, frame.K, torch.device("cpu")),
                            cfg.tracking.pyramid_levels)[-1]
    snap = system.smap.latest()
    T_cw = invert(system.recorder.snapshot()[0][9].T_wc)
    out = render(snap, obs, T_cw)
    mask = valid & (out.alpha > cfg.tracking.alpha_threshold) & depth_edge_mask(out.depth)
    exposure = (0.1, 0.02)
    target, affine = lm.target(obs, cfg.tracking.depth_weight), lm.affine(exposure, cfg.tracking.depth_weight, "cpu")
    m = mask.unsqueeze(-1).float()
    r = lm.residual(out, target, m, affine)
    z_pivot = float(obs.depth[obs.depth > 0].median())
    J = torch.zeros(6, r.numel())
    lm.analytic_pose_rows(out, obs, mask, affine, z_pivot, 0, obs.height, J.view(6, *r.shape))
    # Built band by band (as the normal equations do), the rows are the same.
    bands = torch.zeros(6, *r.shape)
    for a in range(0, obs.height, 7):
        b = min(obs.height, a + 7)
        lm.analytic_pose_rows(out, obs, mask, affine, z_pivot, a, b, bands[:, a:b])
    torch.testing.assert_close(bands.view(6, -1), J)
    assert bool((J.view(6, *r.shape)[:, ~mask] == 0).all())
    h = 3e-3
    for k in range(6):
        d = np.zeros(6)
        d[k] = h
        plus = render(snap, obs, pivot_increment(d, z_pivot) @ T_cw)
        minus = render(snap, obs, pivot_increment(-d, z_pivot) @ T_cw)
        r_p = lm.residual(plus, target, m, affine)
        r_m = lm.residual(minus, target, m, affine)
        fd = ((r_p - r_m) / (2 * h)).reshape(-1)
        cos = float(fd @ J[k] / (fd.norm() * J[k].norm()))
        ratio = float(J[k].norm() / fd.norm())
        # Measured: cosine 0.93-0.96, norm ratio 0.8-0.85 (the render's footprints also change).
        assert cos > 0.85, (k, cos)
        assert 0.6 < ratio < 1.2, (k, ratio)


def test_analytic_jacobian_tracks_with_fewer_renders(monkeypatch, sample_run):
    counts = {"n": 0}
    original = MapSnapshot.render

    def counting(self, *args, **kwargs):
        counts["n"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MapSnapshot, "render", counting)
    renders, ates = {}, {}
    for kind, n in (("finite_difference", 0), ("analytic", 8)):
        counts["n"] = 0
        system = sample_run.run(sample_run.cfg(10, "system.threaded=false", "tracking.solver=renders",
                                               f"tracking.analytic_iters={n}"))
        renders[kind], ates[kind] = counts["n"], sample_run.ate_cm(system)
        assert all(f.ok for f in system.recorder.frames)
    assert renders["analytic"] < 0.35 * renders["finite_difference"], renders
    assert ates["analytic"] < 1.0, ates


def render(snap, obs, T_cw):
    """``snap`` seen from world-to-camera ``T_cw`` at ``obs``'s resolution, as the tracker renders."""
    return snap.render(obs.K, obs.width, obs.height, T_cw=T_cw, backend="cpu")


def _dense_normal_equations(k, r, out, m, exposure, J6):
    """The normal equations from a whole-image float32 Jacobian (the unbanded reference)."""
    ex = torch.zeros(2, *r.shape)
    ex[0, ..., :3] = out.color * m * np.exp(exposure[0])
    ex[1, ..., :3] = m
    J = torch.cat([J6.reshape(6, -1), ex.reshape(2, -1)])
    w = lm.robust_weights(r, k).reshape(-1)
    rv = r.reshape(-1)
    return (J * w) @ J.T, J @ (w * rv), float((w * rv * rv).sum())


@pytest.mark.parametrize("kind", ["analytic", "finite_difference"])
def test_banded_normal_equations_match_the_dense_ones(sample_map, monkeypatch, kind):
    cfg, system, frame = sample_map
    obs, valid = lm.pyramid(Observation.from_numpy(frame.color, frame.depth, frame.K, torch.device("cpu")),
                            cfg.tracking.pyramid_levels)[-1]
    monkeypatch.setattr(lm, "BAND_PIXELS", obs.width * 5 + 3)   # several bands, a short last one
    snap = system.smap.latest()
    T_cw = invert(system.recorder.snapshot()[0][8].T_wc)   # the previous frame's pose: a real residual
    out = render(snap, obs, T_cw)
    mask = valid & (out.alpha > cfg.tracking.alpha_threshold) & depth_edge_mask(out.depth)
    exposure = (0.05, -0.01)
    target, affine = lm.target(obs, cfg.tracking.depth_weight), lm.affine(exposure, cfg.tracking.depth_weight, "cpu")
    m = mask.unsqueeze(-1).float()
    r = lm.residual(out, target, m, affine)
    z_pivot = float(obs.depth[obs.depth > 0].median())
    if kind == "analytic":
        J6 = torch.zeros(6, *r.shape)
        lm.analytic_pose_rows(out, obs, mask, affine, z_pivot, 0, obs.height, J6)
        rows = lambda a, b, J: lm.analytic_pose_rows(out, obs, mask, affine, z_pivot, a, b, J)  # noqa: E731
        tol = 1e-4
    else:
        moved = lambda T, d: pivot_increment(d, z_pivot) @ T  # noqa: E731
        steps = [cfg.tracking.fd_rot] * 3 + [cfg.tracking.fd_trans] * 3
        cols = lm.fd_pose_columns(lambda T: render(snap, obs, T), target, m, affine, r, T_cw, moved, steps)
        assert cols.dtype == torch.float16 and bool(torch.isfinite(cols).all())
        J6 = torch.stack([(lm.residual(render(snap, obs, moved(T_cw, np.eye(6)[k] * steps[k])),
                                             target, m, affine) - r) / steps[k] for k in range(6)])
        rows = lambda a, b, J: lm.copy_rows(cols, a, b, J)  # noqa: E731
        tol = 1e-3   # float16 storage of the columns (measured: 1e-5)
    k = lm.huber_thresholds(cfg.tracking.huber_color, cfg.tracking.huber_depth, cfg.tracking.depth_weight, "cpu")
    Hd, gd, cost = lm.normal_equations(r, out, m, exposure, rows, k, cfg.tracking.exposure)
    H_ref, g_ref, cost_ref = _dense_normal_equations(k, r, out, m, exposure, J6)
    scale = float(H_ref.abs().max())
    assert float((Hd.float() - H_ref).abs().max()) < tol * scale
    assert float((gd.float() - g_ref).abs().max()) < tol * float(g_ref.abs().max()) + 1e-6 * scale
    assert cost == pytest.approx(cost_ref, rel=1e-4)
    # Steps solved from either agree in direction (what LM uses).
    A = Hd + 1e-3 * torch.diag(Hd.diagonal())
    A_ref = (H_ref + 1e-3 * torch.diag(H_ref.diagonal())).double()
    s, s_ref = torch.linalg.solve(A, gd), torch.linalg.solve(A_ref, g_ref.double())
    assert float(s @ s_ref / (s.norm() * s_ref.norm())) > 0.999


@pytest.mark.parametrize("solver", ["fused", "renders"])
def test_tracks_without_the_exposure_term(sample_run, solver):
    # Six parameters instead of eight: the normal equations' exposure rows are left out.
    system = sample_run.run(sample_run.cfg(10, "system.threaded=false", "tracking.exposure=false",
                                           f"tracking.solver={solver}"))
    assert all(f.ok for f in system.recorder.frames)
    assert sample_run.ate_cm(system) < 1.0


def test_fused_solver_tracks_with_half_the_renders_of_the_render_solver(sample_run):
    """The fused kernel's exact normal equations: one render per accepted LM step, none for
    Jacobians; as accurate on the sample as the render-difference solver."""
    runs = {s: sample_run.run(sample_run.cfg(20, "system.threaded=false", f"tracking.solver={s}"))
            for s in ("fused", "renders")}
    renders = {s: sum(f.renders for f in r.recorder.frames) for s, r in runs.items()}
    assert all(f.ok for f in runs["fused"].recorder.frames)
    assert renders["fused"] < 0.6 * renders["renders"], renders
    assert sample_run.ate_cm(runs["fused"]) < 1.0
    assert sample_run.ate_cm(runs["fused"]) < 1.5 * sample_run.ate_cm(runs["renders"]) + 0.05


def test_the_fused_solver_blends_the_observation_gradients_at_every_level(sample_map, monkeypatch):
    """``tracking.obs_gradient`` reaches every pyramid level's evaluations, the finest included
    (exact rows at the finest level cost accuracy on 7-Scenes:
    docs/benchmarks.md#why-the-defaults-are-what-they-are)."""
    from rasterizer import lm_state
    from slam.tracking.tracker import Tracker

    cfg, system, frame = sample_map
    seen = []
    real = lm_state.gauss_newton_lm

    def recording(*args, level, obs_weight, **kw):
        seen.append((level, obs_weight))
        return real(*args, level=level, obs_weight=obs_weight, **kw)

    monkeypatch.setattr(lm_state, "gauss_newton_lm", recording)
    tracker = Tracker(cfg.tracking, cfg.quality, "cpu")
    tracker.initialise(frame.gt_pose)
    result = tracker.track(system.observation(frame), system.latest_map())
    assert result.ok
    assert {lv for lv, _ in seen} == set(range(cfg.tracking.pyramid_levels))
    assert cfg.tracking.obs_gradient > 0 and all(w == cfg.tracking.obs_gradient for _, w in seen)
