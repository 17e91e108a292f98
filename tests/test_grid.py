"""The 2D occupancy grid (slam/grid/, issue 35): the floor, the ray casting, exact removal of a
keyframe's evidence, re-integration when poses move, the map_server files, and the grid of a SLAM
run on the bundled sample against the room's true floor plan (tests/grid_truth.py: from the
room's geometry, no grid code)."""
from __future__ import annotations

import math
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from grid_truth import iou_against_truth
from slam.config import ConfigError, load_config
from slam.grid.builder import GridBuilder, pose_change
from slam.grid.export import load_map_yaml, read_pgm, write_grid_png, write_map_files
from slam.grid.floor import FloorFrame, estimate_floor, floor_from_camera
from slam.grid.occupancy import GridCounts
from slam.grid.raycast import cast


def _rotation(axis, deg) -> np.ndarray:
    a = np.asarray(axis, float) / np.linalg.norm(axis)
    t = math.radians(deg)
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + math.sin(t) * K + (1 - math.cos(t)) * K @ K


def _camera(pos, yaw_deg, pitch_deg) -> np.ndarray:
    """T_wc of an OpenCV camera in a z-up world, looking along yaw, pitch_deg below the horizon."""
    yaw, pitch = math.radians(yaw_deg), math.radians(pitch_deg)
    fwd = np.array([math.cos(yaw) * math.cos(pitch), math.sin(yaw) * math.cos(pitch), -math.sin(pitch)])
    right = np.cross(fwd, [0, 0, 1.0])
    right /= np.linalg.norm(right)
    T = np.eye(4)
    T[:3, 0], T[:3, 1], T[:3, 2], T[:3, 3] = right, np.cross(fwd, right), fwd, pos
    return T


# ------------------------------------------------------------------------------------------ floor
def test_floor_from_a_robot_cameras_height_and_tilt():
    T = _camera([1.0, 2.0, 0.45], yaw_deg=30, pitch_deg=20)
    f = floor_from_camera(T, camera_height=0.45, tilt_deg=20)
    np.testing.assert_allclose(f.up, [0, 0, 1], atol=1e-9)
    assert abs(f.height) < 1e-9
    np.testing.assert_allclose(f.to_floor(np.array([[3.0, -1.0, 0.3]]))[0, 2], 0.3, atol=1e-9)
    assert np.linalg.det(f.R_fw) == pytest.approx(1.0)


def test_floor_estimate_finds_up_and_the_floor_below_a_larger_table():
    """A tilted world (no gravity), a table top that holds more points than the visible floor,
    walls, cameras held at 1.4-1.6 m pitched 0-40 deg down: up within 0.5 deg, the floor (not the
    table) within 1 cm; the sign from the cameras being above."""
    rng = np.random.default_rng(0)
    pts, nrm = [], []

    def patch(n, lo, hi, normal):
        p = rng.uniform(lo, hi, size=(n, 3))
        pts.append(p + rng.normal(0, 0.005, size=p.shape))
        nn = np.asarray(normal, float) + rng.normal(0, 0.05, size=(n, 3))
        nrm.append(nn / np.linalg.norm(nn, axis=1, keepdims=True))

    patch(600, [0, 0, 0], [4, 1, 0], [0, 0, 1])            # the floor seen in front
    patch(3000, [0, 1.5, 0.9], [4, 3, 0.9], [0, 0, 1])     # a big counter top at 0.9 m
    patch(3000, [0, 3, 0], [4, 3, 2.5], [0, -1, 0])        # a wall
    patch(1500, [4, 0, 0], [4, 3, 2.5], [-1, 0, 0])        # another wall
    cams = [_camera([rng.uniform(0.5, 3.5), rng.uniform(-1.0, 0.5), rng.uniform(1.4, 1.6)],
                    rng.uniform(60, 120), rng.uniform(0, 40)) for _ in range(12)]
    R = _rotation([0.3, -0.5, 0.8], 37.0)                  # the SLAM world is tilted against gravity
    P, N = np.concatenate(pts) @ R.T, np.concatenate(nrm) @ R.T
    centres = np.stack([R @ T[:3, 3] for T in cams])
    downs = np.stack([R @ T[:3, 1] for T in cams])
    f = estimate_floor(P, N, centres, downs)
    up_true = R @ [0, 0, 1.0]
    assert math.degrees(math.acos(min(1.0, f.up @ up_true))) < 0.5
    assert abs(f.height - 0.0) < 0.01, f.height            # the floor, not the counter at 0.9
    # nothing horizontal seen: no floor
    assert estimate_floor(pts[2] @ R.T, nrm[2] @ R.T, centres, downs) is None


