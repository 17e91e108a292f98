"""The true floor plan of the sample's room (slam.data.synthetic.room), from its geometry alone:
no grid code. A cell is occupied when the closed cell meets a solid between the band's heights:
an object (every object of the room is convex: its footprint in the band is the convex hull of its
vertices in the band and of its edges' crossings of the band's two planes) or the walls (all
outside the room's [0, W] x [0, D] rectangle is solid). Otherwise, inside the room, it is free.
Cells are tested at 5 x 5 points spanning the cell grown by ``TOL_M`` on each side: the room's
walls lie on cell borders, where a floor frame a few micrometres off the room's would otherwise
flip a whole wall's cells."""
from __future__ import annotations

import numpy as np

from slam.data.synthetic.room import ROOM, build_scene_objects

SUB = 5
TOL_M = 0.005


def _band_footprint(verts: np.ndarray, tris: np.ndarray, lo: float, hi: float) -> np.ndarray | None:
    """(M, 2) points whose convex hull is the object's footprint between heights lo and hi."""
    pts = [verts[(verts[:, 2] >= lo) & (verts[:, 2] <= hi), :2]]
    edges = np.concatenate([tris[:, [0, 1]], tris[:, [1, 2]], tris[:, [2, 0]]])
    a, b = verts[edges[:, 0]], verts[edges[:, 1]]
    for z in (lo, hi):
        dz = b[:, 2] - a[:, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (z - a[:, 2]) / dz
        ok = (np.abs(dz) > 1e-12) & (t >= 0) & (t <= 1)
        pts.append((a[ok] + t[ok, None] * (b[ok] - a[ok]))[:, :2])
    pts = np.concatenate(pts)
    return pts if len(pts) else None


def _hull(points: np.ndarray) -> np.ndarray:
    """Convex hull (counter-clockwise, (K, 2)) by the monotone chain."""
    p = np.unique(np.round(points, 9), axis=0)
    if len(p) < 3:
        return p

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    lower, upper = [], []
    for q in p:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], q) <= 0:
            lower.pop()
        lower.append(q)
    for q in p[::-1]:
        while len(upper) >= 2 and cross(upper[-2], upper[-1], q) <= 0:
            upper.pop()
        upper.append(q)
    return np.array(lower[:-1] + upper[:-1])


def _inside(hull: np.ndarray, q: np.ndarray, eps: float = 1e-9) -> np.ndarray:
    """(N,) bool: points q (N, 2) in the closed convex polygon (a segment or point hull: within eps)."""
    if len(hull) < 3:
        if len(hull) == 1:
            return np.linalg.norm(q - hull[0], axis=1) <= eps
        a, b = hull[0], hull[-1]
        ab = b - a
        t = np.clip(((q - a) @ ab) / max(ab @ ab, 1e-18), 0, 1)
        return np.linalg.norm(q - (a + t[:, None] * ab), axis=1) <= 1e-3
    ok = np.ones(len(q), bool)
    for i in range(len(hull)):
        a, b = hull[i], hull[(i + 1) % len(hull)]
        ok &= (b[0] - a[0]) * (q[:, 1] - a[1]) - (b[1] - a[1]) * (q[:, 0] - a[0]) >= -eps
    return ok


def true_floor_plan(x0: float, y0: float, width: int, height: int, resolution: float, lo: float,
                    hi: float, T_world_floor: np.ndarray | None = None) -> np.ndarray:
    """(height, width) int8: 100 occupied, 0 free; cell (column c, row r) covers
    [x0 + c res, x0 + (c + 1) res] x [y0 + r res, ...] in the grid's frame, whose pose in the
    room (world) is ``T_world_floor`` (4, 4; default identity: the room's x, y)."""
    W, D, _ = ROOM
    s = np.linspace(-TOL_M / resolution, 1.0 + TOL_M / resolution, SUB)
    cx, cy = np.meshgrid(np.arange(width), np.arange(height))
    # (H, W, SUB*SUB, 2) sample points
    ox = (x0 + (cx[..., None] + s[None, None, :]) * resolution)
    oy = (y0 + (cy[..., None] + s[None, None, :]) * resolution)
    qx = np.repeat(ox[..., None, :], SUB, axis=-2).reshape(height, width, -1)
    qy = np.repeat(oy[..., :, None], SUB, axis=-1).reshape(height, width, -1)
    q = np.stack([qx, qy], axis=-1).reshape(-1, 2)
    if T_world_floor is not None:
        T = np.asarray(T_world_floor, dtype=np.float64)
        q = q @ T[:2, :2].T + T[:2, 3]
    solid = (q[:, 0] <= 0) | (q[:, 0] >= W) | (q[:, 1] <= 0) | (q[:, 1] >= D)
    for o in build_scene_objects():
        fp = _band_footprint(o["verts"], o["tris"], lo, hi)
        if fp is None:
            continue
        hull = _hull(fp)
        mn, mx = hull.min(0) - 1e-6, hull.max(0) + 1e-6
        cand = (q[:, 0] >= mn[0]) & (q[:, 0] <= mx[0]) & (q[:, 1] >= mn[1]) & (q[:, 1] <= mx[1])
        solid[cand] |= _inside(hull, q[cand])
    occ = solid.reshape(height, width, -1).any(axis=-1)
    return np.where(occ, 100, 0).astype(np.int8)


def iou_against_truth(tri: np.ndarray, origin_xy: tuple, resolution: float, lo: float, hi: float,
                      T_world_floor: np.ndarray | None = None) -> dict:
    """A trinary grid (H, W) int8 (100 / 0 / -1, row 0 = lowest y) against the true floor plan on
    the cells it knows: IoU of the occupied cells, of the free cells, and how many it knows."""
    h, w = tri.shape
    truth = true_floor_plan(origin_xy[0], origin_xy[1], w, h, resolution, lo, hi, T_world_floor)
    known = tri >= 0
    out = {"known": int(known.sum())}
    for name, cls in (("occupied", 100), ("free", 0)):
        p, t = (tri == cls) & known, (truth == cls) & known
        out[name] = float((p & t).sum() / max((p | t).sum(), 1))
    return out
