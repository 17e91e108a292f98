"""Lock-step ROS 1 player and recorder for tests and demos (rospy).

Publishes RGB-D frames to the node's input topics and records what the node publishes:

    python -m slam.ros.ros1_player --tum sample --last 20 --record out.json   # frames of a TUM folder
    python -m slam.ros.ros1_player --bag run.bag --record out.json            # replay a ROS 1 bag

``--tum``: colour as rgb8, depth as 16UC1 millimetres, CameraInfo before every frame
(``slam.ros.playback``, the same bytes as the ROS 2 player and the tests' bags).
``--bag``: every message of the bag's colour/depth/camera_info topics, in recording order and
byte for byte (raw ROS 1 serialisation, like ``rosbag play``). Pacing: lock-step by default
(after each colour/depth pair, wait until the node has published that many Odometry messages, so
nothing is dropped however slow the SLAM is); ``--rate HZ`` publishes at a fixed rate instead.
The record (JSON): odometry [stamp, frame, child, x y z qx qy qz qw], tf [stamp, parent, child,
x y z qx qy qz qw], clouds [stamp, frame, width], images, grids (the occupancy grid on
``--grid-topic``, latched), timings.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from slam.ros.playback import projection, ros_frames
from slam.ros.recording import OutputRecord
from slam.ros.ros1_node import import_rospy


def _tum_messages(path: str, first: int, last: int, topics: dict, frame_id: str):
    """(topic, msg) in publishing order for frames [first, last) of a TUM folder (the sample too)."""
    from sensor_msgs.msg import CameraInfo, Image

    rospy = import_rospy()
    for f in ros_frames(path, first, last):
        stamp = rospy.Time(f.stamp_ns // 1_000_000_000, f.stamp_ns % 1_000_000_000)
        h, w = f.height, f.width
        info = CameraInfo(width=w, height=h, distortion_model="plumb_bob", D=[0.0] * 5,
                          K=f.K.reshape(-1).tolist(), R=[1, 0, 0, 0, 1, 0, 0, 0, 1],
                          P=projection(f.K).reshape(-1).tolist())
        info.header.stamp, info.header.frame_id = stamp, frame_id
        color = Image(height=h, width=w, encoding="rgb8", is_bigendian=0, step=w * 3, data=f.color.tobytes())
        color.header.stamp, color.header.frame_id = stamp, frame_id
        depth = Image(height=h, width=w, encoding="16UC1", is_bigendian=0, step=w * 2, data=f.depth_mm.tobytes())
        depth.header.stamp, depth.header.frame_id = stamp, frame_id
        yield topics["info"], info
        yield topics["color"], color
        yield topics["depth"], depth


def _bag_messages(path: str, topics: dict):
    """(topic, msg) of the bag's input topics, in recording order, deserialised by rospy."""
    from rosbags.highlevel import AnyReader
    from sensor_msgs.msg import CameraInfo, Image

    classes = {"sensor_msgs/msg/Image": Image, "sensor_msgs/msg/CameraInfo": CameraInfo}
    with AnyReader([Path(path)]) as reader:
        conns = [c for c in reader.connections if c.topic in topics.values()]
        for conn, _, raw in reader.messages(connections=conns):
            msg = classes[conn.msgtype]()
            msg.deserialize(bytes(raw))
            yield conn.topic, msg


