"""slam_view_run: look at a finished run folder in rerun: map, trajectory (+ ground truth),
keyframes, mesh.

    slam_view_run runs/20261130-101500              # spawn a rerun viewer
    slam_view_run runs/x --rrd runs/x/view.rrd      # write a recording (headless)
    slam_view_run runs/x --connect rerun+http://127.0.0.1:9876/proxy

Reads what exists of: map.ply (Points3D, static), trajectory.txt / keyframes.txt (LineStrips3D),
ground truth (from config.yaml's data section, when the source has it), map.keyframes.npz (each
keyframe's camera, colour and depth on the "frame" timeline) and mesh.ply (Mesh3D).
Exit codes: 0 done, 2 not a run folder / unreadable input.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def _blueprint():
    import rerun.blueprint as rrb

    return rrb.Blueprint(rrb.Horizontal(
        rrb.Spatial3DView(name="map and trajectory", origin="world"),
        rrb.Vertical(rrb.Spatial2DView(name="keyframe colour", origin="world/camera/image", contents="$origin/rgb"),
                     rrb.Spatial2DView(name="keyframe depth", origin="world/camera/image", contents="$origin/depth")),
        column_shares=[3, 1]), collapse_panels=True)


def _ground_truth(run: Path, t_range=None):
    """(N, 3) ground-truth positions from the run's config (within ``t_range`` (t0, t1) s, the
    run's own frames, when given), or None (with a note why)."""
    cfg_path = run / "config.yaml"
    if not cfg_path.is_file():
        return None
    try:
        from slam.config import config_from_dict, load_raw
        from slam.data.sources import load_ground_truth

        # the data section alone: an older run's config.yaml may hold keys removed since
        # (slam.config.loading.REMOVED_KEYS), which do not matter here
        data = config_from_dict({"data": load_raw(cfg_path).get("data") or {}}).data
        stamps, poses = load_ground_truth(data)
        if t_range is not None:
            keep = (stamps >= t_range[0] - 0.02) & (stamps <= t_range[1] + 0.02)
            stamps, poses = stamps[keep], poses[keep]
        return np.asarray(poses)[:, :3, 3] if len(poses) else None
    except Exception as exc:  # noqa: BLE001 - ground truth is optional here
        print(f"view_run: no ground truth ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None


def _mesh(path: Path):
    """(vertices (V, 3), faces (F, 3), colours (V, 3) uint8 or None) of a PLY triangle mesh."""
    from plyfile import PlyData

    ply = PlyData.read(str(path))
    v = ply["vertex"].data
    verts = np.stack([v["x"], v["y"], v["z"]], axis=1).astype(np.float32)
    faces = np.stack(list(ply["face"].data["vertex_indices"])).astype(np.uint32)
    names = v.dtype.names
    colors = None
    if all(c in names for c in ("red", "green", "blue")):
        colors = np.stack([v["red"], v["green"], v["blue"]], axis=1)
        colors = (colors * 255 if colors.dtype.kind == "f" else colors).clip(0, 255).astype(np.uint8)
    return verts, faces, colors


def log_run(rec, run: Path, max_points: int = 200_000) -> dict:
    """Log everything found in ``run`` to the rerun recording ``rec``; returns what was logged."""
    import rerun as rr

    from slam.data.trajectory_io import read_tum_trajectory
    from slam.map.map_io import keyframes_path, load_keyframes, load_map_rows
    from slam.map.sphere_map import activate

    done: dict = {}
    t_range = None
    if (run / "map.ply").is_file():
        rows = load_map_rows(run / "map.ply")
        means, radii, colors, _ = (t.numpy() for t in activate(rows))
        if len(means) > max_points:
            idx = np.linspace(0, len(means) - 1, max_points).astype(np.int64)
            means, radii, colors = means[idx], radii[idx], colors[idx]
        rec.log("world/map", rr.Points3D(means, colors=(colors * 255).astype(np.uint8), radii=radii), static=True)
        done["map_spheres"] = int(rows.shape[0])
    if (run / "trajectory.txt").is_file():
        stamps, poses = read_tum_trajectory(run / "trajectory.txt")
        t_range = (stamps[0], stamps[-1]) if len(stamps) else None
        if len(poses) >= 2:
            rec.log("world/trajectory/estimate", rr.LineStrips3D([poses[:, :3, 3]], colors=[[255, 140, 0]], radii=[0.005]),
                    static=True)
        done["poses"] = len(poses)
    gt = _ground_truth(run, t_range)
    if gt is not None and len(gt) >= 2:
        rec.log("world/trajectory/ground_truth", rr.LineStrips3D([gt], colors=[[40, 180, 60]], radii=[0.004]), static=True)
        done["ground_truth"] = len(gt)
    if (run / "mesh.ply").is_file():
        verts, faces, vcol = _mesh(run / "mesh.ply")
        rec.log("world/mesh", rr.Mesh3D(vertex_positions=verts, triangle_indices=faces, vertex_colors=vcol), static=True)
        done["mesh_triangles"] = len(faces)
    side = keyframes_path(run / "map.ply")
    if side.is_file():
        kfs = load_keyframes(side)
        for kf in kfs:
            rec.set_time("frame", sequence=kf.frame_index)
            h, w = kf.depth.shape
            rec.log("world/camera", rr.Transform3D(translation=kf.T_wc[:3, 3], mat3x3=kf.T_wc[:3, :3]))
            rec.log("world/camera/image", rr.Pinhole(image_from_camera=kf.K, resolution=[w, h],
                                                     camera_xyz=rr.ViewCoordinates.RDF, image_plane_distance=0.3))
            rec.log("world/camera/image/rgb", rr.Image(kf.color))
            rec.log("world/camera/image/depth", rr.DepthImage(kf.depth.astype(np.float32), meter=1.0))
        done["keyframes"] = len(kfs)
    return done


def main(argv=None) -> int:
    """slam_view_run: logs the run folder; 0 done, 2 not a run folder / unreadable input."""
    p = argparse.ArgumentParser(prog="slam_view_run", description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="run folder written by run_slam")
    p.add_argument("--rrd", default=None, help="write a .rrd recording instead of opening a viewer")
    p.add_argument("--connect", default=None, metavar="URL", help="send to a running rerun viewer")
    p.add_argument("--max-points", type=int, default=200_000, help="map points shown at most")
    args = p.parse_args(argv)
    run = Path(args.run)
    if not run.is_dir() or not any((run / f).is_file() for f in ("map.ply", "trajectory.txt")):
        print(f"view_run: {run}: not a run folder (no map.ply or trajectory.txt)", file=sys.stderr)
        return 2
    from slam.map.map_io import MapFormatError
    from slam.output.viewer_sinks import open_recording

    rec, _ = open_recording(args.rrd, spawn=args.rrd is None and args.connect is None, connect=args.connect,
                            blueprint=_blueprint())
    try:
        done = log_run(rec, run, args.max_points)
    except (MapFormatError, ValueError, OSError) as exc:
        print(f"view_run: {exc}", file=sys.stderr)
        return 2
    finally:
        rec.flush()
        rec.disconnect()
    print("view_run: logged " + ", ".join(f"{k} {v}" for k, v in done.items()) + (f" -> {args.rrd}" if args.rrd else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
