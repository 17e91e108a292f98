"""Mesh export (TSDF fusion with Open3D) and the run-folder plots."""
from __future__ import annotations

import numpy as np
import torch

from slam.config import load_config
from slam.data.sources import open_source
from slam.geometry import backproject
from slam.map.keyframes import Keyframe
from slam.runtime.recorder import FrameRecord


def _sample_keyframes(step: int = 6, last: int = 42) -> list:
    """Keyframes straight from the bundled sample at their ground-truth poses (no SLAM)."""
    cfg = load_config(None, [f"data.last={last}", f"data.stride={step}"])
    src = open_source(cfg.data)
    kfs = [Keyframe.from_frame(f, f.gt_pose) for f in src]
    src.close()
    return kfs


def _world_points(kf: Keyframe) -> np.ndarray:
    d = torch.from_numpy(kf.depth.astype(np.float32))
    vs, us = torch.nonzero(d > 0, as_tuple=True)
    pc = backproject(d[vs, us], torch.as_tensor(kf.K, dtype=torch.float32), us.float(), vs.float()).numpy()
    return pc @ kf.T_wc[:3, :3].T + kf.T_wc[:3, 3]


def _nearest(mesh_vertices: np.ndarray, pts: np.ndarray) -> np.ndarray:
    import open3d as o3d

    pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(mesh_vertices.astype(np.float64)))
    tree = o3d.geometry.KDTreeFlann(pcd)
    return np.array([np.sqrt(tree.search_knn_vector_3d(p, 1)[2][0]) for p in pts])


def test_mesh_from_measured_depth_lies_on_the_surfaces(tmp_path):
    import open3d as o3d

    from slam.output.mesh import write_mesh

    kfs = _sample_keyframes()
    path = write_mesh(tmp_path / "mesh.ply", kfs, voxel_size=0.02)
    mesh = o3d.io.read_triangle_mesh(str(path))
    v = np.asarray(mesh.vertices)
    assert len(mesh.triangles) > 2000 and mesh.has_vertex_colors()
    # The sample room is 5 x 4 x 2.6 m with its floor corner at the origin (world z up).
    assert v.min(0).min() > -0.1 and np.all(v.max(0) < [5.1, 4.1, 2.7])
    # Observed surface points lie on the mesh: median distance well under a voxel.
    pts = _world_points(kfs[0])[::40]
    dist = _nearest(v, pts)
    assert np.median(dist) < 0.015, np.median(dist)
    assert np.percentile(dist, 90) < 0.04


def test_mesh_from_rendered_map(tmp_path):
    """A map seeded from the keyframes' own depth, rendered and fused, lands on the same surfaces."""
    import open3d as o3d

    from slam.map.sphere_map import SphereMap
    from slam.output.mesh import write_mesh

    kfs = _sample_keyframes(step=10, last=30)
    pts = np.concatenate([_world_points(k)[::3] for k in kfs])
    z = np.linalg.norm(pts - kfs[0].T_wc[:3, 3], axis=1)
    smap = SphereMap()
    smap.add(torch.from_numpy(pts).float(), torch.from_numpy(1.5 * z / 130.0).float(),
             torch.full((len(pts), 3), 0.5), torch.full((len(pts),), 0.95))
    path = write_mesh(tmp_path / "mesh.ply", kfs, snapshot=smap.publish(), backend="cpu", voxel_size=0.03)
    v = np.asarray(o3d.io.read_triangle_mesh(str(path)).vertices)
    assert len(v) > 500
    assert np.median(_nearest(v, _world_points(kfs[1])[::60])) < 0.045   # 1.5 voxels


def _records(n: int, noise: float, with_gt: bool = True) -> list:
    rng = np.random.default_rng(0)
    # A known rigid offset between the estimate's frame and the ground-truth frame: alignment removes it.
    c, s = np.cos(0.3), np.sin(0.3)
    G = np.array([[c, -s, 0, 1.0], [s, c, 0, -2.0], [0, 0, 1, 0.5], [0, 0, 0, 1]])
    recs = []
    for i in range(n):
        gt = np.eye(4)
        gt[:3, 3] = [np.cos(i / 10), np.sin(i / 10), 0.05 * np.sin(i / 3)]
        est = G @ gt
        est[:3, 3] += rng.normal(0, noise, 3)
        recs.append(FrameRecord(i, 100.0 + i / 30, est, gt if with_gt else None, True, False, 0.1, 10.0, i % 5 == 0))
    return recs


def test_trajectory_errors_undo_a_rigid_offset():
    from slam.output.plots import trajectory_errors

    e = trajectory_errors(_records(60, 0.0))
    assert e["rmse"] < 1e-9 and e["est"].shape == (60, 3)
    e = trajectory_errors(_records(60, 0.01))
    assert 0.01 < e["rmse"] < 0.025      # 3-D Gaussian noise of 1 cm per axis: about 1.7 cm RMSE


def test_plots_written_only_with_ground_truth(tmp_path):
    import matplotlib.image as mpimg

    from slam.output.plots import write_plots

    paths = write_plots(tmp_path, _records(40, 0.005))
    assert [p.name for p in paths] == ["trajectory.png", "translation_error.png"]
    for p in paths:
        img = mpimg.imread(p)
        assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300
        assert img[..., :3].std() > 0.05          # not blank
    assert write_plots(tmp_path / "none", _records(40, 0.005, with_gt=False)) == []