# ------------------------------------------------------------------------------------------ rays
def test_cast_marks_the_band_obstacle_and_the_free_ray_only_in_the_band():
    """Camera 1.4 m above the floor; one ray to a wall point at 0.5 m height 3 m away, one to a
    ceiling point (above the band), one to a floor point: the wall point's voxel is occupied, the
    ceiling point is no obstacle, the rays are free only where they are in the band."""
    floor = FloorFrame.from_up([0, 0, 1.0], 0.0)
    T = np.eye(4)
    T[:3, 3] = [0.0, 0.0, 1.4]
    pts_w = np.array([[3.0, 0.01, 0.5], [1.0, 0.01, 2.5], [2.0, 1.01, 0.0]])
    c = cast(pts_w - T[:3, 3], T, floor, resolution=0.1, min_height=0.1, max_height=1.0, max_range=4.0)
    assert c.occupied.tolist() == [[30, 0, 4]]
    free = {tuple(v) for v in c.free.tolist()}
    # the wall ray enters the band (1.0 m) at x = 3 * 0.4 / 0.9 = 1.33 m: no free voxel before
    wall = sorted(v for v in free if v[1] == 0)
    assert wall[0][0] == 13 and wall[-1][0] in (29, 30) and (30, 0, 4) not in free
    assert all(0 <= v[2] < 9 for v in free)
    # the floor ray is free down to the floor point's cell (lowest layer)
    assert (20, 10, 0) in free
    # the ceiling point is above the band and the camera too: nothing
    assert not any(v[1] == 0 and v[0] < 13 for v in free)
    # beyond max_range: the ray clears up to it, no obstacle
    far = cast(np.array([[0.0, 0.0, 6.0]]), _camera([0, 0, 0.5], 0, 0), floor, 0.1, 0.1, 1.0, 4.0)
    assert len(far.occupied) == 0 and far.free[:, 0].max() in (39, 40)   # 4.0 m: the cell boundary


def test_counts_take_a_keyframes_evidence_out_exactly():
    floor = FloorFrame.from_up([0, 0, 1.0], 0.0)
    rng = np.random.default_rng(3)
    a = cast(rng.uniform([-2, -2, 0], [2, 2, 1.2], (500, 3)) - [0, 0, 1.3], _eye_at(1.3), floor, 0.05, 0.1, 1.0, 4)
    b = cast(rng.uniform([-2, -2, 0], [2, 2, 1.2], (500, 3)) - [0.5, 0, 1.3], _eye_at(1.3, x=0.5), floor, 0.05, 0.1,
             1.0, 4)
    both, only_a = GridCounts(18), GridCounts(18)
    both.add(a)
    both.add(b)
    both.add(b, -1)
    only_a.add(a)
    assert both.hits.sum() == only_a.hits.sum() > 0
    (o_both, h_both, m_both), (o_a, h_a, m_a) = both.dense(), only_a.dense()
    oy, ox = (o_a - o_both)[::-1]
    h, w = h_a.shape[1:]
    np.testing.assert_array_equal(h_both[:, oy:oy + h, ox:ox + w], h_a)
    np.testing.assert_array_equal(m_both[:, oy:oy + h, ox:ox + w], m_a)
    assert h_both.sum() == h_a.sum() and m_both.sum() == m_a.sum()       # nothing outside a's columns


