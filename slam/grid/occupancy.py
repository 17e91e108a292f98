"""The grid's state: per voxel of the height band, how many keyframes saw it occupied and how
many free; its projection to the 2D grid; the immutable published version (``GridSnapshot``).

Counts, not clamped log-odds: a keyframe's evidence is added when it is integrated and subtracted
exactly when it is integrated again at a new pose (loop closure). The log-odds of a voxel is
``hits * log_odds_hit + misses * log_odds_miss`` (OctoMap's update without its clamping).

A cell of the 2D grid (a column of voxels) is
- occupied when one of its voxels is (log-odds above that of ``occupied_thresh``): its
  probability is the most likely occupied voxel's;
- free when none is occupied and at least ``free_coverage`` of its voxels were seen free
  (log-odds below that of ``free_thresh``); its probability is the column's highest;
- unknown otherwise: unseen, or seen free only in part (rays under a table see its legs' space,
  not its top; rays above an occluded table top see the space above it, not the top).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from slam.grid.floor import FloorFrame
from slam.grid.raycast import Contribution

GROW_CELLS = 64           # margin added when the grid grows


def logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def _column_box(c: Contribution) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """The (x, y) bounding box (lo, hi: (2,) int64, inclusive) of a contribution's voxels, None when
    it has none. Column by column: numpy's axis-0 reduction of an (M, 2) view is 30x slower."""
    parts = [v for v in (c.occupied, c.free) if len(v)]
    if not parts:
        return None
    lo = np.array([min(int(v[:, k].min()) for v in parts) for k in (0, 1)], np.int64)
    hi = np.array([max(int(v[:, k].max()) for v in parts) for k in (0, 1)], np.int64)
    return lo, hi


class GridCounts:
    """hits, misses: (layers, H, W) counts; voxel (x, y, k) of the floor frame is at
    [k, y - origin[1], x - origin[0]] (row = y). A contribution's voxels are distinct, so no count
    exceeds the number of keyframes integrated (``integrated``): the counts are uint16 (half the
    memory of int32: 72 MB for a 50 x 50 m floor at 5 cm and 18 layers) until that number would
    pass 65535, then int32."""

    def __init__(self, layers: int) -> None:
        self.layers = layers
        self.origin = np.zeros(2, np.int64)
        self.hits = np.zeros((layers, 0, 0), np.uint16)
        self.misses = np.zeros((layers, 0, 0), np.uint16)
        self.integrated = 0                   # contributions added and not taken out
        self.box: Optional[tuple] = None      # (x0, y0, x1, y1) cells ever touched, inclusive

    @property
    def shape(self) -> tuple[int, int]:
        return self.hits.shape[1:]

    def nbytes(self) -> int:
        return self.hits.nbytes + self.misses.nbytes

    def clear(self) -> None:
        self.__init__(self.layers)

    def _fit(self, lo: np.ndarray, hi: np.ndarray) -> None:
        """Grow (with a margin) so that the columns from ``lo`` to ``hi`` ((2,) int64 x, y) fall
        inside."""
        h, w = self.shape
        cur_lo, cur_hi = self.origin, self.origin + np.array([w, h]) - 1
        if h and w and np.all(lo >= cur_lo) and np.all(hi <= cur_hi):
            return
        new_lo = np.minimum(lo - GROW_CELLS, cur_lo) if h and w else lo - GROW_CELLS
        new_hi = np.maximum(hi + GROW_CELLS, cur_hi) if h and w else hi + GROW_CELLS
        W, H = (new_hi - new_lo + 1).tolist()
        dtype = self.hits.dtype
        hits, misses = np.zeros((self.layers, H, W), dtype), np.zeros((self.layers, H, W), dtype)
        if h and w:
            ox, oy = (cur_lo - new_lo).tolist()
            hits[:, oy:oy + h, ox:ox + w] = self.hits
            misses[:, oy:oy + h, ox:ox + w] = self.misses
        self.origin, self.hits, self.misses = new_lo, hits, misses

    def add(self, c: Contribution, sign: int = 1) -> None:
        """Add (sign 1) or take out (sign -1) one keyframe's evidence (its voxels are distinct)."""
        if sign > 0 and self.integrated + 1 > np.iinfo(self.hits.dtype).max:
            self.hits, self.misses = self.hits.astype(np.int32), self.misses.astype(np.int32)
        self.integrated += 1 if sign > 0 else -1
        if sign > 0:
            box = _column_box(c)
            if box is not None:
                self._fit(*box)
                lo, hi = box[0].tolist(), box[1].tolist()
                b = self.box or (lo[0], lo[1], hi[0], hi[1])
                self.box = (min(b[0], lo[0]), min(b[1], lo[1]), max(b[2], hi[0]), max(b[3], hi[1]))
        for v, counts in ((c.occupied, self.hits), (c.free, self.misses)):
            if len(v):
                at = (v[:, 2], v[:, 1] - self.origin[1], v[:, 0] - self.origin[0])
                if sign > 0:
                    counts[at] += 1
                else:
                    counts[at] -= 1

    def snapshot(self, floor: FloorFrame, resolution: float, log_odds_hit: float, log_odds_miss: float,
                 occupied_thresh: float, free_thresh: float, free_coverage: float, version: int,
                 keyframes: int) -> "GridSnapshot":
        """The published version: the columns projected (module docstring) over the bounding box of
        the known cells, as ROS occupancy (-1 unknown, else the probability in percent, int8)."""
        if self.box is None:
            return GridSnapshot(np.full((1, 1), -1, np.int8), resolution, (0, 0), floor, version, keyframes)
        bx0, by0 = self.box[0] - int(self.origin[0]), self.box[1] - int(self.origin[1])
        bx1, by1 = self.box[2] - int(self.origin[0]) + 1, self.box[3] - int(self.origin[1]) + 1
        hits, misses = self.hits[:, by0:by1, bx0:bx1], self.misses[:, by0:by1, bx0:bx1]
        seen = (hits > 0) | (misses > 0)              # (no sum: it could wrap in uint16)
        L = np.where(seen, hits * np.float32(log_odds_hit) + misses * np.float32(log_odds_miss), -np.inf)
        top = L.max(axis=0)
        occupied = top > logit(occupied_thresh)
        free = ~occupied & ((seen & (L < logit(free_thresh))).mean(axis=0) >= free_coverage)
        known = occupied | free
        if not known.any():
            return GridSnapshot(np.full((1, 1), -1, np.int8), resolution, (0, 0), floor, version, keyframes)
        rows, cols = np.nonzero(known.any(axis=1))[0], np.nonzero(known.any(axis=0))[0]
        r0, r1, c0, c1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
        p = 1.0 / (1.0 + np.exp(-np.clip(top[r0:r1, c0:c1], -30.0, 30.0)))
        occ = np.where(known[r0:r1, c0:c1], np.rint(p * 100.0), -1).astype(np.int8)
        origin = (int(self.box[0] + c0), int(self.box[1] + r0))
        return GridSnapshot(occ, resolution, origin, floor, version, keyframes)


