"""Generate the bundled sample RGB-D sequence (TUM RGB-D layout) by ray casting the synthetic room
(slam.data.synthetic.room) along a smooth, closed, hand-held-like camera path.

    python -m slam.data.synthetic.sample --out datasets/sample            # the committed sample
    python -m slam.data.synthetic.sample --out /tmp/s --frames 5          # only the first 5 frames

Deterministic: no downloads, no input images, no random state (all "randomness" is an integer
hash of lattice coordinates and a fixed seed).

Output (under --out):
    rgb/<t>.png       8-bit RGB PNG
    depth/<t>.png     16-bit PNG, metres * 5000, 0 = invalid (no hit)
    rgb.txt, depth.txt, groundtruth.txt   TUM formats; poses are T_wc (camera-to-world),
                      OpenCV camera axes (x right, y down, z forward); world: z up, the room's
                      floor corner at the origin
    camera.yaml       fx, fy, cx, cy, width, height, depth_scale, distortion
    README.md         how it was made, statistics, licence

The path is a function of frame index / total frame count (--total, default 150), so --frames N
writes exactly the first N frames of the full sequence (the tests regenerate a few and compare).
Existing *.png files in <out>/rgb and <out>/depth are removed first.

Reproducibility tolerance (Embree is float32; results are bit-identical on one machine, other
CPUs may differ in the last bits): depth within 1 raw unit (0.2 mm) on >= 99.9 % of pixels,
colour within 2 levels on >= 99.9 % of pixel channels, the text files exactly equal.
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

from slam.data.synthetic.room import CX, CY, DEPTH_SCALE, FX, FY, HEIGHT, ROOM, SEED, WIDTH, Renderer, encode_depth

T0, FPS = 1000.0, 30.0
TOTAL_FRAMES = 150
GENERATOR = "python -m slam.data.synthetic.sample"


# ----------------------------------------------------------------------------------------------
# Camera path
# ----------------------------------------------------------------------------------------------
def camera_pose(k, total=TOTAL_FRAMES):
    """T_wc (4x4) of frame k: a closed, smooth, hand-held-like path (all terms periodic in s)."""
    s = 2.0 * math.pi * k / total
    x = 2.5 + 0.32 * math.sin(s) + 0.025 * math.sin(3 * s + 0.7)
    y = 1.05 + 0.14 * math.sin(2 * s + 0.4) - 0.08 * math.cos(s) + 0.012 * math.sin(5 * s)
    z = 1.42 + 0.05 * math.sin(s + 1.0) + 0.01 * math.sin(6 * s + 0.3)
    yaw = -0.34 * math.sin(s) + 0.18 * math.sin(2 * s + 0.5) + 0.025 * math.sin(5 * s + 1.1)
    pitch = 0.3 + 0.08 * math.sin(2 * s + 1.3) + 0.02 * math.sin(5 * s + 0.2)
    roll = 0.045 * math.sin(3 * s + 0.2) + 0.01 * math.sin(7 * s)
    return camera_from_angles(yaw, pitch, roll, (x, y, z))


def camera_from_angles(yaw: float, pitch: float, roll: float, position) -> np.ndarray:
    """T_wc (4, 4) with OpenCV camera axes (x right, y down, z forward) in the room's world (z up):
    looking along ``yaw`` (rad about world z; 0 = +y, positive turns towards +x), tilted down by
    ``pitch``, rolled by ``roll`` about the viewing direction; ``position``: (3,) metres."""
    fwd = np.array([math.sin(yaw) * math.cos(pitch), math.cos(yaw) * math.cos(pitch), -math.sin(pitch)])
    right = np.cross(fwd, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    down = np.cross(fwd, right)
    cr, sr = math.cos(roll), math.sin(roll)
    right, down = cr * right + sr * down, -sr * right + cr * down
    T = np.eye(4)
    T[:3, 0], T[:3, 1], T[:3, 2], T[:3, 3] = right, down, fwd, position
    return T


def rot_to_quat(R):
    """3x3 rotation -> (qx, qy, qz, qw), qw >= 0."""
    tr = np.trace(R)
    if tr > 0:
        S = math.sqrt(tr + 1.0) * 2
        q = [(R[2, 1] - R[1, 2]) / S, (R[0, 2] - R[2, 0]) / S, (R[1, 0] - R[0, 1]) / S, 0.25 * S]
    elif R[0, 0] > R[1, 1] and R[0, 0] > R[2, 2]:
        S = math.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2]) * 2
        q = [0.25 * S, (R[0, 1] + R[1, 0]) / S, (R[0, 2] + R[2, 0]) / S, (R[2, 1] - R[1, 2]) / S]
    elif R[1, 1] > R[2, 2]:
        S = math.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2]) * 2
        q = [(R[0, 1] + R[1, 0]) / S, 0.25 * S, (R[1, 2] + R[2, 1]) / S, (R[0, 2] - R[2, 0]) / S]
    else:
        S = math.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1]) * 2
        q = [(R[0, 2] + R[2, 0]) / S, (R[1, 2] + R[2, 1]) / S, 0.25 * S, (R[1, 0] - R[0, 1]) / S]
    q = np.array(q) / np.linalg.norm(q)
    return q if q[3] >= 0 else -q



# ----------------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------------
def stamp(k):
    """The TUM timestamp (s, text) of frame k."""
    return f"{T0 + k / FPS:.6f}"


def pose_line(k, T):
    """The TUM ground-truth line of frame k with pose T_wc (4, 4)."""
    q = rot_to_quat(T[:3, :3])
    t = T[:3, 3]
    return f"{stamp(k)} {t[0]:.6f} {t[1]:.6f} {t[2]:.6f} {q[0]:.7f} {q[1]:.7f} {q[2]:.7f} {q[3]:.7f}"


def rotation_angle_deg(R):
    return math.degrees(math.acos(max(-1.0, min(1.0, (np.trace(R) - 1.0) / 2.0))))


def motion_stats(poses):
    steps_t = [np.linalg.norm(b[:3, 3] - a[:3, 3]) for a, b in zip(poses[:-1], poses[1:])]
    steps_r = [rotation_angle_deg(a[:3, :3].T @ b[:3, :3]) for a, b in zip(poses[:-1], poses[1:])]
    loop_t = np.linalg.norm(poses[-1][:3, 3] - poses[0][:3, 3])
    loop_r = rotation_angle_deg(poses[0][:3, :3].T @ poses[-1][:3, :3])
    return dict(
        path_m=float(np.sum(steps_t)), rot_deg=float(np.sum(steps_r)),
        step_mean_cm=100 * float(np.mean(steps_t)), step_max_cm=100 * float(np.max(steps_t)),
        rot_mean_deg=float(np.mean(steps_r)), rot_max_deg=float(np.max(steps_r)),
        loop_cm=100 * float(loop_t), loop_deg=float(loop_r),
    )


README = """# Sample RGB-D sequence (synthetic)

