"""ROS bag loader (ROS 1 ``.bag``, ROS 2 sqlite3 and mcap) through ``rosbags`` (no ROS install).

Topics are ``data.color_topic`` / ``data.depth_topic`` / ``data.camera_info_topic``. Messages are
read in recording order; a colour and a depth image are paired when their *header stamps* differ
by at most ``data.max_time_diff`` (``slam.data.stamp_matcher``, as the live ROS node pairs them:
nearest partner, one-to-one; the pair's time is the colour stamp).
Encodings: colour rgb8, bgr8, rgba8, bgra8, mono8; depth 16UC1/mono16 (millimetres, or
``data.depth_scale`` units per metre) and 32FC1 (metres). K comes from the first CameraInfo
(``data.intrinsics`` overrides it and then no CameraInfo is needed); a non-zero distortion
(``data.distortion`` overrides) is undistorted like TUM. ``first``/``last``/``stride`` count
matched pairs; unselected pairs are never converted.

Bad input:
- bag path missing -> ``DataNotFoundError``; unreadable / truncated / not a bag -> ``FrameError``
  naming it (rosbags cannot open a bag whose index or end is cut off).
- a topic not in the bag, or of the wrong message type -> ``FrameError`` listing the bag's topics.
- an unsupported colour/depth encoding -> ``FrameError`` naming topic and encoding.
- colour and depth (or CameraInfo) of different sizes -> ``FrameError``.
- pairs before the first CameraInfo; a colour image without a depth partner within the
  tolerance; a colour image whose stamp repeats or is older than the previous one, or than the
  last pair (out of order); a message whose data does not match its size; an all-invalid depth
  -> warning + skip counted in ``stats``.
- a read error in the middle of the bag -> warning, the frames so far are kept, the stream ends.
- no frame delivered at all -> ``FrameError``.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from slam.data.errors import CalibrationError, DataNotFoundError, SkipFrame
from slam.data.frame import Frame, FrameError, FrameSource
from slam.data.paired_frames import PairedFrames, frame_from_images
from slam.data.preprocess import K_from_params, Preprocessor, distortion_array
from slam.data.ros_convert import (
    COLOR_ENCODINGS,
    DEPTH_ENCODINGS,
    RosConvertError,
    camera_info_distortion,
    camera_info_to_K,
    color_to_rgb,
    depth_to_metres,
    stamp_ns,
)
from slam.data.sequence import select, skip_frame
from slam.data.stamp_matcher import StampMatcher

log = logging.getLogger("slam.data")

IMAGE_TYPE = "sensor_msgs/msg/Image"
INFO_TYPE = "sensor_msgs/msg/CameraInfo"
PENDING_MAX = 64          # unmatched messages kept per topic (bounds memory)
PENDING_HORIZON_S = 1.0   # an unmatched message older than this behind the newest one is dropped


def _open_reader(path: Path):
    from rosbags.highlevel import AnyReader  # rosbags: heavy import, only for bag datasets

    try:
        reader = AnyReader([path])
        reader.open()
    except Exception as exc:  # rosbags raises its own error types for every kind of damage
        raise FrameError(f"{path}: cannot open bag ({type(exc).__name__}: {exc}); "
                         "is it truncated or not a ROS 1/ROS 2 bag?") from None
    return reader


class RosbagSource(FrameSource):
    """Streams colour/depth pairs from a bag (see module docstring)."""

    name = "rosbag"

    def __init__(self, path: str | Path, *, color_topic: str, depth_topic: str, camera_info_topic: str,
                 max_time_diff: float = 0.02, first: int = 0, last: Optional[int] = None, stride: int = 1,
                 downscale: int = 1, intrinsics=None, distortion=None, depth_scale=None) -> None:
        super().__init__()
        self.path = Path(path)
        if not self.path.exists():
            raise DataNotFoundError(f"{self.path}: bag not found")
        self.topics = {"color": color_topic, "depth": depth_topic, "info": camera_info_topic}
        self.max_time_diff = float(max_time_diff)
        self.first, self.last, self.stride = int(first), last, int(stride)
        select(0, first, last, stride)  # validates the numbers
        self.downscale = int(downscale)
        self.K_override = K_from_params(intrinsics, "data.intrinsics") if intrinsics is not None else None
        self.dist_override = distortion_array(distortion, "data.distortion") if distortion is not None else None
        self.depth_units = 1000.0 if depth_scale is None else float(depth_scale)
        if self.depth_units <= 0:
            raise CalibrationError(f"data.depth_scale must be > 0, got {depth_scale}")
        reader = _open_reader(self.path)
        try:
            self._check_topics(reader)
        finally:
            reader.close()

    def _check_topics(self, reader) -> None:
        available = {c.topic: c.msgtype for c in reader.connections}
        listing = ", ".join(f"{t} ({m})" for t, m in sorted(available.items())) or "none"
        needed = [("color", IMAGE_TYPE), ("depth", IMAGE_TYPE)]
        if self.K_override is None:
            needed.append(("info", INFO_TYPE))
        for role, msgtype in needed:
            topic = self.topics[role]
            if topic not in available:
                hint = " (or set data.intrinsics)" if role == "info" else ""
                raise FrameError(f"{self.path}: {role} topic '{topic}' is not in the bag{hint}; topics: {listing}")
            if available[topic] != msgtype:
                raise FrameError(f"{self.path}: topic '{topic}' carries {available[topic]}, expected {msgtype}")
        counts = {}
        for c in reader.connections:
            counts[c.topic] = counts.get(c.topic, 0) + int(getattr(c, "msgcount", 0) or 0)
        for role, _ in needed:
            if counts.get(self.topics[role], 0) == 0:
                hint = " (or set data.intrinsics)" if role == "info" else ""
                raise FrameError(f"{self.path}: {role} topic '{self.topics[role]}' has no messages{hint}")
        self._n_estimate = min(counts.get(self.topics["color"], 0), counts.get(self.topics["depth"], 0))

    def __len__(self) -> int:
        """Upper estimate: min(colour, depth message count), after first/last/stride."""
        return len(select(self._n_estimate, self.first, self.last, self.stride))

    # ------------------------------------------------------------------ streaming
    def _frames(self) -> Iterator[Frame]:
        reader = _open_reader(self.path)
        try:
            yield from self._stream(reader)
        finally:
            reader.close()

    def _stream(self, reader) -> Iterator[Frame]:
        wanted = set(self.topics.values()) if self.K_override is None else {self.topics["color"], self.topics["depth"]}
        conns = [c for c in reader.connections if c.topic in wanted]
        matcher = StampMatcher(int(round(self.max_time_diff * 1e9)), PENDING_MAX, int(PENDING_HORIZON_S * 1e9),
                               on_drop=self._on_drop, logger=None)
        self._pre: Optional[Preprocessor] = None
        self._info_size = None
        if self.K_override is not None:
            self._pre = Preprocessor(self.K_override, self.dist_override, self.downscale)
        paired = PairedFrames(str(self.path), self.stats, self.first, self.stride)
        stop = np.inf if self.last is None else int(self.last)
        messages = reader.messages(connections=conns)
        while paired.pairs < stop:
            try:
                item = next(messages, None)
                if item is None:
                    break
                conn, _, raw = item
                msg = reader.deserialize(raw, conn.msgtype)
            except Exception as exc:
                reason = (f"{self.path}: read error after {paired.delivered} frames ({type(exc).__name__}: {exc}); "
                          "stream ends here")
                log.warning(reason)
                self.stats.skip(reason)
                break
            if conn.topic == self.topics["info"] and conn.msgtype == INFO_TYPE:
                self._on_camera_info(msg)
                continue
            role = "color" if conn.topic == self.topics["color"] else "depth"
            self._check_encoding(role, msg)
            pair = matcher.push(role, stamp_ns(msg), msg)
            if pair is None:
                continue
            index = paired.select()
            if index is None:
                continue
            frame = paired.deliver(self._make_frame, index, pair)
            if frame is not None:
                yield frame
        matcher.flush()
        paired.finish()

    # ------------------------------------------------------------------ helpers
    def _on_camera_info(self, msg) -> None:
        if self._pre is not None:
            return
        try:
            K = camera_info_to_K(msg)
            dist = self.dist_override if self.dist_override is not None else camera_info_distortion(msg)
        except RosConvertError as exc:
            raise FrameError(f"{self.path}: topic '{self.topics['info']}': {exc}") from None
        self._pre = Preprocessor(K, dist, self.downscale)
        self._info_size = (int(msg.width), int(msg.height))

    def _check_encoding(self, role: str, msg) -> None:
        allowed = COLOR_ENCODINGS if role == "color" else DEPTH_ENCODINGS
        if str(msg.encoding) not in allowed:
            raise FrameError(f"{self.path}: topic '{self.topics[role]}' has encoding '{msg.encoding}'; "
                             f"{role} must be one of {', '.join(allowed)}")

    def _on_drop(self, kind: str, role: str, stamp_ns: int) -> None:
        """A message the matcher dropped: an unpaired depth image is no lost frame; a colour one is."""
        if role != "color":
            return
        t = stamp_ns * 1e-9
        if kind == "unmatched_color":
            skip_frame(self.stats, f"{self.path}: colour image at t={t:.6f} has no depth image "
                                   f"within {self.max_time_diff} s")
        else:
            skip_frame(self.stats, f"{self.path}: colour image at t={t:.6f} is not after the previous "
                                   f"one or the last pair ({kind.replace('_', ' ')})")

    def _make_frame(self, index: int, pair) -> Frame:
        t_ns, cmsg, dmsg = pair
        t = t_ns * 1e-9
        if self._pre is None:
            raise SkipFrame(f"{self.path}: frame at t={t:.6f} arrived before the first CameraInfo on "
                            f"'{self.topics['info']}'")
        try:
            color = color_to_rgb(cmsg)
            depth = depth_to_metres(dmsg, self.depth_units)
        except RosConvertError as exc:
            raise SkipFrame(f"{self.path}: corrupt image message at t={t:.6f}: {exc}") from None
        if color.shape[:2] != depth.shape:
            raise FrameError(f"{self.path}: colour ({self.topics['color']}) is {color.shape[1]}x{color.shape[0]} "
                             f"but depth ({self.topics['depth']}) is {depth.shape[1]}x{depth.shape[0]}; "
                             "use a depth topic aligned to colour")
        if self._info_size is not None and self._info_size != (depth.shape[1], depth.shape[0]):
            raise FrameError(f"{self.path}: CameraInfo is for {self._info_size[0]}x{self._info_size[1]} but "
                             f"images are {depth.shape[1]}x{depth.shape[0]}")
        return frame_from_images(str(self.path), index, t, color, depth, self._pre,
                                 f"{self.path.name}:{self.topics['color']}@{t:.6f}")
