"""ROS 2 for real: the rclpy node and an rclpy player (a camera at 30 Hz) as separate processes.

Skipped (with the reason) when rclpy is not importable: ``bash scripts/install.sh --ros2`` installs
ROS 2 Jazzy's wheels (CPython 3.11, x86-64). Middleware: Fast DDS, discovery on localhost only,
a ROS domain and topic names of this test run's own (parallel runs on one machine do not talk to
each other). Every process runs in its own process group and is stopped by its id.

Same SLAM config in the node and in ``run_slam``: the bundled sample, deterministic mode
(``system.threaded=false``), fewer iterations to keep CI short. Checks:
- live: the sample's first N frames as sensor_msgs/Image (rgb8 + 16UC1 mm) + CameraInfo at the
  recorded 30 Hz, the node with its default input QoS (best effort; the player publishes
  reliable) and lossless queueing -> Odometry and a tracking status for every frame, a rendered
  image for every frame tracked against a map, point clouds, the save_map service, the run folder
  on SIGINT; the trajectory equals ``run_slam`` reading a ROS 2 bag of the same frames offline,
  pose by pose within POSE_TOL_M / POSE_TOL_RAD (same inputs, same order: only float noise may
  differ);
- the occupancy grid arrives on the run's /map for a transient-local subscriber (what Nav2's
  static layer uses), trinary, with occupied and free cells; map -> odom is checked where tf2_ros
  is importable (the ROS 1 test; the pip-installed ROS 2 has no tf2);
- QoS mismatch: a node asking for reliable input and a best-effort camera never connect; both
  sides report it (node log, metrics.json, the player's publisher events) instead of waiting in
  silence.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ros_helpers import (
    CAMERA_FRAME,
    REPO,
    TOPICS,
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

N_FRAMES = 30
POSE_TOL_M = 1e-4          # live node vs offline bag loader, per pose
POSE_TOL_RAD = 1e-4
SLAM_SETTINGS = ["system.threaded=false", "system.device=cpu", "output.plots=false",
                 "tracking.iters=4", "mapping.iters=10", "mapping.final_iters=20", "system.progress=false"]


def _rclpy_missing() -> str | None:
    r = subprocess.run([sys.executable, "-c", "import rclpy, sensor_msgs.msg, nav_msgs.msg, std_msgs.msg, std_srvs.srv"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return f"rclpy not importable ({r.stderr.strip().splitlines()[-1:]}): install it with `bash scripts/install.sh --ros2`"
    return None


pytestmark = pytest.mark.skipif(_rclpy_missing() is not None, reason=str(_rclpy_missing()))


@pytest.fixture(scope="module")
def ros2(tmp_path_factory):
    """Environment of this run: its own ROS domain (from the pid), localhost discovery, Fast DDS,
    topic names under /t<pid>, logs in tmp."""
    tmp = tmp_path_factory.mktemp("ros2")
    ns = f"/t{os.getpid()}"
    env = dict(os.environ, PYTHONPATH=str(REPO), ROS_DOMAIN_ID=str(1 + os.getpid() % 100),
               ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", RMW_IMPLEMENTATION="rmw_fastrtps_cpp",
               ROS_HOME=str(tmp / "ros_home"), ROS_LOG_DIR=str(tmp / "ros_log"), PYTHONUNBUFFERED="1")
    env.pop("ROS_LOCALHOST_ONLY", None)   # deprecated in Jazzy; it would override the range above
    topics = {k: ns + v for k, v in TOPICS.items()}
    return {"env": env, "tmp": tmp, "topics": topics, "node": f"{ns}/sphere_slam"}


def _node_cmd(ros2, run_dir: Path, *params: str, overrides: tuple = ()) -> list:
    t = ros2["topics"]
    name = ros2["node"].rsplit("/", 1)
    overrides = "[" + ", ".join(f"'{s}'" for s in [*SLAM_SETTINGS, *overrides]) + "]"
    return [sys.executable, "-m", "slam.ros.ros2_node", "--ros-args", "-r", f"__ns:={name[0]}", "-r", f"__node:={name[1]}",
            "-p", "config:=default.yaml", "-p", f"overrides:={overrides}", "-p", f"out:={run_dir}",
            "-p", f"color_topic:={t['color']}", "-p", f"depth_topic:={t['depth']}", "-p", f"camera_info_topic:={t['info']}",
            *sum((["-p", p] for p in params), [])]


def _play(ros2, record: Path, *args: str) -> subprocess.CompletedProcess:
    t = ros2["topics"]
    return subprocess.run([sys.executable, "-m", "slam.ros.ros2_player", "--tum", "sample", "--node", ros2["node"],
                           "--color-topic", t["color"], "--depth-topic", t["depth"], "--info-topic", t["info"],
                           "--record", str(record), *args],
                          env=ros2["env"], cwd=str(REPO), capture_output=True, text=True, timeout=600,
                          start_new_session=True)


def _run(ros2, name: str, node_params: list, player_args: list,
         overrides: tuple = ()) -> tuple[dict, Path, str, subprocess.CompletedProcess]:
    """Start the node, play, stop the node with SIGINT (it writes its run folder);
    -> record, run folder, node log, the player's result."""
    tmp = ros2["tmp"]
    run_dir, log = tmp / f"{name}_run", tmp / f"{name}_node.log"
    node = start(_node_cmd(ros2, run_dir, *node_params, overrides=overrides), ros2["env"], log)
    try:
        player = _play(ros2, tmp / f"{name}_record.json", *player_args)
    finally:
        stop(node)
    text = log.read_text()
    assert node.returncode == 0, f"node exit code {node.returncode}:\n{text[-3000:]}"
    assert (tmp / f"{name}_record.json").exists(), f"player:\n{player.stdout}\n{player.stderr[-3000:]}\nnode:\n{text[-3000:]}"
    return json.loads((tmp / f"{name}_record.json").read_text()), run_dir, text, player


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _frame_numbers(times: list, stamps: np.ndarray) -> list:
    """The frame number of each stamp in ``times`` (each must be one of ``stamps``)."""
    idx = [int(np.argmin(np.abs(stamps - t))) for t in times]
    assert all(abs(stamps[i] - t) < 1e-6 for i, t in zip(idx, times)), times
    return idx


