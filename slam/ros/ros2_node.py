"""ROS 2 (rclpy) node: a thin layer over ``slam.ros.bridge.SlamBridge`` (Humble, Jazzy).

    slam_ros2_node --ros-args -p config:=tum.yaml -p overrides:="['system.device=cuda']" \
        -p odom_frame:=odom
    ros2 launch slam/ros/launch/sphere_slam.launch.py config:=base.yaml
(console entry point ``slam_ros2_node=slam.ros.ros2_node:main``; see docs/ROS.md)

Same parameters, topics, frames and run folder as the ROS 1 node. Inputs: reliability from the
``input_reliability`` parameter (default best effort = the sensor-data profile: connects to
best-effort and reliable cameras, never stalls the driver), keep last ``sub_queue_size``; one
callback group per topic, so each topic's messages are handled in order while colour and depth
run in parallel. Outputs: ``~/odom`` and ``~/tracking_status`` (reliable, depth 50), ``/tf``
(tf2_ros, when importable: there are no tf2 wheels for the pip-installed ROS 2; without it no
TF is published and ``tf_mode: external_odom`` is refused), ``~/cloud`` (reliable, transient
local, depth 1: late subscribers get the last cloud), ``~/rendered``, the occupancy grid on
``grid_topic`` (default ``/map``; reliable, transient local, depth 1, as Nav2's map subscribers
expect). Service ``~/save_map``
(std_srvs/Trigger). A peer with incompatible QoS on any of these topics is logged and counted
in metrics.json (``ros_input.qos_incompatible``). Tested for real in tests/test_ros2_integration.py.

rclpy, the message packages and tf2_ros are imported inside the functions: they are optional
(the package installs and its other tests run without ROS 2).
"""
from __future__ import annotations

import logging
import signal
import sys
from typing import Callable, Optional

import numpy as np

from slam.config import ConfigError, load_config
from slam.ros import out_data
from slam.ros.bridge import SlamBridge, TopicSink
from slam.ros.messages import MessageFactory, rclpy_flavour
from slam.ros.params import RosParams, default_values, params_from_mapping

log = logging.getLogger("slam.ros")


def import_rclpy():
    try:
        import rclpy
    except ImportError as exc:
        raise SystemExit(f"slam_ros2_node: rclpy is not importable ({exc}); source your ROS 2 setup "
                         "(e.g. /opt/ros/humble/setup.bash) in the shell that runs the node, or install "
                         "the Jazzy wheels (scripts/install_ros2.sh)") from None
    return rclpy


def import_tf2_ros():
    """tf2_ros, or None where it is not installed (the pip-installed ROS 2 has no tf2 wheels)."""
    try:
        import tf2_ros
    except ImportError:
        return None
    return tf2_ros


def resolved_name(node, name: str) -> str:
    """``~/odom`` -> ``/sphere_slam/odom`` (the name as given where rclpy cannot resolve it)."""
    resolve = getattr(node, "resolve_topic_name", None)
    return resolve(name) if resolve is not None else name


QosReport = Callable[[str, str, str, int], None]   # (topic, peer, policy name, total count)


def qos_event_callbacks(kind: str, topic: str, report: Callable[[], Optional[QosReport]]):
    """rclpy event callbacks ('publisher' or 'subscription') that pass incompatible-QoS events
    of ``topic`` to ``report()`` (looked up at event time: the bridge exists after the sink)."""
    try:
        from rclpy.event_handler import PublisherEventCallbacks, SubscriptionEventCallbacks
    except ImportError:   # Humble: the same classes under their older module name
        from rclpy.qos_event import PublisherEventCallbacks, SubscriptionEventCallbacks
    from rclpy.qos import qos_policy_name_from_kind

    peer = "subscriber" if kind == "publisher" else "publisher"

    def on_event(event) -> None:
        fn = report()
        if fn is not None:
            fn(topic, peer, qos_policy_name_from_kind(event.last_policy_kind), event.total_count)

    cls = PublisherEventCallbacks if kind == "publisher" else SubscriptionEventCallbacks
    return cls(incompatible_qos=on_event)