@dataclass(frozen=True)
class GridSnapshot:
    """An immutable published grid.

    occupancy: (H, W) int8, nav_msgs/OccupancyGrid's convention: -1 unknown, else the
    probability of occupancy in percent; row r, column c is the cell (origin_cell[0] + c,
    origin_cell[1] + r) of the floor frame, so row 0 is the lowest y (as OccupancyGrid.data and
    as map_server's origin: the lower-left pixel of the image). resolution: m per cell;
    floor: the floor frame in the SLAM world; version: increases with every publish;
    keyframes: how many keyframes' evidence it holds."""

    occupancy: np.ndarray
    resolution: float
    origin_cell: tuple
    floor: Optional[FloorFrame]
    version: int
    keyframes: int

    @property
    def origin_xy(self) -> tuple[float, float]:
        """m, floor frame: the outer corner of cell (0, 0) of ``occupancy``."""
        return self.origin_cell[0] * self.resolution, self.origin_cell[1] * self.resolution

    @property
    def shape(self) -> tuple[int, int]:
        return self.occupancy.shape

    def trinary(self, occupied_thresh: float, free_thresh: float) -> np.ndarray:
        """(H, W) int8: 100 occupied (probability above ``occupied_thresh``), 0 free (below
        ``free_thresh``), -1 unknown (unseen or in between)."""
        p = self.occupancy.astype(np.float32) / 100.0
        out = np.full(self.occupancy.shape, -1, np.int8)
        seen = self.occupancy >= 0
        out[seen & (p > occupied_thresh)] = 100
        out[seen & (p < free_thresh)] = 0
        return out

    def cell_of(self, points_w: np.ndarray) -> np.ndarray:
        """points_w: (N, 3) metres, world -> (N, 2) float (column, row) in ``occupancy`` (cell
        units; cell centres at integer + 0.5)."""
        q = self.floor.to_floor(points_w)[:, :2] / self.resolution
        return q - np.asarray(self.origin_cell, dtype=np.float64)
