"""ROS 2 player and recorder for tests and demos (rclpy): a camera at a real rate.

    python -m slam.ros.ros2_player --tum sample --last 20 --record out.json            # 30 Hz, as recorded
    python -m slam.ros.ros2_player --tum sample --rate 10 --reliability best_effort --record out.json

Publishes the frames of a TUM folder (``slam.ros.playback``: colour rgb8, depth 16UC1 mm,
CameraInfo before every frame) on the node's input topics, at the recorded timing (``--rate 0``,
the default) or at ``--rate`` frames/s, with the publishers' QoS set by ``--reliability``
(keep last ``--depth``). It waits until the node's subscriptions are discovered first, and records
what the node publishes: odometry [stamp s, frame, child, x y z qx qy qz qw], status strings,
clouds [stamp, frame, width, point_step, field names], rendered images [stamp, encoding, width,
height, mean pixel value], the QoS mismatches its own publishers saw, and (``--save-map``) the
answer of the node's ``save_map`` service. Exit code 0 when every frame got its odometry, 4 when
some did not (the record is written either way), 3 when no node showed up. rclpy and the message
packages are imported inside the functions: ROS 2 is optional.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

from slam.ros.playback import projection, ros_frames
from slam.ros.recording import OutputRecord
from slam.ros.ros2_node import import_rclpy, qos_event_callbacks


class Recorder(OutputRecord):
    """Subscribes (rclpy) to the node's outputs and keeps plain records (``OutputRecord``)."""

    def __init__(self, node, name: str, grid_topic: str = "/map") -> None:
        from nav_msgs.msg import OccupancyGrid, Odometry
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image, PointCloud2
        from std_msgs.msg import String

        super().__init__(lambda stamp: stamp.sec + 1e-9 * stamp.nanosec, image_mean=True, poll_s=0.2)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.odom_topic = f"{name}/odom"
        self.subs = [node.create_subscription(Odometry, self.odom_topic, self.on_odom, 1000),
                     node.create_subscription(String, f"{name}/tracking_status", self.on_status, 1000),
                     node.create_subscription(PointCloud2, f"{name}/cloud", self.on_cloud, latched),
                     node.create_subscription(Image, f"{name}/rendered", self.on_image, 100),
                     # transient local, as Nav2's map subscribers: a late subscriber gets the last grid
                     node.create_subscription(OccupancyGrid, grid_topic, self.on_grid, latched)]


