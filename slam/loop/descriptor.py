"""A global image descriptor for revisit detection: a small, blurred, zero-mean, unit-norm grey
thumbnail (cheap, no vocabulary to train, invariant to affine exposure changes). Candidates are
ranked by the correlation of two descriptors; ORB + PnP then does the real matching."""
from __future__ import annotations

import cv2
import numpy as np

# The thumbnail's size: coarse enough to ignore small viewpoint changes, fine enough to tell
# places apart. Not a tuning value of the loop test (``loop.min_similarity`` is).
THUMB_W, THUMB_H = 32, 24


def global_descriptor(color: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 RGB -> (THUMB_W * THUMB_H,) float32, zero mean, unit norm."""
    grey = cv2.cvtColor(color, cv2.COLOR_RGB2GRAY).astype(np.float32)
    small = cv2.resize(grey, (THUMB_W, THUMB_H), interpolation=cv2.INTER_AREA)
    small = cv2.GaussianBlur(small, (3, 3), 0).ravel()
    small -= small.mean()
    return small / max(float(np.linalg.norm(small)), 1e-6)


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Correlation of two descriptors, in [-1, 1]."""
    return float(a @ b)
