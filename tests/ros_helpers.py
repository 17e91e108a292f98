"""Helpers shared by the real-ROS tests (ROS 1 and ROS 2): process groups, bags of the sample,
run_slam runs and trajectory comparisons."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TOPICS = {"color": "/camera/color/image_raw", "depth": "/camera/aligned_depth_to_color/image_raw",
          "info": "/camera/color/camera_info"}
CAMERA_FRAME = "camera_color_optical_frame"


def start(cmd, env, log: Path) -> subprocess.Popen:
    """Start ``cmd`` in its own process group (stopped by ``stop``), output to ``log``."""
    fh = open(log, "w")
    return subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=str(REPO), start_new_session=True)


def stop(proc: subprocess.Popen, first=signal.SIGINT, grace_s: float = 90.0) -> None:
    """Stop a process group we started: ``first``, then SIGTERM, then SIGKILL."""
    if proc.poll() is None:
        for sig, wait in ((first, grace_s), (signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
    try:  # anything left in the group (children)
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def write_bag(path: Path, n: int, ros1: bool, topics: dict = TOPICS) -> None:
    """The sample's first n frames as a ROS 1 bag or a ROS 2 bag (sqlite3), written with rosbags:
    rgb8, 16UC1 mm and CameraInfo per frame, the bytes the players publish (slam.ros.playback)."""
    from rosbags.typesys import Stores, get_typestore

    from slam.ros.playback import projection, ros_frames

    ts = get_typestore(Stores.ROS1_NOETIC if ros1 else Stores.ROS2_HUMBLE)
    T = ts.types
    Image, Info, Header, Time = (T["sensor_msgs/msg/Image"], T["sensor_msgs/msg/CameraInfo"],
                                 T["std_msgs/msg/Header"], T["builtin_interfaces/msg/Time"])
    RoI = T["sensor_msgs/msg/RegionOfInterest"]
    if ros1:
        from rosbags.rosbag1 import Writer
        writer, serialize = Writer(path), ts.serialize_ros1
    else:
        from rosbags.rosbag2 import Writer
        writer, serialize = Writer(path, version=8), ts.serialize_cdr
    cam = ("D", "K", "R", "P") if ros1 else ("d", "k", "r", "p")
    with writer as w:
        conns = {k: w.add_connection(t, (Info if k == "info" else Image).__msgtype__, typestore=ts)
                 for k, t in topics.items()}
        for i, f in enumerate(ros_frames("sample", last=n)):
            stamp = Time(sec=f.stamp_ns // 10**9, nanosec=f.stamp_ns % 10**9)
            hdr = Header(seq=i, stamp=stamp, frame_id=CAMERA_FRAME) if ros1 else Header(stamp=stamp, frame_id=CAMERA_FRAME)
            h, wd = f.height, f.width
            calib = dict(zip(cam, (np.zeros(5), f.K.reshape(-1), np.eye(3).reshape(-1), projection(f.K).reshape(-1))))
            info = Info(header=hdr, height=h, width=wd, distortion_model="plumb_bob", binning_x=0, binning_y=0,
                        roi=RoI(x_offset=0, y_offset=0, height=0, width=0, do_rectify=False), **calib)
            color = Image(header=hdr, height=h, width=wd, encoding="rgb8", is_bigendian=0, step=wd * 3,
                          data=f.color.reshape(-1).copy())
            depth = Image(header=hdr, height=h, width=wd, encoding="16UC1", is_bigendian=0, step=wd * 2,
                          data=f.depth_mm.view(np.uint8).reshape(-1).copy())
            for k, msg in (("info", info), ("color", color), ("depth", depth)):
                w.write(conns[k], f.stamp_ns + {"info": 0, "color": 1000, "depth": 2000}[k],
                        serialize(msg, msg.__msgtype__))


def run_slam(out: Path, settings: list, env: dict) -> Path:
    """``run_slam --set s ...`` into ``out`` (asserts success)."""
    r = subprocess.run([sys.executable, "-m", "slam.cli", "--quiet", "--out", str(out),
                        *sum((["--set", s] for s in settings), [])],
                       env=env, cwd=str(REPO), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def bag_settings(bag: Path, topics: dict = TOPICS) -> list:
    """run_slam settings that read ``bag`` with the offline ROS bag loader."""
    return ["data.dataset=rosbag", f"data.path={bag}", f"data.color_topic={topics['color']}",
            f"data.depth_topic={topics['depth']}", f"data.camera_info_topic={topics['info']}"]


def read_trajectory(path: Path):
    from slam.data.trajectory_io import read_tum_trajectory
    return read_tum_trajectory(path)


def sample_stamps(n: int) -> np.ndarray:
    rows = [ln.split()[0] for ln in (REPO / "datasets/sample/rgb.txt").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")]
    return np.array([float(r) for r in rows[:n]])


def same_trajectory(a: Path, b: Path, tol_m: float, tol_rad: float) -> tuple[float, float]:
    """Assert two trajectory files have the same stamps and poses within the tolerances;
    -> (max translation difference m, max rotation difference rad)."""
    from slam.geometry import rotation_angle
    ta, Ta = read_trajectory(a)
    tb, Tb = read_trajectory(b)
    np.testing.assert_allclose(ta, tb, atol=1e-6)
    dt = max(float(np.linalg.norm(x[:3, 3] - y[:3, 3])) for x, y in zip(Ta, Tb))
    dr = max(float(rotation_angle(x[:3, :3].T @ y[:3, :3])) for x, y in zip(Ta, Tb))
    assert dt <= tol_m and dr <= tol_rad, f"trajectories differ: {dt:.2e} m, {dr:.2e} rad"
    return dt, dr


def tracked_poses(run_dir: Path) -> np.ndarray:
    """(N, 4, 4) the run's poses as tracked: what live consumers (Odometry, TF) were sent. The final
    trajectory.txt holds them re-expressed on the refined keyframes; trajectory_tracked.txt, when a
    run refined or corrected any, the poses as they were tracked."""
    path = run_dir / "trajectory_tracked.txt"
    return read_trajectory(path if path.exists() else run_dir / "trajectory.txt")[1]


def odometry_matches_run_folder(odom: list, T_run: np.ndarray, atol: float = 1e-5) -> None:
    """Each recorded Odometry [stamp, frame, child, x y z qx qy qz qw] is the run folder's pose
    as tracked (``tracked_poses``) in the REP-103 map frame."""
    from slam.data.trajectory_io import rot_to_quat
    from slam.ros.out_data import R_MAP_OPTICAL
    assert len(odom) == len(T_run)
    for o, T in zip(odom, T_run):
        T_map = R_MAP_OPTICAL @ T
        np.testing.assert_allclose(o[3:6], T_map[:3, 3], atol=atol)
        q = rot_to_quat(T_map[:3, :3])
        assert min(np.abs(np.array(o[6:10]) - q).max(), np.abs(np.array(o[6:10]) + q).max()) < atol
