"""slam.tools.blur_effect: sharpness, (partial) rank correlation and per-step motion errors."""
from __future__ import annotations

import cv2
import numpy as np

from slam.geometry import so3_exp
from slam.tools.blur_effect import motion_errors, sharpness, spearman


def test_a_blurred_image_is_less_sharp():
    rng = np.random.default_rng(0)
    img = (rng.random((120, 160, 3)) * 255).astype(np.uint8)
    blurred = [cv2.GaussianBlur(img, (0, 0), s) for s in (0.5, 1.0, 2.0)]
    values = [sharpness(img)] + [sharpness(b) for b in blurred]
    assert all(a > b for a, b in zip(values, values[1:]))


def test_partial_correlation_removes_a_common_cause():
    """x and y both follow c (and nothing else): correlated, but not once c is taken out."""
    rng = np.random.default_rng(1)
    c = rng.random(400)
    x, y = c + 0.05 * rng.standard_normal(400), c + 0.05 * rng.standard_normal(400)
    assert spearman(x, y) > 0.8
    assert abs(spearman(x, y, c)) < 0.15
    assert spearman(x, -x) < -0.99


def test_motion_errors_measure_the_run_against_the_truth():
    """A run that drifts 1 cm along x per frame on a truth that turns and moves: error 1 cm per
    frame step, 2 over two; a frame without a pose is left out."""
    truth, run = [], []
    for i in range(6):
        T = np.eye(4)
        T[:3, :3] = so3_exp(np.radians([0.0, 3.0 * i, 0.0]))
        T[:3, 3] = [0.02 * i, 0.0, 0.01 * i]
        truth.append(T)
        D = np.eye(4)
        D[0, 3] = 0.01 * i
        run.append(D @ T)        # drift along the world's x
    run[3] = None
    idx, err, size = motion_errors(run, truth, 1)
    assert list(idx) == [1, 2, 5] and np.allclose(err, 1.0)
    assert np.all(size > 3.0)    # 3 deg + the step's cm
    idx, err, _ = motion_errors(run, truth, 2)
    assert list(idx) == [2, 4] and np.allclose(err, 2.0)
