"""Tracker internals on a map built from the start of the bundled sample: the analytic pose
Jacobian agrees with finite differences of real renders, and tracking with it stays accurate
with far fewer renders."""
import numpy as np
import pytest
import torch

from slam.data.sources import open_source
from slam.geometry import invert, pivot_increment
from slam.observation import Observation, depth_edge_mask
from slam.tracking.tracker import Tracker

from test_system import ate_cm, cfg_for, run_system


@pytest.fixture(scope="module")
def sample_map():
    cfg = cfg_for(10, "system.threaded=false")
    system = run_system(cfg)
    frame = list(open_source(cfg.data))[9]
    return cfg, system, frame


def test_analytic_jacobian_matches_central_differences(sample_map):
    cfg, system, frame = sample_map
    tracker = Tracker(cfg.tracking, "cpu")
    obs, valid = tracker._pyramid(Observation.from_numpy(frame.color, frame.depth, frame.K,
                                                         torch.device("cpu")))[-1]
    snap = system.smap.latest()
    T_cw = invert(system.recorder.snapshot()[0][9].T_wc)
    out = tracker._render(snap, obs, T_cw)
    mask = valid & (out.alpha > cfg.tracking.alpha_threshold) & depth_edge_mask(out.depth)
    exposure = (0.1, 0.02)
    target, affine = tracker._target(obs), tracker._affine(exposure, "cpu")
    m = mask.unsqueeze(-1).float()
    r = tracker._residual(out, target, m, affine)
    z_pivot = float(obs.depth[obs.depth > 0].median())
    J = torch.zeros(6, r.numel())
    tracker._analytic_pose_jacobian(out, obs, mask, affine, z_pivot, 0, obs.height, J.view(6, *r.shape))
    # Built band by band (as the normal equations do), the rows are the same.
    bands = torch.zeros(6, *r.shape)
    for a in range(0, obs.height, 7):
        b = min(obs.height, a + 7)
        tracker._analytic_pose_jacobian(out, obs, mask, affine, z_pivot, a, b, bands[:, a:b])
    torch.testing.assert_close(bands.view(6, -1), J)
    assert bool((J.view(6, *r.shape)[:, ~mask] == 0).all())
    h = 3e-3
    for k in range(6):
        d = np.zeros(6)
        d[k] = h
        plus = tracker._render(snap, obs, pivot_increment(d, z_pivot) @ T_cw)
        minus = tracker._render(snap, obs, pivot_increment(-d, z_pivot) @ T_cw)
        r_p = tracker._residual(plus, target, m, affine)
        r_m = tracker._residual(minus, target, m, affine)
        fd = ((r_p - r_m) / (2 * h)).reshape(-1)
        cos = float(fd @ J[k] / (fd.norm() * J[k].norm()))
        ratio = float(J[k].norm() / fd.norm())
        # Measured: cosine 0.93-0.96, norm ratio 0.8-0.85 (the render's footprints also change).
        assert cos > 0.85, (k, cos)
        assert 0.6 < ratio < 1.2, (k, ratio)


def test_analytic_jacobian_tracks_with_fewer_renders(monkeypatch):
    counts = {"n": 0}
    original = Tracker._render

    def counting(self, *args):
        counts["n"] += 1
        return original(self, *args)

    monkeypatch.setattr(Tracker, "_render", counting)
    renders, ates = {}, {}
    for kind, n in (("finite_difference", 0), ("analytic", 8)):
        counts["n"] = 0
        system = run_system(cfg_for(10, "system.threaded=false", f"tracking.analytic_iters={n}"))
        renders[kind], ates[kind] = counts["n"], ate_cm(system)
        assert all(f.ok for f in system.recorder.frames)
    assert renders["analytic"] < 0.35 * renders["finite_difference"], renders
    assert ates["analytic"] < 1.0, ates


