"""The node logic both ROS nodes share: message callbacks in, publisher calls out, run folder.

    bridge = SlamBridge(params, cfg, sink)      # sink: the middleware's publishers (see ``Sink``)
    bridge.start()                              # SLAM runs in a worker thread
    sub(color)  -> bridge.on_color(msg)         # any thread; rospy / rclpy messages
    sub(depth)  -> bridge.on_depth(msg)
    sub(info)   -> bridge.on_camera_info(msg)
    srv(save)   -> bridge.save_map()            # -> (ok, message)
    on shutdown -> bridge.shutdown()            # writes the run folder like ``run_slam``: the same
                                                # ``slam.output.session.RunSession``

Per tracked frame (tracking thread, cheap): Odometry + TF. A side thread publishes the point
cloud of sphere centres and the rendered image, each throttled, so tracking never waits for them.
"""
from __future__ import annotations

import logging
import threading
import time
import traceback
from collections import OrderedDict, deque
from pathlib import Path
from typing import Optional, Protocol

import numpy as np
import torch

from slam.config import Config
from slam.data.frame import SourceStats
from slam.data.ros_convert import stamp_ns
from slam.data.stamp_matcher import StampMatcher
from slam.map.map_io import save_map
from slam.map.sphere_map import logit
from slam.output.session import RunSession
from slam.ros import out_data
from slam.ros.assemble import FrameAssembler, FrameDropped
from slam.ros.live_source import LiveSource
from slam.ros.params import RosParams, topics
from slam.runtime.channel import Closed
from slam.runtime.system import SlamSystem

log = logging.getLogger("slam.ros")
DEFAULT_CAMERA_FRAME = "camera_color_optical_frame"


class Sink(Protocol):
    """What a middleware layer provides. Every method may be called from any thread."""

    def publish_odometry(self, d: out_data.OdometryData) -> None: ...
    def publish_status(self, d: out_data.StatusData) -> None: ...
    def publish_transforms(self, items: list) -> None: ...
    def publish_cloud(self, d: out_data.CloudData) -> None: ...
    def publish_image(self, d: out_data.ImageData) -> None: ...
    def publish_grid(self, d: out_data.GridData) -> None: ...
    def lookup_odom_camera(self, stamp_ns: int, odom_frame: str, camera_frame: str) -> Optional[np.ndarray]: ...


class TopicSink:
    """The publishing half of a ``Sink`` shared by both middleware layers: a subclass sets
    ``make`` (a ``MessageFactory``), ``odom_pub``, ``status_pub``, ``cloud_pub``, ``image_pub``,
    ``grid_pub`` (objects with ``publish(msg)``) and ``tf`` (a TF broadcaster, or None: no TF) and
    provides ``lookup_odom_camera``."""

    make = odom_pub = status_pub = cloud_pub = image_pub = grid_pub = tf = None

    def publish_odometry(self, d: out_data.OdometryData) -> None:
        self.odom_pub.publish(self.make.odometry(d))

    def publish_status(self, d: out_data.StatusData) -> None:
        self.status_pub.publish(self.make.status(d))

    def publish_transforms(self, items: list) -> None:
        if self.tf is not None:
            self.tf.sendTransform([self.make.transform(d) for d in items])

    def publish_cloud(self, d: out_data.CloudData) -> None:
        self.cloud_pub.publish(self.make.cloud(d))

    def publish_image(self, d: out_data.ImageData) -> None:
        self.image_pub.publish(self.make.image(d))

    def publish_grid(self, d: out_data.GridData) -> None:
        self.grid_pub.publish(self.make.occupancy_grid(d))


def snapshot_rows(snap) -> torch.Tensor:
    """A published ``MapSnapshot`` -> parameter rows (N, 8) for ``slam.map.map_io.save_map``."""
    return torch.cat([snap.means, torch.log(snap.radii)[:, None], logit(snap.colors),
                      logit(snap.opacities)[:, None]], dim=1)


