"""Densification (slam.mapping.densify): the candidate pixels (missing, in front of the map or, when
switched on, too coarse in colour, on valid depth away from edges), the seeding grid, and which
seeds a budget cut keeps (the most needed: lowest priority, ties in grid order)."""
from types import SimpleNamespace

import pytest
import torch

from slam.config import MappingConfig
from slam.mapping.densify import candidate_mask, most_needed, seed_pixels, seed_spheres
from slam.observation import Observation


def _scene():
    h, w = 6, 8
    obs = Observation(torch.zeros(h, w, 3), torch.full((h, w), 2.0), torch.eye(3))
    render = SimpleNamespace(alpha=torch.ones(h, w), depth=torch.full((h, w), 2.0), color=torch.zeros(h, w, 3))
    render.alpha[0, 0] = 0.5          # missing
    render.depth[1, 1] = 2.2          # the observed surface 0.2 m in front of the map's
    render.color[2, 2] = 1.0          # colour off by the most it can be (mean error 1)
    render.color[3, 3] = 0.6          # off by 0.6
    return obs, render, torch.ones(h, w, dtype=torch.bool)


def test_missing_and_in_front_pixels_are_candidates_and_colour_alone_is_not_by_default():
    obs, render, depth_ok = _scene()
    mask = candidate_mask(obs, render, MappingConfig(), depth_ok)
    assert MappingConfig().densify_color_error == 1.0
    assert mask[0, 0] and mask[1, 1]
    assert int(mask.sum()) == 2       # neither the colour-only pixels (off) nor the agreeing rest


def test_colour_error_counts_when_switched_on():
    obs, render, depth_ok = _scene()
    mask = candidate_mask(obs, render, MappingConfig(densify_color_error=0.5), depth_ok)
    assert mask[2, 2] and mask[3, 3] and int(mask.sum()) == 4
    assert int(candidate_mask(obs, render, MappingConfig(densify_color_error=0.7), depth_ok).sum()) == 3


def test_only_pixels_with_edge_free_depth_are_candidates():
    """The mask the keyframe's loss uses (invalid or edge depth) rules a pixel out, missing or not;
    with no map yet it is the whole answer."""
    obs, render, depth_ok = _scene()
    depth_ok[0, 0] = False
    mask = candidate_mask(obs, render, MappingConfig(), depth_ok)
    assert not mask[0, 0] and mask[1, 1] and int(mask.sum()) == 1
    assert torch.equal(candidate_mask(obs, None, MappingConfig(), depth_ok), depth_ok)


def test_seed_pixels_are_the_masked_grid_points_in_row_major_order():
    cfg = MappingConfig(densify_stride=2)
    mask = torch.ones(5, 6, dtype=torch.bool)
    mask[2, :] = False
    vs, us = seed_pixels(mask, cfg, torch.Generator().manual_seed(0))
    assert vs.numel() > 0 and bool(mask[vs, us].all())
    assert len({int(v) % 2 for v in vs}) == 1 and len({int(u) % 2 for u in us}) == 1   # one grid offset
    flat = (vs * 6 + us).tolist()
    assert flat == sorted(flat)
    assert vs.numel() == int(mask[int(vs[0]) % 2 :: 2, int(us[0]) % 2 :: 2].sum())   # every masked grid point


def test_a_budget_cut_keeps_the_lowest_priority_seeds_ties_in_their_order():
    vs = torch.tensor([0, 0, 1, 1, 2])
    us = torch.tensor([0, 3, 1, 2, 0])
    priority = torch.zeros(3, 4)
    priority[0, 0], priority[0, 3], priority[1, 1], priority[1, 2], priority[2, 0] = 0.9, 0.2, 0.5, 0.2, 0.0
    kv, ku = most_needed(vs, us, priority, 3)
    assert list(zip(kv.tolist(), ku.tolist())) == [(2, 0), (0, 3), (1, 2)]
    assert most_needed(vs, us, priority, 0)[0].numel() == 0


def test_seed_spheres_back_project_their_pixels():
    cfg = MappingConfig(densify_stride=2)
    K = torch.tensor([[100.0, 0, 4], [0, 100.0, 3], [0, 0, 1]])
    obs = Observation(torch.rand(6, 8, 3), torch.full((6, 8), 2.0), K)
    vs, us = torch.tensor([3, 1]), torch.tensor([4, 6])
    means, radii, colors, opacities = seed_spheres(obs, torch.eye(4), vs, us, cfg)
    assert torch.allclose(means, torch.tensor([[0.0, 0.0, 2.0], [0.04, -0.04, 2.0]]))
    assert torch.allclose(radii, torch.full((2,), cfg.radius_scale * 2 * 2.0 / 100.0))
    assert torch.equal(colors, obs.color[vs, us]) and torch.all(opacities == cfg.initial_opacity)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _seeded(device: str, budget: int):
    """A mapper whose map covers the left half of a keyframe's view (1 m behind its surface),
    after one densification of that keyframe: (added, the new rows (M, 8) on the host)."""
    import numpy as np

    from slam.config import PrunerConfig
    from slam.map.keyframes import Keyframe, KeyframeView
    from slam.map.sphere_map import SphereMap
    from slam.mapping.keyframes import KeyframeStore
    from slam.mapping.mapper import Mapper

    K = np.array([[40.0, 0, 19.5], [0, 40.0, 14.5], [0, 0, 1]])
    kf = Keyframe(0, 0.0, np.eye(4), np.full((30, 40, 3), 128, np.uint8), np.full((30, 40), 2.0, np.float16), K,
                  kf_id=1)
    ys, xs = torch.meshgrid(torch.linspace(-0.7, 0.7, 30), torch.linspace(-1.9, -0.05, 40), indexing="ij")
    behind = torch.stack([xs.flatten() * 1.5, ys.flatten() * 1.5, torch.full((1200,), 3.0)], 1)  # left half, 1 m behind
    smap = SphereMap(device, max_spheres=budget)
    smap.add(behind, torch.full((1200,), 0.05), torch.full((1200, 3), 0.5), torch.full((1200,), 0.99))
    smap.publish()
    mapper = Mapper(MappingConfig(), PrunerConfig(enabled=False), smap, KeyframeStore(4), backend=device)
    added, _, _ = mapper._densify(KeyframeView.upload(kf, torch.device(device)), kf)
    return added, smap.params[1200:smap.n].cpu()


@pytest.mark.parametrize("device", DEVICES)
def test_the_mapper_cuts_new_seeds_to_the_budget_keeping_the_map_s_holes(device):
    """With no room for every seed, the mapper keeps those where the map renders the least alpha
    (the holes), not the first in grid order; with room, every seed is added. The mask and the
    seeds are made on the host from the keyframe's arrays and the render's images: a GPU map gets
    the CPU map's rows, to the bit."""
    added, new = _seeded(device, 10_000)
    assert added == 300 and bool((new[:, 0] < 0).any()) and bool((new[:, 0] > 0).any())   # both halves
    added_tight, tight = _seeded(device, 1200 + 60)
    assert added_tight == 60 and bool((tight[:, 0] > 0.02).all())     # all from the uncovered right half
    if device != "cpu":   # the kept seeds lie where no sphere renders (alpha 0 on every device)
        assert torch.equal(tight, _seeded("cpu", 1200 + 60)[1])