def _dense_reference(contributions: list, layers: int, args: tuple):
    """The grid as one dense array over the columns touched (the store before tiles): counts and
    the snapshot's projection, the oracle of the tiled ``GridCounts``."""
    floor, resolution, lh, lm, occ_t, free_t, coverage = args[:7]
    cols = np.concatenate([np.concatenate([c.occupied, c.free])[:, :2] for c, _ in contributions])
    lo, hi = cols.min(axis=0), cols.max(axis=0)
    hits = np.zeros((layers, hi[1] - lo[1] + 1, hi[0] - lo[0] + 1), np.int64)
    misses = np.zeros_like(hits)
    for c, sign in contributions:
        for v, counts in ((c.occupied, hits), (c.free, misses)):
            np.add.at(counts, (v[:, 2], v[:, 1] - lo[1], v[:, 0] - lo[0]), sign)
    seen = (hits + misses) > 0
    L = np.where(seen, hits * np.float32(lh) + misses * np.float32(lm), -np.inf)
    top = L.max(axis=0)
    occupied = top > math.log(occ_t / (1 - occ_t))
    free = ~occupied & ((seen & (L < math.log(free_t / (1 - free_t)))).mean(axis=0) >= coverage)
    known = occupied | free
    rows, cols_ = np.nonzero(known.any(axis=1))[0], np.nonzero(known.any(axis=0))[0]
    r0, r1, c0, c1 = rows[0], rows[-1] + 1, cols_[0], cols_[-1] + 1
    p = 1.0 / (1.0 + np.exp(-np.clip(top[r0:r1, c0:c1], -30.0, 30.0)))
    occ = np.where(known[r0:r1, c0:c1], np.rint(p * 100.0), -1).astype(np.int8)
    return lo, hits, misses, occ, (int(lo[0] + c0), int(lo[1] + r0))


def test_tiled_counts_equal_one_dense_array():
    """Keyframes scattered over a large area (negative cells, tiles far apart, the tile table
    growing in every direction) and one taken out again: the same counts and the same grid as one
    dense array over the whole box."""
    floor = FloorFrame.from_up([0, 0, 1.0], 0.0)
    rng = np.random.default_rng(7)
    counts, added = GridCounts(18), []
    for x, y in ((0.0, 0.0), (9.0, -4.0), (-12.0, 7.5), (3.1, 3.2), (-6.0, -15.0)):
        T = _eye_at(1.3, x=x)
        T[1, 3] = y
        pts = rng.uniform([-2, -2, 0], [2, 2, 1.2], (400, 3)) + [x, y, -1.3]
        c = cast(pts, T, floor, 0.05, 0.1, 1.0, 4)
        counts.add(c)
        added.append((c, 1))
    counts.add(added[1][0], -1)
    added.append((added[1][0], -1))
    args = (floor, 0.05, 0.85, -0.4, 0.65, 0.35, 0.8, 3, 5)
    lo, hits, misses, occ, origin = _dense_reference(added, 18, args)
    o, h, m = counts.dense()
    np.testing.assert_array_equal(o, lo)
    np.testing.assert_array_equal(h, hits)
    np.testing.assert_array_equal(m, misses)
    snap = counts.snapshot(*args)
    np.testing.assert_array_equal(snap.occupancy, occ)
    assert snap.origin_cell == origin
    # the tiles hold the area seen, far less than the box: 5 views 4 m wide over a 25 x 26 m box
    assert counts.tiles * 64 * 64 < 0.5 * hits.shape[1] * hits.shape[2]


