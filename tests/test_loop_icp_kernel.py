"""The loop stage's ICP kernel (torch.ops.sphere_raster.icp_point_to_plane, through
slam.loop.icp.icp) against its NumPy oracle (slam.loop.icp.icp_reference): the same pose,
overlap, inliers, normal equations, residual variance, median depth and conditioning, on a scene
with relief, holes and NaN depth, on a flat view, without overlap, and on real keyframe pairs."""
from pathlib import Path

import numpy as np
import pytest

from slam.geometry import invert, pivot_increment
from slam.loop.icp import icp, icp_reference, point_map

K = np.array([[120.0, 0.0, 39.5], [0.0, 120.0, 29.5], [0.0, 0.0, 1.0]])
TOL, QUAD = 0.02, 0.005


def _relief(h=60, w=80, flat=False, holes=True):
    v, u = np.mgrid[0:h, 0:w]
    z = 2.0 + (0.0 * u if flat else 0.25 * np.sin(u / 6.0) * np.cos(v / 5.0) + 0.1 * np.sin(v / 3.0))
    z = z.astype(np.float32)
    if holes:
        rng = np.random.default_rng(0)
        z[rng.random((h, w)) < 0.1] = 0.0
        z[:, 17] = 0.0
        z[5, 5] = z[30, 0] = z[0, 40] = np.nan
    return z


def _source(depth: np.ndarray, T_src_to_dst: np.ndarray, stride: int = 2) -> np.ndarray:
    """The destination's points moved into a source camera at T_src_to_dst (what that camera sees)."""
    pts = point_map(np.nan_to_num(depth), K, stride).reshape(-1, 3)
    pts = pts[pts[:, 2] > 0]
    T_ds = invert(T_src_to_dst)
    return pts @ T_ds[:3, :3].T + T_ds[:3, 3]


def _same(a, b):
    np.testing.assert_allclose(a.T, b.T, rtol=0, atol=1e-12)
    assert a.overlap == b.overlap and a.inliers == b.inliers
    assert (a.H is None) == (b.H is None)
    if a.H is not None:
        np.testing.assert_allclose(a.H, b.H, rtol=1e-10, atol=1e-12 * np.abs(b.H).max())
    np.testing.assert_allclose([a.residual_var, a.z_median, a.conditioning],
                               [b.residual_var, b.z_median, b.conditioning], rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("iters", [0, 1, 10])
def test_kernel_matches_the_oracle_on_a_scene_with_relief(iters):
    depth = _relief()
    truth = pivot_increment(np.array([0.01, -0.02, 0.015, 0.03, -0.02, 0.05]), 0.0)
    src = _source(depth, truth)
    start = pivot_increment(np.array([-0.01, 0.01, 0.0, 0.02, 0.01, -0.02]), 0.0) @ truth
    ref = icp_reference(src, depth, K, start, iters, TOL, QUAD)
    _same(icp(src, depth, K, start, iters, TOL, QUAD), ref)
    if iters == 10:   # and it aligns: the true pose back to well under a millimetre
        assert np.abs(ref.T[:3, 3] - truth[:3, 3]).max() < 1e-3
        assert ref.inliers > 0.95 and ref.conditioning > 1e-3


def test_kernel_matches_the_oracle_where_it_converges_early_and_on_a_flat_view():
    depth = _relief(holes=False)
    src = _source(depth, np.eye(4), stride=1)
    ref = icp_reference(src, depth, K, np.eye(4), 10, TOL, QUAD)     # exact depth: stops early
    _same(icp(src, depth, K, np.eye(4), 10, TOL, QUAD), ref)
    flat = _relief(flat=True, holes=False)
    start = pivot_increment(np.array([0.0, 0.0, 0.0, 0.01, 0.0, 0.0]), 0.0)
    src = _source(flat, np.eye(4))
    ref = icp_reference(src, flat, K, start, 10, TOL, QUAD)
    _same(icp(src, flat, K, start, 10, TOL, QUAD), ref)
    assert ref.conditioning < 1e-6                                    # the plane lets it slide


def test_kernel_matches_the_oracle_without_overlap_or_depth():
    depth = _relief()
    src = _source(depth, np.eye(4))
    behind = np.diag([1.0, 1.0, 1.0, 1.0])
    behind[2, 3] = -10.0                                              # every point behind the camera
    for dst, start in ((depth, behind), (np.zeros_like(depth), np.eye(4)),
                       (np.full_like(depth, np.nan), np.eye(4))):
        ref = icp_reference(src, dst, K, start, 10, TOL, QUAD)
        out = icp(src, dst, K, start, 10, TOL, QUAD)
        _same(out, ref)
        assert out.H is None and out.overlap == 0.0 and out.conditioning == 0.0


SEVEN = Path(__file__).resolve().parents[2] / "shared" / "data" / "7scenes-redkitchen-0000-0499"


@pytest.mark.skipif(not SEVEN.is_dir(), reason="needs ../shared/data/7scenes-redkitchen-0000-0499")
def test_kernel_matches_the_oracle_on_real_keyframe_pairs():
    import cv2

    Kr = np.loadtxt(SEVEN / "camera-intrinsics.txt")
    Kr[:2] /= 2.0
    Kr[0, 2], Kr[1, 2] = Kr[0, 2] - 0.25, Kr[1, 2] - 0.25           # 320x240, pixel-centre convention

    def frame(i):
        d = cv2.imread(str(SEVEN / f"frame-{i:06d}.depth.png"), cv2.IMREAD_UNCHANGED).astype(np.float32) / 1000.0
        d[d > 60.0] = 0.0
        return d[::2, ::2].copy(), np.loadtxt(SEVEN / f"frame-{i:06d}.pose.txt")

    for i, j in ((0, 5), (100, 110), (200, 203), (300, 320)):
        (da, Ta), (db, Tb) = frame(i), frame(j)
        src = point_map(db, Kr, 4).reshape(-1, 3)
        src = src[src[:, 2] > 0]
        start = invert(Ta) @ Tb @ pivot_increment(np.array([0.005, 0.0, -0.005, 0.01, 0.0, 0.01]), 0.0)
        ref = icp_reference(src, da, Kr, start, 10, TOL, QUAD)
        out = icp(src, da, Kr, start, 10, TOL, QUAD)
        assert ref.overlap > 0.5
        np.testing.assert_allclose(out.T, ref.T, rtol=0, atol=1e-9)
        assert abs(out.overlap - ref.overlap) < 1e-3 and abs(out.inliers - ref.inliers) < 1e-3
        np.testing.assert_allclose(out.H, ref.H, rtol=1e-6, atol=1e-9 * np.abs(ref.H).max())
