"""A guard on every correction that needs no ground truth: the keyframes' own depths.

For a pair of keyframes, the older one's depth (about GUARD_POINTS pixels of it) is moved
into the newer one's camera by their relative pose and compared with the newer one's depth where
it lands: within ``tol = loop.depth_tol + quality.depth_noise_quad z^2`` it agrees, fully at zero
difference and linearly less up to ``tol`` (``slam.eval.depth_consistency``'s test, graded). The
evidence of a set of poses is the mean agreement of the sampled points (0 for a point that lands
off the image or on invalid depth), pooled over
- the pairs **across** the loop: each old keyframe within GUARD_WINDOW keyframes of a loop's old
  keyframe against each new keyframe within GUARD_WINDOW before (and at) its new one, except the
  loop edges' own pairs (their measurement made them agree: no independent evidence);
- the pairs **along** it: consecutive keyframes from the oldest to the newest loop keyframe
  (a correction that bends the trajectory shows there).
A correction is kept only if the evidence at the corrected poses is higher than at the current
ones. Graded, not counted: a correction of a few centimetres hardly moves points across a
tolerance of 3-5 cm: on 7-Scenes the count moved by -0.002..+0.003 for the 3 cm loop kf 57-98
(kept in some runs, rejected in others), the graded agreement by +0.016 in each run (H200:
docs/benchmarks.md#loop-closure-on-and-off).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slam.geometry import invert

# Pixels sampled from a keyframe's depth (a regular grid): 160x120 sampled every 2nd pixel. Bounds
# the cost (a pair is ~1 ms; a closure compares up to a few hundred pairs twice), tunes nothing.
GUARD_POINTS = 4800
GUARD_WINDOW = 3   # keyframes either side of a loop's old keyframe / before its new one


@dataclass
class Evidence:
    """agree: the points' summed agreement (each in [0, 1]); points: points sampled; pairs: pairs."""

    agree: float = 0.0
    points: int = 0
    pairs: int = 0

    @property
    def share(self) -> float:
        return self.agree / max(self.points, 1)


def pair_agreement(old, new, T_new_old: np.ndarray, tol: float, quad: float) -> tuple[float, int]:
    """(summed agreement of the points of ``old``'s depth with ``new``'s depth where they land,
    points sampled): keyframes (``depth`` (H, W) metres, ``K`` (3, 3)); T_new_old (4, 4): old
    camera -> new camera. A point's agreement: ``max(0, 1 - |z_new - z| / (tol + quad z_new^2))``
    on valid depth, else 0."""
    h, w = old.depth.shape
    stride = max(1, int(round(np.sqrt(h * w / GUARD_POINTS))))
    d = np.asarray(old.depth, dtype=np.float32)[::stride, ::stride]
    v, u = np.nonzero(d > 0)
    z = d[v, u].astype(np.float64)
    K = old.K
    u, v = u * stride, v * stride
    p = np.stack([(u - K[0, 2]) / K[0, 0] * z, (v - K[1, 2]) / K[1, 1] * z, z], axis=1)
    p = p @ T_new_old[:3, :3].T + T_new_old[:3, 3]
    front = p[:, 2] > 1e-6
    p = p[front]
    Kn = new.K
    un = np.round(p[:, 0] / p[:, 2] * Kn[0, 0] + Kn[0, 2]).astype(np.int64)
    vn = np.round(p[:, 1] / p[:, 2] * Kn[1, 1] + Kn[1, 2]).astype(np.int64)
    h, w = new.depth.shape
    inside = (un >= 0) & (un < w) & (vn >= 0) & (vn < h)
    zn = np.asarray(new.depth[vn[inside], un[inside]], dtype=np.float64)
    zp = p[inside, 2]
    grade = np.clip(1.0 - np.abs(zn - zp) / (tol + quad * zn * zn), 0.0, None)
    return float(grade[zn > 0].sum()), int(len(z))


def guard_pairs(loops: list, ids: list) -> list[tuple[int, int]]:
    """(old id, new id) pairs the guard compares: across each loop (a, b) of ``loops`` (objects
    with ``a``, ``b``) and along the span of all of them, among the keyframe ``ids`` available."""
    ids = sorted(ids)
    index = {k: i for i, k in enumerate(ids)}
    own = {(e.a, e.b) for e in loops}
    pairs = set()
    for e in loops:
        if e.a not in index or e.b not in index:
            continue
        ia, ib = index[e.a], index[e.b]
        olds = ids[max(ia - GUARD_WINDOW, 0): ia + GUARD_WINDOW + 1]
        news = ids[max(ib - GUARD_WINDOW, 0): ib + 1]
        pairs.update((i, j) for i in olds for j in news if i < j and (i, j) not in own)
    lo = min(index.get(e.a, len(ids)) for e in loops)
    hi = max(index.get(e.b, -1) for e in loops)
    pairs.update((ids[i], ids[i + 1]) for i in range(lo, hi))
    return sorted(pairs)


def evidence(keyframes: dict, poses: dict, pairs: list, tol: float, quad: float) -> Evidence:
    """Pooled depth agreement of ``pairs`` at ``poses`` (id -> T_wc (4, 4)); ``keyframes``: id ->
    keyframe (depth, K)."""
    out = Evidence()
    for i, j in pairs:
        agree, points = pair_agreement(keyframes[i], keyframes[j], invert(np.asarray(poses[j])) @ np.asarray(poses[i]),
                                       tol, quad)
        out.agree += agree
        out.points += points
        out.pairs += 1
    return out


def check(keyframes: dict, before: dict, after: dict, loops: list, tol: float, quad: float) -> tuple[bool, Evidence, Evidence]:
    """(keep the correction, evidence at the current poses ``before``, at the corrected ``after``)."""
    ids = [k for k in keyframes if k in before and k in after]
    pairs = guard_pairs(loops, ids)
    b = evidence(keyframes, before, pairs, tol, quad)
    a = evidence(keyframes, after, pairs, tol, quad)
    return a.share > b.share, b, a
