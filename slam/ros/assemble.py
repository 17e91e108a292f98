"""Paired colour/depth messages + CameraInfo -> ``Frame`` (middleware-free).

Messages may be rospy, rclpy or rosbags objects (``slam.data.ros_convert`` reads all of them).
CameraInfo may arrive late or never: until the first usable one, pairs are dropped with a clear,
throttled warning that names the topic and how many frames were lost (``data.intrinsics`` in the
config removes the need for CameraInfo). A later CameraInfo with a different K or size replaces
the calibration (logged). Bad images (unsupported encoding, size mismatch, broken buffer, no
valid depth) raise ``SkipFrame``-style ``FrameDropped`` with the reason; the caller counts them.
"""
from __future__ import annotations

import logging
import time
from typing import Optional

import numpy as np

from slam.data.frame import Frame, FrameError, validate_frame
from slam.data.preprocess import K_from_params, Preprocessor, distortion_array
from slam.data.ros_convert import (
    COLOR_ENCODINGS,
    DEPTH_ENCODINGS,
    RosConvertError,
    camera_info_distortion,
    camera_info_to_K,
    color_to_rgb,
    depth_to_metres,
)

log = logging.getLogger("slam.ros")


class FrameDropped(Exception):
    """A pair that cannot become a frame; ``reason`` says why (counted, logged by the caller)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind, self.reason = kind, reason


class FrameAssembler:
    """Builds frames from pairs; owns the calibration.

    depth_units: raw units per metre of 16UC1/mono16 depth (ROS convention 1000 = millimetres).
    intrinsics / distortion: config overrides ([fx, fy, cx, cy]; OpenCV coefficients, zeros = none).
    """

    def __init__(self, info_topic: str, depth_units: float = 1000.0, downscale: int = 1,
                 intrinsics=None, distortion=None, warn_period_s: float = 5.0) -> None:
        if depth_units <= 0:
            raise FrameError(f"data.depth_scale must be > 0, got {depth_units}")
        self.info_topic = info_topic
        self.depth_units = float(depth_units)
        self.downscale = int(downscale)
        self.dist_override = distortion is not None
        self._dist = distortion_array(distortion, "data.distortion") if distortion is not None else None
        self.warn_period_s = float(warn_period_s)
        self._pre: Optional[Preprocessor] = None
        self._info_size: Optional[tuple] = None
        self._info_key = None
        self._waiting_since = time.monotonic()
        self._last_wait_warn = -np.inf
        self.frames_before_info = 0
        if intrinsics is not None:
            self._pre = Preprocessor(K_from_params(intrinsics, "data.intrinsics"), self._dist, self.downscale)
            self._info_key = "override"

    @property
    def calibrated(self) -> bool:
        return self._pre is not None

    def on_camera_info(self, msg) -> bool:
        """Take a CameraInfo; returns True when it (re)defined the calibration."""
        if self._info_key == "override":
            return False
        try:
            K = camera_info_to_K(msg)
            dist = self._dist if self.dist_override else camera_info_distortion(msg)
        except RosConvertError as exc:
            now = time.monotonic()
            if now - self._last_wait_warn >= self.warn_period_s:
                self._last_wait_warn = now
                log.error("CameraInfo on '%s' is not usable: %s (set data.intrinsics / data.distortion "
                          "in the config to override it); still waiting", self.info_topic, exc)
            return False
        size = (int(msg.width), int(msg.height))
        key = (tuple(K.ravel()), None if dist is None else tuple(dist), size)
        if key == self._info_key:
            return False
        if self._info_key is None:
            waited = time.monotonic() - self._waiting_since
            log.info("CameraInfo received on '%s' after %.1f s: %dx%d fx=%.2f fy=%.2f cx=%.2f cy=%.2f%s",
                     self.info_topic, waited, size[0], size[1], K[0, 0], K[1, 1], K[0, 2], K[1, 2],
                     "" if dist is None else f", distortion {np.round(dist, 4).tolist()} (undistorted)")
            if self.frames_before_info:
                log.warning("%d frame(s) arrived before the first CameraInfo on '%s' (the newest "
                            "are kept and tracked now, older ones are dropped)",
                            self.frames_before_info, self.info_topic)
        else:
            log.warning("CameraInfo on '%s' changed: now %dx%d K=%s", self.info_topic, size[0], size[1],
                        np.round(K, 3).tolist())
        self._pre = Preprocessor(K, dist, self.downscale)
        self._info_size = size
        self._info_key = key
        return True

    def make_frame(self, stamp_ns: int, color_msg, depth_msg, source_id: str = "") -> Frame:
        """A validated ``Frame`` (index 0; the source renumbers) or ``FrameDropped``."""
        t = stamp_ns * 1e-9
        if self._pre is None:
            self.frames_before_info += 1
            now = time.monotonic()
            if now - self._last_wait_warn >= self.warn_period_s:
                self._last_wait_warn = now
                log.warning("waiting for CameraInfo on '%s' (%.0f s so far, %d frame(s) arrived); "
                            "is the camera driver publishing it? (or set data.intrinsics)",
                            self.info_topic, now - self._waiting_since, self.frames_before_info)
            raise FrameDropped("no_camera_info", f"frame at {t:.6f} s arrived before CameraInfo on '{self.info_topic}'")
        cenc, denc = str(color_msg.encoding), str(depth_msg.encoding)
        if cenc not in COLOR_ENCODINGS:
            raise FrameDropped("encoding", f"colour encoding '{cenc}' is not supported "
                                           f"(one of {', '.join(COLOR_ENCODINGS)})")
        if denc not in DEPTH_ENCODINGS:
            raise FrameDropped("encoding", f"depth encoding '{denc}' is not supported "
                                           f"(one of {', '.join(DEPTH_ENCODINGS)})")
        try:
            color = color_to_rgb(color_msg)
            depth = depth_to_metres(depth_msg, self.depth_units)
        except RosConvertError as exc:
            raise FrameDropped("corrupt", f"frame at {t:.6f} s: {exc}") from None
        if not color.flags.writeable:   # a view of the message buffer: own the pixels
            color = color.copy()
        if color.shape[:2] != depth.shape:
            raise FrameDropped("size_mismatch",
                               f"frame at {t:.6f} s: colour is {color.shape[1]}x{color.shape[0]} but depth is "
                               f"{depth.shape[1]}x{depth.shape[0]}; subscribe to a depth topic aligned to colour")
        if self._info_size is not None and self._info_size != (depth.shape[1], depth.shape[0]):
            raise FrameDropped("size_mismatch",
                               f"frame at {t:.6f} s: CameraInfo is for {self._info_size[0]}x{self._info_size[1]} "
                               f"but images are {depth.shape[1]}x{depth.shape[0]}")
        if not np.any(depth > 0):
            raise FrameDropped("no_depth", f"frame at {t:.6f} s: depth has no valid pixel")
        color, depth, K = self._pre(color, depth)
        return validate_frame(Frame(index=0, timestamp=t, color=color, depth=depth, K=K, source_id=source_id))
