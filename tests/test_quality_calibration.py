"""The quality test's calibration: samples labelled right / wrong, and the rule table."""
import math

import numpy as np

from slam.config import load_config
from slam.data.sources import open_source
from slam.eval.quality_calibration import OPEN_TEST, Sample, collect, perturbed, rule_table
from slam.geometry import relative_motion


def test_perturbation_has_the_asked_size():
    rng = np.random.default_rng(1)
    T = perturbed(np.eye(4), 0.1, 6.0, rng)
    shift, turn = relative_motion(np.eye(4), T)
    assert math.isclose(math.degrees(turn), 6.0, rel_tol=1e-9)
    assert 0.0 < shift < 0.2


def test_rule_table_counts_false_alarms_and_misses():
    s = [Sample(0, (0, 0), "right", {"depth_inliers": 0.95, "color_inliers": 0.9}),
         Sample(1, (0, 0), "right", {"depth_inliers": 0.55, "color_inliers": 0.9}),
         Sample(2, (0.1, 6), "wrong", {"depth_inliers": 0.6, "color_inliers": 0.8}),
         Sample(3, (0.1, 6), "wrong", {"depth_inliers": 0.1, "color_inliers": float("nan")})]
    rows = {(r["d"], r["c"]): r for r in rule_table(s, depth_mins=(0.5, 0.7), color_mins=(0.5,))}
    assert rows[(0.5, 0.5)]["false_alarms"] == 0.0 and rows[(0.5, 0.5)]["misses"] == 0.5
    assert rows[(0.7, 0.5)]["false_alarms"] == 0.5 and rows[(0.7, 0.5)]["misses"] == 0.0


def test_collect_on_the_sample_finds_right_and_wrong_results(sample_run):
    cfg = load_config("default.yaml", ["data.last=9", *sample_run.FAST, *OPEN_TEST])
    samples = collect(cfg, open_source(cfg.data), every=4)
    own = [s for s in samples if s.start == (0.0, 0.0)]
    assert own and all(s.label == "right" for s in own)         # the sample tracks within 2 cm / 1 deg
    labels = {s.label for s in samples if s.start != (0.0, 0.0)}
    assert "wrong" in labels                                     # some perturbed starts do not come back
    rows = rule_table(samples)
    assert all(r["right"] == sum(s.label == "right" for s in samples) for r in rows)
