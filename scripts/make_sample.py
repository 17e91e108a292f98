#!/usr/bin/env python
"""Generate the bundled sample RGB-D sequence (TUM RGB-D layout) by ray casting a synthetic room.

    python scripts/make_sample.py --out datasets/sample            # the committed sample
    python scripts/make_sample.py --out /tmp/s --frames 5          # only the first 5 frames

Deterministic: no downloads, no input images, no random state (all "randomness" is an integer
hash of lattice coordinates and a fixed seed). The scene is a furnished ~5 x 4 x 2.6 m room made
of triangle meshes, ray cast with Open3D's ``RaycastingScene`` (Embree) along a smooth, closed,
hand-held-like camera path. Colour is a procedural function of the world hit point and the
surface (view independent: Lambertian shading with a fixed light + ambient), supersampled 2x2
per pixel; depth is the exact z-depth of the pixel-centre ray (OpenCV convention: pixel column i,
row j has its centre at (u, v) = (i, j), ray K^-1 [i, j, 1]).

Output (under --out):
    rgb/<t>.png       8-bit RGB PNG
    depth/<t>.png     16-bit PNG, metres * 5000, 0 = invalid (no hit)
    rgb.txt, depth.txt, groundtruth.txt   TUM formats; poses are T_wc (camera-to-world),
                      OpenCV camera axes (x right, y down, z forward); world: z up, the room's
                      floor corner at the origin
    camera.yaml       fx, fy, cx, cy, width, height, depth_scale, distortion
    README.md         how it was made, statistics, licence

The path is a function of frame index / total frame count (--total, default 180), so --frames N
writes exactly the first N frames of the full sequence (the tests regenerate a few and compare).
Existing *.png files in <out>/rgb and <out>/depth are removed first.

Reproducibility tolerance (Embree is float32; results are bit-identical on one machine, other
CPUs may differ in the last bits): depth within 1 raw unit (0.2 mm) on >= 99.9 % of pixels,
colour within 2 levels on >= 99.9 % of pixel channels, the text files exactly equal.

open3d is imported lazily (inside functions) so this module imports without it.
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

# ----------------------------------------------------------------------------------------------
# Fixed parameters of the sample
# ----------------------------------------------------------------------------------------------
WIDTH, HEIGHT = 160, 120
FX = FY = 130.0  # ~63.2 deg horizontal, ~49.5 deg vertical field of view
CX, CY = 79.5, 59.5  # OpenCV pixel-centre convention: the optical axis hits the image centre
DEPTH_SCALE = 5000.0  # TUM: raw uint16 = metres * 5000
T0, FPS = 1000.0, 30.0
TOTAL_FRAMES = 150
SEED = 20261130  # seed of the texture hash
ROOM = (5.0, 4.0, 2.6)  # x (width), y (depth), z (height), metres
SUPERSAMPLE = 2  # colour: SUPERSAMPLE x SUPERSAMPLE rays per pixel, averaged

LIGHT = np.array([0.35, -0.55, 0.75])
LIGHT = LIGHT / np.linalg.norm(LIGHT)
AMBIENT = 0.45
GRAIN = 0.0  # strength of the fine multiplicative brightness noise: off, it doubles the PNG size;
#             the multi-scale variation comes from the patterns (blobs, spots, flecks, checkers)


# ----------------------------------------------------------------------------------------------
# Procedural texture helpers (numpy, float64, integer hashing: identical on every platform)
# ----------------------------------------------------------------------------------------------
def _hash3(ix, iy, iz, seed):
    """Integer lattice coordinates (int64 arrays) -> uniform floats in [0, 1)."""
    with np.errstate(over="ignore"):
        h = (ix.astype(np.uint64) * np.uint64(0x9E3779B185EBCA87)) ^ (
            iy.astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)
        ) ^ (iz.astype(np.uint64) * np.uint64(0x165667B19E3779F9)) ^ np.uint64(seed * 0x27D4EB2F165667C5 % 2**64)
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xFF51AFD7ED558CCD)
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xC4CEB9FE1A85EC53)
        h ^= h >> np.uint64(33)
    return (h >> np.uint64(11)).astype(np.float64) / float(2**53)


def value_noise(p, cell, seed):
    """Smooth 3-D value noise in [0, 1] with lattice spacing ``cell`` metres. p: (M, 3)."""
    q = p / cell
    i0 = np.floor(q)
    f = q - i0
    w = f * f * f * (f * (f * 6.0 - 15.0) + 10.0)  # quintic fade: C2-smooth
    i0 = i0.astype(np.int64)
    out = np.zeros(len(p))
    for dx in (0, 1):
        wx = w[:, 0] if dx else 1.0 - w[:, 0]
        for dy in (0, 1):
            wy = w[:, 1] if dy else 1.0 - w[:, 1]
            for dz in (0, 1):
                wz = w[:, 2] if dz else 1.0 - w[:, 2]
                out += wx * wy * wz * _hash3(i0[:, 0] + dx, i0[:, 1] + dy, i0[:, 2] + dz, seed)
    return out


def fbm(p, cells, seed):
    """Sum of value-noise octaves (cells in metres, coarse to fine), normalised to [0, 1]."""
    total, norm = np.zeros(len(p)), 0.0
    for k, c in enumerate(cells):
        a = 1.0 / (k + 1.0)
        total += a * value_noise(p, c, seed + 101 * k)
        norm += a
    return total / norm


def grain(p, cells, seed, amp, octave=False):
    """Multiplicative brightness variation 1 + GRAIN * amp * (noise - 0.5); ``cells`` a list (fbm)
    or, with octave=True, one lattice spacing (single value-noise octave)."""
    if GRAIN == 0.0:
        return np.ones(len(p))
    nz = value_noise(p, cells, seed) if octave else fbm(p, cells, seed)
    return 1.0 + GRAIN * amp * (nz - 0.5)


def smoothstep(e0, e1, x):
    t = np.clip((x - e0) / (e1 - e0), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def mix(c0, c1, t):
    """Blend colours c0, c1 ((3,) or (M, 3)) by t (M,)."""
    return np.asarray(c0) * (1.0 - t[:, None]) + np.asarray(c1) * t[:, None]


def soft_checker(a, b, size, edge=0.12):
    """2-D checker on coordinates a, b (M,) with soft edges (edge: fraction of a cell). -> [0,1]."""
    sa = np.sin(np.pi * a / size)
    sb = np.sin(np.pi * b / size)
    return smoothstep(-edge, edge, sa * sb)


def soft_stripes(a, period, duty=0.5, edge=0.08):
    """Stripes along coordinate a: 1 on a fraction ``duty`` of each period, soft edges. -> [0,1]."""
    ph = np.mod(a / period, 1.0)
    d = np.minimum(ph, 1.0 - ph)  # distance to stripe centre line at phase 0, in periods
    return 1.0 - smoothstep(duty / 2 - edge, duty / 2 + edge, d)


# ----------------------------------------------------------------------------------------------
# Materials: albedo(p, n) -> (M, 3) in [0, 1]
# ----------------------------------------------------------------------------------------------
def _plane_coords(p, n):
    """Two in-plane coordinates for an axis-aligned-ish surface with normal n."""
    ax = np.argmax(np.abs(n), axis=1)
    a = np.where(ax == 0, p[:, 1], p[:, 0])
    b = np.where(ax == 2, p[:, 1], p[:, 2])
    return a, b


def mat_noise_wall(base, accent, seed):
    """Multi-scale 'camouflage/terrazzo': large soft-edged blobs, medium spots, small flecks."""
    base, accent = np.asarray(base), np.asarray(accent)
    spot_col = 0.5 * (base + accent) * np.array([0.75, 0.8, 1.05])
    fleck_col = base * 0.45

    def f(p, n):
        blobs = smoothstep(0.47, 0.53, fbm(p, [0.9, 0.45], seed))
        spots = smoothstep(0.66, 0.71, value_noise(p, 0.2, seed + 7))
        flecks = smoothstep(0.76, 0.8, value_noise(p, 0.07, seed + 8))
        c = mix(mix(base, accent, blobs), spot_col, 0.85 * spots)
        c = mix(c, fleck_col, 0.7 * flecks)
        return c * grain(p, [0.2, 0.09], seed + 9, 0.5)[:, None]

    return f


def mat_wallpaper(base, stripe, seed):
    def f(p, n):
        a, b = _plane_coords(p, n)
        s = soft_stripes(a, 0.22, 0.35, 0.06)
        fine = soft_stripes(a + 0.11, 0.22, 0.06, 0.02)
        motif = soft_checker(a + 0.055, b, 0.11, 0.25) * (1 - s) * 0.5
        c = mix(base, stripe, s)
        c = mix(c, np.array([0.25, 0.2, 0.3]), 0.55 * fine + motif * 0.6)
        return c * grain(p, [0.6, 0.15, 0.05], seed, 0.5)[:, None]

    return f


def mat_front_wall(base, seed):
    """Noise wall with a colourful 'poster' (rings, bands, blocks) and a framed picture."""
    wall = mat_noise_wall(base, np.array([0.62, 0.58, 0.40]), seed)

    def f(p, n):
        c = wall(p, n)
        x, z = p[:, 0], p[:, 2]
        # poster 1: x in [1.35, 2.55], z in [1.15, 2.05]
        inside = (x > 1.35) & (x < 2.55) & (z > 1.15) & (z < 2.05)
        if inside.any():
            xi, zi = x[inside], z[inside]
            r = np.hypot(xi - 1.75, zi - 1.65)
            rings = 0.5 + 0.5 * np.sin(r * 2 * np.pi / 0.12)
            bands = soft_stripes(xi + zi, 0.3, 0.4, 0.05)
            blocks = _hash3(np.floor(xi / 0.2).astype(np.int64), np.floor(zi / 0.15).astype(np.int64),
                            np.zeros(len(xi), np.int64), seed + 3)
            pal = np.array([[0.9, 0.2, 0.15], [0.15, 0.45, 0.85], [0.95, 0.8, 0.15],
                            [0.2, 0.7, 0.3], [0.85, 0.4, 0.75]])
            block_col = pal[np.minimum((blocks * len(pal)).astype(int), len(pal) - 1)]
            pc = mix(block_col, np.array([0.98, 0.95, 0.9]), 0.65 * rings * (r < 0.4))
            pc = mix(pc, np.array([0.1, 0.1, 0.15]), 0.6 * bands * (xi > 2.1))
            border = (xi < 1.4) | (xi > 2.5) | (zi < 1.2) | (zi > 2.0)
            pc[border] = np.array([0.08, 0.07, 0.06])
            c[inside] = pc
        # poster 2 (framed 'landscape'): x in [3.0, 3.5], z in [1.4, 1.9]
        inside = (x > 3.0) & (x < 3.5) & (z > 1.4) & (z < 1.9)
        if inside.any():
            xi, zi = x[inside], z[inside]
            pi = p[inside]
            sky = mix(np.array([0.55, 0.75, 0.95]), np.array([0.2, 0.35, 0.8]), (zi - 1.4) / 0.5)
            hill = zi < 1.55 + 0.08 * np.sin((xi - 3.0) * 14.0) + 0.05 * fbm(pi, [0.05], seed + 5)
            pc = sky.copy()
            pc[hill] = mix(np.array([0.15, 0.5, 0.15]), np.array([0.45, 0.35, 0.1]),
                           fbm(pi[hill], [0.06, 0.02], seed + 6))
            sun = np.hypot(xi - 3.35, zi - 1.78) < 0.05
            pc[sun] = np.array([1.0, 0.85, 0.3])
            border = (xi < 3.03) | (xi > 3.47) | (zi < 1.43) | (zi > 1.87)
            pc[border] = np.array([0.55, 0.35, 0.15])
            c[inside] = pc
        return c

    return f


def mat_floor(seed):
    def f(p, n):
        chk = soft_checker(p[:, 0], p[:, 1], 0.5, 0.04)
        c = mix(np.array([0.62, 0.52, 0.38]), np.array([0.30, 0.22, 0.16]), chk)
        return c * grain(p * np.array([1.0, 4.0, 1.0]), [0.3, 0.1, 0.04], seed, 0.6)[:, None]

    return f


def mat_rug(seed):
    def f(p, n):
        x, y = p[:, 0] - 2.5, p[:, 1] - 2.3
        d = np.maximum(np.abs(x) / 1.0, np.abs(y) / 0.7)
        frame = soft_stripes(d, 0.3, 0.35, 0.05)
        diag = soft_stripes(x + y, 0.3, 0.5, 0.1)
        c = mix(np.array([0.65, 0.12, 0.12]), np.array([0.9, 0.8, 0.55]), 0.8 * frame)
        c = mix(c, np.array([0.1, 0.2, 0.45]), 0.5 * diag * (d < 0.55))
        return c * grain(p, [0.15, 0.05], seed, 0.4)[:, None]

    return f


def mat_ceiling(seed):
    def f(p, n):
        tiles = soft_checker(p[:, 0], p[:, 1], 0.6, 0.03)
        c = mix(np.array([0.88, 0.87, 0.82]), np.array([0.7, 0.72, 0.78]), tiles)
        return c * grain(p, [0.5, 0.12], seed, 0.4)[:, None]

    return f


def mat_wood(base, dark, axis, seed):
    def f(p, n):
        q = p.copy()
        q[:, axis] *= 0.1  # stretch the noise along the grain
        warp = fbm(q, [0.15, 0.05], seed)
        across = p[:, 1 - axis if axis < 2 else 0] + 0.25 * warp
        rings = 0.5 + 0.5 * np.sin(across * 2 * np.pi / 0.07)
        c = mix(base, dark, 0.6 * rings * warp + 0.2)
        return c * grain(p, [0.3, 0.06], seed + 1, 0.4)[:, None]

    return f


def mat_checker_box(c0, c1, size, seed):
    def f(p, n):
        a, b = _plane_coords(p, n)
        chk = soft_checker(a, b, size, 0.1)
        c = mix(c0, c1, chk)
        return c * grain(p, [0.25, 0.06], seed, 0.5)[:, None]

    return f


def mat_blobby(c0, c1, c2, cell, seed):
    def f(p, n):
        t1 = smoothstep(0.35, 0.65, value_noise(p, cell, seed))
        t2 = smoothstep(0.45, 0.6, value_noise(p, cell * 0.45, seed + 1))
        c = mix(mix(c0, c1, t1), c2, 0.7 * t2)
        return c * grain(p, cell * 0.2, seed + 2, 0.4, octave=True)[:, None]

    return f


def mat_rings(c0, c1, period, seed):
    def f(p, n):
        s = soft_stripes(p[:, 2], period, 0.45, 0.08)
        c = mix(c0, c1, s)
        return c * grain(p, [0.08, 0.03], seed, 0.5)[:, None]

    return f


def mat_books(seed):
    pal = np.array([[0.75, 0.15, 0.12], [0.12, 0.3, 0.65], [0.85, 0.75, 0.2], [0.15, 0.55, 0.25],
                    [0.9, 0.9, 0.85], [0.35, 0.2, 0.5], [0.95, 0.5, 0.1], [0.1, 0.1, 0.1]])

    def f(p, n):
        book = np.floor(p[:, 0] / 0.045).astype(np.int64)
        shelf = np.floor(p[:, 2] / 0.45).astype(np.int64)
        h = _hash3(book, shelf, np.zeros_like(book), seed)
        c = pal[np.minimum((h * len(pal)).astype(int), len(pal) - 1)]
        label = soft_stripes(p[:, 2] - 0.45 * shelf, 0.45, 0.08, 0.02)
        c = mix(c, np.array([0.95, 0.92, 0.8]), 0.7 * label * (_hash3(book, shelf, book, seed + 1) > 0.4))
        return c * grain(p, 0.03, seed + 2, 0.3, octave=True)[:, None]

    return f


def mat_plain_noise(base, seed, amp=0.5):
    def f(p, n):
        return np.asarray(base) * grain(p, [0.3, 0.1, 0.04], seed, amp)[:, None]

    return f


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


def camera_pose(k, total=TOTAL_FRAMES):
    """T_wc (4x4) of frame k: a closed, smooth, hand-held-like path (all terms periodic in s)."""
    s = 2.0 * math.pi * k / total
    x = 2.5 + 0.32 * math.sin(s) + 0.025 * math.sin(3 * s + 0.7)
    y = 1.05 + 0.14 * math.sin(2 * s + 0.4) - 0.08 * math.cos(s) + 0.012 * math.sin(5 * s)
    z = 1.42 + 0.05 * math.sin(s + 1.0) + 0.01 * math.sin(6 * s + 0.3)
    yaw = -0.34 * math.sin(s) + 0.18 * math.sin(2 * s + 0.5) + 0.025 * math.sin(5 * s + 1.1)
    pitch = 0.3 + 0.08 * math.sin(2 * s + 1.3) + 0.02 * math.sin(5 * s + 0.2)
    roll = 0.045 * math.sin(3 * s + 0.2) + 0.01 * math.sin(7 * s)
    # forward (camera z) from yaw (about world z, 0 = +y, positive turns toward +x) and pitch (down)
    fwd = np.array([math.sin(yaw) * math.cos(pitch), math.cos(yaw) * math.cos(pitch), -math.sin(pitch)])
    right = np.cross(fwd, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    down = np.cross(fwd, right)
    cr, sr = math.cos(roll), math.sin(roll)
    right, down = cr * right + sr * down, -sr * right + cr * down
    T = np.eye(4)
    T[:3, 0], T[:3, 1], T[:3, 2], T[:3, 3] = right, down, fwd, (x, y, z)
    return T


def rot_to_quat(R):
    """3x3 rotation -> (qx, qy, qz, qw), qw >= 0."""
    tr = np.trace(R)
    if tr > 0:
        S = math.sqrt(tr + 1.0) * 2
        q = [(R[2, 1] - R[1, 2]) / S, (R[0, 2] - R[2, 0]) / S, (R[1, 0] - R[0, 1]) / S, 0.25 * S]
    elif R[0, 0] > R[1, 1] and R[0, 0] > R[2, 2]:
        S = math.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2]) * 2
        q = [0.25 * S, (R[0, 1] + R[1, 0]) / S, (R[0, 2] + R[2, 0]) / S, (R[2, 1] - R[1, 2]) / S]
    elif R[1, 1] > R[2, 2]:
        S = math.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2]) * 2
        q = [(R[0, 1] + R[1, 0]) / S, 0.25 * S, (R[1, 2] + R[2, 1]) / S, (R[0, 2] - R[2, 0]) / S]
    else:
        S = math.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1]) * 2
        q = [(R[0, 2] + R[2, 0]) / S, (R[1, 2] + R[2, 1]) / S, 0.25 * S, (R[1, 0] - R[0, 1]) / S]
    q = np.array(q) / np.linalg.norm(q)
    return q if q[3] >= 0 else -q


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


# ----------------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------------
def stamp(k):
    return f"{T0 + k / FPS:.6f}"


def pose_line(k, T):
    q = rot_to_quat(T[:3, :3])
    t = T[:3, 3]
    return f"{stamp(k)} {t[0]:.6f} {t[1]:.6f} {t[2]:.6f} {q[0]:.7f} {q[1]:.7f} {q[2]:.7f} {q[3]:.7f}"


def rotation_angle_deg(R):
    return math.degrees(math.acos(max(-1.0, min(1.0, (np.trace(R) - 1.0) / 2.0))))


def motion_stats(poses):
    steps_t = [np.linalg.norm(b[:3, 3] - a[:3, 3]) for a, b in zip(poses[:-1], poses[1:])]
    steps_r = [rotation_angle_deg(a[:3, :3].T @ b[:3, :3]) for a, b in zip(poses[:-1], poses[1:])]
    loop_t = np.linalg.norm(poses[-1][:3, 3] - poses[0][:3, 3])
    loop_r = rotation_angle_deg(poses[0][:3, :3].T @ poses[-1][:3, :3])
    return dict(
        path_m=float(np.sum(steps_t)), rot_deg=float(np.sum(steps_r)),
        step_mean_cm=100 * float(np.mean(steps_t)), step_max_cm=100 * float(np.max(steps_t)),
        rot_mean_deg=float(np.mean(steps_r)), rot_max_deg=float(np.max(steps_r)),
        loop_cm=100 * float(loop_t), loop_deg=float(loop_r),
    )


README = """# Sample RGB-D sequence (synthetic)