class Ros2Sink(TopicSink):
    """Publishers, TF broadcaster and TF lookups of the rclpy node (``bridge.Sink``)."""

    def __init__(self, node, tf_mode: str, publish_tf: bool, grid_topic: str = "/map") -> None:
        from nav_msgs.msg import OccupancyGrid, Odometry
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image, PointCloud2
        from std_msgs.msg import String

        self.node = node
        self.qos_report: Optional[QosReport] = None
        self.make = MessageFactory(rclpy_flavour())
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)

        def pub(msg_type, name, qos):
            topic = resolved_name(node, name)
            return node.create_publisher(msg_type, name, qos,
                                         event_callbacks=qos_event_callbacks("publisher", topic, lambda: self.qos_report))

        self.odom_pub = pub(Odometry, "~/odom", 50)
        self.status_pub = pub(String, "~/tracking_status", 50)
        self.cloud_pub = pub(PointCloud2, "~/cloud", latched)
        self.image_pub = pub(Image, "~/rendered", 1)
        self.grid_pub = pub(OccupancyGrid, grid_topic, latched)   # transient local: Nav2's costmaps
        tf2_ros = import_tf2_ros()
        self.tf = self.buffer = None
        if tf2_ros is None:
            if tf_mode == "external_odom":
                raise ConfigError("tf_mode 'external_odom' needs tf2_ros (install your distribution's "
                                  "tf2_ros package, e.g. ros-humble-tf2-ros-py)")
            if publish_tf:
                log.warning("tf2_ros is not importable: no TF is published (~/odom carries the pose); "
                            "install your distribution's tf2_ros package for TF")
        else:
            self.tf = tf2_ros.TransformBroadcaster(node)
            if tf_mode == "external_odom":
                self.buffer = tf2_ros.Buffer()
                self._listener = tf2_ros.TransformListener(self.buffer, node)

    def lookup_odom_camera(self, stamp_ns: int, odom_frame: str, camera_frame: str) -> Optional[np.ndarray]:
        from rclpy.duration import Duration
        from rclpy.time import Time

        try:
            t = self.buffer.lookup_transform(odom_frame, camera_frame, Time(nanoseconds=int(stamp_ns)),
                                             timeout=Duration(seconds=0.05))
        except Exception:  # noqa: BLE001 - tf2 raises several exception types; caller logs
            return None
        return out_data.transform_matrix(t.transform)


def declare_params(node) -> dict:
    """Declare every node parameter with its default; -> the values as a plain dict."""
    from rcl_interfaces.msg import ParameterDescriptor, ParameterType

    out = {}
    for name, default in default_values().items():
        if isinstance(default, list):   # a string array needs a typed, non-empty default in rclpy
            value = node.declare_parameter(name, [""], ParameterDescriptor(type=ParameterType.PARAMETER_STRING_ARRAY)).value
            out[name] = [v for v in value if v]
        else:
            out[name] = node.declare_parameter(name, default).value
    return out


def input_qos(params: RosParams):
    """QoS of the image and CameraInfo subscriptions (keep last ``sub_queue_size``)."""
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

    reliability = ReliabilityPolicy.RELIABLE if params.input_reliability == "reliable" else ReliabilityPolicy.BEST_EFFORT
    return QoSProfile(depth=params.sub_queue_size, history=HistoryPolicy.KEEP_LAST, reliability=reliability)


def _sigterm_as_interrupt(signum, frame):
    raise KeyboardInterrupt()


def _console_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(name)s: %(message)s"))
    logging.getLogger("slam").addHandler(handler)
    logging.getLogger("slam").setLevel(logging.INFO)


def main(argv: Optional[list] = None) -> int:
    rclpy = import_rclpy()
    from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
    from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
    from rclpy.signals import SignalHandlerOptions
    from sensor_msgs.msg import CameraInfo, Image
    from std_srvs.srv import Trigger

    # Our own SIGINT/SIGTERM handling: rclpy's would invalidate the context at once, and the
    # frames still queued could not publish their odometry while shutdown finishes them.
    rclpy.init(args=argv if argv is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    node = rclpy.create_node("sphere_slam")
    _console_logging()
    try:
        params = params_from_mapping(declare_params(node))
        cfg = load_config(params.config, params.overrides)
        sink = Ros2Sink(node, params.resolved_tf_mode(), params.publish_tf, params.grid_topic)
    except (ConfigError, FileNotFoundError) as exc:
        node.get_logger().fatal(f"slam_ros2_node: {exc}")
        node.destroy_node()
        rclpy.try_shutdown()
        return 2
    bridge = SlamBridge(params, cfg, sink)
    sink.qos_report = bridge.on_qos_incompatible
    bridge.start()
    t = bridge.topics
    qos = input_qos(params)
    # One mutually exclusive group per topic: a topic's messages are handled one at a time, in
    # arrival order (the stamp matcher drops out-of-order ones), colour and depth in parallel.
    # With queue_policy 'block' a callback waits for the tracker; the DDS queue then holds the rest.
    for msg_type, topic, callback in ((CameraInfo, t["info"], bridge.on_camera_info),
                                      (Image, t["color"], bridge.on_color), (Image, t["depth"], bridge.on_depth)):
        events = qos_event_callbacks("subscription", resolved_name(node, topic), lambda: bridge.on_qos_incompatible)
        node.create_subscription(msg_type, topic, callback, qos, callback_group=MutuallyExclusiveCallbackGroup(),
                                 event_callbacks=events)

    def save(_req, resp):
        resp.success, resp.message = bridge.save_map()
        return resp

    node.create_service(Trigger, "~/save_map", save, callback_group=MutuallyExclusiveCallbackGroup())
    node.get_logger().info(f"waiting for '{t['color']}' + '{t['depth']}' (camera_info '{t['info']}', "
                           f"{params.input_reliability}); run folder {bridge.run_dir}")
    executor = MultiThreadedExecutor(num_threads=5)
    executor.add_node(node)
    try:
        while rclpy.ok():   # short waits: the Python signal handlers run between them
            executor.spin_once(timeout_sec=0.2)
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
