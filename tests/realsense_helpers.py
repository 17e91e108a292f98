"""RealSense recordings made without a camera: librealsense's software device + recorder, fed the
bundled sample's frames (depth z16 with a depth scale, colour rgb8, the sample's K, its timestamps
on the device clock).

The installed librealsense decides the format: 2.59+ records ROS 2 ``.db3``, earlier versions
ROS 1 ``.bag``. ``tests/fixtures/realsense_*_ros1.bag`` were written by this file under
pyrealsense2 2.56.5 (the last ``.bag`` recorder on PyPI for Python 3.11):

    python tests/realsense_helpers.py tests/fixtures/realsense_sample_ros1.bag --frames 12
    python tests/realsense_helpers.py tests/fixtures/realsense_colour_only_ros1.bag --frames 2 --no-depth

Record in a process of its own (as the tests do): after a software device has run, librealsense
keeps threads that slowed torch's OpenMP work in the same process about sixfold on 2 cores.
"""
from __future__ import annotations

import argparse
import gc
from pathlib import Path
from typing import Collection

import cv2
import numpy as np
import pyrealsense2 as rs

SAMPLE = Path(__file__).resolve().parents[1] / "datasets" / "sample"
DEPTH_UNITS = 1 / 5000.0        # the sample's 16-bit depth is metres x 5000: raw values unchanged


def sample_frames(n: int):
    """[(timestamp s, colour (H, W, 3) uint8 RGB, depth (H, W) uint16 raw)] of the first n sample frames."""
    rgb = [ln.split() for ln in (SAMPLE / "rgb.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    dep = [ln.split() for ln in (SAMPLE / "depth.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    out = []
    for (t, c), (_, d) in list(zip(rgb, dep))[:n]:
        color = cv2.cvtColor(cv2.imread(str(SAMPLE / c)), cv2.COLOR_BGR2RGB)
        out.append((float(t), color, cv2.imread(str(SAMPLE / d), cv2.IMREAD_UNCHANGED)))
    return out


def _intrinsics(w: int, h: int):
    intr = rs.intrinsics()
    intr.width, intr.height = w, h
    intr.fx, intr.fy, intr.ppx, intr.ppy = 130.0, 130.0, 79.5, 59.5      # datasets/sample/camera.yaml
    intr.model, intr.coeffs = rs.distortion.none, [0.0] * 5
    return intr


def record_sample(path: Path, frames: int, *, depth: bool = True, blank_depth: Collection[int] = (),
                  drop_depth: Collection[int] = (), compress: bool = False) -> Path:
    """Record the first ``frames`` sample frames to ``path`` (.db3 or .bag, per librealsense version).

    ``blank_depth``: frame numbers whose depth is all 0; ``drop_depth``: frame numbers recorded
    without their depth frame (its colour frame has no partner).
    """
    data = sample_frames(frames)
    h, w = data[0][2].shape
    intr = _intrinsics(w, h)
    dev = rs.software_device()
    sensors, profiles = {}, {}
    kinds = [("Color", rs.stream.color, rs.format.rgb8, 3)] + ([("Depth", rs.stream.depth, rs.format.z16, 2)] if depth else [])
    for uid, (name, stream, fmt, bpp) in enumerate(kinds):
        sensors[name] = dev.add_sensor(name)
        vs = rs.video_stream()
        vs.type, vs.index, vs.uid, vs.width, vs.height, vs.fps, vs.bpp, vs.fmt = stream, 0, uid, w, h, 30, bpp, fmt
        vs.intrinsics = intr
        profiles[name] = sensors[name].add_video_stream(vs)
    if depth:
        ext = rs.extrinsics()
        ext.rotation, ext.translation = [1, 0, 0, 0, 1, 0, 0, 0, 1], [0, 0, 0]
        profiles["Depth"].register_extrinsics_to(profiles["Color"], ext)
        sensors["Depth"].add_read_only_option(rs.option.depth_units, DEPTH_UNITS)
    recorder = rs.recorder(str(path), dev, compress)
    rec_sensors = {s.name: s for s in recorder.query_sensors()}
    for name, s in rec_sensors.items():
        s.open(profiles[name])
        s.start(lambda f: None)
    keep = []
    for i, (t, color, raw) in enumerate(data):
        if i in blank_depth:
            raw = np.zeros_like(raw)
        items = [("Color", color, 3, t)] + ([("Depth", raw, 2, t)] if depth and i not in drop_depth else [])
        for name, arr, bpp, stamp in items:
            arr = np.ascontiguousarray(arr)
            keep.append(arr)
            f = rs.software_video_frame()
            f.pixels, f.stride, f.bpp = arr, w * bpp, bpp
            f.timestamp, f.domain, f.frame_number = stamp * 1000.0, rs.timestamp_domain.hardware_clock, i
            f.profile = profiles[name].as_video_stream_profile()
            if name == "Depth":
                f.depth_units = DEPTH_UNITS
            sensors[name].on_video_frame(f)
    for s in rec_sensors.values():
        s.stop()
        s.close()
    del rec_sensors, recorder, sensors, profiles, dev      # the recorder writes its index when destroyed
    gc.collect()
    return path


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="record the bundled sample as a RealSense recording")
    ap.add_argument("out", type=Path)
    ap.add_argument("--frames", type=int, default=12)
    ap.add_argument("--no-depth", action="store_true")
    ap.add_argument("--blank-depth", type=int, nargs="*", default=(), help="frames whose depth is all 0")
    ap.add_argument("--drop-depth", type=int, nargs="*", default=(), help="frames recorded without depth")
    args = ap.parse_args()
    record_sample(args.out, args.frames, depth=not args.no_depth, blank_depth=args.blank_depth,
                  drop_depth=args.drop_depth, compress=True)
    print(args.out, args.out.stat().st_size, "bytes")
