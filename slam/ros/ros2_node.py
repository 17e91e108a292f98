"""ROS 2 (rclpy) node: a thin layer over ``slam.ros.bridge.SlamBridge`` (Humble and newer).

    slam_ros2_node --ros-args -p config:=tum.yaml -p overrides:="['system.device=cuda']" \
        -p odom_frame:=odom
    ros2 launch slam/ros/launch/sphere_slam.launch.py config:=base.yaml
(console entry point ``slam_ros2_node=slam.ros.ros2_node:main``; see docs/ROS.md)

Same parameters, topics, frames and run folder as the ROS 1 node. Inputs use the sensor-data
QoS (best effort, keep last ``sub_queue_size``: accepts reliable and best-effort publishers,
never stalls the driver). Outputs: ``~/odom`` (reliable, depth 50), ``/tf`` (tf2_ros),
``~/cloud`` (reliable, transient local, depth 1: late subscribers get the last cloud),
``~/rendered``. Service ``~/save_map`` (std_srvs/Trigger). Not runnable on the development
machines (Debian 12 has no ROS 2): the message building it uses is tested with rosbags' Humble
types (tests/test_ros_core.py); this file itself is untested.
"""
from __future__ import annotations

import logging
import sys
from typing import Optional

import numpy as np

from slam.config import ConfigError, load_config
from slam.ros.bridge import SlamBridge
from slam.ros.messages import MessageFactory, rclpy_flavour
from slam.ros.params import default_values, params_from_mapping
from slam.data.trajectory_io import quat_to_rot


def import_rclpy():
    try:
        import rclpy
    except ImportError as exc:
        raise SystemExit(f"slam_ros2_node: rclpy is not importable ({exc}); source your ROS 2 setup "
                         "(e.g. /opt/ros/humble/setup.bash) in the shell that runs the node") from None
    return rclpy


class Ros2Sink:
    """Publishers, TF broadcaster and TF lookups of the rclpy node (``bridge.Sink``)."""

    def __init__(self, node, external_odom: bool) -> None:
        import tf2_ros
        from nav_msgs.msg import Odometry
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image, PointCloud2
        from std_msgs.msg import String

        self.node = node
        self.make = MessageFactory(rclpy_flavour())
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.odom_pub = node.create_publisher(Odometry, "~/odom", 50)
        self.status_pub = node.create_publisher(String, "~/tracking_status", 50)
        self.cloud_pub = node.create_publisher(PointCloud2, "~/cloud", latched)
        self.image_pub = node.create_publisher(Image, "~/rendered", 1)
        self.tf = tf2_ros.TransformBroadcaster(node)
        self.buffer = None
        if external_odom:
            self.buffer = tf2_ros.Buffer()
            self._listener = tf2_ros.TransformListener(self.buffer, node)

    def publish_odometry(self, d) -> None:
        self.odom_pub.publish(self.make.odometry(d))

    def publish_status(self, d) -> None:
        self.status_pub.publish(self.make.status(d))

    def publish_transforms(self, items) -> None:
        self.tf.sendTransform([self.make.transform(d) for d in items])

    def publish_cloud(self, d) -> None:
        self.cloud_pub.publish(self.make.cloud(d))

    def publish_image(self, d) -> None:
        self.image_pub.publish(self.make.image(d))

    def lookup_odom_camera(self, stamp_ns: int, odom_frame: str, camera_frame: str) -> Optional[np.ndarray]:
        from rclpy.duration import Duration
        from rclpy.time import Time

        try:
            t = self.buffer.lookup_transform(odom_frame, camera_frame, Time(nanoseconds=int(stamp_ns)),
                                             timeout=Duration(seconds=0.05))
        except Exception:  # noqa: BLE001 - tf2 raises several exception types; caller logs
            return None
        tr, q = t.transform.translation, t.transform.rotation
        T = np.eye(4)
        T[:3, :3] = quat_to_rot([q.x, q.y, q.z, q.w])
        T[:3, 3] = [tr.x, tr.y, tr.z]
        return T


def declare_params(node) -> dict:
    """Declare every node parameter with its default; -> the values as a plain dict."""
    out = {}
    for name, default in default_values().items():
        if isinstance(default, list):   # a string array needs a typed, non-empty default in rclpy
            from rcl_interfaces.msg import ParameterDescriptor, ParameterType
            value = node.declare_parameter(name, [""], ParameterDescriptor(type=ParameterType.PARAMETER_STRING_ARRAY)).value
            out[name] = [v for v in value if v]
        else:
            out[name] = node.declare_parameter(name, default).value
    return out


def main(argv: Optional[list] = None) -> int:
    rclpy = import_rclpy()
    from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
    from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import CameraInfo, Image
    from std_srvs.srv import Trigger

    rclpy.init(args=argv if argv is not None else sys.argv)
    node = rclpy.create_node("sphere_slam")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(name)s: %(message)s"))
    logging.getLogger("slam").addHandler(handler)
    logging.getLogger("slam").setLevel(logging.INFO)
    try:
        params = params_from_mapping(declare_params(node))
        cfg = load_config(params.config, params.overrides)
    except (ConfigError, FileNotFoundError) as exc:
        node.get_logger().fatal(f"slam_ros2_node: {exc}")
        node.destroy_node()
        rclpy.try_shutdown()
        return 2
    bridge = SlamBridge(params, cfg, Ros2Sink(node, params.resolved_tf_mode() == "external_odom"))
    bridge.start()
    t = bridge.topics
    qos = QoSProfile(depth=params.sub_queue_size, history=HistoryPolicy.KEEP_LAST,   # = sensor-data QoS
                     reliability=ReliabilityPolicy.BEST_EFFORT)
    images = ReentrantCallbackGroup()   # colour and depth callbacks may run in parallel (matcher locks)
    node.create_subscription(CameraInfo, t["info"], bridge.on_camera_info, qos, callback_group=images)
    node.create_subscription(Image, t["color"], bridge.on_color, qos, callback_group=images)
    node.create_subscription(Image, t["depth"], bridge.on_depth, qos, callback_group=images)

    def save(_req, resp):
        resp.success, resp.message = bridge.save_map()
        return resp

    node.create_service(Trigger, "~/save_map", save, callback_group=MutuallyExclusiveCallbackGroup())
    node.get_logger().info(f"waiting for '{t['color']}' + '{t['depth']}' (camera_info '{t['info']}'); "
                           f"run folder {bridge.run_dir}")
    executor = MultiThreadedExecutor(num_threads=4)
    executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        bridge.shutdown()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 1 if bridge.error is not None else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