class Recorder(OutputRecord):
    """Subscribes (rospy) to the node's outputs and keeps plain records (``OutputRecord``)."""

    def __init__(self, rospy, node: str, grid_topic: str = "/map") -> None:
        from nav_msgs.msg import OccupancyGrid, Odometry
        from sensor_msgs.msg import Image, PointCloud2
        from std_msgs.msg import String
        from tf2_msgs.msg import TFMessage

        super().__init__(lambda stamp: stamp.secs + 1e-9 * stamp.nsecs, image_mean=False, poll_s=0.5)
        self.subs = [rospy.Subscriber(f"{node}/odom", Odometry, self.on_odom, queue_size=1000),
                     rospy.Subscriber(f"{node}/tracking_status", String, self.on_status, queue_size=1000),
                     rospy.Subscriber("/tf", TFMessage, self.on_tf, queue_size=1000),
                     rospy.Subscriber(f"{node}/cloud", PointCloud2, self.on_cloud, queue_size=10),
                     rospy.Subscriber(f"{node}/rendered", Image, self.on_image, queue_size=10),
                     rospy.Subscriber(grid_topic, OccupancyGrid, self.on_grid, queue_size=10)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ros1_player", description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--tum", help="TUM-layout folder ('sample' = the bundled sample)")
    src.add_argument("--bag", help="ROS 1 bag to replay")
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--last", type=int, default=None)
    ap.add_argument("--node", default="/sphere_slam", help="the SLAM node's name (its ~odom, ~cloud)")
    ap.add_argument("--color-topic", default="/camera/color/image_raw")
    ap.add_argument("--depth-topic", default="/camera/aligned_depth_to_color/image_raw")
    ap.add_argument("--info-topic", default="/camera/color/camera_info")
    ap.add_argument("--frame-id", default="camera_color_optical_frame")
    ap.add_argument("--rate", type=float, default=0.0, help="publish at this many frames/s (0 = lock-step)")
    ap.add_argument("--frame-timeout", type=float, default=120.0, help="lock-step: max s to wait per frame")
    ap.add_argument("--wait-cloud", type=float, default=10.0, help="s to wait for a cloud at the end")
    ap.add_argument("--grid-topic", default="/map", help="the node's occupancy grid topic")
    ap.add_argument("--wait-grid", type=float, default=0.0, help="s to wait for an occupancy grid at the end")
    ap.add_argument("--record", required=True, help="JSON file for what the node published")
    args = ap.parse_args(argv)

    rospy = import_rospy()
    from sensor_msgs.msg import CameraInfo, Image

    rospy.init_node("slam_player", anonymous=True, disable_signals=True)
    topics = {"color": args.color_topic, "depth": args.depth_topic, "info": args.info_topic}
    pubs = {topics["info"]: rospy.Publisher(topics["info"], CameraInfo, queue_size=100),
            topics["color"]: rospy.Publisher(topics["color"], Image, queue_size=100),
            topics["depth"]: rospy.Publisher(topics["depth"], Image, queue_size=100)}
    rec = Recorder(rospy, args.node, args.grid_topic)
    t0 = time.monotonic()
    while any(p.get_num_connections() == 0 for p in pubs.values()) or \
            rec.subs[0].get_num_connections() == 0:   # the node subscribed and publishes ~odom
        if time.monotonic() - t0 > 60:
            print("ros1_player: the node did not connect within 60 s", file=sys.stderr)
            return 3
        time.sleep(0.1)
    messages = _bag_messages(args.bag, topics) if args.bag else \
        _tum_messages(args.tum, args.first, args.last, topics, args.frame_id)
    n = {"color": 0, "depth": 0}
    role = {topics["color"]: "color", topics["depth"]: "depth"}
    timeouts = 0
    t_start = time.monotonic()
    for topic, msg in messages:
        pubs[topic].publish(msg)
        if topic not in role:
            continue
        n[role[topic]] += 1
        pairs = min(n.values())
        if role[topic] == "depth" or n["color"] == n["depth"]:
            if args.rate > 0:
                time.sleep(1.0 / args.rate)
            elif n["color"] == n["depth"] and not rec.wait("odom", pairs, args.frame_timeout):
                timeouts += 1
                print(f"ros1_player: no odometry for frame {pairs} within {args.frame_timeout} s", file=sys.stderr)
    pairs = min(n.values())
    rec.wait("odom", pairs, args.frame_timeout)
    end = time.monotonic() + args.wait_cloud
    while time.monotonic() < end:
        with rec.lock:
            if rec.clouds and len(rec.tf) > 0:
                break
        time.sleep(0.1)
    rec.wait("grids", 1, args.wait_grid)
    time.sleep(0.3)   # the last TF messages
    with rec.lock:
        out = {"published_pairs": pairs, "timeouts": timeouts, "seconds": time.monotonic() - t_start,
               "odometry": rec.odom, "status": rec.status, "tf": rec.tf, "clouds": rec.clouds, "images": rec.images,
               "grids": rec.grids}
    Path(args.record).write_text(json.dumps(out))
    print(f"ros1_player: {pairs} frames published, {len(out['odometry'])} odometry, {len(out['tf'])} tf, "
          f"{len(out['clouds'])} clouds in {out['seconds']:.1f} s")
    rospy.signal_shutdown("done")
    return 0 if timeouts == 0 else 4


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