def test_counts_are_uint16_until_the_keyframes_could_pass_it_then_int32():
    floor = FloorFrame.from_up([0, 0, 1.0], 0.0)
    rng = np.random.default_rng(4)
    a = cast(rng.uniform([-2, -2, 0], [2, 2, 1.2], (500, 3)) - [0, 0, 1.3], _eye_at(1.3), floor, 0.05, 0.1, 1.0, 4)
    small, wide = GridCounts(18), GridCounts(18)
    small.add(a)
    wide.hits, wide.misses = wide.hits.astype(np.int32), wide.misses.astype(np.int32)
    wide.add(a)
    assert small.hits.dtype == np.uint16 and small.hits.nbytes * 2 == wide.hits.nbytes
    args = (floor, 0.05, 0.85, -0.4, 0.65, 0.2, 0.5, 1, 1)
    np.testing.assert_array_equal(small.snapshot(*args).occupancy, wide.snapshot(*args).occupancy)
    # counts near the top of uint16 (hits + misses = 65536 would wrap to 0 in uint16: still seen)
    occupied = small.hits > 0
    small.hits[occupied], small.misses[occupied] = 60000, 5536
    small.misses[~occupied & (small.misses > 0)] = 65535
    small.integrated = 65535
    wide.hits, wide.misses = small.hits.astype(np.int32), small.misses.astype(np.int32)
    before = small.snapshot(*args).occupancy
    np.testing.assert_array_equal(before, wide.snapshot(*args).occupancy)
    # at 65535 integrated keyframes the next one needs int32
    small.add(a)
    assert small.hits.dtype == np.int32 and small.hits.max() == 60001 and small.misses.max() == 65536
    small.add(a, -1)
    assert small.integrated == 65535
    np.testing.assert_array_equal(small.hits, wide.hits)
    np.testing.assert_array_equal(small.snapshot(*args).occupancy, before)


def _eye_at(z: float, x: float = 0.0) -> np.ndarray:
    T = np.eye(4)
    T[:3, 3] = [x, 0.0, z]
    return T


# ------------------------------------------------------------------------------------------ builder
def _sample_keyframes(every: int = 10, last: int = 150):
    from slam.data.sources import open_source
    cfg = load_config("default.yaml", [f"data.last={last}"])
    return [SimpleNamespace(kf_id=i, depth=f.depth.astype(np.float16), K=f.K, T_wc=f.gt_pose)
            for i, f in enumerate(open_source(cfg.data)) if i % every == 0]


def test_a_moved_keyframe_is_integrated_again_at_its_new_pose():
    """Keyframes offered at wrong poses (10 cm off), then the corrected poses (as a loop closure
    publishes them): the grid equals one built at the right poses from the start."""
    cfg = load_config("default.yaml", ["grid.floor=camera", "grid.camera_height=1.4", "grid.max_reintegrations=2"]).grid
    kfs = _sample_keyframes()
    right = GridBuilder(cfg, threaded=False)
    moved = GridBuilder(cfg, threaded=True)
    off = np.eye(4)
    off[:3, 3] = [0.1, -0.05, 0.0]
    for kf in kfs:
        right.offer(kf, {kf.kf_id: kf.T_wc})
        moved.offer(SimpleNamespace(kf_id=kf.kf_id, depth=kf.depth, K=kf.K, T_wc=off @ kf.T_wc),
                    {k.kf_id: (k.T_wc if k.kf_id == kfs[0].kf_id else off @ k.T_wc) for k in kfs[: kfs.index(kf) + 1]})
    truth = {k.kf_id: k.T_wc for k in kfs}
    a, b = right.finish(truth), moved.finish(truth)
    assert moved.reintegrations == len(kfs) - 1        # every moved keyframe (the first held the gauge)
    assert b.origin_cell == a.origin_cell
    np.testing.assert_array_equal(b.occupancy, a.occupancy)
    assert moved.error is None and moved.stats()["integrated"] == len(kfs)


