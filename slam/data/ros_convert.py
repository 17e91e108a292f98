"""ROS message <-> numpy conversion, shared by the bag loader and the ROS node.

Works on any object with the sensor_msgs attribute names: ``rosbags`` messages (ROS 1 and 2),
rospy / rclpy messages, or plain stand-ins. ``data`` may be bytes, a uint8 numpy array or a list.
Header stamps may be ``sec``/``nanosec`` (ROS 2, rosbags) or ``secs``/``nsecs`` (rospy).
CameraInfo matrices may be ``k``/``d`` (ROS 2) or ``K``/``D`` (ROS 1).

Errors are ``RosConvertError`` (a ``FrameError``) naming the encoding/size problem; callers add
the topic and bag name.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from slam.data.frame import FrameError

COLOR_ENCODINGS = ("rgb8", "bgr8", "rgba8", "bgra8", "mono8")
DEPTH_ENCODINGS = ("16UC1", "mono16", "32FC1")

_LAYOUT = {  # encoding -> (dtype, channels)
    "rgb8": (np.uint8, 3), "bgr8": (np.uint8, 3), "rgba8": (np.uint8, 4), "bgra8": (np.uint8, 4),
    "mono8": (np.uint8, 1), "8UC1": (np.uint8, 1), "8UC3": (np.uint8, 3),
    "mono16": (np.uint16, 1), "16UC1": (np.uint16, 1), "32FC1": (np.float32, 1),
}


class RosConvertError(FrameError):
    """A ROS message cannot be converted (unknown encoding, inconsistent size)."""


def stamp_ns(msg) -> int:
    """``msg.header.stamp`` as integer nanoseconds (ROS 1 secs/nsecs or ROS 2 sec/nanosec)."""
    s = msg.header.stamp
    if hasattr(s, "nanosec"):
        return int(s.sec) * 1_000_000_000 + int(s.nanosec)
    if hasattr(s, "nsecs"):
        return int(s.secs) * 1_000_000_000 + int(s.nsecs)
    if hasattr(s, "to_sec"):
        return int(round(float(s.to_sec()) * 1e9))
    raise RosConvertError(f"unsupported time object {type(s).__name__}")


def image_to_numpy(msg) -> np.ndarray:
    """sensor_msgs/Image -> (H, W) or (H, W, C) array in the message's own encoding and dtype.

    Honours ``step`` (row padding) and ``is_bigendian``. Raises ``RosConvertError`` for an
    unsupported encoding or a data buffer that does not match height/step.
    """
    enc = str(msg.encoding)
    if enc not in _LAYOUT:
        raise RosConvertError(f"unsupported image encoding '{enc}' (supported: {', '.join(_LAYOUT)})")
    dtype, ch = _LAYOUT[enc]
    dt = np.dtype(dtype).newbyteorder(">" if msg.is_bigendian else "<")
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    data = msg.data
    buf = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) \
        else np.asarray(data, dtype=np.uint8).reshape(-1)
    row = w * ch * dt.itemsize
    if h <= 0 or w <= 0 or step < row or buf.size < h * step:
        raise RosConvertError(
            f"image {w}x{h} '{enc}' needs step >= {row} and {h * max(step, row)} bytes, "
            f"got step {step} and {buf.size} bytes")
    rows = buf[: h * step].reshape(h, step)[:, :row]
    arr = np.ascontiguousarray(rows).view(dt).reshape((h, w, ch) if ch > 1 else (h, w))
    return arr.astype(dt.newbyteorder("="), copy=False)


def color_to_rgb(msg) -> np.ndarray:
    """A colour image message (rgb8, bgr8, rgba8, bgra8, mono8) -> (H, W, 3) uint8 RGB."""
    enc = str(msg.encoding)
    if enc not in COLOR_ENCODINGS:
        raise RosConvertError(f"colour encoding '{enc}' not supported (use one of {', '.join(COLOR_ENCODINGS)})")
    arr = image_to_numpy(msg)
    if enc == "mono8":
        return np.repeat(arr[:, :, None], 3, axis=2)
    if enc.startswith("bgr"):
        arr = arr[:, :, 2::-1]
    return np.ascontiguousarray(arr[:, :, :3])


def depth_to_metres(msg, units_per_metre: float = 1000.0) -> np.ndarray:
    """A depth image message -> (H, W) float32 metres, 0 = invalid.

    16UC1/mono16: raw / units_per_metre (ROS convention: millimetres, so 1000); 32FC1: metres,
    NaN/inf/negative -> 0.
    """
    enc = str(msg.encoding)
    if enc not in DEPTH_ENCODINGS:
        raise RosConvertError(f"depth encoding '{enc}' not supported (use one of {', '.join(DEPTH_ENCODINGS)})")
    arr = image_to_numpy(msg)
    if enc == "32FC1":
        d = arr.astype(np.float32, copy=True)
        d[~np.isfinite(d) | (d < 0)] = 0.0
        return d
    return arr.astype(np.float32) * np.float32(1.0 / units_per_metre)


def _field(msg, *names):
    for n in names:
        v = getattr(msg, n, None)
        if v is not None:
            return v
    return None


def camera_info_to_K(msg) -> np.ndarray:
    """sensor_msgs/CameraInfo -> (3, 3) float64 K; raises ``RosConvertError`` if not usable."""
    k = _field(msg, "k", "K")
    if k is None:
        raise RosConvertError("CameraInfo has no K/k field")
    K = np.asarray(k, dtype=np.float64).reshape(-1)
    if K.size != 9:
        raise RosConvertError(f"CameraInfo K must have 9 values, got {K.size}")
    K = K.reshape(3, 3)
    if not np.all(np.isfinite(K)) or K[0, 0] <= 0 or K[1, 1] <= 0:
        raise RosConvertError(f"CameraInfo K is not a valid pinhole matrix (all zero = uncalibrated?): {K.tolist()}")
    return K


def camera_info_distortion(msg) -> Optional[np.ndarray]:
    """OpenCV distortion coefficients of a plumb_bob/rational_polynomial CameraInfo, None if zero/absent."""
    d = _field(msg, "d", "D")
    if d is None:
        return None
    d = np.asarray(d, dtype=np.float64).reshape(-1)
    if d.size == 0 or not np.any(d):
        return None
    model = str(getattr(msg, "distortion_model", "plumb_bob") or "plumb_bob")
    if model not in ("plumb_bob", "rational_polynomial") or d.size not in (4, 5, 8, 12, 14):
        raise RosConvertError(f"CameraInfo distortion model '{model}' with {d.size} coefficients is not supported")
    return d
