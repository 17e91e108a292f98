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

from ros_helpers import (
    REPO,
    bag_settings,
    odometry_matches_run_folder,
    read_trajectory,
    run_slam,
    same_trajectory,
    sample_stamps,
    start,
    stop,
    tracked_poses,
    write_bag,
)

N_FRAMES = 10
ATE_TOL_M = 0.005          # |ATE(node, live) - ATE(run_slam, TUM files)|
POSE_TOL_M = 1e-4          # replayed bag vs offline bag loader, per pose
POSE_TOL_RAD = 1e-4
SLAM_SETTINGS = ["system.threaded=false", "system.device=cpu", "output.plots=false",
                 "tracking.iters=4", "mapping.iters=10", "system.progress=false"]


def _ros1_missing() -> str | None:
    if shutil.which("rosmaster") is None:
        return "rosmaster not found: install ROS 1 with `bash scripts/install_ros1.sh` (root)"
    env = dict(os.environ, PYTHONPATH=_pythonpath())
    code = ("from slam.ros.ros1_node import import_rospy; import_rospy(); "   # ROS 1 beside ROS 2 wheels
            "import tf2_ros, nav_msgs.msg, sensor_msgs.msg, std_srvs.srv")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=str(REPO))
    if r.returncode != 0:
        return f"ROS 1 python packages not importable: {r.stderr.strip().splitlines()[-1:]}"
    return None


def _pythonpath() -> str:
    """Only the repo: the venv's python finds its site-packages and the ROS 1 node adds Debian's
    dist-packages itself (``import_rospy``); Debian's own tools (rosmaster, roslaunch) must not see
    the venv's packages, which may include ROS 2 message packages of the same names."""
    return str(REPO)


pytestmark = pytest.mark.skipif(_ros1_missing() is not None, reason=str(_ros1_missing()))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ros(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ros1")
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=_pythonpath(), ROS_MASTER_URI=f"http://127.0.0.1:{port}",
               ROS_HOSTNAME="127.0.0.1", ROS_HOME=str(tmp / "ros_home"), ROS_LOG_DIR=str(tmp / "ros_log"),
               PYTHONUNBUFFERED="1")
    env.pop("ROS_IP", None)
    master = start(["rosmaster", "--core", "-p", str(port)], env, tmp / "master.log")
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
            stop(master, signal.SIGTERM)
            pytest.fail(f"rosmaster did not start: {(tmp / 'master.log').read_text()[-2000:]}")
        time.sleep(0.2)
    yield {"env": env, "tmp": tmp, "master": master}
    stop(master, signal.SIGTERM, 10.0)   # rosmaster ignores SIGINT while serving
    assert master.poll() is not None, "rosmaster still running after the test"


def _run_node_and_player(ros, name: str, player_args: list) -> tuple[dict, Path]:
    """Start the node, play, stop the node with SIGINT (it writes its run folder); -> record, run dir."""
    tmp, env = ros["tmp"], ros["env"]
    run_dir = tmp / f"{name}_run"
    overrides = "[" + ", ".join(SLAM_SETTINGS) + "]"
    node = start([sys.executable, "-m", "slam.ros.ros1_node", "__name:=sphere_slam", "_config:=default.yaml",
                   f"_overrides:={overrides}", "_queue_policy:=block", "_cloud_period_s:=0.2",
                   "_render_period_s:=0.5", "_grid_period_s:=0.2", f"_out:={run_dir}"], env, tmp / f"{name}_node.log")
    record = tmp / f"{name}_record.json"
    try:
        player = subprocess.run([sys.executable, "-m", "slam.ros.ros1_player", *player_args, "--record", str(record),
                                 "--frame-timeout", "120", "--wait-grid", "30"], env=env, cwd=str(REPO), capture_output=True,
                                text=True, timeout=900, start_new_session=True)
        assert player.returncode == 0, f"player failed:\n{player.stdout}\n{player.stderr[-3000:]}\nnode log:\n" \
                                       f"{(tmp / f'{name}_node.log').read_text()[-3000:]}"
    finally:
        stop(node)
    log = (tmp / f"{name}_node.log").read_text()
    assert node.returncode == 0, f"node exit code {node.returncode}:\n{log[-3000:]}"
    return json.loads(record.read_text()), run_dir


def _run_slam(ros, name: str, overrides: list) -> Path:
    return run_slam(ros["tmp"] / f"{name}_cli", SLAM_SETTINGS + overrides, ros["env"])


def _ate(stamps, poses) -> float:
    from slam.data.tum import tum_ground_truth
    from slam.eval.trajectory import evaluate_trajectory
    from slam.resources import resolve_data_path
    gt_t, gt_T = tum_ground_truth(resolve_data_path("sample"))
    return float(evaluate_trajectory(poses, stamps, gt_T, gt_t)["ate_rmse_m"])


@pytest.fixture(scope="module")
def bag(ros) -> Path:
    path = ros["tmp"] / "sample.bag"
    write_bag(path, N_FRAMES, ros1=True)
    return path


@pytest.fixture(scope="module")
def offline_bag_run(ros, bag) -> Path:
    return _run_slam(ros, "bag_offline", bag_settings(bag))


def _assert_same_trajectory(a: Path, b: Path) -> tuple[float, float]:
    return same_trajectory(a, b, POSE_TOL_M, POSE_TOL_RAD)


def test_live_frames_odometry_tf_cloud_and_ate(ros, offline_bag_run, capsys):
    rec, run_dir = _run_node_and_player(ros, "live", ["--tum", "sample", "--last", str(N_FRAMES)])
    stamps = sample_stamps(N_FRAMES)
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
    # the occupancy grid on /map (latched), in the map frame, with occupied and free cells
    assert rec["grids"], "no occupancy grid on /map"
    _, frame, w, h, res, occupied, free, unknown = rec["grids"][-1]
    assert frame == "map" and res == pytest.approx(0.05, rel=1e-6) and occupied > 20 and free > 20, rec["grids"][-1]
    assert occupied + free + unknown == w * h                    # trinary, as map_server publishes
    assert (run_dir / "map.pgm").exists() and (run_dir / "map.yaml").exists()
    # the run folder, written on SIGINT like run_slam's
    for name in ("trajectory.txt", "map.ply", "metrics.json", "config.yaml", "log.txt"):
        assert (run_dir / name).exists(), name
    t_node, T_node = read_trajectory(run_dir / "trajectory.txt")
    np.testing.assert_allclose(t_node, stamps, atol=1e-6)
    # Odometry = the run folder's poses in the REP-103 map frame
    odometry_matches_run_folder(odom, tracked_poses(run_dir))
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
    assert abs(ate_odom - _ate(t_node, tracked_poses(run_dir))) < 1e-5   # Odometry = the poses as tracked
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
