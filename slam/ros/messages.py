"""Plain output data -> message objects of one flavour: rospy (ROS 1), rclpy (ROS 2) or rosbags.

Every message is built with all fields given as keywords, which all three accept, so the ROS 2
path is exercised with ``rosbags``' Humble types (tests/test_ros_core.py, no ROS needed) and with
rclpy itself (tests/test_ros2_integration.py, Jazzy wheels; tf2_msgs only with rosbags). A
``Flavour`` supplies what differs: the class lookup, the time type (``secs/nsecs`` vs
``sec/nanosec``), whether ``Header`` has ``seq`` (ROS 1), and the containers for float64 and
byte arrays.
"""
from __future__ import annotations

import array
import importlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from slam.ros.out_data import CloudData, GridData, ImageData, OdometryData, PoseData, StatusData, TransformData


@dataclass
class Flavour:
    """cls('nav_msgs/msg/Odometry') -> class; time(ns) -> a time object; f64(list) / u8(bytes) /
    i8(int8 array) -> what the message fields expect."""

    name: str
    cls: Callable[[str], type]
    time: Callable[[int], Any]
    header_has_seq: bool
    f64: Callable[[list], Any]
    u8: Callable[[bytes], Any]
    i8: Callable[[np.ndarray], Any] = lambda a: [int(v) for v in np.asarray(a, dtype=np.int8).ravel()]


def _module_class(name: str) -> type:
    pkg, sub, cls = name.split("/")
    return getattr(importlib.import_module(f"{pkg}.{sub}"), cls)


def rospy_flavour() -> Flavour:
    import rospy

    return Flavour("rospy", _module_class, lambda ns: rospy.Time(int(ns // 1_000_000_000), int(ns % 1_000_000_000)),
                   True, list, bytes)


def rclpy_flavour() -> Flavour:
    from builtin_interfaces.msg import Time

    return Flavour("rclpy", _module_class,
                   lambda ns: Time(sec=int(ns // 1_000_000_000), nanosec=int(ns % 1_000_000_000)),
                   False, lambda v: array.array("d", v), lambda b: array.array("B", b),
                   lambda a: array.array("b", np.ascontiguousarray(a, dtype=np.int8).tobytes()))


def rosbags_flavour(typestore, ros1: bool) -> Flavour:
    """For tests and bag writing: messages of a ``rosbags`` typestore (ROS 1 or ROS 2)."""
    Time = typestore.types["builtin_interfaces/msg/Time"]
    return Flavour("rosbags-ros1" if ros1 else "rosbags-ros2", lambda n: typestore.types[n],
                   lambda ns: Time(sec=int(ns // 1_000_000_000), nanosec=int(ns % 1_000_000_000)),
                   ros1, lambda v: np.asarray(v, dtype=np.float64), lambda b: np.frombuffer(b, dtype=np.uint8).copy(),
                   lambda a: np.ascontiguousarray(a, dtype=np.int8).ravel().copy())


class MessageFactory:
    """Builds Header, Odometry, TransformStamped, TFMessage, PointCloud2, Image, OccupancyGrid and
    String (status) messages."""

    def __init__(self, flavour: Flavour) -> None:
        self.f = flavour
        self._seq = 0

    def header(self, stamp_ns: int, frame: str):
        Header = self.f.cls("std_msgs/msg/Header")
        if self.f.header_has_seq:
            self._seq += 1
            return Header(seq=self._seq, stamp=self.f.time(stamp_ns), frame_id=frame)
        return Header(stamp=self.f.time(stamp_ns), frame_id=frame)

    def _pose(self, p: PoseData):
        c = self.f.cls
        t, q = [float(v) for v in p.translation], [float(v) for v in p.quaternion]
        return c("geometry_msgs/msg/Pose")(position=c("geometry_msgs/msg/Point")(x=t[0], y=t[1], z=t[2]),
                                           orientation=c("geometry_msgs/msg/Quaternion")(x=q[0], y=q[1], z=q[2], w=q[3]))

    def _vec(self, x=0.0, y=0.0, z=0.0):
        return self.f.cls("geometry_msgs/msg/Vector3")(x=float(x), y=float(y), z=float(z))

    def odometry(self, d: OdometryData):
        c = self.f.cls
        zeros = self.f.f64([0.0] * 36)
        pose = c("geometry_msgs/msg/PoseWithCovariance")(pose=self._pose(d.pose), covariance=zeros)
        twist = c("geometry_msgs/msg/TwistWithCovariance")(
            twist=c("geometry_msgs/msg/Twist")(linear=self._vec(), angular=self._vec()), covariance=self.f.f64([0.0] * 36))
        return c("nav_msgs/msg/Odometry")(header=self.header(d.stamp_ns, d.frame), child_frame_id=d.child,
                                          pose=pose, twist=twist)

    def status(self, d: StatusData):
        return self.f.cls("std_msgs/msg/String")(data=d.text)

    def transform(self, d: TransformData):
        c = self.f.cls
        t, q = d.pose.translation, d.pose.quaternion
        tf = c("geometry_msgs/msg/Transform")(
            translation=self._vec(*t),
            rotation=c("geometry_msgs/msg/Quaternion")(x=float(q[0]), y=float(q[1]), z=float(q[2]), w=float(q[3])))
        return c("geometry_msgs/msg/TransformStamped")(header=self.header(d.stamp_ns, d.parent),
                                                       child_frame_id=d.child, transform=tf)

    def tf_message(self, items: list):
        return self.f.cls("tf2_msgs/msg/TFMessage")(transforms=[self.transform(d) for d in items])

    def cloud(self, d: CloudData):
        c = self.f.cls
        Field = c("sensor_msgs/msg/PointField")
        fields = [Field(name=n, offset=o, datatype=t, count=k) for n, o, t, k in d.fields]
        return c("sensor_msgs/msg/PointCloud2")(
            header=self.header(d.stamp_ns, d.frame), height=1, width=d.width, fields=fields,
            is_bigendian=False, point_step=d.point_step, row_step=d.point_step * d.width,
            data=self.f.u8(d.data), is_dense=True)

    def image(self, d: ImageData):
        px = np.ascontiguousarray(d.pixels, dtype=np.uint8)
        h, w = px.shape[:2]
        return self.f.cls("sensor_msgs/msg/Image")(
            header=self.header(d.stamp_ns, d.frame), height=h, width=w, encoding=d.encoding,
            is_bigendian=0, step=w * 3, data=self.f.u8(px.tobytes()))

    def occupancy_grid(self, d: GridData):
        c = self.f.cls
        info = c("nav_msgs/msg/MapMetaData")(map_load_time=self.f.time(d.stamp_ns), resolution=float(d.resolution),
                                            width=d.width, height=d.height, origin=self._pose(d.origin))
        return c("nav_msgs/msg/OccupancyGrid")(header=self.header(d.stamp_ns, d.frame), info=info,
                                               data=self.f.i8(d.cells))
