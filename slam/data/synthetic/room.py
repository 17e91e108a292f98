"""The synthetic room the bundled sample (slam.data.synthetic.sample) and the loop sequence
(slam.data.synthetic.loop) are ray cast in: a furnished ~5 x 4 x 2.6 m room of triangle meshes
with procedural materials (slam.data.synthetic.textures), the sample camera's intrinsics and a
``Renderer`` (Open3D's ``RaycastingScene``, Embree). Colour is view independent (Lambertian
shading with a fixed light + ambient), supersampled per pixel; depth is the exact z-depth of the
pixel-centre ray (OpenCV convention: pixel column i, row j has its centre at (u, v) = (i, j)).
World: z up, the room's floor corner at the origin; poses T_wc with OpenCV camera axes.

open3d is imported lazily (inside functions) so this module imports without it.
"""
from __future__ import annotations

import math

import numpy as np

from slam.data.synthetic.textures import (
    mat_blobby,
    mat_books,
    mat_ceiling,
    mat_checker_box,
    mat_floor,
    mat_front_wall,
    mat_noise_wall,
    mat_plain_noise,
    mat_rings,
    mat_rug,
    mat_wallpaper,
    mat_wood,
    mix,
    smoothstep,
)

WIDTH, HEIGHT = 160, 120
FX = FY = 130.0  # ~63.2 deg horizontal, ~49.5 deg vertical field of view
CX, CY = 79.5, 59.5  # OpenCV pixel-centre convention: the optical axis hits the image centre
DEPTH_SCALE = 5000.0  # TUM: raw uint16 = metres * 5000
SEED = 20261130  # seed of the texture hash
ROOM = (5.0, 4.0, 2.6)  # x (width), y (depth), z (height), metres
SUPERSAMPLE = 2  # colour: SUPERSAMPLE x SUPERSAMPLE rays per pixel, averaged

LIGHT = np.array([0.35, -0.55, 0.75])
LIGHT = LIGHT / np.linalg.norm(LIGHT)
AMBIENT = 0.45


# ----------------------------------------------------------------------------------------------
# Geometry
# ----------------------------------------------------------------------------------------------
def _quad(p0, p1, p2, p3):
    v = np.array([p0, p1, p2, p3], dtype=np.float64)
    return v, np.array([[0, 1, 2], [0, 2, 3]], dtype=np.int64)


