"""Densification's candidate pixels (slam.mapping.densify.candidate_mask): missing, in front of the
map or (when switched on) too coarse in colour, on valid depth away from edges."""
from types import SimpleNamespace

import torch

from slam.config import MappingConfig
from slam.mapping.densify import candidate_mask
from slam.observation import Observation


def _scene():
    h, w = 6, 8
    obs = Observation(torch.zeros(h, w, 3), torch.full((h, w), 2.0), torch.eye(3))
    render = SimpleNamespace(alpha=torch.ones(h, w), depth=torch.full((h, w), 2.0), color=torch.zeros(h, w, 3))
    render.alpha[0, 0] = 0.5          # missing
    render.depth[1, 1] = 2.2          # the observed surface 0.2 m in front of the map's
    render.color[2, 2] = 1.0          # colour off by the most it can be (mean error 1)
    render.color[3, 3] = 0.6          # off by 0.6
    return obs, render


def test_missing_and_in_front_pixels_are_candidates_and_colour_alone_is_not_by_default():
    obs, render = _scene()
    mask = candidate_mask(obs, render, MappingConfig())
    assert MappingConfig().densify_color_error == 1.0
    assert mask[0, 0] and mask[1, 1]
    assert int(mask.sum()) == 2       # neither the colour-only pixels (off) nor the agreeing rest


def test_colour_error_counts_when_switched_on():
    obs, render = _scene()
    mask = candidate_mask(obs, render, MappingConfig(densify_color_error=0.5))
    assert mask[2, 2] and mask[3, 3] and int(mask.sum()) == 4
    assert int(candidate_mask(obs, render, MappingConfig(densify_color_error=0.7)).sum()) == 3