The small sequence `run_slam` and the end-to-end tests use by default. TUM RGB-D layout:
`rgb/*.png` (8-bit RGB), `depth/*.png` (16-bit, metres x 5000, 0 = invalid), `rgb.txt`,
`depth.txt`, `groundtruth.txt` (`timestamp tx ty tz qx qy qz qw`, camera-to-world T_wc, OpenCV
camera axes x right / y down / z forward; world z up, the room's floor corner at the origin) and
`camera.yaml` (pinhole intrinsics, OpenCV pixel-centre convention, no distortion).

## How it was made

    python -m slam.data.synthetic.sample --out datasets/sample

Deterministic, no downloads and no input images: a furnished {room} m room built from triangle
meshes, ray cast with Open3D (`RaycastingScene`) along a smooth closed camera path. Colour is a
procedural, view-independent texture of the world hit point (checkers, stripes, value-noise
blobs, posters; Lambertian shading with a fixed light plus ambient), averaged over 2x2 rays per
pixel; depth is the exact z-depth of each pixel-centre ray. Rays through the window see no
surface: depth 0 there.

- {frames} frames, {w}x{h}, {fps:g} Hz timestamps from {t0:.6f}
- intrinsics fx = {fx}, fy = {fy}, cx = {cx}, cy = {cy}, depth_scale = {ds}
- camera path: {path_m:.2f} m long, {rot_deg:.1f} deg of accumulated rotation
- per frame: {step_mean_cm:.2f} cm mean / {step_max_cm:.2f} cm max translation,
  {rot_mean_deg:.2f} deg mean / {rot_max_deg:.2f} deg max rotation
- loop: the last frame is {loop_cm:.2f} cm / {loop_deg:.2f} deg from the first
- valid depth: {valid_pct:.2f} % of all pixels (lowest frame {valid_min_pct:.2f} %),
  depth range {zmin:.2f} - {zmax:.2f} m

Regenerating on another CPU may change the last bits of Embree's float32 ray casting. The tests
(`tests/test_sample.py`) accept depth within 1 raw unit (0.2 mm) on >= 99.9 % of pixels, colour
within 2 levels on >= 99.9 % of pixel channels, and require the text files to match exactly.

## Licence

Generated by this project (slam/data/synthetic/sample.py); it contains no third-party data. It is
distributed under the same licence as the rest of the repository.
"""


def write_text(path, lines):
    """Writes ``lines`` with a final newline."""
    Path(path).write_text("\n".join(lines) + "\n")


def generate(out, frames=None, total=TOTAL_FRAMES, seed=SEED, quiet=False):
    """Writes the first ``frames`` (all: None) of the ``total``-frame path under ``out``; returns
    the statistics the README quotes (path length, steps, valid depth, ...)."""
    import cv2

    out = Path(out)
    n = total if frames is None else min(frames, total)
    (out / "rgb").mkdir(parents=True, exist_ok=True)
    (out / "depth").mkdir(parents=True, exist_ok=True)
    for sub in ("rgb", "depth"):
        for f in (out / sub).glob("*.png"):
            f.unlink()
    t_start = time.perf_counter()
    ren = Renderer(seed)
    poses, valid, zmin, zmax = [], [], np.inf, 0.0
    made_by = f"# file: 'sample' (generated by {GENERATOR})"
    rgb_lines = ["# color images", made_by, "# timestamp filename"]
    depth_lines = ["# depth maps", made_by, "# timestamp filename"]
    gt_lines = ["# ground truth trajectory (T_wc, OpenCV camera axes)", made_by, "# timestamp tx ty tz qx qy qz qw"]
    png = [cv2.IMWRITE_PNG_COMPRESSION, 9]
    for k in range(n):
        T = camera_pose(k, total)
        rgb, z = ren.render(T)
        raw = encode_depth(z)
        ts = stamp(k)
        if not cv2.imwrite(str(out / "rgb" / f"{ts}.png"), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), png):
            raise OSError(f"could not write {out / 'rgb' / (ts + '.png')}")
        if not cv2.imwrite(str(out / "depth" / f"{ts}.png"), raw, png):
            raise OSError(f"could not write {out / 'depth' / (ts + '.png')}")
        rgb_lines.append(f"{ts} rgb/{ts}.png")
        depth_lines.append(f"{ts} depth/{ts}.png")
        gt_lines.append(pose_line(k, T))
        poses.append(T)
        v = raw > 0
        valid.append(float(v.mean()))
        if v.any():
            zmin, zmax = min(zmin, raw[v].min() / DEPTH_SCALE), max(zmax, raw[v].max() / DEPTH_SCALE)
    write_text(out / "rgb.txt", rgb_lines)
    write_text(out / "depth.txt", depth_lines)
    write_text(out / "groundtruth.txt", gt_lines)
    write_text(out / "camera.yaml", [
        "# Pinhole intrinsics of the sample (OpenCV convention: pixel centres at integer coordinates)",
        f"fx: {FX}", f"fy: {FY}", f"cx: {CX}", f"cy: {CY}", f"width: {WIDTH}", f"height: {HEIGHT}",
        f"depth_scale: {DEPTH_SCALE}", "distortion: null",
    ])
    elapsed = time.perf_counter() - t_start
    stats = motion_stats(poses) if n > 1 else {}
    stats.update(valid_pct=100 * float(np.mean(valid)), valid_min_pct=100 * float(np.min(valid)),
                 zmin=float(zmin), zmax=float(zmax), frames=n, seconds=elapsed)
    if n > 1:
        (out / "README.md").write_text(README.format(
            room="x".join(f"{v:g}" for v in ROOM), w=WIDTH, h=HEIGHT, fps=FPS, t0=T0, fx=FX, fy=FY, cx=CX, cy=CY,
            ds=DEPTH_SCALE, **stats))
    if not quiet:
        print(f"wrote {n} frames ({WIDTH}x{HEIGHT}) to {out} in {elapsed:.1f} s")
        for key, val in stats.items():
            print(f"  {key}: {val:.4g}" if isinstance(val, float) else f"  {key}: {val}")
    return stats


def main(argv=None):
    """python -m slam.data.synthetic.sample: writes the sample."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="datasets/sample", help="output directory (default: datasets/sample)")
    ap.add_argument("--frames", type=int, default=None, help="write only the first N frames of the sequence")
    ap.add_argument("--total", type=int, default=TOTAL_FRAMES,
                    help=f"frames in the full (closed) path (default {TOTAL_FRAMES}); changing it changes the path")
    ap.add_argument("--seed", type=int, default=SEED, help="texture seed (default: the committed sample's)")
    args = ap.parse_args(argv)
    if args.frames is not None and args.frames < 1:
        ap.error("--frames must be >= 1")
    generate(args.out, args.frames, args.total, args.seed)


if __name__ == "__main__":
    main()
