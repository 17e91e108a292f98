"""ROS 1 for real: a rosmaster, the rospy node and a rospy player as separate processes.

Skipped (with the reason) when ROS 1 is not installed: ``bash scripts/install_ros1.sh`` (root)
installs Debian's packages. Everything this module starts runs in its own process group and is
stopped by process-group id at the end (SIGINT, then SIGTERM, then SIGKILL).

Same SLAM config everywhere: the bundled sample, deterministic single-thread mode
(``system.threaded=false``), fewer iterations to keep CI short. Checks:
- live: the sample's first N frames published as sensor_msgs/Image (rgb8 + 16UC1 mm) +
  CameraInfo, lock-step -> Odometry and TF (map -> odom -> camera) for every frame, a point
  cloud, the run folder; ATE vs the sample's ground truth within ATE_TOL_M of ``run_slam`` on
  the same frames from the TUM files (inputs differ by millimetre depth quantisation and the
  world origin, so not bit-exact);
- replay: a ROS 1 bag of the same frames written with rosbags, replayed message by message
  through the node, gives the trajectory ``run_slam`` computes reading the bag offline, pose by
  pose within POSE_TOL_M / POSE_TOL_RAD (same inputs, same order: only float noise may differ).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
DIST = "/usr/lib/python3/dist-packages"
N_FRAMES = 10
ATE_TOL_M = 0.005          # |ATE(node, live) - ATE(run_slam, TUM files)|
POSE_TOL_M = 1e-4          # replayed bag vs offline bag loader, per pose
POSE_TOL_RAD = 1e-4
SLAM_SETTINGS = ["system.threaded=false", "system.device=cpu", "output.plots=false",
                 "tracking.iters=4", "mapping.iters=10", "system.progress=false"]
TOPICS = {"color": "/camera/color/image_raw", "depth": "/camera/aligned_depth_to_color/image_raw",
          "info": "/camera/color/camera_info"}


def _ros1_missing() -> str | None:
    if shutil.which("rosmaster") is None:
        return "rosmaster not found: install ROS 1 with `bash scripts/install_ros1.sh` (root)"
    env = dict(os.environ, PYTHONPATH=_pythonpath())
    r = subprocess.run([sys.executable, "-c", "import rospy, tf2_ros, nav_msgs.msg, sensor_msgs.msg, std_srvs.srv"],
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        return f"ROS 1 python packages not importable: {r.stderr.strip().splitlines()[-1:]}"
    return None


def _pythonpath() -> str:
    """The repo, then this venv's site-packages, then Debian's dist-packages (ROS 1) last."""
    site = [p for p in sys.path if p.endswith("site-packages")]
    return os.pathsep.join([str(REPO)] + site + [DIST])


pytestmark = pytest.mark.skipif(_ros1_missing() is not None, reason=str(_ros1_missing()))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(cmd, env, log: Path) -> subprocess.Popen:
    fh = open(log, "w")
    return subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=str(REPO), start_new_session=True)


def _stop(proc: subprocess.Popen, first=signal.SIGINT, grace_s: float = 90.0) -> None:
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


@pytest.fixture(scope="module")
def ros(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ros1")
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=_pythonpath(), ROS_MASTER_URI=f"http://127.0.0.1:{port}",
               ROS_HOSTNAME="127.0.0.1", ROS_HOME=str(tmp / "ros_home"), ROS_LOG_DIR=str(tmp / "ros_log"),
               PYTHONUNBUFFERED="1")
    env.pop("ROS_IP", None)
    master = _start(["rosmaster", "--core", "-p", str(port)], env, tmp / "master.log")
    import xmlrpc.client
    deadline = time.monotonic() + 30
    while True:
        try:
            code, _, _ = xmlrpc.client.ServerProxy(env["ROS_MASTER_URI"]).getSystemState("/test")
            if code == 1:
                break
        except OSError:
            pass
        if master.poll() is not None or time.monotonic() > deadline:
            _stop(master, signal.SIGTERM)
            pytest.fail(f"rosmaster did not start: {(tmp / 'master.log').read_text()[-2000:]}")
        time.sleep(0.2)
    yield {"env": env, "tmp": tmp, "master": master}
    _stop(master, signal.SIGTERM, 10.0)   # rosmaster ignores SIGINT while serving
    assert master.poll() is not None, "rosmaster still running after the test"


def _run_node_and_player(ros, name: str, player_args: list) -> tuple[dict, Path]:
    """Start the node, play, stop the node with SIGINT (it writes its run folder); -> record, run dir."""
    tmp, env = ros["tmp"], ros["env"]
    run_dir = tmp / f"{name}_run"
    overrides = "[" + ", ".join(SLAM_SETTINGS) + "]"
    node = _start([sys.executable, "-m", "slam.ros.ros1_node", "__name:=sphere_slam", "_config:=default.yaml",
                   f"_overrides:={overrides}", "_queue_policy:=block", "_cloud_period_s:=0.2",
                   "_render_period_s:=0.5", f"_out:={run_dir}"], env, tmp / f"{name}_node.log")
    record = tmp / f"{name}_record.json"
    try:
        player = subprocess.run([sys.executable, "-m", "slam.ros.ros1_player", *player_args, "--record", str(record),
                                 "--frame-timeout", "120"], env=env, cwd=str(REPO), capture_output=True,
                                text=True, timeout=900, start_new_session=True)
        assert player.returncode == 0, f"player failed:\n{player.stdout}\n{player.stderr[-3000:]}\nnode log:\n" \
                                       f"{(tmp / f'{name}_node.log').read_text()[-3000:]}"
    finally:
        _stop(node)
    log = (tmp / f"{name}_node.log").read_text()
    assert node.returncode == 0, f"node exit code {node.returncode}:\n{log[-3000:]}"
    return json.loads(record.read_text()), run_dir


def _run_slam(ros, name: str, overrides: list) -> Path:
    out = ros["tmp"] / f"{name}_cli"
    r = subprocess.run([sys.executable, "-m", "slam.cli", "--quiet", "--out", str(out),
                        *sum((["--set", s] for s in SLAM_SETTINGS + overrides), [])],
                       env=ros["env"], cwd=str(REPO), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def _traj(path: Path):
    from slam.data.trajectory_io import read_tum_trajectory
    return read_tum_trajectory(path)


def _ate(stamps, poses) -> float:
    from slam.data.tum import tum_ground_truth
    from slam.eval.trajectory import evaluate_trajectory
    from slam.resources import resolve_data_path
    gt_t, gt_T = tum_ground_truth(resolve_data_path("sample"))
    return float(evaluate_trajectory(poses, stamps, gt_T, gt_t)["ate_rmse_m"])


def _sample_stamps(n: int) -> np.ndarray:
    rows = [ln.split()[0] for ln in (REPO / "datasets/sample/rgb.txt").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")]
    return np.array([float(r) for r in rows[:n]])


def _write_bag(path: Path, n: int) -> None:
    """The sample's first n frames as a ROS 1 bag (rgb8, 16UC1 mm, CameraInfo), with rosbags."""
    from rosbags.rosbag1 import Writer
    from rosbags.typesys import Stores, get_typestore

    from slam.data.tum import TumSource
    from slam.resources import resolve_data_path

    ts = get_typestore(Stores.ROS1_NOETIC)
    T = ts.types
    Image, Info, Header, Time = (T["sensor_msgs/msg/Image"], T["sensor_msgs/msg/CameraInfo"],
                                 T["std_msgs/msg/Header"], T["builtin_interfaces/msg/Time"])
    RoI = T["sensor_msgs/msg/RegionOfInterest"]
    with Writer(path) as w:
        conns = {k: w.add_connection(t, (Info if k == "info" else Image).__msgtype__, typestore=ts)
                 for k, t in TOPICS.items()}
        for i, f in enumerate(TumSource(resolve_data_path("sample"), last=n)):
            ns = int(round(f.timestamp * 1e6)) * 1000
            hdr = Header(seq=i, stamp=Time(sec=ns // 10**9, nanosec=ns % 10**9), frame_id="camera_color_optical_frame")
            h, wd = f.height, f.width
            info = Info(header=hdr, height=h, width=wd, distortion_model="plumb_bob", D=np.zeros(5),
                        K=f.K.reshape(-1).astype(np.float64), R=np.eye(3).reshape(-1),
                        P=np.hstack([f.K, np.zeros((3, 1))]).reshape(-1), binning_x=0, binning_y=0,
                        roi=RoI(x_offset=0, y_offset=0, height=0, width=0, do_rectify=False))
            color = Image(header=hdr, height=h, width=wd, encoding="rgb8", is_bigendian=0, step=wd * 3,
                          data=f.color.reshape(-1).copy())
            mm = np.clip(np.rint(f.depth * 1000.0), 0, 65535).astype("<u2")
            depth = Image(header=hdr, height=h, width=wd, encoding="16UC1", is_bigendian=0, step=wd * 2,
                          data=mm.view(np.uint8).reshape(-1).copy())
            for k, msg in (("info", info), ("color", color), ("depth", depth)):
                w.write(conns[k], ns + {"info": 0, "color": 1000, "depth": 2000}[k],
                        ts.serialize_ros1(msg, msg.__msgtype__))


@pytest.fixture(scope="module")
def bag(ros) -> Path:
    path = ros["tmp"] / "sample.bag"
    _write_bag(path, N_FRAMES)
    return path


@pytest.fixture(scope="module")
def offline_bag_run(ros, bag) -> Path:
    return _run_slam(ros, "bag_offline", [f"data.dataset=rosbag", f"data.path={bag}",
                                          f"data.color_topic={TOPICS['color']}", f"data.depth_topic={TOPICS['depth']}",
                                          f"data.camera_info_topic={TOPICS['info']}"])


def _assert_same_trajectory(a: Path, b: Path) -> tuple[float, float]:
    from slam.geometry import rotation_angle
    ta, Ta = _traj(a)
    tb, Tb = _traj(b)
    np.testing.assert_allclose(ta, tb, atol=1e-6)
    dt = max(float(np.linalg.norm(x[:3, 3] - y[:3, 3])) for x, y in zip(Ta, Tb))
    dr = max(float(rotation_angle(x[:3, :3].T @ y[:3, :3])) for x, y in zip(Ta, Tb))
    assert dt <= POSE_TOL_M and dr <= POSE_TOL_RAD, f"trajectories differ: {dt:.2e} m, {dr:.2e} rad"
    return dt, dr


def test_live_frames_odometry_tf_cloud_and_ate(ros, offline_bag_run, capsys):
    rec, run_dir = _run_node_and_player(ros, "live", ["--tum", "sample", "--last", str(N_FRAMES)])
    stamps = _sample_stamps(N_FRAMES)
    # Odometry for every frame, in order, at the frames' stamps, in odom (SLAM is the odometry)
    odom = rec["odometry"]
    assert len(odom) == N_FRAMES and rec["timeouts"] == 0
    np.testing.assert_allclose([o[0] for o in odom], stamps, atol=1e-6)
    assert {(o[1], o[2]) for o in odom} == {("odom", "camera_color_optical_frame")}
    # a tracking status with every pose: "<ok|recovered|lost> <stamp_ns>[ reason]"
    status = [s.split(" ", 2) for s in rec["status"]]
    assert len(status) == N_FRAMES and all(s[0] in ("ok", "recovered", "lost") for s in status)
    np.testing.assert_allclose([int(s[1]) * 1e-9 for s in status], stamps, atol=1e-6)
    # TF (REP-105): map -> odom and odom -> camera for every frame
    for parent, child in (("map", "odom"), ("odom", "camera_color_optical_frame")):
        got = sorted(t[0] for t in rec["tf"] if (t[1], t[2]) == (parent, child))
        np.testing.assert_allclose(got, stamps, atol=1e-6, err_msg=f"{parent} -> {child}")
    # point cloud of sphere centres with packed colour; the rendered image
    assert rec["clouds"] and rec["clouds"][-1][2] > 100 and rec["clouds"][-1][4] == ["x", "y", "z", "rgb"]
    assert rec["clouds"][-1][1] == "map" and rec["clouds"][-1][3] == 16
    assert rec["images"] and rec["images"][-1][1:] == ["rgb8", 160, 120]
    # the run folder, written on SIGINT like run_slam's
    for name in ("trajectory.txt", "map.ply", "metrics.json", "config.yaml", "log.txt"):
        assert (run_dir / name).exists(), name
    t_node, T_node = _traj(run_dir / "trajectory.txt")
    np.testing.assert_allclose(t_node, stamps, atol=1e-6)
    # Odometry = the run folder's poses in the REP-103 map frame
    from slam.ros.out_data import R_MAP_OPTICAL
    from slam.data.trajectory_io import rot_to_quat
    for o, T in zip(odom, T_node):
        T_map = R_MAP_OPTICAL @ T
        np.testing.assert_allclose(o[3:6], T_map[:3, 3], atol=1e-5)
        q = rot_to_quat(T_map[:3, :3])
        assert min(np.abs(np.array(o[6:10]) - q).max(), np.abs(np.array(o[6:10]) + q).max()) < 1e-5
    # ATE vs ground truth: the node's odometry, its run folder and run_slam on the TUM files
    ref = _run_slam(ros, "tum_reference", [f"data.last={N_FRAMES}"])
    ate_ref = json.loads((ref / "metrics.json").read_text())["trajectory"]["ate_rmse_m"]
    ate_node = _ate(t_node, T_node)
    odom_T = []
    from slam.data.trajectory_io import quat_to_rot
    for o in odom:
        T = np.eye(4)
        T[:3, :3], T[:3, 3] = quat_to_rot(o[6:10]), o[3:6]
        odom_T.append(T)
    ate_odom = _ate(np.array([o[0] for o in odom]), np.stack(odom_T))
    with capsys.disabled():
        print(f"\n[ros1 live] ATE node run folder {ate_node * 100:.3f} cm, node Odometry {ate_odom * 100:.3f} cm, "
              f"run_slam (TUM files) {ate_ref * 100:.3f} cm; {N_FRAMES} frames in {rec['seconds']:.0f} s")
    assert abs(ate_odom - ate_node) < 1e-5
    assert abs(ate_node - ate_ref) <= ATE_TOL_M
    assert ate_node < 0.02
    # the live stream carried the bag's exact data: the node matches the offline bag run too
    dt, dr = _assert_same_trajectory(run_dir / "trajectory.txt", offline_bag_run / "trajectory.txt")
    with capsys.disabled():
        print(f"[ros1 live] vs offline bag loader: max {dt:.1e} m, {dr:.1e} rad")


def test_bag_replay_matches_offline_bag_loader(ros, bag, offline_bag_run, capsys):
    rec, run_dir = _run_node_and_player(ros, "replay", ["--bag", str(bag)])
    assert len(rec["odometry"]) == N_FRAMES and rec["timeouts"] == 0
    dt, dr = _assert_same_trajectory(run_dir / "trajectory.txt", offline_bag_run / "trajectory.txt")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["frames"] == N_FRAMES and metrics["skipped_frames"] == 0
    with capsys.disabled():
        print(f"\n[ros1 replay] node vs offline bag loader over {N_FRAMES} frames: max {dt:.1e} m, {dr:.1e} rad")


def test_launch_file_resolves(ros):
    """roslaunch parses the shipped ROS 1 launch file and resolves the node's command line."""
    launch = REPO / "slam/ros/launch/sphere_slam_ros1.launch"
    env = dict(ros["env"], ROS_PACKAGE_PATH=str(REPO / "slam" / "ros"))
    if shutil.which("roslaunch") is None:
        pytest.skip("roslaunch not installed")
    r = subprocess.run(["roslaunch", "--nodes", str(launch)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "sphere_slam" in r.stdout, r.stdout + r.stderr
    r = subprocess.run(["roslaunch", "--args", "/sphere_slam", str(launch)], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "slam_ros1_node" in r.stdout, r.stdout + r.stderr
