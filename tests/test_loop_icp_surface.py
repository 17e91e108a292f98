"""ICP's destination surface (slam.loop.icp.DepthSurface) against the full-image maps it
replaces (point_map, normal_map): the same points and normals at the pixels asked for."""
import numpy as np

from slam.loop.icp import DepthSurface, normal_map, point_map


def _depth(rng, h=24, w=32):
    d = 1.0 + 0.3 * rng.random((h, w))
    d[rng.random((h, w)) < 0.2] = 0.0           # holes
    d[:, 5] = 0.0                                # a dead column
    d[0, 3] = d[10, 0] = d[7, 9] = np.nan         # not-a-number depth, two on the border
    return d.astype(np.float32)


def test_surface_matches_full_maps_at_every_pixel():
    rng = np.random.default_rng(3)
    depth = _depth(rng)
    K = np.array([[30.0, 0, 15.5], [0, 31.0, 11.5], [0, 0, 1]])
    pts = point_map(depth, K)
    nrm = normal_map(pts)
    h, w = depth.shape
    v, u = np.divmod(np.arange(h * w), w)
    q, n, keep = DepthSurface(depth, K).at(u, v)
    usable = (pts[..., 2] > 0) & (np.abs(nrm).sum(-1) > 0)
    assert np.array_equal(keep, usable.ravel())
    assert 0 < keep.sum() < h * w
    np.testing.assert_allclose(q.T, pts.reshape(-1, 3)[keep], rtol=0, atol=1e-12)
    np.testing.assert_allclose(n.T, nrm.reshape(-1, 3)[keep], rtol=0, atol=1e-12)


def test_strided_point_map_is_the_full_maps_subsample():
    rng = np.random.default_rng(4)
    depth = _depth(rng, 25, 31)
    K = np.array([[30.0, 0, 15.0], [0, 30.0, 12.0], [0, 0, 1]])
    for stride in (1, 3, 4):
        assert np.array_equal(point_map(depth, K, stride), point_map(depth, K)[::stride, ::stride], equal_nan=True)
