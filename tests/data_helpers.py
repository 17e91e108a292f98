"""Helpers for the data-layer tests: tiny synthetic sequences and real bag files in tmp_path."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import cv2
import numpy as np

from slam.data.trajectory_io import tum_from_pose

W, H = 32, 24
K_PARAMS = (30.0, 31.0, 15.5, 11.5)


def synthetic_pose(i: int) -> np.ndarray:
    """A smooth, curved (non-collinear) T_wc path with a slow yaw."""
    a = 0.05 * i
    T = np.eye(4)
    T[:3, :3] = np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])
    T[:3, 3] = [0.1 * i, 0.02 * i * i, 0.5 - 0.03 * i + 0.05 * np.sin(i)]
    return T


def synthetic_images(i: int, w: int = W, h: int = H) -> tuple:
    """Deterministic (colour (h, w, 3) uint8 RGB, depth (h, w) float32 m) with a few invalid pixels."""
    rng = np.random.default_rng(i)
    color = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    yy, xx = np.mgrid[0:h, 0:w]
    depth = (1.0 + 2.0 * xx / w + 1.0 * yy / h + 0.1 * i).astype(np.float32)
    depth[0, :4] = 0.0
    return color, depth


def write_png16(path: Path, depth_m: np.ndarray, units: float) -> None:
    raw = np.round(depth_m.astype(np.float64) * units).astype(np.uint16)
    assert cv2.imwrite(str(path), raw)


def write_rgb(path: Path, color: np.ndarray) -> None:
    assert cv2.imwrite(str(path), cv2.cvtColor(color, cv2.COLOR_RGB2BGR))


def write_tum_sequence(root: Path, n: int = 6, *, camera_yaml: bool = True, gt: bool = True,
                       rgb_dt: float = 1 / 30, depth_offset: float = 0.004, ext: str = "png",
                       w: int = W, h: int = H) -> Path:
    """A TUM-layout folder with n frames; depth stamps offset by depth_offset s from colour."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "rgb").mkdir(exist_ok=True)
    (root / "depth").mkdir(exist_ok=True)
    rgb_lines, depth_lines, gt_lines = ["# colour images", "# timestamp filename"], ["# depth"], ["# gt"]
    for i in range(n):
        t = 100.0 + i * rgb_dt
        color, depth = synthetic_images(i, w, h)
        write_rgb(root / "rgb" / f"{t:.6f}.{ext}", color)
        write_png16(root / "depth" / f"{t + depth_offset:.6f}.png", depth, 5000.0)
        rgb_lines.append(f"{t:.6f} rgb/{t:.6f}.{ext}")
        depth_lines.append(f"{t + depth_offset:.6f} depth/{t + depth_offset:.6f}.png")
        gt_lines.append(f"{t:.6f} " + " ".join(f"{v:.9f}" for v in tum_from_pose(synthetic_pose(i))))
    (root / "rgb.txt").write_text("\n".join(rgb_lines) + "\n")
    (root / "depth.txt").write_text("\n".join(depth_lines) + "\n")
    if gt:
        (root / "groundtruth.txt").write_text("\n".join(gt_lines) + "\n")
    if camera_yaml:
        fx, fy, cx, cy = K_PARAMS
        (root / "camera.yaml").write_text(
            f"fx: {fx}\nfy: {fy}\ncx: {cx}\ncy: {cy}\ndepth_scale: 5000.0\nwidth: {w}\nheight: {h}\n")
    return root


def write_7scenes_sequence(root: Path, n: int = 5, w: int = W, h: int = H) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    fx, fy, cx, cy = K_PARAMS
    np.savetxt(root / "camera-intrinsics.txt", np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1]]))
    for i in range(n):
        color, depth = synthetic_images(i, w, h)
        cv2.imwrite(str(root / f"frame-{i:06d}.color.png"), cv2.cvtColor(color, cv2.COLOR_RGB2BGR))
        raw = np.round(depth * 1000).astype(np.uint16)
        raw[1, :3] = 65535
        cv2.imwrite(str(root / f"frame-{i:06d}.depth.png"), raw)
        np.savetxt(root / f"frame-{i:06d}.pose.txt", synthetic_pose(i))
    return root


def write_replica_sequence(root: Path, n: int = 5, w: int = W, h: int = H) -> Path:
    (root / "results").mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        color, depth = synthetic_images(i, w, h)
        write_rgb(root / "results" / f"frame{i:06d}.png", color)
        write_png16(root / "results" / f"depth{i:06d}.png", depth, 6553.5)
        lines.append(" ".join(f"{v:.9f}" for v in synthetic_pose(i).reshape(-1)))
    (root / "traj.txt").write_text("\n".join(lines) + "\n")
    return root


# ----------------------------------------------------------------------------- bags
COLOR_TOPIC = "/camera/color/image_raw"
DEPTH_TOPIC = "/camera/aligned_depth_to_color/image_raw"
INFO_TOPIC = "/camera/color/camera_info"


