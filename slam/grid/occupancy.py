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

TILE = 64                 # columns per tile side: counts are stored for the tiles touched only
TILE_SHIFT = 6            # log2(TILE)
GROW_TILES = 2            # margin of the tile table when it grows


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
    """Per voxel of the band, how many integrated keyframes saw it occupied (hits) and free
    (misses), stored in TILE x TILE-column tiles allocated where a keyframe first touches: memory
    follows the area seen, not its bounding box (an L-shaped corridor holds its own tiles only).

    ``hits``, ``misses``: (capacity, layers, TILE, TILE) pools, the first ``tiles`` in use;
    ``slots``: (TH, TW) int32, the pool slot of tile (tx, ty) at [ty - tile_origin[1], tx -
    tile_origin[0]] (-1: none); column (x, y) lies in tile (x >> TILE_SHIFT, y >> TILE_SHIFT) at
    [y & (TILE - 1), x & (TILE - 1)]. A contribution's voxels are distinct, so no count exceeds the
    keyframes integrated (``integrated``): uint16 until that number would pass 65535, then int32.
    ``dense()`` gives the counts over the columns touched as plain arrays."""

    def __init__(self, layers: int) -> None:
        self.layers = layers
        self.tile_origin = np.zeros(2, np.int64)
        self.slots = np.full((0, 0), -1, np.int32)
        self.hits = np.zeros((0, layers, TILE, TILE), np.uint16)
        self.misses = np.zeros((0, layers, TILE, TILE), np.uint16)
        self.tiles = 0                        # pool slots in use
        self.integrated = 0                   # contributions added and not taken out
        self.box: Optional[tuple] = None      # (x0, y0, x1, y1) cells ever touched, inclusive

    def nbytes(self) -> int:
        return self.hits.nbytes + self.misses.nbytes + self.slots.nbytes

    def clear(self) -> None:
        self.__init__(self.layers)

    def _fit_tiles(self, lo: np.ndarray, hi: np.ndarray) -> None:
        """Grow the tile table (with a margin) so that tiles ``lo`` to ``hi`` ((2,) int64 tx, ty)
        fall inside it."""
        th, tw = self.slots.shape
        cur_lo, cur_hi = self.tile_origin, self.tile_origin + np.array([tw, th]) - 1
        if th and tw and np.all(lo >= cur_lo) and np.all(hi <= cur_hi):
            return
        new_lo = np.minimum(lo - GROW_TILES, cur_lo) if th and tw else lo - GROW_TILES
        new_hi = np.maximum(hi + GROW_TILES, cur_hi) if th and tw else hi + GROW_TILES
        TW, TH = (new_hi - new_lo + 1).tolist()
        slots = np.full((TH, TW), -1, np.int32)
        if th and tw:
            ox, oy = (cur_lo - new_lo).tolist()
            slots[oy:oy + th, ox:ox + tw] = self.slots
        self.tile_origin, self.slots = new_lo, slots

    def _allocate(self, new: np.ndarray) -> None:
        """Give the tiles where ``new`` ((TH, TW) bool) is true a pool slot each (zeroed)."""
        count = int(new.sum())
        if count == 0:
            return
        need = self.tiles + count
        if need > len(self.hits):                      # the pool doubles: amortised copies
            cap = max(need, 2 * len(self.hits), 4)
            for name in ("hits", "misses"):
                old = getattr(self, name)
                grown = np.zeros((cap, self.layers, TILE, TILE), old.dtype)
                grown[:self.tiles] = old[:self.tiles]
                setattr(self, name, grown)
        self.slots[new] = np.arange(self.tiles, need, dtype=np.int32)
        self.tiles = need

    def _tile_at(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(M, 3) voxels (x, y, layer) inside the tile table -> (rows, cols) of their tiles in it."""
        return (v[:, 1] >> TILE_SHIFT) - self.tile_origin[1], (v[:, 0] >> TILE_SHIFT) - self.tile_origin[0]

    def _flat(self, v: np.ndarray, tile: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """(M, 3) voxels of allocated tiles, with their ``_tile_at`` -> flat indices into a pool."""
        x, y = v[:, 0], v[:, 1]
        return (((self.slots[tile].astype(np.int64) * self.layers + v[:, 2]) << TILE_SHIFT) + (y & (TILE - 1))) \
            * TILE + (x & (TILE - 1))

    def add(self, c: Contribution, sign: int = 1) -> None:
        """Add (sign 1) or take out (sign -1, a contribution added before) one keyframe's evidence
        (its voxels are distinct)."""
        if sign > 0 and self.integrated + 1 > np.iinfo(self.hits.dtype).max:
            self.hits, self.misses = self.hits.astype(np.int32), self.misses.astype(np.int32)
        self.integrated += 1 if sign > 0 else -1
        if sign > 0:
            box = _column_box(c)
            if box is None:
                return
            self._fit_tiles(box[0] >> TILE_SHIFT, box[1] >> TILE_SHIFT)
            lo, hi = box[0].tolist(), box[1].tolist()
            b = self.box or (lo[0], lo[1], hi[0], hi[1])
            self.box = (min(b[0], lo[0]), min(b[1], lo[1]), max(b[2], hi[0]), max(b[3], hi[1]))
        tiles = [self._tile_at(v) if len(v) else None for v in (c.occupied, c.free)]
        if sign > 0:
            touched = np.zeros(self.slots.shape, bool)
            for tile in tiles:
                if tile is not None:
                    touched[tile] = True
            self._allocate(touched & (self.slots < 0))
        for v, tile, pool in zip((c.occupied, c.free), tiles, (self.hits, self.misses)):   # (pools as grown)
            if tile is None:
                continue
            counts = pool.reshape(-1)                   # a view: the pool is contiguous
            if sign > 0:
                counts[self._flat(v, tile)] += 1
            else:
                counts[self._flat(v, tile)] -= 1

    def dense(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(origin (2,) int64 cell x, y; hits, misses (layers, H, W)) over the columns ever
        touched (``box``; voxel (x, y, k) at [k, y - origin[1], x - origin[0]]); empty arrays
        before any."""
        if self.box is None:
            z = np.zeros((self.layers, 0, 0), self.hits.dtype)
            return np.zeros(2, np.int64), z, z.copy()
        hits, misses = (np.ascontiguousarray(self._box_plane(pool[:self.tiles], 0)) for pool in (self.hits, self.misses))
        return np.array(self.box[:2], np.int64), hits, misses

    def _box_plane(self, per_tile: np.ndarray, fill) -> np.ndarray:
        """(tiles, ..., TILE, TILE) values of the allocated tiles -> (..., H, W) over the columns
        ever touched (``box``), ``fill`` where no tile is; only the tiles the box spans are laid out."""
        x0, y0, x1, y1 = self.box
        tx, ty = int(self.tile_origin[0]), int(self.tile_origin[1])
        slots = self.slots[(y0 >> TILE_SHIFT) - ty:(y1 >> TILE_SHIFT) - ty + 1,
                           (x0 >> TILE_SHIFT) - tx:(x1 >> TILE_SHIFT) - tx + 1]
        th, tw = slots.shape
        lead = per_tile.shape[1:-2]
        grid = np.full((th, tw, *lead, TILE, TILE), fill, per_tile.dtype)
        have = slots >= 0
        grid[have] = per_tile[slots[have]]
        axes = tuple(range(2, 2 + len(lead)))                    # (th, tw, *lead, T, T) ->
        grid = grid.transpose(*axes, 0, len(lead) + 2, 1, len(lead) + 3)   # (*lead, th, T, tw, T)
        plane = grid.reshape(*lead, th * TILE, tw * TILE)
        ox, oy = (x0 >> TILE_SHIFT) * TILE, (y0 >> TILE_SHIFT) * TILE
        return plane[..., y0 - oy:y1 - oy + 1, x0 - ox:x1 - ox + 1]

    def snapshot(self, floor: FloorFrame, resolution: float, log_odds_hit: float, log_odds_miss: float,
                 occupied_thresh: float, free_thresh: float, free_coverage: float, version: int,
                 keyframes: int) -> "GridSnapshot":
        """The published version: the columns projected (module docstring) over the bounding box of
        the known cells, as ROS occupancy (-1 unknown, else the probability in percent, int8).
        Projected tile by tile (no array over the layers of the whole box)."""
        if self.box is None:
            return GridSnapshot(np.full((1, 1), -1, np.int8), resolution, (0, 0), floor, version, keyframes)
        hits, misses = self.hits[:self.tiles], self.misses[:self.tiles]
        seen = (hits > 0) | (misses > 0)              # (no sum: it could wrap in uint16)
        L = np.where(seen, hits * np.float32(log_odds_hit) + misses * np.float32(log_odds_miss), -np.inf)
        top_t = L.max(axis=1)
        occupied_t = top_t > logit(occupied_thresh)
        free_t = ~occupied_t & ((seen & (L < logit(free_thresh))).mean(axis=1) >= free_coverage)
        top, known = self._box_plane(top_t, -np.inf), self._box_plane(occupied_t | free_t, False)
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
