"""The quality test's calibration: samples labelled right / wrong, and the rule table."""
import math

import numpy as np

from slam.config import QualityConfig, load_config
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
    q = QualityConfig()
    level = {"loss": 0.1, "depth_inliers": 0.95}
    s = [Sample(0, (0, 0), "right", {"known": 0.8, "depth_inliers": 0.95, "color_inliers": 0.9}, 0.1, level),
         Sample(1, (0, 0), "right", {"known": 0.8, "depth_inliers": 0.55, "color_inliers": 0.9}, 0.12, level),
         Sample(2, (0.1, 6), "wrong", {"known": 0.8, "depth_inliers": 0.6, "color_inliers": 0.8}, 0.5, level),
         Sample(3, (0.1, 6), "wrong", {"known": 0.8, "depth_inliers": 0.1, "color_inliers": 0.3}, 0.9, level)]
    grid = {"min_depth_inliers": [0.5, 0.7], "residual_spike": [1e9], "weak_spike": [1e9]}
    rows = {r["min_depth_inliers"]: r for r in rule_table(s, q, 0.2, grid)}
    assert rows[0.5]["false_alarms"] == 0.0 and rows[0.5]["misses"] == 0.5
    assert rows[0.7]["false_alarms"] == 0.5 and rows[0.7]["misses"] == 0.0
    # The loss against the recent level catches the wrong result the floors pass (0.5 > 2.5 x 0.1).
    spike = rule_table(s, q, 0.2, {"min_depth_inliers": [0.5], "residual_spike": [2.5], "weak_spike": [1e9]})[0]
    assert spike["misses"] == 0.0 and spike["false_alarms"] == 0.0
    # Twice the level with depth inliers below 0.9 fails too (0.25 = 2.5 x 0.1, 60 % inliers).
    s[2].loss = 0.25
    weak = {"min_depth_inliers": [0.5], "residual_spike": [2.5], "weak_spike": [2.0], "weak_depth_inliers": [0.9]}
    assert rule_table(s, q, 0.2, weak)[0]["misses"] == 0.0
    assert rule_table(s, q, 0.2, {**weak, "weak_spike": [1e9]})[0]["misses"] == 0.5


def test_collect_on_the_sample_finds_right_and_wrong_results(sample_run):
    cfg = load_config("default.yaml", ["data.last=9", *sample_run.FAST, *OPEN_TEST])
    samples = collect(cfg, open_source(cfg.data), every=4)
    own = [s for s in samples if s.start == (0.0, 0.0)]
    assert own and all(s.label == "right" for s in own)         # the sample tracks within 2 cm / 1 deg
    labels = {s.label for s in samples if s.start != (0.0, 0.0)}
    assert "wrong" in labels                                     # some perturbed starts do not come back
    rows = rule_table(samples, cfg.quality, 0.2, {"min_depth_inliers": [0.5, 0.9]})
    assert all(r["right"] == sum(s.label == "right" for s in samples) for r in rows)