The small sequence `run_slam` and the end-to-end tests use by default. TUM RGB-D layout:
`rgb/*.png` (8-bit RGB), `depth/*.png` (16-bit, metres x 5000, 0 = invalid), `rgb.txt`,
`depth.txt`, `groundtruth.txt` (`timestamp tx ty tz qx qy qz qw`, camera-to-world T_wc, OpenCV
camera axes x right / y down / z forward; world z up, the room's floor corner at the origin) and
`camera.yaml` (pinhole intrinsics, OpenCV pixel-centre convention, no distortion).

## How it was made

    python scripts/make_sample.py --out datasets/sample

Deterministic, no downloads and no input images: a furnished {room} m room built from triangle
meshes, ray cast with Open3D (`RaycastingScene`) along a smooth closed camera path. Colour is a
procedural, view-independent texture of the world hit point (checkers, stripes, value-noise
blobs, posters; Lambertian shading with a fixed light plus ambient), averaged over 2x2 rays per
pixel; depth is the exact z-depth of each pixel-centre ray. Rays through the window see no
surface: depth 0 there.

- {frames} frames, {w}x{h}, {fps:g} Hz timestamps from {t0:.6f}
- intrinsics fx = {fx}, fy = {fy}, cx = {cx}, cy = {cy}, depth_scale = {ds}
- camera path: {path_m:.2f} m long, {rot_deg:.1f} deg of accumulated rotation
- per frame: {step_mean_cm:.2f} cm mean / {step_max_cm:.2f} cm max translation,
  {rot_mean_deg:.2f} deg mean / {rot_max_deg:.2f} deg max rotation
- loop: the last frame is {loop_cm:.2f} cm / {loop_deg:.2f} deg from the first
- valid depth: {valid_pct:.2f} % of all pixels (lowest frame {valid_min_pct:.2f} %),
  depth range {zmin:.2f} - {zmax:.2f} m

Regenerating on another CPU may change the last bits of Embree's float32 ray casting. The tests
(`tests/test_sample.py`) accept depth within 1 raw unit (0.2 mm) on >= 99.9 % of pixels, colour
within 2 levels on >= 99.9 % of pixel channels, and require the text files to match exactly.

## Licence

Generated by this project (scripts/make_sample.py); it contains no third-party data. It is
distributed under the same licence as the rest of the repository.
"""


def write_text(path, lines):
    Path(path).write_text("\n".join(lines) + "\n")


def generate(out, frames=None, total=TOTAL_FRAMES, seed=SEED, quiet=False):
    import cv2

    out = Path(out)
    n = total if frames is None else min(frames, total)
    (out / "rgb").mkdir(parents=True, exist_ok=True)
    (out / "depth").mkdir(parents=True, exist_ok=True)
    for sub in ("rgb", "depth"):
        for f in (out / sub).glob("*.png"):
            f.unlink()
    t_start = time.perf_counter()
    ren = Renderer(seed)
    poses, valid, zmin, zmax = [], [], np.inf, 0.0
    rgb_lines = ["# color images", "# file: 'sample' (generated by scripts/make_sample.py)", "# timestamp filename"]
    depth_lines = ["# depth maps", "# file: 'sample' (generated by scripts/make_sample.py)", "# timestamp filename"]
    gt_lines = ["# ground truth trajectory (T_wc, OpenCV camera axes)",
                "# file: 'sample' (generated by scripts/make_sample.py)", "# timestamp tx ty tz qx qy qz qw"]
    png = [cv2.IMWRITE_PNG_COMPRESSION, 9]
    for k in range(n):
        T = camera_pose(k, total)
        rgb, z = ren.render(T)
        raw = encode_depth(z)
        ts = stamp(k)
        if not cv2.imwrite(str(out / "rgb" / f"{ts}.png"), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), png):
            raise OSError(f"could not write {out / 'rgb' / (ts + '.png')}")
        if not cv2.imwrite(str(out / "depth" / f"{ts}.png"), raw, png):
            raise OSError(f"could not write {out / 'depth' / (ts + '.png')}")
        rgb_lines.append(f"{ts} rgb/{ts}.png")
        depth_lines.append(f"{ts} depth/{ts}.png")
        gt_lines.append(pose_line(k, T))
        poses.append(T)
        v = raw > 0
        valid.append(float(v.mean()))
        if v.any():
            zmin, zmax = min(zmin, raw[v].min() / DEPTH_SCALE), max(zmax, raw[v].max() / DEPTH_SCALE)
    write_text(out / "rgb.txt", rgb_lines)
    write_text(out / "depth.txt", depth_lines)
    write_text(out / "groundtruth.txt", gt_lines)
    write_text(out / "camera.yaml", [
        "# Pinhole intrinsics of the sample (OpenCV convention: pixel centres at integer coordinates)",
        f"fx: {FX}", f"fy: {FY}", f"cx: {CX}", f"cy: {CY}", f"width: {WIDTH}", f"height: {HEIGHT}",
        f"depth_scale: {DEPTH_SCALE}", "distortion: null",
    ])
    elapsed = time.perf_counter() - t_start
    stats = motion_stats(poses) if n > 1 else {}
    stats.update(valid_pct=100 * float(np.mean(valid)), valid_min_pct=100 * float(np.min(valid)),
                 zmin=float(zmin), zmax=float(zmax), frames=n, seconds=elapsed)
    if n > 1:
        (out / "README.md").write_text(README.format(
            room="x".join(f"{v:g}" for v in ROOM), w=WIDTH, h=HEIGHT, fps=FPS, t0=T0, fx=FX, fy=FY, cx=CX, cy=CY,
            ds=DEPTH_SCALE, **stats))
    if not quiet:
        print(f"wrote {n} frames ({WIDTH}x{HEIGHT}) to {out} in {elapsed:.1f} s")
        for key, val in stats.items():
            print(f"  {key}: {val:.4g}" if isinstance(val, float) else f"  {key}: {val}")
    return stats


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="datasets/sample", help="output directory (default: datasets/sample)")
    ap.add_argument("--frames", type=int, default=None, help="write only the first N frames of the sequence")
    ap.add_argument("--total", type=int, default=TOTAL_FRAMES,
                    help=f"frames in the full (closed) path (default {TOTAL_FRAMES}); changing it changes the path")
    ap.add_argument("--seed", type=int, default=SEED, help="texture seed (default: the committed sample's)")
    args = ap.parse_args(argv)
    if args.frames is not None and args.frames < 1:
        ap.error("--frames must be >= 1")
    generate(args.out, args.frames, args.total, args.seed)


if __name__ == "__main__":
    main()
