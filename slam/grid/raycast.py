"""One keyframe's evidence for the grid: which voxels of the robot's height band it sees occupied
and which free.

The band [min_height, max_height] above the floor is cut into layers of ``resolution`` (cubic
voxels). Each depth ray runs from the camera to its surface point; in the floor frame
(``FloorFrame``):
- the point is an **obstacle** when its height is in the band and it is within ``max_range`` of
  the camera: its voxel is occupied;
- the ray is **free** where its height is in the band: the part of the segment between the band's
  two heights (clipped to the camera and the point); a ray to a floor point (lower than
  min_height) stays free down to the point, the part below the band counting in the lowest layer
  (the floor is seen there). Rays are cut at ``max_range``: farther points clear space up to that
  distance and are no obstacle;
- a voxel that this keyframe sees occupied is not free for this keyframe.

Free segments are sampled at half a voxel and the voxels they touch are taken once per keyframe
(counts per keyframe, not per ray: a voxel crossed by a hundred rays of one view is one
observation). Why voxels and not cells: a ray passing a table top's cell above the top says the
space above the top is free, not the cell; the 2D grid is the columns' projection
(``slam.grid.occupancy``), which keeps the top occupied.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rasterizer.grid import grid_cast
from slam.grid.floor import FloorFrame

STEP_CELLS = 0.5          # free-segment sample spacing, cells


@dataclass(frozen=True)
class Contribution:
    """A keyframe's evidence: occupied and free voxels, each (M, 3) int32 (cell x, cell y, layer)
    in the floor frame (cell (i, j) covers [i, i + 1) x [j, j + 1) times the resolution; layer k
    the heights min_height + [k, k + 1) times it); distinct, and disjoint."""

    occupied: np.ndarray
    free: np.ndarray

    @staticmethod
    def empty() -> "Contribution":
        z = np.zeros((0, 3), np.int32)
        return Contribution(z, z)


def _unique_voxels(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(M, 3) int64 voxels -> (the distinct ones (M', 3) int64 in a fixed order, the bounding box's
    low corner (3,), its size (3,))."""
    lo = v.min(axis=0)
    span = v.max(axis=0) - lo + 1
    flat = ((v[:, 2] - lo[2]) * span[1] + (v[:, 1] - lo[1])) * span[0] + (v[:, 0] - lo[0])
    seen = np.zeros(int(np.prod(span)), dtype=bool)
    seen[flat] = True
    idx = np.flatnonzero(seen)
    x = idx % span[0]
    y = (idx // span[0]) % span[1]
    z = idx // (span[0] * span[1])
    return np.stack([x + lo[0], y + lo[1], z + lo[2]], axis=1), lo, span


def cast(points_c: np.ndarray, T_wc: np.ndarray, floor: FloorFrame, resolution: float, min_height: float,
         max_height: float, max_range: float) -> Contribution:
    """points_c: (N, 3) metres, camera frame (a ``Scan``'s); T_wc: (4, 4) the keyframe's pose;
    resolution: m per cell and per layer; min_height / max_height: the band, m above the floor;
    max_range: m. The host kernel ``rasterizer.grid.grid_cast`` (one call without the interpreter
    lock: the grid thread casts beside the tracking and mapping threads); ``cast_reference`` is its
    NumPy model."""
    pts, cam, layers = _floor_frame(points_c, T_wc, floor, resolution, min_height, max_height)
    if len(pts) == 0:
        return Contribution.empty()
    occupied, free = grid_cast(pts, cam, resolution, min_height, max_height, max_range, layers, STEP_CELLS)
    return Contribution(occupied, free)


def _floor_frame(points_c, T_wc, floor: FloorFrame, resolution: float, min_height: float, max_height: float):
    """(the points (N, 3) and the camera (3,) in the floor frame, float64; the band's layers)."""
    P = np.asarray(points_c, dtype=np.float64)
    layers = max(1, int(np.ceil((max_height - min_height) / resolution - 1e-9)))
    T_wc = np.asarray(T_wc, dtype=np.float64)
    pts = floor.to_floor(P @ T_wc[:3, :3].T + T_wc[:3, 3])           # (N, 3): x, y, height
    return pts, floor.to_floor(T_wc[None, :3, 3])[0], layers


def cast_reference(points_c: np.ndarray, T_wc: np.ndarray, floor: FloorFrame, resolution: float,
                   min_height: float, max_height: float, max_range: float) -> Contribution:
    """``cast`` in NumPy: the model the host kernel follows and the tests' oracle."""
    pts, cam, layers = _floor_frame(points_c, T_wc, floor, resolution, min_height, max_height)
    if len(pts) == 0:
        return Contribution.empty()
    d = pts - cam
    dist = np.linalg.norm(d, axis=1)
    t_end = np.minimum(1.0, max_range / np.maximum(dist, 1e-9))         # cut at max_range
    h = pts[:, 2]
    obstacle = (h >= min_height) & (h <= max_height) & (dist <= max_range)
    floor_pt = (h < min_height) & (dist <= max_range)
    # The ray's parameter interval inside the band (heights are linear in t).
    dh = d[:, 2]
    flat = np.abs(dh) < 1e-9
    in_band_flat = flat & (cam[2] >= min_height) & (cam[2] <= max_height)
    safe = np.where(flat, 1.0, dh)
    t1, t2 = (min_height - cam[2]) / safe, (max_height - cam[2]) / safe
    ta = np.where(flat, np.where(in_band_flat, 0.0, 1.0), np.minimum(t1, t2))
    tb = np.where(flat, np.where(in_band_flat, 1.0, 0.0), np.maximum(t1, t2))
    tb = np.where(floor_pt, 1.0, tb)             # down to the floor point itself: seen floor
    ta = np.clip(ta, 0.0, None)
    tb = np.minimum(tb, t_end)
    seg = tb > ta
    occupied = _voxels(pts[obstacle], resolution, min_height, layers)
    if not seg.any():                            # no ray crosses the band: nothing seen free
        return Contribution(occupied, np.zeros((0, 3), np.int32))
    ta, tb, dseg = ta[seg], tb[seg], d[seg]
    a = cam + ta[:, None] * dseg
    b = cam + tb[:, None] * dseg
    length = np.linalg.norm(b - a, axis=1)
    n = (length / (STEP_CELLS * resolution)).astype(np.int64) + 2          # samples per segment, ends included
    idx = np.repeat(np.arange(len(n), dtype=np.int32), n)
    k = np.arange(int(n.sum()), dtype=np.float32) - np.repeat((np.cumsum(n) - n).astype(np.float32), n)
    frac = k / (n.astype(np.float32) - 1.0)[idx]
    # In voxel units (x, y, layer), float32: the samples are the bulk of the work.
    scale = np.array([1.0, 1.0, 1.0]) / resolution
    shift = np.array([0.0, 0.0, min_height / resolution])
    av, bv = (a * scale - shift).astype(np.float32), (b * scale - shift).astype(np.float32)
    lo = np.floor(np.minimum(av.min(0), bv.min(0))).astype(np.int64)
    hi = np.floor(np.maximum(av.max(0), bv.max(0))).astype(np.int64)
    lo[2], hi[2] = 0, layers - 1
    span = hi - lo + 1
    seen = np.zeros(int(np.prod(span)), dtype=bool)
    flat = np.zeros(len(idx), np.int64)
    for axis, stride in ((2, span[0] * span[1]), (1, span[0]), (0, 1)):
        c = np.floor(av[idx, axis] + (bv[idx, axis] - av[idx, axis]) * frac).astype(np.int64) - lo[axis]
        np.clip(c, 0, span[axis] - 1, out=c)     # below the band: its lowest layer (and float edges)
        flat += c * stride
    seen[flat] = True
    if len(occupied):
        o = occupied.astype(np.int64) - lo
        inside = np.all((o >= 0) & (o < span), axis=1)
        o = o[inside]
        seen[(o[:, 2] * span[1] + o[:, 1]) * span[0] + o[:, 0]] = False
    i = np.flatnonzero(seen)
    free = np.stack([i % span[0] + lo[0], (i // span[0]) % span[1] + lo[1], i // (span[0] * span[1])], axis=1)
    return Contribution(occupied, free.astype(np.int32))


def _voxels(p: np.ndarray, resolution: float, min_height: float, layers: int) -> np.ndarray:
    """(M, 3) points (floor frame, m) -> their distinct voxels (M', 3) int32; heights below the band
    count in its lowest layer, above it in its highest."""
    if len(p) == 0:
        return np.zeros((0, 3), np.int32)
    v = np.empty((len(p), 3), np.int64)
    v[:, :2] = np.floor(p[:, :2] / resolution)
    v[:, 2] = np.clip(np.floor((p[:, 2] - min_height) / resolution), 0, layers - 1)
    return _unique_voxels(v)[0].astype(np.int32)