def write_bag(path: Path, kind: str, n: int = 4, *, color_encoding: str = "rgb8",
              depth_encoding: str = "16UC1", info_after: int = 0, depth_offset: float = 0.003,
              w: int = W, h: int = H, extra_depth: Sequence[float] = (),
              with_info: bool = True, period: float = 1 / 30, nan_depth: Sequence[int] = ()) -> Path:
    """Write a real bag (kind: 'ros1' .bag, 'sqlite3' or 'mcap' ROS 2 folder) with n frames.

    Colour at t = 10 + i * period s, depth at t + depth_offset; CameraInfo published before frame
    ``info_after`` (0 = before everything). ``extra_depth``: stamps of depth messages without
    a colour partner. ``nan_depth``: frame numbers whose depth is all NaN (32FC1) or 0 (16UC1).
    """
    from rosbags.typesys import Stores, get_typestore

    ros1 = kind == "ros1"
    ts = get_typestore(Stores.ROS1_NOETIC if ros1 else Stores.ROS2_HUMBLE)
    Image = ts.types["sensor_msgs/msg/Image"]
    Info = ts.types["sensor_msgs/msg/CameraInfo"]
    Header = ts.types["std_msgs/msg/Header"]
    Time = ts.types["builtin_interfaces/msg/Time"]
    ROI = ts.types["sensor_msgs/msg/RegionOfInterest"]

    def header(t: float):
        stamp = Time(sec=int(t), nanosec=int(round((t - int(t)) * 1e9)))
        return Header(seq=0, stamp=stamp, frame_id="cam") if ros1 else Header(stamp=stamp, frame_id="cam")

    def image(t, arr, enc):
        data = np.frombuffer(np.ascontiguousarray(arr).tobytes(), dtype=np.uint8)
        step = arr.shape[1] * (arr.shape[2] if arr.ndim == 3 else 1) * arr.dtype.itemsize
        return Image(header=header(t), height=arr.shape[0], width=arr.shape[1], encoding=enc,
                     is_bigendian=0, step=step, data=data)

    def info(t):
        fx, fy, cx, cy = K_PARAMS
        k = np.array([fx, 0, cx, 0, fy, cy, 0, 0, 1], dtype=np.float64)
        p = np.array([fx, 0, cx, 0, 0, fy, cy, 0, 0, 0, 1, 0], dtype=np.float64)
        kw = dict(header=header(t), height=h, width=w, distortion_model="plumb_bob", binning_x=0,
                  binning_y=0, roi=ROI(x_offset=0, y_offset=0, height=0, width=0, do_rectify=False))
        mats = dict(D=np.zeros(5), K=k, R=np.eye(3).reshape(-1), P=p)
        kw.update(mats if ros1 else {key.lower(): v for key, v in mats.items()})
        return Info(**kw)

    msgs = []  # (t, topic, msg)
    for i in range(n):
        t = 10.0 + i * period
        color, depth = synthetic_images(i, w, h)
        if color_encoding == "bgr8":
            c = color[:, :, ::-1]
        elif color_encoding == "mono8":
            c = color[:, :, 0]
        else:
            c = color
        msgs.append((t, COLOR_TOPIC, image(t, c, color_encoding)))
        if i in nan_depth:
            depth = np.full_like(depth, np.nan if depth_encoding == "32FC1" else 0.0)
        if depth_encoding == "32FC1":
            d = depth.astype(np.float32)
        else:
            d = np.round(depth * 1000).astype(np.uint16)
        msgs.append((t + depth_offset, DEPTH_TOPIC, image(t + depth_offset, d, depth_encoding)))
        if with_info and i == info_after:
            msgs.append((t - 0.001, INFO_TOPIC, info(t - 0.001)))
    for t in extra_depth:
        _, depth = synthetic_images(99, w, h)
        msgs.append((t, DEPTH_TOPIC, image(t, np.round(depth * 1000).astype(np.uint16), "16UC1")))
    msgs.sort(key=lambda m: m[0])

    if ros1:
        from rosbags.rosbag1 import Writer
        writer = Writer(path)
    else:
        from rosbags.rosbag2 import StoragePlugin, Writer
        plugin = StoragePlugin.MCAP if kind == "mcap" else StoragePlugin.SQLITE3
        writer = Writer(path, version=9, storage_plugin=plugin)
    with writer:
        conns = {}
        for topic, typ in ((COLOR_TOPIC, Image), (DEPTH_TOPIC, Image), (INFO_TOPIC, Info)):
            conns[topic] = writer.add_connection(topic, typ.__msgtype__, typestore=ts)
        for t, topic, msg in msgs:
            raw = ts.serialize_ros1(msg, msg.__msgtype__) if ros1 else ts.serialize_cdr(msg, msg.__msgtype__)
            writer.write(conns[topic], int(round(t * 1e9)), raw)
    return path