def test_the_published_grid_is_made_when_read_once_per_version():
    """The grid thread only bumps the version; ``latest()`` makes the snapshot (once per version:
    the same object until the next update); ``last_made()`` never makes one (the autosave's read
    on the mapping thread). Threaded, a reader polling ``latest()`` meanwhile sees whole grids."""
    cfg = load_config("default.yaml", ["grid.floor=camera", "grid.camera_height=1.4"]).grid
    kfs = _sample_keyframes(every=15)
    builder = GridBuilder(cfg, threaded=False)
    assert builder.version == 0 and builder.latest() is None
    builder.offer(kfs[0], {kfs[0].kf_id: kfs[0].T_wc})
    assert builder.version == 1 and builder.last_made() is None        # nothing made yet
    first = builder.latest()
    assert first.version == 1 and builder.latest() is first and builder.last_made() is first
    builder.offer(kfs[1], {k.kf_id: k.T_wc for k in kfs[:2]})
    assert builder.last_made() is first and builder.latest().version == 2
    for i, kf in enumerate(kfs[2:], start=2):
        builder.offer(kf, {k.kf_id: k.T_wc for k in kfs[: i + 1]})
    threaded = GridBuilder(cfg, threaded=True)
    seen, stop = [], threading.Event()

    def poll():
        while not stop.is_set():
            g = threaded.latest()
            if g is not None:
                seen.append((g.version, g.keyframes))

    reader = threading.Thread(target=poll)
    reader.start()
    for i, kf in enumerate(kfs):
        threaded.offer(kf, {k.kf_id: k.T_wc for k in kfs[: i + 1]})
    final = threaded.finish({k.kf_id: k.T_wc for k in kfs})
    stop.set()
    reader.join()
    assert threaded.error is None and final.keyframes == len(kfs)
    assert seen and all(a <= b for a, b in zip(seen, seen[1:]))           # versions only go forward
    np.testing.assert_array_equal(final.occupancy, builder.finish({k.kf_id: k.T_wc for k in kfs}).occupancy)


def test_pose_change_is_zero_for_a_pose_and_its_copy_also_when_not_quite_orthonormal():
    # 7-Scenes' ground truth is printed to a few digits: its rotations are orthonormal to ~1e-4,
    # where acos((trace - 1) / 2) read a pose and its own copy as 1.1 deg apart.
    c, s = math.cos(0.3), math.sin(0.3)
    T = np.eye(4)
    T[:3, :3] = np.round(np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]), 3) * 0.9998
    T[:3, 3] = [0.1, 0.2, 0.3]
    assert pose_change(T, T.copy()) == (0.0, 0.0)
    T2 = T.copy()
    a = math.radians(10.0)
    T2[:3, :3] = T[:3, :3] @ np.array([[1.0, 0.0, 0.0], [0.0, math.cos(a), -math.sin(a)], [0.0, math.sin(a), math.cos(a)]])
    T2[:3, 3] += [0.03, 0.0, 0.04]
    dt, deg = pose_change(T, T2)
    assert dt == pytest.approx(0.05) and deg == pytest.approx(10.0, abs=0.05)


def test_builder_on_the_sample_with_true_poses_matches_the_floor_plan(tmp_path):
    """Keyframes at their true poses: up found within 0.2 deg and the floor within 2 cm of the
    room's; occupied / free IoU >= 0.93 on the known cells (measured 0.95 / 0.97), >= 1500 known cells."""
    cfg = load_config("default.yaml", []).grid
    b = GridBuilder(cfg, threaded=False)
    for kf in _sample_keyframes(every=5):
        b.offer(kf, {})
    g = b.finish({})
    assert math.degrees(math.acos(g.floor.up[2])) < 0.2 and abs(g.floor.height) < 0.02
    iou = iou_against_truth(g.trinary(cfg.occupied_thresh, cfg.free_thresh), g.origin_xy, cfg.resolution,
                            cfg.min_height, cfg.max_height, g.floor.T_world_floor())
    assert iou["occupied"] >= 0.93 and iou["free"] >= 0.93 and iou["known"] >= 1500, iou


