"""How long the tiles' sphere lists of a real map are, and how far down them a pixel goes: the
figures behind the Gauss-Newton pass's 8x8 tiles on CUDA (rasterizer/csrc/gn_cuda.cu). Maps the
first frames of a sequence (single-thread mode, as ``slam_profile``), then at the last frame's
tracked pose, for each tile side and each tracking pyramid level: every tile's sphere list (the
kernels' rule: the tiles of the pixel centres in the 3-sigma box, front to back) and every pixel
walked down its tile's list as the render does (``rasterizer._model``'s constants), in NumPy.
A block's latency on CUDA is the longest walk of its pixels, its work the walks' sum.

    python -m slam.tools.tile_lists --config 7scenes.yaml --set data.path=... --map-frames 60
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from rasterizer import _model as M


@dataclass
class Splats:
    """Projected spheres, front to back: centres ``u, v`` (px), per-axis variances ``sx2, sy2``
    (px^2), opacities (n,) float64; ``box``: (4, n) int64 the first and last pixel column and row
    whose centres lie in the 3-sigma box (px0, px1, py0, py1); the culled ones left out."""

    u: np.ndarray
    v: np.ndarray
    sx2: np.ndarray
    sy2: np.ndarray
    opacity: np.ndarray
    box: np.ndarray


def project(means_cam: np.ndarray, radii: np.ndarray, opacities: np.ndarray, K: np.ndarray,
            width: int, height: int) -> Splats:
    """``means_cam``: (N, 3) m, camera frame; ``radii``, ``opacities``: (N,); ``K``: (3, 3) px.
    -> the splats in view (depth culling and the 3-sigma box touching a pixel centre), sorted by
    depth (ties by index, as the kernels)."""
    x, y, z = (np.asarray(means_cam, np.float64)[:, i] for i in range(3))
    keep = (z > M.NEAR) & (z <= M.FAR)
    idx = np.nonzero(keep)[0]
    idx = idx[np.argsort(z[idx], kind="stable")]
    x, y, z, r, o = x[idx], y[idx], z[idx], np.asarray(radii, np.float64)[idx], np.asarray(opacities, np.float64)[idx]
    u = K[0, 0] * x / z + K[0, 2]
    v = K[1, 1] * y / z + K[1, 2]
    sx2 = (K[0, 0] * r / z) ** 2 + M.LOW_PASS
    sy2 = (K[1, 1] * r / z) ** 2 + M.LOW_PASS
    rx, ry = 3.0 * np.sqrt(sx2), 3.0 * np.sqrt(sy2)
    box = np.stack([np.ceil(np.maximum(u - rx, 0)), np.floor(np.minimum(u + rx, width - 1)),
                    np.ceil(np.maximum(v - ry, 0)), np.floor(np.minimum(v + ry, height - 1))]).astype(np.int64)
    seen = (box[0] <= box[1]) & (box[2] <= box[3])
    return Splats(u[seen], v[seen], sx2[seen], sy2[seen], o[seen], box[:, seen])


def tile_lists(s: Splats, width: int, height: int, tile: int) -> list:
    """Per tile (row-major, ``tile`` x ``tile`` px) the indices into ``s`` of its spheres, front to
    back: each splat in the tiles of the pixel centres of its 3-sigma box."""
    tiles_x, tiles_y = -(-width // tile), -(-height // tile)
    px0, px1, py0, py1 = s.box // tile
    lists: list = [[] for _ in range(tiles_x * tiles_y)]
    for i in range(len(s.u)):       # in depth order: each list comes out front to back
        for ty in range(py0[i], py1[i] + 1):
            for tx in range(px0[i], px1[i] + 1):
                lists[ty * tiles_x + tx].append(i)
    return [np.asarray(lst, dtype=np.int64) for lst in lists]


def walk_tile(s: Splats, ids: np.ndarray, x0: int, y0: int, x1: int, y1: int) -> tuple:
    """The pixels [x0, x1) x [y0, y1) (row-major) walked down one tile's list ``ids`` as the render
    does. -> (how far each pixel goes: the list position where it stops, or the list's length;
    the spheres it blends; its alpha, 1 - the final transmittance), (P,) each."""
    py, px = np.mgrid[y0:y1, x0:x1]
    px, py = px.reshape(-1, 1).astype(np.float64), py.reshape(-1, 1).astype(np.float64)
    if len(ids) == 0:
        return np.zeros(len(px), int), np.zeros(len(px), int), np.zeros(len(px))
    q = (px - s.u[ids]) ** 2 / s.sx2[ids] + (py - s.v[ids]) ** 2 / s.sy2[ids]
    a = np.minimum(M.ALPHA_MAX, s.opacity[ids] * np.exp(-0.5 * q))
    a[(q > M.CUTOFF_Q) | (a < M.ALPHA_MIN)] = 0.0
    T = np.cumprod(1.0 - a, axis=1)
    stops = T <= M.T_MIN                    # the first such sphere is not blended: the pixel ends there
    reach = np.where(stops.any(axis=1), stops.argmax(axis=1), len(ids))
    blended = ((a > 0) & (np.arange(len(ids)) < reach[:, None])).sum(axis=1)
    T_final = np.where(reach > 0, T[np.arange(len(px)), np.maximum(reach - 1, 0)], 1.0)
    return reach, blended, 1.0 - T_final


def list_figures(s: Splats, width: int, height: int, tile: int) -> dict:
    """The lists' and walks' figures of one image and tile side (see ``main``)."""
    lists = tile_lists(s, width, height, tile)
    tiles_x = -(-width // tile)
    lengths = np.array([len(ids) for ids in lists])
    longest_walk, reach_all, blended_all, ended = [], [], [], []
    for t, ids in enumerate(lists):
        x0, y0 = (t % tiles_x) * tile, (t // tiles_x) * tile
        reach, blended, _ = walk_tile(s, ids, x0, y0, min(x0 + tile, width), min(y0 + tile, height))
        longest_walk.append(reach.max())
        reach_all.append(reach)
        blended_all.append(blended)
        ended.append(reach < len(ids))
    reach, blended, ended = np.concatenate(reach_all), np.concatenate(blended_all), np.concatenate(ended)
    return {"tiles": len(lists), "pairs": int(lengths.sum()), "list_mean": float(lengths.mean()),
            "list_median": float(np.median(lengths)), "list_p90": float(np.percentile(lengths, 90)),
            "list_max": int(lengths.max()), "walk_per_pixel": float(reach.mean()),
            "longest_walk_max": int(max(longest_walk)), "pixels_ended_pct": 100.0 * float(ended.mean()),
            "blended_per_pixel": float(blended.mean())}


def main(argv=None) -> int:
    """Prints the table; 0 when done."""
    from slam.geometry import invert
    from slam.tools.profile_tracking import load_frames, map_first_frames

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="default.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--map-frames", type=int, default=60, help="frames mapped before the lists are read")
    ap.add_argument("--tiles", default="8,16", help="tile sides (px), comma-separated")
    args = ap.parse_args(argv)

    cfg, system, snap, first = map_first_frames(args.config, args.set, args.map_frames)
    last = system.recorder.snapshot()[0][-1]          # the last frame mapped: its pose and image size
    obs = system.observation(load_frames(args.config, args.set, first + args.map_frames - 1, first + args.map_frames)[0])
    T_cw = invert(last.T_wc)
    means = snap.means.cpu().double().numpy()
    means_cam = means @ T_cw[:3, :3].T + T_cw[:3, 3]
    radii, opac = snap.radii.cpu().double().numpy(), snap.opacities.cpu().double().numpy()
    print(f"map: {means.shape[0]:,} spheres after {args.map_frames} frames; pose of frame {last.index}")
    print("\n| image | tile | tiles | pairs | list mean / median / p90 / max | walk a pixel | longest walk "
          "| pixels ended early | blended a pixel |\n|---|---|---|---|---|---|---|---|---|")
    for level in range(cfg.tracking.pyramid_levels):      # the tracker's pyramid, fine to coarse
        lv = obs.downsampled(2 ** level)
        w, h = lv.width, lv.height
        s = project(means_cam, radii, opac, np.asarray(lv.K, dtype=np.float64), w, h)
        for tile in (int(t) for t in args.tiles.split(",")):
            r = list_figures(s, w, h, tile)
            print(f"| {w}x{h} | {tile} | {r['tiles']} | {r['pairs']:,} | {r['list_mean']:.0f} / "
                  f"{r['list_median']:.0f} / {r['list_p90']:.0f} / {r['list_max']} | {r['walk_per_pixel']:.0f} | "
                  f"{r['longest_walk_max']} | {r['pixels_ended_pct']:.1f} % | {r['blended_per_pixel']:.1f} |")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
