"""ROS 1 (rospy) node: a thin layer over ``slam.ros.bridge.SlamBridge``.

    slam_ros1_node _config:=tum.yaml _overrides:="[system.device=cuda]" _odom_frame:=odom
    (console entry point ``slam_ros1_node=slam.ros.ros1_node:main``; see docs/ROS.md)

Subscribes (private params override the config's data.* names): colour image, aligned depth
image, camera_info. Publishes: ``~odom`` (nav_msgs/Odometry), ``/tf`` (REP-105), ``~cloud``
(sensor_msgs/PointCloud2, latched, throttled), ``~rendered`` (sensor_msgs/Image, throttled, off
by default), the occupancy grid on ``grid_topic`` (default ``/map``, nav_msgs/OccupancyGrid,
latched, throttled). Service ``~save_map`` (std_srvs/Trigger). On shutdown (Ctrl-C, SIGTERM,
``rosnode kill``) the run folder is written like ``run_slam``'s.

Debian's ROS 1 python packages live in /usr/lib/python3/dist-packages; when the venv cannot import
``rospy``, modules it cannot find are looked up there last (after the venv's site-packages), and
ROS 1's message packages are imported from there even when ROS 2 wheels of the same names are in
the venv (``import_rospy``).
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import sys
from typing import Optional

import numpy as np

from slam.config import ConfigError, load_config
from slam.ros import out_data
from slam.ros.bridge import SlamBridge, TopicSink
from slam.ros.messages import MessageFactory, rospy_flavour
from slam.ros.params import RosParams, default_values, params_from_mapping

DIST_PACKAGES = "/usr/lib/python3/dist-packages"
BUFF_SIZE = 1 << 24   # rospy's default 64 KiB socket buffer adds seconds of latency to images


def import_rospy():
    """Import rospy; where the environment cannot, from Debian's dist-packages, which is then
    searched for any top-level module after everything else (``Ros1RootFinder``: what appending
    the folder to the import path would do, without editing the path).

    ROS 1 and ROS 2 message packages share top-level names (``std_msgs``, ``sensor_msgs``,
    ``rosgraph_msgs`` ...). When the venv also holds ROS 2's wheels (``install.sh --ros2``), those
    would shadow ROS 1's, so every message/service package found next to rospy is imported from
    there (``Ros1PackageFinder``), whatever else comes first."""
    root = ros1_root()
    if root is not None:
        if importlib.machinery.PathFinder.find_spec("rospy") is None and \
                not any(isinstance(f, Ros1RootFinder) for f in sys.meta_path):
            sys.meta_path.append(Ros1RootFinder(root))
        if not any(isinstance(f, Ros1PackageFinder) for f in sys.meta_path):
            sys.meta_path.insert(0, Ros1PackageFinder(root))
    try:
        import rospy
    except ImportError as exc:
        raise SystemExit(f"slam_ros1_node: rospy is not importable ({exc}); install ROS 1 "
                         "(scripts/install_ros1.sh on Debian, or source /opt/ros/noetic/setup.bash)") from None
    return rospy


def ros1_root() -> Optional[str]:
    """The folder that holds the rospy package: where the environment imports it from, else
    Debian's dist-packages when rospy is there; None when neither has it."""
    spec = importlib.machinery.PathFinder.find_spec("rospy")
    if spec is not None and spec.submodule_search_locations:
        return os.path.dirname(next(iter(spec.submodule_search_locations)))
    if os.path.isfile(os.path.join(DIST_PACKAGES, "rospy", "__init__.py")):
        return DIST_PACKAGES
    return None


class Ros1PackageFinder(importlib.abc.MetaPathFinder):
    """Imports the ROS 1 message/service packages (folders with ``msg/`` or ``srv/``) of ``root``
    from ``root`` only, ahead of every other finder (the venv may hold ROS 2 packages of the same
    names)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.names = {d for d in os.listdir(root)
                      if os.path.isdir(os.path.join(root, d, "msg")) or os.path.isdir(os.path.join(root, d, "srv"))}

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.names:   # top-level only: submodules follow the package's __path__
            return importlib.machinery.PathFinder.find_spec(fullname, [self.root])
        return None


class Ros1RootFinder(importlib.abc.MetaPathFinder):
    """Imports any top-level module from ``root``; placed after every other finder, so it serves
    only what the environment does not have (rospy and its Debian dependencies)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        if path is None:             # top-level only: submodules follow the package's __path__
            return importlib.machinery.PathFinder.find_spec(fullname, [self.root])
        return None


