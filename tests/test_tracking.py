"""Tracker internals on a map built from the start of the bundled sample: the analytic pose
Jacobian agrees with finite differences of real renders, and tracking with it stays accurate
with far fewer renders."""
import numpy as np
import pytest
import torch

from slam.data.sources import open_source
from slam.geometry import invert, pivot_increment
from slam.observation import Observation, depth_edge_mask
from slam.tracking import Tracker

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
    tracker._analytic_pose_jacobian(out, obs, mask, affine, z_pivot, J)
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
