"""A reference trajectory from another method on the same frames: KinectFusion-style depth-only
frame-to-model ICP on a TSDF volume (open3d's ``t.pipelines.slam.Model``), evaluated against the
dataset's ground truth exactly as run_slam's trajectories are (evo ATE, optional prefixes).

7-Scenes' ground truth itself comes from KinectFusion; what this method scores against it says how
far that ground truth can tell tracking accuracy from its own error
(docs/benchmarks.md#7-scenes-ground-truth).

    python -m slam.tools.kinectfusion_reference --config 7scenes.yaml --voxel 0.01 \\
        --prefixes 50 100 161 250 500 [--out kinfu.txt] [--set data.last=200]

Runs on the CPU (open3d's tensor pipeline; about 0.2-0.9 s a 640x480 frame on 2 cores). Frames
where ICP fails keep the previous pose and are counted.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from slam.config import load_config
from slam.data.sources import open_source
from slam.data.trajectory_io import write_tum_trajectory
from slam.eval.trajectory import ate_over_prefixes, evaluate_ate

BLOCK_RESOLUTION = 16       # open3d's voxel blocks: 16^3 voxels each
BLOCK_COUNT = 40_000        # hash-map capacity (blocks); ample for a room at 6 mm voxels
TRUNCATION_VOXELS = 8.0     # TSDF truncation, in voxels
ICP_DEPTH_DIFF = 0.07       # m: ICP correspondence gate (open3d's example value)


def track(frames, voxel: float, max_depth: float, progress_every: int = 50):
    """KinectFusion on ``frames`` (``slam.data.Frame``): returns (timestamps (N,), T_wc (N, 4, 4)
    starting at identity, number of frames whose ICP failed)."""
    import open3d as o3d
    import open3d.core as o3c

    device = o3c.Device("CPU:0")
    model = input_frame = raycast = None
    T = o3c.Tensor(np.eye(4))
    stamps, poses, failed = [], [], 0
    t0 = time.perf_counter()
    for i, frame in enumerate(frames):
        depth = o3d.t.geometry.Image(o3c.Tensor(np.ascontiguousarray(frame.depth, dtype=np.float32)))
        if model is None:
            h, w = frame.depth.shape
            K = o3c.Tensor(np.asarray(frame.K, dtype=np.float64))
            model = o3d.t.pipelines.slam.Model(voxel, BLOCK_RESOLUTION, BLOCK_COUNT, T, device)
            input_frame = o3d.t.pipelines.slam.Frame(h, w, K, device)
            raycast = o3d.t.pipelines.slam.Frame(h, w, K, device)
        input_frame.set_data_from_image("depth", depth)
        color = np.ascontiguousarray(frame.color, dtype=np.float32) / 255.0   # float depth needs float colour
        input_frame.set_data_from_image("color", o3d.t.geometry.Image(o3c.Tensor(color)))
        if i > 0:
            try:
                result = model.track_frame_to_model(input_frame, raycast, 1.0, max_depth, ICP_DEPTH_DIFF)
                T = T @ result.transformation
            except RuntimeError:
                failed += 1            # open3d raises when ICP finds too few correspondences
        stamps.append(frame.timestamp)
        poses.append(T.numpy().copy())
        model.update_frame_pose(i, T)
        model.integrate(input_frame, 1.0, max_depth, TRUNCATION_VOXELS)
        model.synthesize_model_frame(raycast, 1.0, 0.1, max_depth, TRUNCATION_VOXELS)
        if progress_every and i % progress_every == 0:
            print(f"frame {i}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return np.array(stamps), np.array(poses), failed


def main(argv=None) -> int:
    """Tracks, writes and evaluates; 0 when done."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--voxel", type=float, default=0.01, help="TSDF voxel size, m")
    p.add_argument("--max-depth", type=float, default=4.0, help="m: depth beyond this is ignored")
    p.add_argument("--prefixes", type=int, nargs="+", default=[], metavar="N")
    p.add_argument("--out", help="write the trajectory here (TUM format)")
    args = p.parse_args(argv)
    if args.voxel <= 0 or args.max_depth <= 0:
        raise SystemExit("kinectfusion_reference: --voxel and --max-depth must be positive")
    cfg = load_config(args.config, args.set)
    frames = list(open_source(cfg.data))
    if not frames:
        raise SystemExit(f"kinectfusion_reference: no frames in {cfg.data.path}")
    stamps, poses, failed = track(frames, args.voxel, args.max_depth)
    if args.out:
        write_tum_trajectory(args.out, stamps, poses)
    print(f"frames {len(frames)}, ICP failed on {failed}")
    gt = [(f.timestamp, f.gt_pose) for f in frames if f.gt_pose is not None]
    if not gt:
        print(f"no ground truth in {cfg.data.path}: trajectory only")
        return 0
    ref_stamps, ref_poses = np.array([g[0] for g in gt]), np.array([g[1] for g in gt])
    ate = evaluate_ate(poses, stamps, ref_poses, ref_stamps)
    print(f"ATE {ate['ate_rmse_m'] * 100:.2f} cm ({ate['alignment']}, {ate['frames']} frames, voxel {args.voxel} m)")
    for row in ate_over_prefixes(poses, stamps, ref_poses, ref_stamps, args.prefixes):
        print(f"ATE over the first {row['frames']} frames: {row['ate_rmse_m'] * 100:.2f} cm")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
