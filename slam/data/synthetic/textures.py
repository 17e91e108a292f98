"""Procedural textures of the synthetic room (slam.data.synthetic.room): integer-hashed value
noise and the materials built on it. A material is ``albedo(p, n) -> (M, 3)`` in [0, 1] of world
hit points ``p`` (M, 3) and normals ``n`` (M, 3). numpy only, float64, integer hashing: identical
on every platform.
"""
from __future__ import annotations

import numpy as np

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
