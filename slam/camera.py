"""Pinhole camera intrinsics shared by every layer that changes an image's resolution (the
loaders' preprocessing, observations' pyramid levels, keyframes, saved maps, the viewer).

Conventions: OpenCV pinhole, K = [[fx, 0, cx], [0, fy, cy], [0, 0, 1]] in pixels, pixel centres
at integer coordinates. Downscaling by a factor ``s`` maps pixel block ``[s*u, s*u + s)`` to pixel
``u``, so ``fx' = fx/s, fy' = fy/s, cx' = (cx + 0.5)/s - 0.5, cy' = (cy + 0.5)/s - 0.5``.
"""
from __future__ import annotations

import numpy as np
import torch


def scale_K(K, s: float):
    """Intrinsics (3, 3) of an image downscaled by factor ``s`` (> 1 shrinks; the pixel-centre
    convention above). ``K``: (3, 3) in pixels, numpy / nested list or a tensor. A numpy ``K``
    comes back as float64; a tensor keeps its dtype and device."""
    if isinstance(K, torch.Tensor):   # on the host in float64, back as one tensor: one op, not eight
        return torch.tensor(scale_K(K.tolist(), s), dtype=K.dtype, device=K.device)
    K2 = np.asarray(K, dtype=np.float64).copy()
    if s == 1:
        return K2
    K2[0, 0] = K2[0, 0] / s
    K2[1, 1] = K2[1, 1] / s
    K2[0, 2] = (K2[0, 2] + 0.5) / s - 0.5
    K2[1, 2] = (K2[1, 2] + 0.5) / s - 0.5
    return K2