class SlamBridge:
    def __init__(self, params: RosParams, cfg: Config, sink: Sink) -> None:
        self.params, self.cfg, self.sink = params, cfg, sink
        self.topics = topics(params, cfg)
        self.tf_mode = params.resolved_tf_mode()
        d = cfg.data
        self.matcher = StampMatcher(int(round(d.max_time_diff * 1e9)), params.max_pending, logger="slam.ros")
        self.assembler = FrameAssembler(self.topics["info"], 1000.0 if d.depth_scale is None else d.depth_scale,
                                        d.downscale, d.intrinsics, d.distortion, params.info_warn_period_s)
        self.source = LiveSource(params.queue_size, params.queue_policy)
        self.system = SlamSystem(cfg)
        self.system.frame_hooks.append(self._on_tracked)
        # run folder, log.txt, journal (survives kill -9), autosave, the live view (viewer.*) if asked for
        self.session = RunSession(self.system, cfg, self.source.stats, out=params.out or None)
        self.run_dir = self.session.run_dir
        self.session.attach_viewer()
        self.camera_frame = params.camera_frame or ""
        self.drops: dict = {}
        self.qos_incompatible: dict = {}   # "topic (peer)" -> {"policy", "count"}
        self.published = 0
        self.error: Optional[BaseException] = None
        self._stamps: "OrderedDict[float, int]" = OrderedDict()
        self._stamps_lock = threading.Lock()
        self._info_lock = threading.Lock()
        self._waiting: deque = deque()   # pairs waiting for the first CameraInfo
        self._max_waiting = params.queue_size if params.queue_policy == "drop_oldest" else params.max_pending
        self._last = None            # (stamp_ns, T_wc, K, width, height) of the newest tracked frame
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._cloud_throttle = out_data.Throttle(params.cloud_period_s)
        self._render_throttle = out_data.Throttle(params.render_period_s)
        self._cloud_version = -1
        self._grid_throttle = out_data.Throttle(params.grid_period_s)
        self._grid_version = -1
        self._rendered_ns: Optional[int] = None   # stamp of the last frame rendered
        self._worker: Optional[threading.Thread] = None
        self._extras: Optional[threading.Thread] = None
        self._shutdown_lock = threading.Lock()
        self.metrics: Optional[dict] = None
        log.info("ROS bridge: colour '%s', depth '%s', camera_info '%s', tf mode %s, run folder %s",
                 self.topics["color"], self.topics["depth"], self.topics["info"], self.tf_mode, self.run_dir)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._worker = threading.Thread(target=self._run, name="slam-run", daemon=True)
        self._extras = threading.Thread(target=self._extras_loop, name="slam-ros-extras", daemon=True)
        self._worker.start()
        self._extras.start()

    def _run(self) -> None:
        try:
            self.system.run(self.source)
        except BaseException as exc:  # noqa: BLE001 - reported; the node keeps serving until shutdown
            self.error = exc
            log.error("SLAM stopped with an error; no more frames are tracked:\n%s", traceback.format_exc())
        finally:
            self.source.close()

    @property
    def running(self) -> bool:
        return self._worker is not None and self._worker.is_alive()

    def shutdown(self, timeout_s: float = 120.0) -> Optional[dict]:
        """Stop input, finish the frames already queued, write the run folder; returns the metrics.
        Safe to call twice (the second call returns the same metrics)."""
        with self._shutdown_lock:
            if self.metrics is not None:
                return self.metrics
            self.source.close()
            if self._worker is not None:
                self._worker.join(timeout_s)
                if self._worker.is_alive():
                    log.error("SLAM did not finish within %.0f s; writing the outputs so far", timeout_s)
            self._stopping.set()
            self._wake.set()
            if self._extras is not None:
                self._extras.join(10.0)
            try:   # the final grid (latched): what a planner started after the run gets
                self.publish_grid()
            except Exception:  # noqa: BLE001 - a publisher problem must not cost the run folder
                log.error("publishing the final grid failed:\n%s", traceback.format_exc())
            ros_input = {"pairs": self.matcher.counts["pairs"], "matcher": dict(self.matcher.counts),
                         "dropped": dict(self.drops), "queue_drops": self.source.stats.skipped,
                         "published_odometry": self.published, "qos_incompatible": dict(self.qos_incompatible)}
            self.metrics = self.session.finish(self.input_stats(), extra={"ros_input": ros_input})
            return self.metrics

    def input_stats(self) -> SourceStats:
        """Every frame lost before tracking: unpaired, bad, waiting for CameraInfo, queue full."""
        s = SourceStats(delivered=self.source.stats.delivered)
        s.skip_reasons = list(self.source.stats.skip_reasons)
        s.skipped = self.source.stats.skipped + sum(self.drops.values()) + \
            sum(v for k, v in self.matcher.counts.items() if k != "pairs")
        for k, v in self.drops.items():
            s.skip_reasons.append(f"{v} frame(s) dropped: {k}")
        for k, v in self.matcher.counts.items():
            if k != "pairs" and v:
                s.skip_reasons.append(f"{v} image(s) dropped by stamp matching: {k}")
        return s

    # ------------------------------------------------------------------ input callbacks
    def on_camera_info(self, msg) -> None:
        with self._info_lock:
            if self.assembler.on_camera_info(msg):
                waiting, self._waiting = list(self._waiting), deque()
                for pair in waiting:   # pairs that arrived before the first CameraInfo
                    self._convert(pair)

    def on_color(self, msg) -> None:
        if not self.camera_frame:
            self.camera_frame = str(msg.header.frame_id) or DEFAULT_CAMERA_FRAME
        self._push("color", msg)

    def on_depth(self, msg) -> None:
        self._push("depth", msg)

    def _push(self, role: str, msg) -> None:
        pair = self.matcher.push(role, stamp_ns(msg), msg)
        if pair is not None:
            with self._info_lock:
                self._convert(pair)

    def _convert(self, pair) -> None:
        """Pair -> frame -> source. Called with ``_info_lock`` held. Pairs that come before the
        first CameraInfo wait and go on when it arrives: the newest ``queue_size`` of them when
        live (``drop_oldest``), up to ``max_pending`` when lossless (``block``)."""
        t_ns, cmsg, dmsg = pair
        try:
            frame = self.assembler.make_frame(t_ns, cmsg, dmsg, source_id=f"{self.topics['color']}@{t_ns * 1e-9:.6f}")
        except FrameDropped as drop:
            if drop.kind == "no_camera_info":
                self._waiting.append(pair)
                if len(self._waiting) <= self._max_waiting:
                    return
                self._waiting.popleft()
            n = self.drops.get(drop.kind, 0) + 1
            self.drops[drop.kind] = n
            if drop.kind != "no_camera_info" and (n <= 5 or n % 100 == 0):
                log.warning("frame dropped (%s #%d): %s", drop.kind, n, drop.reason)
            return
        with self._stamps_lock:
            self._stamps[frame.timestamp] = t_ns
            while len(self._stamps) > 4 * (self.params.queue_size + 8):
                self._stamps.popitem(last=False)
        try:
            self.source.put(frame)
        except Closed:
            pass  # shutting down, or SLAM stopped with an error (already logged)

    def on_qos_incompatible(self, topic: str, peer: str, policy: str, count: int) -> None:
        """A ``peer`` ('publisher' on an input topic, 'subscriber' of an output) whose QoS cannot
        match ours was discovered on ``topic``: no messages flow between us. Logged (the hint
        names the fix for the common case) and counted in metrics.json ``ros_input``."""
        self.qos_incompatible[f"{topic} ({peer})"] = {"policy": policy, "count": int(count)}
        hint = ""
        if peer == "publisher" and policy == "RELIABILITY":
            hint = ("; the camera publishes best effort: set the node parameter input_reliability to "
                    "best_effort (the default)")
        log.warning("QoS mismatch on '%s': a %s with incompatible %s policy (%d so far); no messages flow "
                    "between them%s", topic, peer, policy, count, hint)

    # ------------------------------------------------------------------ outputs
    def _on_tracked(self, frame, rec, snap) -> None:
        """Frame hook (tracking thread): Odometry + TF now, cloud/image later in the side thread."""
        with self._stamps_lock:
            t_ns = self._stamps.pop(frame.timestamp, None)
        if t_ns is None:
            t_ns = int(round(frame.timestamp * 1e9))
        p = self.params
        cam = self.camera_frame or DEFAULT_CAMERA_FRAME
        T_map_cam = out_data.camera_in_map(rec.T_wc, p.rep103_map)
        T_map_odom = out_data.odom_in_map(self.system.odom_correction(), p.rep103_map)
        if not rec.ok:
            log.warning("tracking lost at %.6f s; publishing the best pose estimate", frame.timestamp)
        try:
            self.sink.publish_odometry(out_data.odometry(t_ns, T_map_cam, self.tf_mode, p.map_frame, p.odom_frame, cam,
                                                         T_map_odom))
            self.sink.publish_status(out_data.StatusData(t_ns, rec.status, rec.reason or ""))
            self.published += 1
            if p.publish_tf:
                T_odom_cam = None
                if self.tf_mode == "external_odom":
                    T_odom_cam = self.sink.lookup_odom_camera(t_ns, p.odom_frame, cam)
                    if T_odom_cam is None:
                        log.warning("no %s -> %s transform at %.6f s; map -> odom not published",
                                    p.odom_frame, cam, frame.timestamp)
                items = out_data.transforms(t_ns, T_map_cam, self.tf_mode, p.map_frame, p.odom_frame, cam, T_odom_cam,
                                            T_map_odom)
                if items:
                    self.sink.publish_transforms(items)
        except Exception:  # noqa: BLE001 - a publisher problem must not stop tracking
            log.error("publishing failed:\n%s", traceback.format_exc())
        self._last = (t_ns, rec.T_wc.copy(), frame.K.copy(), frame.width, frame.height)
        self._wake.set()

    def _extras_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(0.5)
            self._wake.clear()
            if self._last is None or self._stopping.is_set():
                continue
            try:
                self._publish_extras(time.monotonic())
            except Exception:  # noqa: BLE001
                log.error("cloud/image publishing failed:\n%s", traceback.format_exc())

    def _publish_extras(self, now: float) -> None:
        self.publish_grid(now)
        snap = self.system.latest_map()
        if snap is None or snap.size == 0:
            return
        t_ns, T_wc, K, w, h = self._last
        p = self.params
        if snap.version != self._cloud_version and self._cloud_throttle.ready(now):
            self._cloud_version = snap.version
            self.sink.publish_cloud(out_data.cloud(t_ns, p.map_frame, snap.means.detach().cpu().numpy(),
                                                   snap.colors.detach().cpu().numpy(), p.rep103_map,
                                                   p.cloud_max_points))
        if t_ns != self._rendered_ns and self._render_throttle.ready(now):   # each tracked frame once at most
            self._rendered_ns = t_ns
            self.sink.publish_image(self.render(snap, T_wc, K, w, h, t_ns))

    def publish_grid(self, now: Optional[float] = None) -> bool:
        """The occupancy grid on ``grid_topic`` when a new version exists (throttled by
        ``grid_period_s``; ``now`` None: at once, e.g. the final grid at shutdown). True if sent."""
        builder = self.system.grid
        if builder is None or builder.version in (0, self._grid_version):     # none yet, or sent
            return False
        if now is not None and not self._grid_throttle.ready(now):
            return False
        grid = builder.latest()                  # made here, at most once per version and period
        if grid is None or grid.floor is None:
            return False
        self._grid_version = grid.version
        stamp = self._last[0] if self._last is not None else time.time_ns()
        g = self.cfg.grid
        self.sink.publish_grid(out_data.grid(stamp, self.params.map_frame, grid, self.params.rep103_map,
                                             g.occupied_thresh, g.free_thresh))
        return True

    def render(self, snap, T_wc: np.ndarray, K: np.ndarray, w: int, h: int, t_ns: int) -> out_data.ImageData:
        """The map rendered at ``T_wc`` -> rgb8 image data in the camera frame (on this thread's
        stream: ``MapSnapshot.render`` waits for the mapper's writes)."""
        out = snap.render(K, w, h, T_wc=T_wc, backend=self.cfg.raster.backend)
        px = (out.color.clamp(0, 1) * 255.0 + 0.5).to(torch.uint8).cpu().numpy()
        return out_data.ImageData(t_ns, self.camera_frame or DEFAULT_CAMERA_FRAME, px)

    # ------------------------------------------------------------------ services
    def save_map(self, path: Optional[str] = None) -> tuple[bool, str]:
        """Write the latest published map as a 3DGS PLY (default: <run folder>/map_<n>.ply)."""
        snap = self.system.latest_map()
        if snap is None or snap.size == 0:
            return False, "the map is empty (no keyframe mapped yet)"
        target = Path(path) if path else self.run_dir / f"map_{snap.version:05d}.ply"
        try:
            save_map(target, snapshot_rows(snap))
        except Exception as exc:  # noqa: BLE001 - answered to the caller
            return False, f"saving {target} failed: {type(exc).__name__}: {exc}"
        log.info("map saved: %s (%d spheres)", target, snap.size)
        return True, f"{target} ({snap.size} spheres)"
