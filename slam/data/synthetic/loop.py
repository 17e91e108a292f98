"""Generate a looping RGB-D test sequence (TUM RGB-D layout) in the sample's synthetic room:
the camera circles the room looking outwards (a full turn in ``--total`` frames) and goes on past
the start by ``--frames - --total`` frames, so the end revisits the beginning. The colour
exposure drifts over the loop (a smooth gain change: the mapper's colour loss has no exposure
model, so the map's colours and the tracker's poses drift with it), which is what loop closure
must correct.

    python -m slam.data.synthetic.loop --out /tmp/loop --frames 140 --total 120 --width 80 --height 60

Same scene, renderer, depth encoding (slam.data.synthetic.room) and text formats
(slam.data.synthetic.sample) as the bundled sample; deterministic. open3d is imported lazily
(inside the renderer). slam_suite generates it into its data cache (slam.batch.suite).
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from slam.data.synthetic import room
from slam.data.synthetic.sample import pose_line, stamp, write_text

CENTRE = (2.5, 2.05, 1.4)      # m: the loop's centre, above the table
RADIUS = 0.35                  # m
PITCH = 0.28                   # rad, looking down a little


def loop_pose(k: int, total: int) -> np.ndarray:
    """T_wc (4, 4) of frame k: on a circle, looking outwards, one full turn per ``total`` frames
    (periodic: frame k + total is frame k again)."""
    s = 2.0 * math.pi * k / total
    x = CENTRE[0] + RADIUS * math.sin(s)
    y = CENTRE[1] + RADIUS * math.cos(s)
    z = CENTRE[2] + 0.03 * math.sin(3 * s + 0.4)
    yaw = s + 0.08 * math.sin(4 * s)            # 0 = looking along +y, turning towards +x
    pitch = PITCH + 0.05 * math.sin(2 * s + 1.0)
    fwd = np.array([math.sin(yaw) * math.cos(pitch), math.cos(yaw) * math.cos(pitch), -math.sin(pitch)])
    right = np.cross(fwd, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    down = np.cross(fwd, right)
    T = np.eye(4)
    T[:3, 0], T[:3, 1], T[:3, 2], T[:3, 3] = right, down, fwd, (x, y, z)
    return T


def exposure_gain(k: int, total: int, amplitude: float) -> float:
    """Colour gain of frame k: 1 at the start, drifting smoothly by up to ``amplitude`` over a loop."""
    s = 2.0 * math.pi * k / total
    return 1.0 + amplitude * math.sin(1.5 * s) * math.sin(0.5 * s)


def generate_loop(out, frames: int = 140, total: int = 120, width: int = 80, height: int = 60,
                  exposure: float = 0.35, supersample: int = 1) -> dict:
    """Write the sequence under ``out``; returns {'frames', 'overlap_frames', 'turn_deg'}."""
    import cv2

    out = Path(out)
    for sub in ("rgb", "depth"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    ren = room.Renderer(room.SEED, width, height, supersample)
    K = room.intrinsics(width, height)
    rgb_lines, depth_lines, gt_lines = ["# timestamp filename"], ["# timestamp filename"], ["# timestamp tx ty tz qx qy qz qw"]
    for k in range(frames):
        T = loop_pose(k, total)
        rgb, z = ren.render(T)
        rgb = np.clip(np.round(rgb.astype(np.float64) * exposure_gain(k, total, exposure)), 0, 255).astype(np.uint8)
        ts = stamp(k)
        cv2.imwrite(str(out / "rgb" / f"{ts}.png"), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
        cv2.imwrite(str(out / "depth" / f"{ts}.png"), room.encode_depth(z))
        rgb_lines.append(f"{ts} rgb/{ts}.png")
        depth_lines.append(f"{ts} depth/{ts}.png")
        gt_lines.append(pose_line(k, T))
    write_text(out / "rgb.txt", rgb_lines)
    write_text(out / "depth.txt", depth_lines)
    write_text(out / "groundtruth.txt", gt_lines)
    write_text(out / "camera.yaml", [
        f"fx: {K[0, 0]}", f"fy: {K[1, 1]}", f"cx: {K[0, 2]}", f"cy: {K[1, 2]}", f"width: {width}",
        f"height: {height}", f"depth_scale: {room.DEPTH_SCALE}", "distortion: null"])
    return {"frames": frames, "overlap_frames": max(frames - total, 0), "turn_deg": 360.0 * frames / total}


def main(argv=None):
    """python -m slam.data.synthetic.loop: writes the sequence and prints its summary."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--frames", type=int, default=140)
    ap.add_argument("--total", type=int, default=120, help="frames per full turn")
    ap.add_argument("--width", type=int, default=80)
    ap.add_argument("--height", type=int, default=60)
    ap.add_argument("--exposure", type=float, default=0.35, help="largest colour gain change")
    ap.add_argument("--supersample", type=int, default=1)
    args = ap.parse_args(argv)
    print(generate_loop(args.out, args.frames, args.total, args.width, args.height, args.exposure, args.supersample))


if __name__ == "__main__":
    main()
