"""Pruner scoring and removal rules, adaptivity, and the hard budget."""
import pytest
import torch

from slam.config import PrunerConfig
from slam.map.sphere_map import SphereMap
from slam.mapping.pruner import Pruner, adapt_factor


def make_map(n=10, opacity=0.8):
    m = SphereMap(chunk=16)
    m.add(torch.rand(n, 3), torch.full((n,), 0.01), torch.full((n, 3), 0.5), torch.full((n,), opacity))
    return m


def test_importance_rewards_contribution_and_penalises_error():
    m = make_map(4)
    p = Pruner(PrunerConfig(weight_ema=0.0))
    weight = torch.tensor([10.0, 10.0, 1.0, 10.0])
    error = weight * torch.tensor([0.1, 0.5, 0.1, 0.1])  # blend-weighted error sums
    p.record(m, weight, error, renders=1)
    s = p.importance(m)
    assert s[0] > s[1]          # same coverage, more error -> less important
    assert s[0] > s[2]          # same error, less coverage -> less important
    assert torch.isclose(s[0], s[3])


def test_low_spheres_removed_only_after_window_rounds_and_unseen_are_kept():
    m = make_map(5)
    cfg = PrunerConfig(window=2, threshold=0.5, weight_ema=0.0, explore_keep=1.0, revisit_prune=1.0)
    p = Pruner(cfg)
    weight = torch.tensor([10.0, 10.0, 10.0, 0.01, 0.0])    # sphere 4 is not seen at all
    error = weight * 0.1
    seen = weight > 0
    radius_px = torch.zeros(5)
    p.record(m, weight, error, 1)
    r1 = p.prune(m, novelty=0.0, screen_radius_px=radius_px, seen=seen)
    assert r1.total == 0 and m.n == 5                      # first low round: kept
    p.record(m, weight, error, 1)
    r2 = p.prune(m, novelty=0.0, screen_radius_px=radius_px, seen=seen)
    assert r2.removed_low == 1 and m.n == 4                # second low round: gone
    # the never-seen sphere survived (out of view is not useless)


def test_transparent_and_oversized_removed_at_once():
    m = make_map(4)
    m.params[0, 7] = -10.0   # opacity ~ 0
    p = Pruner(PrunerConfig(max_radius_px=50.0))
    w = torch.ones(4)
    p.record(m, w, w * 0.1, 1)
    rep = p.prune(m, 0.0, torch.tensor([1.0, 1.0, 80.0, 1.0]), w > 0)
    assert rep.removed_transparent == 1 and rep.removed_oversized == 1 and m.n == 2


def test_disabled_pruner_removes_nothing():
    m = make_map(4)
    m.params[0, 7] = -10.0
    p = Pruner(PrunerConfig(enabled=False))
    assert p.prune(m, 0.0, torch.full((4,), 999.0), torch.ones(4, dtype=torch.bool)).total == 0


def test_adaptive_threshold_between_explore_and_revisit():
    cfg = PrunerConfig(explore_keep=0.5, revisit_prune=2.0)
    assert adapt_factor(cfg, 0.0) == 2.0       # revisiting: prune harder
    assert adapt_factor(cfg, 0.5) == 0.5       # exploring: keep more
    assert 0.5 < adapt_factor(cfg, 0.1) < 2.0


def test_make_room_drops_least_important_to_fit_budget():
    m = SphereMap(max_spheres=10, chunk=4)
    m.add(torch.rand(10, 3), torch.full((10,), 0.01), torch.full((10, 3), 0.5), torch.full((10,), 0.8))
    p = Pruner(PrunerConfig(weight_ema=0.0))
    weight = torch.arange(1, 11, dtype=torch.float32)
    p.record(m, weight, weight * 0.1, 1)
    keep_best = m.active()[5:].clone()
    removed = p.make_room(m, incoming=4, headroom=1.0)
    assert removed == 4 and m.n == 6
    assert torch.equal(m.active()[-5:], keep_best)        # the most important survived
    assert m.add(torch.rand(4, 3), torch.full((4,), 0.01), torch.full((4, 3), 0.5), torch.full((4,), 0.8)) == 4
    assert m.n == 10 == m.budget


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_a_round_on_a_device_map_runs_on_the_host_and_removes_what_the_cpu_map_does(device):
    """The statistics live on the host whatever the map's device; the device's sums and masks
    (the mapper's) are copied down; a GPU map loses the same rows as a CPU map, its rows and Adam
    state compacted to the bit."""
    def run(dev):
        gen = torch.Generator().manual_seed(3)
        m = SphereMap(dev, chunk=16)
        m.add(torch.rand(40, 3, generator=gen), torch.full((40,), 0.01), torch.full((40, 3), 0.5),
              torch.full((40,), 0.8))
        m.params[5, 7] = -10.0                                    # transparent
        m.exp_avg[:40] = torch.arange(40, dtype=torch.float32, device=dev)[:, None]
        p = Pruner(PrunerConfig(window=1, threshold=0.5, weight_ema=0.0, explore_keep=1.0, revisit_prune=1.0,
                                max_radius_px=50.0))
        weight = torch.rand(40, generator=gen) * 10
        weight[::7] = 0.01                                        # low
        weight[3] = 0.0                                           # unseen
        radius = torch.ones(40)
        radius[11] = 80.0                                         # oversized
        w, r = weight.to(dev), radius.to(dev)
        p.record(m, w, w * 0.1, 1)
        report = p.prune(m, 0.0, r, w > 0)
        return m, report

    m, report = run(device)
    assert all(v.device.type == "cpu" for v in m.stats.values())
    assert report.removed_transparent == 1 and report.removed_oversized == 1 and report.removed_low >= 1
    if device != "cpu":
        ref, ref_report = run("cpu")
        assert report == ref_report and m.n == ref.n
        assert torch.equal(m.params[:m.n].cpu(), ref.params[:ref.n])
        assert torch.equal(m.exp_avg[:m.n].cpu(), ref.exp_avg[:ref.n])
        assert torch.equal(m.params[m.n:40].cpu(), torch.zeros(40 - m.n, 8))