@pytest.fixture(scope="module")
def offline_bag_run(ros2) -> Path:
    bag = ros2["tmp"] / "sample_ros2_bag"
    write_bag(bag, N_FRAMES, ros1=False, topics=ros2["topics"])
    return run_slam(ros2["tmp"] / "bag_offline", SLAM_SETTINGS + bag_settings(bag, ros2["topics"]), ros2["env"])


def test_live_camera_rate_odometry_render_cloud_save_map_and_trajectory(ros2, offline_bag_run, capsys):
    grpc_port, web_port = _free_port(), _free_port()
    live_view = ("viewer.serve=true", "viewer.bind=127.0.0.1", f"viewer.grpc_port={grpc_port}",
                 f"viewer.web_port={web_port}")    # the browser view of the live map (no effect on the poses)
    grid_topic = ros2["node"].rsplit("/", 1)[0] + "/map"     # /map of this test run's own
    rec, run_dir, log, player = _run(
        ros2, "live", ["queue_policy:=block", "sub_queue_size:=100", "cloud_period_s:=0.01", "render_period_s:=0.01",
                       f"grid_topic:={grid_topic}", "grid_period_s:=0.2"],
        ["--last", str(N_FRAMES), "--reliability", "reliable", "--save-map", "--grid-topic", grid_topic,
         "--wait-grid", "30"], overrides=live_view)
    assert player.returncode == 0, f"{player.stdout}\n{player.stderr[-3000:]}\nnode:\n{log[-3000:]}"
    stamps = sample_stamps(N_FRAMES)
    # a camera: the player kept the recorded 30 Hz, it did not wait for the SLAM
    assert rec["published_s"] < (N_FRAMES - 1) / 30.0 + 1.0 and rec["matched"] == {"info": True, "color": True, "depth": True}
    # Odometry for every frame, in order, at the frames' stamps, in odom (SLAM is the odometry)
    odom = rec["odometry"]
    np.testing.assert_allclose([o[0] for o in odom], stamps, atol=1e-6)
    assert {(o[1], o[2]) for o in odom} == {("odom", CAMERA_FRAME)}
    # a tracking status with every pose: "<ok|recovered|lost> <stamp_ns>[ reason]"
    status = [s.split(" ", 2) for s in rec["status"]]
    assert len(status) == N_FRAMES and all(s[0] in ("ok", "recovered", "lost") for s in status)
    np.testing.assert_allclose([int(s[1]) * 1e-9 for s in status], stamps, atol=1e-6)
    # the rendered image for every frame tracked against a map (frame 0 only if the first
    # keyframe was mapped before the side thread looked), each frame once, not blank
    images = rec["images"]
    rendered = _frame_numbers([i[0] for i in images], stamps)
    assert rendered == sorted(set(rendered)) and set(range(1, N_FRAMES)) <= set(rendered), rendered
    assert all(i[1:4] == ["rgb8", 160, 120] and i[4] > 10 for i in images)
    # point clouds of the growing map: sphere centres with packed colour, in map
    clouds = rec["clouds"]
    assert clouds and all(c[1] == "map" and c[3] == 16 and c[4] == ["x", "y", "z", "rgb"] for c in clouds)
    assert clouds[-1][2] > 100 and _frame_numbers([c[0] for c in clouds], stamps)
    # the occupancy grid on /map, received by a transient-local subscriber (Nav2's QoS): trinary, in map
    assert rec["grids"], f"no occupancy grid on {grid_topic}"
    _, frame, w, h, res, occupied, free, unknown = rec["grids"][-1]
    assert frame == "map" and res == pytest.approx(0.05, rel=1e-6) and occupied > 20 and free > 20, rec["grids"][-1]
    assert occupied + free + unknown == w * h
    # the save_map service wrote a loadable map of the number of spheres it names
    assert rec["save_map"]["success"], rec["save_map"]
    saved, count = rec["save_map"]["message"].split(" (")
    from slam.map.map_io import load_map_rows
    assert load_map_rows(saved).shape[0] == int(count.split()[0]) > 100
    # TF: published where tf2_ros is importable; the pip-installed ROS 2 has no tf2, and the node says so
    has_tf2 = subprocess.run([sys.executable, "-c", "import tf2_ros"], env=ros2["env"], capture_output=True).returncode == 0
    assert ("no TF is published" in log) != has_tf2
    # the run folder, written on SIGINT like run_slam's; nothing dropped, no QoS mismatch
    for name in ("trajectory.txt", "map.ply", "metrics.json", "config.yaml", "log.txt", "map.pgm", "map.yaml"):
        assert (run_dir / name).exists(), name
    metrics = json.loads((run_dir / "metrics.json").read_text())
    ri = metrics["ros_input"]
    assert metrics["frames"] == N_FRAMES and metrics["skipped_frames"] == 0
    assert ri["pairs"] == N_FRAMES and ri["dropped"] == {} and ri["qos_incompatible"] == {}
    t_node, T_node = read_trajectory(run_dir / "trajectory.txt")
    np.testing.assert_allclose(t_node, stamps, atol=1e-6)
    odometry_matches_run_folder(odom, tracked_poses(run_dir))
    # the node served the live view to browsers (tests/test_web_viewer.py opens one for run_slam)
    viewer = metrics["viewer"]
    assert viewer["error"] is None and viewer["payloads_logged"] > 0
    assert viewer["served"]["grpc"] == f"rerun+http://127.0.0.1:{grpc_port}/proxy" and viewer["served"]["page"] in log
    # the trajectory run_slam computes from a ROS 2 bag of the same frames, pose by pose
    dt, dr = same_trajectory(run_dir / "trajectory.txt", offline_bag_run / "trajectory.txt", POSE_TOL_M, POSE_TOL_RAD)
    with capsys.disabled():
        print(f"\n[ros2 live] {N_FRAMES} frames published in {rec['published_s']:.2f} s, all answered after "
              f"{rec['seconds']:.1f} s; {len(images)} rendered images, {len(clouds)} clouds; "
              f"vs run_slam on the bag: max {dt:.1e} m, {dr:.1e} rad")


def test_qos_mismatch_best_effort_camera_reliable_node_is_reported(ros2):
    rec, run_dir, log, player = _run(ros2, "qos", ["input_reliability:=reliable"],
                                     ["--last", "3", "--reliability", "best_effort", "--answer-timeout", "3",
                                      "--wait-cloud", "0"])
    assert player.returncode == 4 and rec["odometry"] == []          # nothing arrived ...
    t = ros2["topics"]
    assert rec["matched"] == {"info": False, "color": False, "depth": False}
    for topic in t.values():                                         # ... and both sides said why
        assert rec["qos_incompatible"][topic]["policy"] == "RELIABILITY"
        assert f"QoS mismatch on '{topic}': a publisher with incompatible RELIABILITY policy" in log
    assert "set the node parameter input_reliability to best_effort" in log
    metrics = json.loads((run_dir / "metrics.json").read_text())
    got = metrics["ros_input"]["qos_incompatible"]
    assert {k: v["policy"] for k, v in got.items()} == {f"{topic} (publisher)": "RELIABILITY" for topic in t.values()}
    assert "QoS mismatch" in (run_dir / "log.txt").read_text()