def _box(lo, hi, yaw=0.0):
    """Axis-aligned box [lo, hi], optionally rotated by ``yaw`` (rad) about its vertical axis."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    c = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
    if yaw:
        ctr = (lo + hi) / 2
        R = np.array([[math.cos(yaw), -math.sin(yaw), 0], [math.sin(yaw), math.cos(yaw), 0], [0, 0, 1]])
        c = (c - ctr) @ R.T + ctr
    # vertex index = 4*ix + 2*iy + iz
    faces = [[0, 1, 3, 2], [4, 6, 7, 5], [0, 4, 5, 1], [2, 3, 7, 6], [0, 2, 6, 4], [1, 5, 7, 3]]
    tris = []
    for a, b, cc, d in faces:
        tris += [[a, b, cc], [a, cc, d]]
    return c, np.array(tris, dtype=np.int64)


def _sphere(center, radius, resolution=48):
    import open3d as o3d

    m = o3d.geometry.TriangleMesh.create_sphere(radius=radius, resolution=resolution)
    return np.asarray(m.vertices) + np.asarray(center), np.asarray(m.triangles).astype(np.int64)


def _cylinder(center_bottom, radius, height, resolution=64):
    import open3d as o3d

    m = o3d.geometry.TriangleMesh.create_cylinder(radius=radius, height=height, resolution=resolution, split=1)
    v = np.asarray(m.vertices) + np.asarray(center_bottom) + np.array([0.0, 0.0, height / 2])
    return v, np.asarray(m.triangles).astype(np.int64)


def build_scene_objects(seed=SEED):
    """List of dicts: verts (V,3), tris (T,3), albedo fn, normal kind ('flat'|'sphere'|'cyl'), params."""
    W, D, H = ROOM
    objs = []

    def add(vt, albedo, kind="flat", **params):
        objs.append(dict(verts=vt[0], tris=vt[1], albedo=albedo, kind=kind, **params))

    # room shell
    add(_quad([0, 0, 0], [W, 0, 0], [W, D, 0], [0, D, 0]), mat_floor(seed + 1))
    add(_quad([0, 0, H], [0, D, H], [W, D, H], [W, 0, H]), mat_ceiling(seed + 2))
    add(_quad([0, D, 0], [W, D, 0], [W, D, H], [0, D, H]), mat_front_wall(np.array([0.80, 0.74, 0.62]), seed + 3))
    add(_quad([0, 0, 0], [0, 0, H], [W, 0, H], [W, 0, 0]),
        mat_noise_wall(np.array([0.55, 0.70, 0.62]), np.array([0.85, 0.85, 0.7]), seed + 4))
    add(_quad([W, 0, 0], [W, 0, H], [W, D, H], [W, D, 0]),
        mat_wallpaper(np.array([0.92, 0.88, 0.80]), np.array([0.70, 0.45, 0.40]), seed + 5))
    # left wall (x = 0) with a window opening y in [2.2, 3.1], z in [1.05, 1.85]: 4 pieces
    left = mat_noise_wall(np.array([0.70, 0.72, 0.85]), np.array([0.45, 0.50, 0.72]), seed + 6)
    wy0, wy1, wz0, wz1 = 2.2, 3.1, 1.05, 1.85
    add(_quad([0, 0, 0], [0, D, 0], [0, D, wz0], [0, 0, wz0]), left)
    add(_quad([0, 0, wz1], [0, D, wz1], [0, D, H], [0, 0, H]), left)
    add(_quad([0, 0, wz0], [0, wy0, wz0], [0, wy0, wz1], [0, 0, wz1]), left)
    add(_quad([0, wy1, wz0], [0, D, wz0], [0, D, wz1], [0, wy1, wz1]), left)
    # window frame (thin boxes around the opening)
    frame = mat_plain_noise([0.92, 0.92, 0.9], seed + 7, 0.3)
    add(_box([-0.05, wy0 - 0.05, wz0 - 0.05], [0.03, wy1 + 0.05, wz0]), frame)
    add(_box([-0.05, wy0 - 0.05, wz1], [0.03, wy1 + 0.05, wz1 + 0.05]), frame)
    add(_box([-0.05, wy0 - 0.05, wz0], [0.03, wy0, wz1]), frame)
    add(_box([-0.05, wy1, wz0], [0.03, wy1 + 0.05, wz1]), frame)
    add(_box([-0.05, (wy0 + wy1) / 2 - 0.02, wz0], [0.02, (wy0 + wy1) / 2 + 0.02, wz1]), frame)

    # rug
    add(_box([1.45, 1.55, 0.0], [3.55, 3.05, 0.012]), mat_rug(seed + 8))
    # table: top + 4 legs
    wood = mat_wood(np.array([0.62, 0.42, 0.24]), np.array([0.35, 0.2, 0.1]), 0, seed + 9)
    add(_box([1.9, 2.0, 0.72], [3.1, 2.8, 0.77]), wood)
    for lx, ly in ((1.95, 2.05), (3.0, 2.05), (1.95, 2.7), (3.0, 2.7)):
        add(_box([lx, ly, 0.0], [lx + 0.05, ly + 0.05, 0.72]), wood)
    # things on the table
    add(_sphere([2.2, 2.35, 0.77 + 0.12], 0.12),
        mat_blobby([0.9, 0.3, 0.2], [0.95, 0.85, 0.3], [0.2, 0.3, 0.8], 0.08, seed + 10),
        kind="sphere", center=np.array([2.2, 2.35, 0.89]))
    add(_box([2.55, 2.12, 0.77], [2.85, 2.34, 0.95], yaw=0.35),
        mat_checker_box([0.15, 0.35, 0.75], [0.95, 0.95, 0.9], 0.075, seed + 11))
    add(_cylinder([2.85, 2.6, 0.77], 0.06, 0.24), mat_rings([0.2, 0.6, 0.3], [0.95, 0.9, 0.8], 0.05, seed + 12),
        kind="cyl", center=np.array([2.85, 2.6]))
    add(_box([2.3, 2.55, 0.77], [2.6, 2.75, 0.80], yaw=-0.2), mat_books(seed + 13))  # a flat book stack
    # cabinet (front-left) with a box on top
    add(_box([0.3, 3.45, 0.0], [1.1, 3.97, 1.0]),
        mat_wood(np.array([0.45, 0.55, 0.6]), np.array([0.2, 0.25, 0.3]), 2, seed + 14))
    add(_box([0.45, 3.55, 1.0], [0.8, 3.85, 1.25], yaw=0.15),
        mat_checker_box([0.85, 0.5, 0.15], [0.25, 0.15, 0.1], 0.08, seed + 15))
    add(_sphere([0.95, 3.7, 1.1], 0.1), mat_blobby([0.2, 0.7, 0.7], [0.1, 0.2, 0.3], [0.95, 0.95, 0.95], 0.06, seed + 16),
        kind="sphere", center=np.array([0.95, 3.7, 1.1]))
    # shelf (front-right): sides, back, boards, books
    shelf = mat_wood(np.array([0.75, 0.6, 0.42]), np.array([0.45, 0.3, 0.18]), 2, seed + 17)
    sx0, sx1, sy0, sy1 = 3.55, 4.75, 3.62, 3.98
    add(_box([sx0, sy0, 0.0], [sx0 + 0.03, sy1, 1.9]), shelf)
    add(_box([sx1 - 0.03, sy0, 0.0], [sx1, sy1, 1.9]), shelf)
    add(_box([sx0, sy1 - 0.01, 0.0], [sx1, sy1, 1.9]), shelf)
    for bz in (0.0, 0.45, 0.9, 1.35, 1.87):
        add(_box([sx0, sy0, bz], [sx1, sy1, bz + 0.03]), shelf)
    for k, bz in enumerate((0.03, 0.48, 0.93, 1.38)):
        # books: a row covering most of each board, heights vary per board
        h = (0.34, 0.3, 0.36, 0.28)[k]
        x_end = (4.45, 4.7, 4.2, 4.6)[k]
        add(_box([sx0 + 0.03, sy0 + 0.06, bz], [x_end, sy1 - 0.02, bz + h]), mat_books(seed + 18 + k))
    # stack of boxes (right, on the floor) and a stool/bin
    add(_box([4.15, 1.75, 0.0], [4.85, 2.45, 0.5]),
        mat_checker_box([0.75, 0.6, 0.4], [0.45, 0.32, 0.2], 0.14, seed + 22))
    add(_box([4.25, 1.85, 0.5], [4.75, 2.3, 0.85], yaw=0.3),
        mat_blobby([0.85, 0.85, 0.8], [0.7, 0.2, 0.3], [0.3, 0.3, 0.35], 0.12, seed + 23))
    add(_cylinder([3.85, 2.95, 0.0], 0.18, 0.45), mat_rings([0.8, 0.25, 0.2], [0.2, 0.2, 0.25], 0.09, seed + 24),
        kind="cyl", center=np.array([3.85, 2.95]))
    # a big ball on the floor (left) and a floor lamp
    add(_sphere([1.0, 2.3, 0.25], 0.25),
        mat_blobby([0.95, 0.9, 0.2], [0.15, 0.5, 0.85], [0.85, 0.2, 0.5], 0.15, seed + 25),
        kind="sphere", center=np.array([1.0, 2.3, 0.25]))
    add(_cylinder([0.6, 3.0, 0.0], 0.025, 1.55), mat_rings([0.2, 0.2, 0.22], [0.75, 0.75, 0.7], 0.2, seed + 26),
        kind="cyl", center=np.array([0.6, 3.0]))
    add(_sphere([0.6, 3.0, 1.7], 0.15), mat_blobby([0.98, 0.95, 0.85], [0.95, 0.75, 0.45], [0.9, 0.9, 0.9], 0.1, seed + 27),
        kind="sphere", center=np.array([0.6, 3.0, 1.7]))
    return objs


def make_raycasting_scene(objs):
    import open3d as o3d

    scene = o3d.t.geometry.RaycastingScene()
    for k, o in enumerate(objs):
        gid = scene.add_triangles(
            o3d.core.Tensor(o["verts"].astype(np.float32)), o3d.core.Tensor(o["tris"].astype(np.uint32))
        )
        assert gid == k, (gid, k)
    return scene


# ----------------------------------------------------------------------------------------------
# Camera path
# ----------------------------------------------------------------------------------------------
def intrinsics(width=WIDTH, height=HEIGHT):
    """K (3, 3) of the sample camera at ``width`` x ``height`` (the field of view kept; OpenCV
    pixel centres)."""
    sx, sy = width / WIDTH, height / HEIGHT
    return np.array([[FX * sx, 0.0, (CX + 0.5) * sx - 0.5], [0.0, FY * sy, (CY + 0.5) * sy - 0.5], [0.0, 0.0, 1.0]])



# ----------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------
def _pixel_rays(offsets, width=WIDTH, height=HEIGHT):
    """Camera-frame ray directions (not normalised, z = 1) for the given sub-pixel offsets.

    Returns (len(offsets), H, W, 3). Pixel (col i, row j) has its centre at (u, v) = (i, j).
    """
    Kinv = np.linalg.inv(intrinsics(width, height))
    jj, ii = np.meshgrid(np.arange(height, dtype=np.float64), np.arange(width, dtype=np.float64), indexing="ij")
    out = []
    for du, dv in offsets:
        pix = np.stack([ii + du, jj + dv, np.ones_like(ii)], axis=-1)
        out.append(pix @ Kinv.T)
    return np.stack(out)


def _shade(objs, gid, p, n_prim, d):
    """Colour (M, 3) in [0, 1] for hits (gid valid) and the sky for misses."""
    M = len(gid)
    col = np.zeros((M, 3))
    hit = gid != np.iinfo(np.uint32).max
    # sky seen through the window (no hit, no depth): a smooth function of the ray direction
    miss = ~hit
    if miss.any():
        up = np.clip(d[miss, 2], -1, 1)
        col[miss] = mix(np.array([0.85, 0.9, 0.95]), np.array([0.35, 0.55, 0.9]), smoothstep(-0.2, 0.6, up))
    for g in np.unique(gid[hit]):
        m = gid == g
        o = objs[int(g)]
        pm = p[m]
        if o["kind"] == "sphere":
            n = pm - o["center"]
            n /= np.linalg.norm(n, axis=1, keepdims=True)
        elif o["kind"] == "cyl":
            n = n_prim[m].copy()
            side = np.abs(n[:, 2]) < 0.9
            r = pm[side, :2] - o["center"]
            n[side] = np.concatenate([r / np.linalg.norm(r, axis=1, keepdims=True), np.zeros((side.sum(), 1))], 1)
        else:
            n = n_prim[m].copy()
            flip = np.sum(n * d[m], axis=1) > 0  # face the viewer (closed objects: outward)
            n[flip] *= -1
        albedo = np.clip(o["albedo"](pm, n), 0.0, 1.0)
        shade = AMBIENT + (1.0 - AMBIENT) * np.clip(n @ LIGHT, 0.0, None)
        col[m] = albedo * shade[:, None]
    return np.clip(col, 0.0, 1.0)


class Renderer:
    """Ray casts the scene at ``width`` x ``height`` (default: the sample's) with ``supersample``^2
    colour rays per pixel."""

    def __init__(self, seed=SEED, width=WIDTH, height=HEIGHT, supersample=SUPERSAMPLE):
        self.objs = build_scene_objects(seed)
        self.scene = make_raycasting_scene(self.objs)
        self.width, self.height, self.supersample = width, height, supersample
        step = 1.0 / supersample
        offs = [(-0.5 + step * (a + 0.5), -0.5 + step * (b + 0.5)) for b in range(supersample) for a in range(supersample)]
        self.rays_sub = _pixel_rays(offs, width, height).reshape(-1, 3)  # colour rays
        self.rays_ctr = _pixel_rays([(0.0, 0.0)], width, height).reshape(-1, 3)  # depth rays (pixel centres)

    def _cast(self, T, rays_cam):
        import open3d as o3d

        norm = np.linalg.norm(rays_cam, axis=1)
        d = (rays_cam / norm[:, None]) @ T[:3, :3].T
        o = np.broadcast_to(T[:3, 3], d.shape)
        r = self.scene.cast_rays(o3d.core.Tensor(np.concatenate([o, d], 1).astype(np.float32)))
        t = r["t_hit"].numpy().astype(np.float64)
        return t, norm, d, o, r

    def render(self, T):
        """-> rgb (H, W, 3) uint8, depth (H, W) float64 metres (0 = no hit)."""
        t, norm, d, o, r = self._cast(T, self.rays_sub)
        gid = r["geometry_ids"].numpy()
        finite = np.isfinite(t)
        p = o + d * np.where(finite, t, 0.0)[:, None]
        col = _shade(self.objs, gid, p, r["primitive_normals"].numpy().astype(np.float64), d)
        col = col.reshape(self.supersample ** 2, self.height, self.width, 3).mean(axis=0)
        rgb = np.clip(np.round(col * 255.0), 0, 255).astype(np.uint8)
        t, norm, d, o, r = self._cast(T, self.rays_ctr)
        # ray distance along the unit ray -> z-depth: the camera-frame ray (x, y, 1) has z = 1/norm
        z = np.where(np.isfinite(t), t / norm, 0.0).reshape(self.height, self.width)
        return rgb, z


def encode_depth(z):
    raw = np.round(z * DEPTH_SCALE)
    raw[(raw > 65535) | ~np.isfinite(raw)] = 0  # out of range -> invalid
    return raw.astype(np.uint16)
