"""An occupancy grid's ray casting on the host: the wrapper of the host-only op ``grid_cast``
(csrc/grid_cpu.cpp; ``_ext.HOST_ONLY``: the scans it casts live on the host). The model and its
NumPy oracle are the grid's (slam/grid/raycast.py ``cast_reference``; tests/test_grid_kernel.py
compares the two voxel for voxel). One call without the interpreter lock."""
from __future__ import annotations

import numpy as np
import torch

from . import _ext


def grid_cast(pts: np.ndarray, cam: np.ndarray, resolution: float, min_height: float, max_height: float,
              max_range: float, layers: int, step_cells: float) -> tuple[np.ndarray, np.ndarray]:
    """pts: (N, 3) surface points and cam: (3,) the camera, floor frame (x, y, height above the
    floor; metres); resolution: m per cell and layer; the band [min_height, max_height] (m) in
    ``layers`` layers; rays cut at max_range (m); free segments sampled every ``step_cells`` cells.
    Returns (occupied (M, 3), free (F, 3)) int32 voxels (cell x, cell y, layer), distinct, ordered
    by (layer, y, x), disjoint."""
    cam = np.asarray(cam, dtype=np.float64)
    occupied, free = _ext.ops("cpu").grid_cast(
        torch.from_numpy(np.ascontiguousarray(pts, dtype=np.float64).reshape(-1, 3)),
        [cam[0], cam[1], cam[2], resolution, min_height, max_height, max_range, float(layers), step_cells])
    return occupied.numpy(), free.numpy()