# ------------------------------------------------------------------------------------------ files
def test_map_server_files_follow_the_format_and_load_back(tmp_path):
    cfg = load_config("default.yaml", []).grid
    b = GridBuilder(cfg, threaded=False)
    for kf in _sample_keyframes(every=15):
        b.offer(kf, {})
    g = b.finish({})
    pgm, yml = write_map_files(tmp_path, g, cfg.occupied_thresh, cfg.free_thresh)
    assert pgm.read_bytes().startswith(f"P5\n{g.shape[1]} {g.shape[0]}\n255\n".encode())
    assert set(np.unique(read_pgm(pgm)).tolist()) <= {0, 205, 254}
    import yaml
    meta = yaml.safe_load(yml.read_text())
    assert meta["image"] == "map.pgm" and meta["mode"] == "trinary" and meta["negate"] == 0
    assert meta["resolution"] == pytest.approx(0.05) and len(meta["origin"]) == 3
    assert (meta["occupied_thresh"], meta["free_thresh"]) == (0.65, 0.196)   # map_server reads 0 / 254 / 205 back
    m = load_map_yaml(yml)
    tri = g.trinary(cfg.occupied_thresh, cfg.free_thresh)
    np.testing.assert_array_equal(m.trinary, tri)           # what map_server loads is the grid
    assert (tri == 100).sum() > 100 and (tri == 0).sum() > 100
    np.testing.assert_allclose(m.origin[:2], g.origin_xy)
    png = write_grid_png(tmp_path / "grid.png", g, cfg.occupied_thresh, cfg.free_thresh,
                         np.array([[2.5, 1.0, 1.4], [2.6, 1.1, 1.4]]))
    import cv2
    img = cv2.imread(str(png))
    assert img is not None and img.shape[0] > g.shape[0]   # padded to take in the path below the grid


def test_grid_config_is_checked():
    for bad in (["grid.min_height=1.2"], ["grid.free_coverage=0"], ["grid.floor=camera"], ["grid.resolution=0"],
                ["grid.free_thresh=0.7"], ["grid.unknown_key=1"]):
        with pytest.raises(ConfigError):
            load_config("default.yaml", bad)


# ------------------------------------------------------------------------------------------ a run
def test_a_slam_run_on_the_sample_leaves_a_grid_that_matches_the_floor_plan(tmp_path, sample_run):
    """The grid of a SLAM run (its keyframes at their SLAM poses) on the sample: map.pgm / map.yaml
    / grid.png in the run folder; against the room's true floor plan IoU >= 0.9 occupied and free
    at 5 cm, on >= 1000 known cells; the grid's figures in metrics.json."""
    import json

    from slam.output.metrics import collect_metrics
    from slam.output.run_folder import write_outputs

    cfg = sample_run.cfg(60, "system.threaded=false", "mapping.iters=5")
    system = sample_run.run(cfg)
    result = system.result()
    metrics = collect_metrics(result, eval_images_every=None)
    write_outputs(tmp_path, cfg, result, metrics)
    for name in ("map.pgm", "map.yaml", "grid.png"):
        assert (tmp_path / name).exists(), name
    m = load_map_yaml(tmp_path / "map.yaml")
    g = json.loads((tmp_path / "metrics.json").read_text())["grid"]
    assert g["integrated"] == metrics["keyframes"] and g["error"] is None and g["memory_mb"] < 50
    iou = iou_against_truth(m.trinary, m.origin[:2], m.resolution, cfg.grid.min_height, cfg.grid.max_height,
                            np.array(g["T_world_floor"]))
    assert iou["occupied"] >= 0.9 and iou["free"] >= 0.9 and iou["known"] >= 1000, iou
    # the same grid again from the run folder's keyframes (python -m slam.tools.grid_from_run)
    from slam.tools.grid_from_run import rebuild
    again = rebuild(tmp_path, [], tmp_path / "again")
    assert again["integrated"] == len(result.map_keyframes) and again["error"] is None
    m2 = load_map_yaml(tmp_path / "again" / "map.yaml")
    assert m2.trinary.shape == m.trinary.shape and (m2.trinary == m.trinary).mean() > 0.98
