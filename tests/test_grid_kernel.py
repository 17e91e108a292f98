"""The grid's kernels against their NumPy oracles: the ray casting (torch.ops.sphere_raster.grid_cast
through slam.grid.raycast.cast, against cast_reference: the same occupied and free voxels in the
same order, for random rooms seen from cameras inside and above the band, rays cut at the range,
no ray in the band, no points, the bundled sample's keyframe scans) and the scan
(grid_scan through slam.grid.scan.make_scan, against make_scan_reference: the same float16 points
and normals, with holes, NaN, depth edges and near pixels)."""
import numpy as np
import pytest

from slam.geometry import pivot_increment
from slam.grid.floor import FloorFrame
from slam.grid.raycast import Contribution, cast, cast_reference
from slam.grid.scan import make_scan, make_scan_reference


def _same(a: Contribution, b: Contribution):
    assert a.occupied.dtype == b.occupied.dtype == np.int32 and a.free.dtype == b.free.dtype == np.int32
    assert np.array_equal(a.occupied, b.occupied) and np.array_equal(a.free, b.free)


def _pose(x, y, h, yaw, pitch):
    T = pivot_increment(np.array([pitch, yaw, 0.0, 0.0, 0.0, 0.0]), 0.0)
    T[:3, :3] = np.array([[1.0, 0, 0], [0, 0, 1.0], [0, -1.0, 0]]) @ T[:3, :3]   # OpenCV camera, z-up world
    T[:3, 3] = [x, y, h]
    return T


@pytest.mark.parametrize("seed", range(6))
def test_kernel_marks_the_oracles_voxels_in_random_rooms(seed):
    rng = np.random.default_rng(seed)
    floor = FloorFrame.from_up([0, 0, 1.0], -0.02 * seed)
    T = _pose(*rng.uniform(-1, 1, 2), rng.uniform(0.2, 2.0), rng.uniform(-3, 3), rng.uniform(-0.6, 0.2))
    pts_w = rng.uniform([-4, -4, -0.2], [4, 4, 2.5], (3000, 3))
    pts_c = (pts_w - T[:3, 3]) @ T[:3, :3]
    for res, lo, hi, rng_m in ((0.05, 0.1, 1.0, 4.0), (0.1, 0.05, 1.5, 2.5), (0.03, 0.2, 0.6, 6.0)):
        ref = cast_reference(pts_c, T, floor, res, lo, hi, rng_m)
        assert len(ref.free) > 0 and len(ref.occupied) > 0
        _same(cast(pts_c, T, floor, res, lo, hi, rng_m), ref)


def test_kernel_and_oracle_without_rays_in_the_band_or_points():
    floor = FloorFrame.from_up([0, 0, 1.0], 0.0)
    T = _pose(0.0, 0.0, 3.0, 0.0, 0.3)
    ceiling = np.array([[0.1, -0.5, 1.0], [0.3, -0.4, 1.2]])       # camera and points above the band
    for pts in (ceiling, np.zeros((0, 3))):
        ref = cast_reference(pts, T, floor, 0.05, 0.1, 1.0, 4.0)
        _same(cast(pts, T, floor, 0.05, 0.1, 1.0, 4.0), ref)
        assert len(ref.free) == 0 and len(ref.occupied) == 0


def test_kernel_matches_the_oracle_on_the_samples_keyframes():
    from slam.config import load_config
    from slam.data.sources import open_source

    cfg = load_config("default.yaml", ["data.last=40"])
    floor = FloorFrame.from_up([0, 0, 1.0], 0.0)
    g = cfg.grid
    checked = 0
    for i, frame in enumerate(open_source(cfg.data)):
        if i % 10:
            continue
        scan = make_scan(i, frame.depth, frame.K, g.points_per_keyframe, g.min_range)
        ref = cast_reference(scan.points_c, frame.gt_pose, floor, g.resolution, g.min_height, g.max_height,
                             g.max_range)
        _same(cast(scan.points_c, frame.gt_pose, floor, g.resolution, g.min_height, g.max_height, g.max_range), ref)
        checked += len(ref.free) > 0
    assert checked >= 3


@pytest.mark.parametrize("points", [300, 2000, 100000])
def test_scan_kernel_matches_the_oracle(points):
    rng = np.random.default_rng(points)
    v, u = np.mgrid[0:120, 0:160]
    depth = (1.5 + 0.4 * np.sin(u / 60.0) + 0.2 * (v > 70) + 0.3 * rng.random((120, 160)) * (u > 130))
    depth = depth.astype(np.float16)                      # a keyframe's depth: float16, with
    depth[rng.random(depth.shape) < 0.08] = 0             # holes,
    depth[40:44, 20:90] = np.nan                          # not-a-number depth,
    depth[90:, :30] = 0.2                                 # a near patch (dropped below min_range),
    depth[:, 100] = 3.9                                   # and a far line: depth edges
    K = np.array([[140.0, 0, 79.5], [0, 140.0, 59.5], [0, 0, 1]])
    ref = make_scan_reference(3, depth, K, points, 0.3)
    out = make_scan(3, depth, K, points, 0.3)
    assert out.kf_id == ref.kf_id == 3 and out.points_c.dtype == out.normals_c.dtype == np.float16
    assert np.array_equal(out.points_c, ref.points_c) and np.array_equal(out.normals_c, ref.normals_c)
    assert len(ref.points_c) > 10 and np.abs(ref.normals_c.astype(float)).sum(1).min() == 0   # some without
    assert (np.abs(ref.normals_c.astype(float)).sum(1) > 0).mean() > 0.5                   # most with a normal