def make_messages(frame, frame_id: str):
    """(CameraInfo, colour Image, depth Image) of a ``playback.RosFrame``."""
    from builtin_interfaces.msg import Time
    from sensor_msgs.msg import CameraInfo, Image
    from std_msgs.msg import Header

    header = Header(stamp=Time(sec=frame.stamp_ns // 1_000_000_000, nanosec=frame.stamp_ns % 1_000_000_000),
                    frame_id=frame_id)
    h, w = frame.height, frame.width
    info = CameraInfo(header=header, width=w, height=h, distortion_model="plumb_bob", d=[0.0] * 5,
                      k=frame.K.reshape(-1).tolist(), r=[1.0, 0, 0, 0, 1.0, 0, 0, 0, 1.0],
                      p=projection(frame.K).reshape(-1).tolist())
    color = Image(header=header, height=h, width=w, encoding="rgb8", is_bigendian=0, step=w * 3,
                  data=frame.color.tobytes())
    depth = Image(header=header, height=h, width=w, encoding="16UC1", is_bigendian=0, step=w * 2,
                  data=frame.depth_mm.tobytes())
    return info, color, depth


def _publishers(node, topics: dict, reliability: str, depth: int, mismatches: dict) -> dict:
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import CameraInfo, Image

    def note(topic, peer, policy, count):
        mismatches[topic] = {"peer": peer, "policy": policy, "count": int(count)}

    qos = QoSProfile(depth=depth, history=HistoryPolicy.KEEP_LAST,
                     reliability=ReliabilityPolicy.RELIABLE if reliability == "reliable" else ReliabilityPolicy.BEST_EFFORT)
    return {role: node.create_publisher(CameraInfo if role == "info" else Image, topic, qos,
                                        event_callbacks=qos_event_callbacks("publisher", topic, lambda: note))
            for role, topic in topics.items()}


def _wait_for_node(node, pubs: dict, rec: Recorder, timeout_s: float, match_s: float = 5.0) -> dict:
    """Wait until the node's subscriptions and its ~/odom are in the graph, then up to ``match_s``
    for every publisher to be matched (a QoS mismatch never matches). -> {role: matched}."""
    end = time.monotonic() + timeout_s
    while any(node.count_subscribers(p.topic_name) == 0 for p in pubs.values()) or \
            node.count_publishers(rec.odom_topic) == 0:
        if time.monotonic() > end:
            raise TimeoutError(f"the node did not appear within {timeout_s:.0f} s")
        time.sleep(0.1)
    end = time.monotonic() + match_s
    while any(p.get_subscription_count() == 0 for p in pubs.values()) and time.monotonic() < end:
        time.sleep(0.05)
    return {role: p.get_subscription_count() > 0 for role, p in pubs.items()}


def _call_save_map(node, name: str, timeout_s: float) -> dict:
    from std_srvs.srv import Trigger

    client = node.create_client(Trigger, f"{name}/save_map")
    if not client.wait_for_service(timeout_sec=timeout_s):
        return {"success": False, "message": "service not available"}
    future = client.call_async(Trigger.Request())
    end = time.monotonic() + timeout_s
    while not future.done() and time.monotonic() < end:
        time.sleep(0.05)
    if not future.done():
        return {"success": False, "message": "no answer"}
    return {"success": bool(future.result().success), "message": future.result().message}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ros2_player", description=__doc__.split("\n")[0])
    ap.add_argument("--tum", required=True, help="TUM-layout folder ('sample' = the bundled sample)")
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--last", type=int, default=None)
    ap.add_argument("--node", default="/sphere_slam", help="the SLAM node's name (its ~/odom, ~/cloud)")
    ap.add_argument("--color-topic", default="/camera/color/image_raw")
    ap.add_argument("--depth-topic", default="/camera/aligned_depth_to_color/image_raw")
    ap.add_argument("--info-topic", default="/camera/color/camera_info")
    ap.add_argument("--frame-id", default="camera_color_optical_frame")
    ap.add_argument("--rate", type=float, default=0.0, help="frames/s (0 = the recorded timing)")
    ap.add_argument("--reliability", choices=["reliable", "best_effort"], default="reliable")
    ap.add_argument("--depth", type=int, default=100, help="publisher history (keep last)")
    ap.add_argument("--connect-timeout", type=float, default=120.0, help="s to wait for the node")
    ap.add_argument("--answer-timeout", type=float, default=300.0, help="s to wait for the last odometry")
    ap.add_argument("--wait-cloud", type=float, default=20.0, help="s to wait for a cloud and an image at the end")
    ap.add_argument("--grid-topic", default="/map", help="the node's occupancy grid topic")
    ap.add_argument("--wait-grid", type=float, default=0.0, help="s to wait for an occupancy grid at the end")
    ap.add_argument("--save-map", action="store_true", help="call the node's save_map service at the end")
    ap.add_argument("--record", required=True, help="JSON file for what the node published")
    args = ap.parse_args(argv)

    rclpy = import_rclpy()
    from rclpy.executors import SingleThreadedExecutor

    rclpy.init(args=None)
    node = rclpy.create_node("slam_player")
    rec = Recorder(node, args.node, args.grid_topic)
    mismatches: dict = {}
    topics = {"info": args.info_topic, "color": args.color_topic, "depth": args.depth_topic}
    pubs = _publishers(node, topics, args.reliability, args.depth, mismatches)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.1)

    spinner = threading.Thread(target=spin, name="player-spin")
    spinner.start()
    try:
        try:
            matched = _wait_for_node(node, pubs, rec, args.connect_timeout)
        except TimeoutError as exc:
            print(f"ros2_player: {exc}", file=sys.stderr)
            return 3
        frames = list(ros_frames(args.tum, args.first, args.last))
        t_start = time.monotonic()
        for i, f in enumerate(frames):
            due = (f.stamp_ns - frames[0].stamp_ns) * 1e-9 if args.rate <= 0 else i / args.rate
            time.sleep(max(0.0, t_start + due - time.monotonic()))
            info, color, depth = make_messages(f, args.frame_id)
            pubs["info"].publish(info)
            pubs["color"].publish(color)
            pubs["depth"].publish(depth)
        published_s = time.monotonic() - t_start
        complete = rec.wait("odom", len(frames), args.answer_timeout)
        rec.wait("clouds", 1, args.wait_cloud)
        rec.wait("images", 1, args.wait_cloud)
        rec.wait("grids", 1, args.wait_grid)
        saved = _call_save_map(node, args.node, 30.0) if args.save_map else None
        time.sleep(0.3)   # the last status messages
        with rec.lock:
            out = {"frames": len(frames), "published_s": published_s, "seconds": time.monotonic() - t_start,
                   "matched": matched, "qos_incompatible": dict(mismatches), "reliability": args.reliability,
                   "odometry": rec.odom, "status": rec.status, "clouds": rec.clouds, "images": rec.images,
                   "grids": rec.grids, "save_map": saved}
        Path(args.record).write_text(json.dumps(out))
        print(f"ros2_player: {len(frames)} frames in {published_s:.2f} s, {len(out['odometry'])} odometry, "
              f"{len(out['clouds'])} clouds, {len(out['images'])} images in {out['seconds']:.1f} s")
        return 0 if complete else 4
    finally:   # stop spinning before anything is destroyed (else rclpy's C++ side aborts)
        stop.set()
        spinner.join()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
