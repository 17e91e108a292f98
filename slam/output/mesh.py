"""Mesh export: TSDF fusion (Open3D ``t.geometry.VoxelBlockGrid``) of depth at the keyframe poses.

``source="measured"`` fuses the stored keyframe images (sensor depth + colour at the estimated
poses); ``source="rendered"`` fuses the map rendered at the same poses (what the map itself
says). ``ScalableTSDFVolume`` is not used: it integrates nothing in Open3D 0.20. open3d is
imported only here, only when a mesh is asked for.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

import numpy as np
import torch


def fuse_tsdf(views: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], voxel_size: float = 0.02,
              depth_max: float = 6.0, trunc_voxels: float = 4.0, weight_threshold: float = 1.0):
    """Fuse ``(color (h, w, 3) uint8, depth (h, w) metres, K (3, 3), T_wc (4, 4))`` views into a
    TSDF and extract the coloured triangle mesh (``open3d.t.geometry.TriangleMesh``).

    voxel_size: metres; depth_max: metres (farther depth is ignored); trunc_voxels: truncation
    distance in voxels; weight_threshold: minimum accumulated weight for a surface voxel."""
    import open3d as o3d
    import open3d.core as o3c

    vbg = o3d.t.geometry.VoxelBlockGrid(
        attr_names=("tsdf", "weight", "color"), attr_dtypes=(o3c.float32, o3c.float32, o3c.float32),
        attr_channels=((1), (1), (3)), voxel_size=float(voxel_size), block_resolution=8, block_count=50_000)
    n = 0
    for color, depth, K, T_wc in views:
        depth = np.ascontiguousarray(np.nan_to_num(np.asarray(depth, dtype=np.float32), nan=0.0, posinf=0.0))
        d_img = o3d.t.geometry.Image(o3c.Tensor(depth))
        c_img = o3d.t.geometry.Image(o3c.Tensor(np.ascontiguousarray(color, dtype=np.float32) / 255.0))
        intr = o3c.Tensor(np.asarray(K, dtype=np.float64))
        extr = o3c.Tensor(np.linalg.inv(np.asarray(T_wc, dtype=np.float64)))   # world -> camera
        blocks = vbg.compute_unique_block_coordinates(d_img, intr, extr, 1.0, float(depth_max), float(trunc_voxels))
        if blocks.shape[0] == 0:
            continue
        vbg.integrate(blocks, d_img, c_img, intr, extr, 1.0, float(depth_max), float(trunc_voxels))
        n += 1
    if n == 0:
        raise ValueError("no view had valid depth: nothing to fuse")
    return vbg.extract_triangle_mesh(weight_threshold=float(weight_threshold))


def keyframe_views(keyframes: list, snapshot=None, backend: str = "auto"):
    """Views for ``fuse_tsdf`` from keyframes: measured images, or (``snapshot`` given) the map
    rendered at each keyframe pose at the keyframe's resolution (depth where alpha > 0.5)."""
    if snapshot is None:
        for kf in keyframes:
            yield kf.color, kf.depth.astype(np.float32), kf.K, kf.T_wc
        return
    for kf in keyframes:
        h, w = kf.depth.shape
        out = snapshot.render(kf.K, w, h, T_wc=kf.T_wc, backend=backend)
        depth = torch.where(out.alpha > 0.5, out.depth, torch.zeros_like(out.depth)).cpu().numpy()
        color = (out.color.clamp(0, 1) * 255).to(torch.uint8).cpu().numpy()
        yield color, depth, kf.K, kf.T_wc


def write_mesh(path: str | Path, keyframes: list, snapshot=None, backend: str = "auto",
               voxel_size: Optional[float] = None, depth_max: float = 6.0) -> Path:
    """Fuse the keyframes (measured, or rendered from ``snapshot``) and write a PLY triangle mesh.

    voxel_size: metres; default 1/100 of the median keyframe depth, clamped to [5 mm, 4 cm]."""
    import open3d as o3d

    if not keyframes:
        raise ValueError("no keyframes to fuse")
    if voxel_size is None:
        d = np.concatenate([kf.depth[kf.depth > 0].astype(np.float32).ravel()[::7] for kf in keyframes])
        voxel_size = float(np.clip(np.median(d) / 100.0, 0.005, 0.04)) if d.size else 0.02
    mesh = fuse_tsdf(keyframe_views(keyframes, snapshot, backend), voxel_size=voxel_size, depth_max=depth_max)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.ply")
    if not o3d.t.io.write_triangle_mesh(str(tmp), mesh):
        raise OSError(f"{path}: open3d could not write the mesh")
    tmp.replace(path)
    return path
