"""Intel RealSense RGB-D through ``pyrealsense2``: a live camera or a librealsense recording.

``data.path: live`` streams the first connected camera at ``data.realsense`` = [width, height,
fps] (depth z16, colour rgb8); any other path is a recording: ``.bag`` (ROS 1, written by
librealsense before 2.59 and the RealSense Viewer) or ``.db3`` (ROS 2, written by 2.59+).

Colour and depth frames arrive on librealsense's sensor callbacks, are paired by device timestamp
(``slam.data.stamp_matcher``, within ``data.max_time_diff``) and depth is aligned to colour by
librealsense (``rs.align``). Frames carry the colour stream profile's intrinsics (Brown-Conrady
distortion is undistorted like TUM; other models with non-zero coefficients are logged and used as
pinhole), depth in metres from the device's depth scale (``data.depth_scale``, units per metre,
overrides), and the colour frame's device timestamp in seconds (hardware clock, or librealsense's
global time: the device clock mapped onto the host clock; a recording keeps what was recorded).
Frames that only have host arrival times (no frame metadata) are used, with a warning.

Live: when SLAM is slower than the camera only the newest pair waits for it; an older unread
pair is dropped and counted in ``stats.dropped``. ``Frame.index`` counts the camera's pairs, so a
drop leaves a gap in the indices as well as in the timestamps. Recordings play as fast as SLAM
reads them (non-real-time playback): nothing is dropped. ``first``/``last``/``stride`` count pairs.

Bad input:
- pyrealsense2 not installed, no camera, a stream mode the camera does not offer -> ``FrameError``
  saying what to do; a live camera that delivers nothing for ``LIVE_TIMEOUT_S`` (unplugged) ->
  ``FrameError``.
- recording missing -> ``DataNotFoundError``; truncated or not a recording -> ``FrameError``
  naming it; without a depth or colour stream -> ``FrameError`` listing its streams.
- a colour frame without a depth partner, a depth frame with no valid pixel -> skip counted in
  ``stats``; no frame at all -> ``FrameError``.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

import numpy as np

from slam.data.errors import CalibrationError, DataNotFoundError
from slam.data.frame import Frame, FrameError, FrameSource
from slam.data.paired_frames import PairedFrames, frame_from_images
from slam.data.preprocess import Preprocessor
from slam.data.sequence import select, skip_frame
from slam.data.stamp_matcher import StampMatcher

log = logging.getLogger("slam.data")

LIVE = "live"
LIVE_TIMEOUT_S = 5.0      # a live camera silent this long is treated as unplugged
POLL_S = 0.2              # reader wake-up interval (end of a recording, Ctrl-C)
PENDING_MAX = 8           # unpaired frames held per stream (librealsense's frame pool is small)
COLOR_ORDER = {"rgb8": (0, 1, 2), "bgr8": (2, 1, 0), "rgba8": (0, 1, 2), "bgra8": (2, 1, 0)}


def _import_rs():
    try:
        import pyrealsense2 as rs  # heavy, and optional: no wheel for every platform (docs/DATA.md)
    except ImportError:
        raise FrameError("data.dataset realsense needs pyrealsense2: 'pip install pyrealsense2' (wheels for Linux "
                         "x86-64/aarch64 and Windows), or build librealsense with its Python bindings "
                         "(docs/DATA.md)") from None
    return rs


class LatestSlot:
    """One-pair mailbox from the callback threads to the reader.

    ``block=False`` (live): a new pair replaces an unread one, counted in ``dropped``.
    ``block=True`` (recordings): ``put`` waits until the reader took the previous pair.
    """

    def __init__(self, block: bool) -> None:
        self.block = block
        self.dropped = 0
        self._item = None
        self._closed = False
        self._cond = threading.Condition()

    def put(self, item) -> None:
        with self._cond:
            while self.block and self._item is not None and not self._closed:
                self._cond.wait()
            if self._closed:
                return
            if self._item is not None:
                self.dropped += 1
            self._item = item
            self._cond.notify_all()

    def get(self, timeout: float):
        """The waiting pair, or None after ``timeout`` s (or once closed)."""
        with self._cond:
            self._cond.wait_for(lambda: self._item is not None or self._closed, timeout)
            item, self._item = self._item, None
            self._cond.notify_all()
            return item

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._item = None
            self._cond.notify_all()


class RealsenseSource(FrameSource):
    """Streams aligned RGB-D pairs from a RealSense camera or recording (see module docstring)."""

    name = "realsense"

    def __init__(self, path: str, *, stream: Sequence[int] = (640, 480, 30), max_time_diff: float = 0.02,
                 first: int = 0, last: Optional[int] = None, stride: int = 1, downscale: int = 1,
                 depth_scale: Optional[float] = None, keep_newest: bool = False) -> None:
        """``keep_newest``: a recording is handled like the live camera when SLAM falls behind (only
        the newest pair waits, older ones are dropped and counted); it is still read unpaced, so
        every drop is this source's (tests of the drop policy)."""
        super().__init__()
        self.rs = _import_rs()
        self.live = str(path) == LIVE
        self.keep_newest = self.live or bool(keep_newest)
        self.path = Path(path)
        if len(stream) != 3 or min(stream) < 1:
            raise FrameError(f"data.realsense: expected [width, height, fps] > 0, got {list(stream)}")
        self.stream = tuple(int(v) for v in stream)
        self.max_time_diff = float(max_time_diff)
        self.first, self.last, self.stride = int(first), last, int(stride)
        select(0, first, last, stride)  # validates the numbers
        self.downscale = int(downscale)
        if depth_scale is not None and depth_scale <= 0:
            raise CalibrationError(f"data.depth_scale must be > 0, got {depth_scale}")
        self.units_override = depth_scale
        self.where = "RealSense camera" if self.live else str(self.path)
        if not self.live and not self.path.is_file():
            raise DataNotFoundError(f"{self.path}: RealSense recording not found (data.path: live for the camera)")
        self._opened = self._open()
        self._sensors: List = []
        self._slot: Optional[LatestSlot] = None

    # ------------------------------------------------------------------ device and streams
    def _open(self) -> dict:
        """Device, chosen profiles per sensor, K/distortion and depth scale; raises ``FrameError``."""
        rs = self.rs
        ctx = rs.context()
        if self.live:
            devices = ctx.query_devices()
            if len(devices) == 0:
                raise FrameError("no RealSense camera found: is it plugged in (USB 3), and can this user open it "
                                 "(librealsense's udev rules)? For a recording set data.path to the file")
            device = devices[0]
        else:
            try:
                device = ctx.load_device(str(self.path))
                device.as_playback().set_real_time(False)
            except RuntimeError as exc:
                raise FrameError(f"{self.path}: cannot open RealSense recording ({exc}); is it truncated, or "
                                 "not a .bag/.db3 recorded by librealsense?") from None
        chosen = {}  # sensor index -> [profiles]
        depth = color = None
        for i, sensor in enumerate(device.query_sensors()):
            for p in sensor.get_stream_profiles():
                if depth is None and p.stream_type() == rs.stream.depth and self._wanted(p, "z16"):
                    depth = (i, sensor, p)
                elif color is None and p.stream_type() == rs.stream.color and self._wanted(p, None):
                    color = (i, sensor, p)
        for role, found in (("depth (z16)", depth), ("colour (rgb8/bgr8/rgba8/bgra8)", color)):
            if found is None:
                raise FrameError(f"{self.where}: no {role} stream"
                                 f"{' at %dx%d %d fps' % self.stream if self.live else ''}; streams: "
                                 f"{self._listing(device)}")
        for i, sensor, p in (depth, color):
            chosen.setdefault(i, (sensor, []))[1].append(p)
        scale = self._depth_scale(depth[1])
        intr = color[2].as_video_stream_profile().get_intrinsics()
        K = np.array([[intr.fx, 0.0, intr.ppx], [0.0, intr.fy, intr.ppy], [0.0, 0.0, 1.0]])
        coeffs = np.asarray(intr.coeffs, dtype=np.float64)
        dist = None
        if np.any(coeffs != 0):
            if intr.model == rs.distortion.brown_conrady:
                dist = coeffs
            else:
                log.warning("%s: colour distortion model %s %s is not undistorted (treated as pinhole)",
                            self.where, intr.model, coeffs.tolist())
        return {"ctx": ctx, "device": device, "sensors": list(chosen.values()), "scale": scale,
                "pre": Preprocessor(K, dist, self.downscale), "color_format": str(color[2].format()).split(".")[-1]}

    def _wanted(self, p, fmt: Optional[str]) -> bool:
        name = str(p.format()).split(".")[-1]
        if (fmt is not None and name != fmt) or (fmt is None and name not in COLOR_ORDER):
            return False
        if not self.live:
            return True
        v = p.as_video_stream_profile()
        return (v.width(), v.height(), p.fps()) == self.stream and (fmt is not None or name == "rgb8")

    def _listing(self, device) -> str:
        seen = sorted({f"{str(p.stream_type()).split('.')[-1]} {p.as_video_stream_profile().width()}x"
                       f"{p.as_video_stream_profile().height()}@{p.fps()} {str(p.format()).split('.')[-1]}"
                       for s in device.query_sensors() for p in s.get_stream_profiles() if p.is_video_stream_profile()})
        return ", ".join(seen[:12]) + (f" (+{len(seen) - 12} more)" if len(seen) > 12 else "") or "none"

    def _depth_scale(self, sensor) -> float:
        """Metres per depth unit: ``data.depth_scale`` override, else the device's."""
        if self.units_override is not None:
            return 1.0 / float(self.units_override)
        if sensor.supports(self.rs.option.depth_units):
            scale = float(sensor.get_option(self.rs.option.depth_units))
            if scale > 0:
                return scale
        raise CalibrationError(f"{self.where}: the depth sensor reports no depth scale; set data.depth_scale "
                               "(raw units per metre)")

    # ------------------------------------------------------------------ streaming
    def _frames(self) -> Iterator[Frame]:
        opened = self._opened or self._open()
        self._opened = None
        slot = self._slot = LatestSlot(block=not self.keep_newest)
        matcher = StampMatcher(int(round(self.max_time_diff * 1e9)), PENDING_MAX, on_drop=self._on_drop, logger=None)
        paired = PairedFrames(self.where, self.stats, self.first, self.stride)
        state = {"error": None, "warned_clock": False}
        stop = np.inf if self.last is None else int(self.last)

        def on_frame(f) -> None:  # librealsense's threads: never raise into them
            try:
                if paired.pairs >= stop:
                    return
                role = "depth" if f.get_profile().stream_type() == self.rs.stream.depth else "color"
                f.keep()
                pair = matcher.push(role, int(round(f.get_timestamp() * 1e6)), f)
                if pair is None:
                    return
                index = paired.select()
                if index is not None:
                    slot.put((index, pair[1], pair[2]))
            except Exception as exc:  # noqa: BLE001 - handed to the reader
                state["error"] = exc

        align = self.rs.align(self.rs.stream.color)
        composer = _Composer(self.rs)
        self._sensors = [s for s, _ in opened["sensors"]]
        try:
            playback = None if self.live else opened["device"].as_playback()
            for sensor, profiles in opened["sensors"]:
                sensor.open(profiles)
            if playback is not None:    # playback starts with the first sensor: hold it until all are
                playback.pause()
            for sensor in self._sensors:
                sensor.start(on_frame)
            if playback is not None:
                playback.resume()
            idle = 0.0
            while True:
                item = slot.get(POLL_S)
                if state["error"] is not None:
                    raise FrameError(f"{self.where}: {type(state['error']).__name__}: {state['error']}")
                if item is None:
                    idle += POLL_S
                    if paired.pairs >= stop or self._ended(opened, idle):
                        break
                    continue
                idle = 0.0
                frame = paired.deliver(self._make_frame, item, align, composer, opened, state)
                if frame is not None:
                    yield frame
            matcher.flush()
            paired.finish()
        finally:
            self.stats.dropped += slot.dropped
            self._stop()
            if slot.dropped:
                log.warning("%s: %d frames dropped because SLAM was slower than the camera", self.where, slot.dropped)

    def _ended(self, opened: dict, idle: float) -> bool:
        if self.live:
            if idle >= LIVE_TIMEOUT_S:
                raise FrameError(f"RealSense camera delivered no frame for {LIVE_TIMEOUT_S:.0f} s: unplugged, or "
                                 "not enough USB bandwidth?")
            return False
        return opened["device"].as_playback().current_status() == self.rs.playback_status.stopped

    def _make_frame(self, item, align, composer, opened: dict, state: dict) -> Frame:
        index, cframe, dframe = item
        t = cframe.get_timestamp() * 1e-3
        if not state["warned_clock"] and cframe.get_frame_timestamp_domain() == self.rs.timestamp_domain.system_time:
            log.warning("%s: frames carry host arrival times, not the device clock (no frame metadata)", self.where)
            state["warned_clock"] = True
        aligned = align.process(composer(cframe, dframe))
        color = np.asanyarray(aligned.get_color_frame().get_data())
        color = np.ascontiguousarray(color[:, :, list(COLOR_ORDER[opened["color_format"]])])
        depth = np.asanyarray(aligned.get_depth_frame().get_data()).astype(np.float32) * np.float32(opened["scale"])
        return frame_from_images(self.where, index, t, color, depth, opened["pre"],
                                 f"{self.path.name}@{t:.6f}" if not self.live else f"camera@{t:.6f}")

    def _on_drop(self, kind: str, role: str, stamp_ns: int) -> None:
        if role == "color":
            skip_frame(self.stats, f"{self.where}: colour frame at t={stamp_ns * 1e-9:.6f} has no depth frame "
                                   f"within {self.max_time_diff} s ({kind.replace('_', ' ')})")

    def _stop(self) -> None:
        if self._slot is not None:
            self._slot.close()          # wakes a callback blocked in put() before stop() waits for it
        for sensor in self._sensors:
            for step in (sensor.stop, sensor.close):
                try:
                    step()
                except RuntimeError:
                    pass
        self._sensors = []

    def close(self) -> None:
        """Stop and release the camera or recording (also on Ctrl-C); safe to call twice."""
        self._stop()
        self._opened = None


class _Composer:
    """Two kept frames -> one librealsense frameset (what ``rs.align`` takes)."""

    def __init__(self, rs) -> None:
        self._held = None
        self._queue = rs.frame_queue(1)
        self._block = rs.processing_block(self._compose)
        self._block.start(self._queue)

    def _compose(self, frame, source) -> None:
        source.frame_ready(source.allocate_composite_frame([self._held, frame]))

    def __call__(self, color, depth):
        self._held = color
        self._block.invoke(depth)
        return self._queue.wait_for_frame().as_frameset()