class Ros1Sink(TopicSink):
    """Publishers, TF broadcaster and TF lookups of the rospy node (``bridge.Sink``)."""

    def __init__(self, rospy, external_odom: bool, grid_topic: str = "/map") -> None:
        import tf2_ros
        from nav_msgs.msg import OccupancyGrid, Odometry
        from sensor_msgs.msg import Image, PointCloud2
        from std_msgs.msg import String

        self.rospy = rospy
        self.make = MessageFactory(rospy_flavour())
        self.odom_pub = rospy.Publisher("~odom", Odometry, queue_size=50)
        self.status_pub = rospy.Publisher("~tracking_status", String, queue_size=50)
        self.cloud_pub = rospy.Publisher("~cloud", PointCloud2, queue_size=1, latch=True)
        self.image_pub = rospy.Publisher("~rendered", Image, queue_size=1)
        self.grid_pub = rospy.Publisher(grid_topic, OccupancyGrid, queue_size=1, latch=True)
        self.tf = tf2_ros.TransformBroadcaster()
        self.buffer = None
        if external_odom:
            self.buffer = tf2_ros.Buffer(cache_time=rospy.Duration(30.0))
            self._listener = tf2_ros.TransformListener(self.buffer)

    def lookup_odom_camera(self, stamp_ns: int, odom_frame: str, camera_frame: str) -> Optional[np.ndarray]:
        try:
            t = self.buffer.lookup_transform(odom_frame, camera_frame, self.make.f.time(stamp_ns),
                                             self.rospy.Duration(0.05))
        except Exception:  # noqa: BLE001 - tf2 raises several exception types; caller logs
            return None
        return out_data.transform_matrix(t.transform)


def read_params(rospy) -> dict:
    """Private parameters (``~name``) that are set, as a plain dict."""
    out = {}
    for name in default_values():
        if rospy.has_param("~" + name):
            out[name] = rospy.get_param("~" + name)
    return out


def _console_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    logging.getLogger("slam").addHandler(handler)
    logging.getLogger("slam").setLevel(logging.INFO)


def main(argv: Optional[list] = None) -> int:
    rospy = import_rospy()
    from sensor_msgs.msg import CameraInfo, Image
    from std_srvs.srv import Trigger, TriggerResponse

    rospy.init_node("sphere_slam", argv=argv if argv is not None else sys.argv)
    _console_logging()
    try:
        params: RosParams = params_from_mapping(read_params(rospy))
        cfg = load_config(params.config, params.overrides)
    except (ConfigError, FileNotFoundError) as exc:
        rospy.logfatal("slam_ros1_node: %s", exc)
        return 2
    ext = params.resolved_tf_mode() == "external_odom"
    bridge = SlamBridge(params, cfg, Ros1Sink(rospy, ext, params.grid_topic))
    bridge.start()
    t = bridge.topics
    q = params.sub_queue_size
    rospy.Subscriber(t["info"], CameraInfo, bridge.on_camera_info, queue_size=q)
    rospy.Subscriber(t["color"], Image, bridge.on_color, queue_size=q, buff_size=BUFF_SIZE)
    rospy.Subscriber(t["depth"], Image, bridge.on_depth, queue_size=q, buff_size=BUFF_SIZE)

    def save(_req):
        ok, message = bridge.save_map()
        return TriggerResponse(success=ok, message=message)

    rospy.Service("~save_map", Trigger, save)
    rospy.loginfo("sphere_slam: waiting for '%s' + '%s' (camera_info '%s'); run folder %s",
                  t["color"], t["depth"], t["info"], bridge.run_dir)
    rospy.spin()   # returns on Ctrl-C / SIGTERM / rosnode kill
    metrics = bridge.shutdown()
    return 1 if bridge.error is not None else (0 if metrics is not None else 1)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