def _dense_normal_equations(tracker, r, out, m, exposure, J6):
    """The normal equations from a whole-image float32 Jacobian (the unbanded reference)."""
    ex = torch.zeros(2, *r.shape)
    ex[0, ..., :3] = out.color * m * np.exp(exposure[0])
    ex[1, ..., :3] = m
    J = torch.cat([J6.reshape(6, -1), ex.reshape(2, -1)])
    w = tracker._robust_weights(r).reshape(-1)
    rv = r.reshape(-1)
    return (J * w) @ J.T, J @ (w * rv), float((w * rv * rv).sum())


@pytest.mark.parametrize("kind", ["analytic", "finite_difference"])
def test_banded_normal_equations_match_the_dense_ones(sample_map, monkeypatch, kind):
    import slam.tracking.tracker
    cfg, system, frame = sample_map
    tracker = Tracker(cfg.tracking, "cpu")
    obs, valid = tracker._pyramid(Observation.from_numpy(frame.color, frame.depth, frame.K,
                                                         torch.device("cpu")))[-1]
    monkeypatch.setattr(slam.tracking.tracker, "BAND_PIXELS", obs.width * 5 + 3)   # several bands, a short last one
    snap = system.smap.latest()
    T_cw = invert(system.recorder.snapshot()[0][8].T_wc)   # the previous frame's pose: a real residual
    out = tracker._render(snap, obs, T_cw)
    mask = valid & (out.alpha > cfg.tracking.alpha_threshold) & depth_edge_mask(out.depth)
    exposure = (0.05, -0.01)
    target, affine = tracker._target(obs), tracker._affine(exposure, "cpu")
    m = mask.unsqueeze(-1).float()
    r = tracker._residual(out, target, m, affine)
    z_pivot = float(obs.depth[obs.depth > 0].median())
    if kind == "analytic":
        J6 = torch.zeros(6, *r.shape)
        tracker._analytic_pose_jacobian(out, obs, mask, affine, z_pivot, 0, obs.height, J6)
        rows = lambda a, b, J: tracker._analytic_pose_jacobian(out, obs, mask, affine, z_pivot, a, b, J)  # noqa: E731
        tol = 1e-4
    else:
        moved = lambda T, d: pivot_increment(d, z_pivot) @ T  # noqa: E731
        cols = tracker._fd_pose_columns(snap, obs, target, m, affine, r, T_cw, moved)
        assert cols.dtype == torch.float16 and bool(torch.isfinite(cols).all())
        steps = [cfg.tracking.fd_rot] * 3 + [cfg.tracking.fd_trans] * 3
        J6 = torch.stack([(tracker._residual(tracker._render(snap, obs, moved(T_cw, np.eye(6)[k] * steps[k])),
                                             target, m, affine) - r) / steps[k] for k in range(6)])
        rows = lambda a, b, J: tracker._copy_rows(cols, a, b, J)  # noqa: E731
        tol = 1e-3   # float16 storage of the columns (measured: 1e-5)
    Hd, gd, cost = tracker._normal_equations(r, out, m, exposure, rows)
    H_ref, g_ref, cost_ref = _dense_normal_equations(tracker, r, out, m, exposure, J6)
    scale = float(H_ref.abs().max())
    assert float((Hd.float() - H_ref).abs().max()) < tol * scale
    assert float((gd.float() - g_ref).abs().max()) < tol * float(g_ref.abs().max()) + 1e-6 * scale
    assert cost == pytest.approx(cost_ref, rel=1e-4)
    # Steps solved from either agree in direction (what LM uses).
    A = Hd + 1e-3 * torch.diag(Hd.diagonal())
    A_ref = (H_ref + 1e-3 * torch.diag(H_ref.diagonal())).double()
    s, s_ref = torch.linalg.solve(A, gd), torch.linalg.solve(A_ref, g_ref.double())
    assert float(s @ s_ref / (s.norm() * s_ref.norm())) > 0.999


def test_tracks_without_the_exposure_term():
    # Six parameters instead of eight: the normal equations' exposure rows are left out.
    system = run_system(cfg_for(10, "system.threaded=false", "tracking.exposure=false"))
    assert all(f.ok for f in system.recorder.frames)
    assert ate_cm(system) < 1.0
