"""Generate a looping RGB-D test sequence (TUM RGB-D layout) in the sample's synthetic room:
the camera makes a full turn in ``--total`` frames and goes on past the start by ``--frames -
--total`` frames, so the end revisits the beginning. The colour exposure drifts over the turn (a
smooth gain change: the mapper's colour loss has no exposure model, so the map's colours and the
tracker's poses drift with it). Two trajectories (``--trajectory``):

- ``circle``: the camera circles the room's centre (0.35 m radius) looking outwards: a real loop,
  0.7 m across, that loop closure must close and correct.
- ``spin``: the camera turns in place (a hand-held wobble of about a centimetre), yawing at a
  steady rate with roll and pitch swinging, like TUM fr1/rpy (at 150 frames a turn: 2.8 deg a
  frame on average, at most 4.4): fast rotation, and revisits of every view with almost no travel
  between them.

    python -m slam.data.synthetic.loop --out /tmp/loop --frames 140 --total 120 --width 80 --height 60
    python -m slam.data.synthetic.loop --out /tmp/spin --trajectory spin --frames 180 --total 150

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
from slam.data.synthetic.sample import camera_from_angles, pose_line, stamp, write_text

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
    return camera_from_angles(yaw, pitch, 0.0, (x, y, z))


def spin_pose(k: int, total: int) -> np.ndarray:
    """T_wc (4, 4) of frame k turning in place at the loop's centre: yaw one full turn per
    ``total`` frames, roll (+-9 deg) and pitch (+-6 deg about PITCH) swinging at their own rates,
    the position wobbling by ~1 cm (periodic in ``total`` like ``loop_pose``)."""
    s = 2.0 * math.pi * k / total
    x = CENTRE[0] + 0.010 * math.sin(2 * s + 0.3)
    y = CENTRE[1] + 0.008 * math.cos(3 * s)
    z = CENTRE[2] + 0.006 * math.sin(5 * s + 1.1)
    yaw = s + 0.12 * math.sin(3 * s)
    pitch = PITCH + 0.10 * math.sin(4 * s + 0.5)
    roll = 0.16 * math.sin(5 * s + 0.2)
    return camera_from_angles(yaw, pitch, roll, (x, y, z))


TRAJECTORIES = {"circle": loop_pose, "spin": spin_pose}


def exposure_gain(k: int, total: int, amplitude: float) -> float:
    """Colour gain of frame k: 1 at the start, drifting smoothly by up to ``amplitude`` over a loop."""
    s = 2.0 * math.pi * k / total
    return 1.0 + amplitude * math.sin(1.5 * s) * math.sin(0.5 * s)


def generate_loop(out, frames: int = 140, total: int = 120, width: int = 80, height: int = 60,
                  exposure: float = 0.35, supersample: int = 1, trajectory: str = "circle") -> dict:
    """Write the sequence under ``out``; ``trajectory``: a ``TRAJECTORIES`` key. Returns {'frames',
    'overlap_frames', 'turn_deg'}."""
    import cv2

    if trajectory not in TRAJECTORIES:
        raise ValueError(f"unknown trajectory {trajectory!r}: one of {', '.join(TRAJECTORIES)}")
    pose = TRAJECTORIES[trajectory]

    out = Path(out)
    for sub in ("rgb", "depth"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    ren = room.Renderer(room.SEED, width, height, supersample)
    K = room.intrinsics(width, height)
    rgb_lines, depth_lines, gt_lines = ["# timestamp filename"], ["# timestamp filename"], ["# timestamp tx ty tz qx qy qz qw"]
    for k in range(frames):
        T = pose(k, total)
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
    ap.add_argument("--trajectory", choices=sorted(TRAJECTORIES), default="circle")
    args = ap.parse_args(argv)
    print(generate_loop(args.out, args.frames, args.total, args.width, args.height, args.exposure, args.supersample,
                        args.trajectory))


if __name__ == "__main__":
    main()
