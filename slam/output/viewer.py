"""Live rerun viewer: a frame hook that hands payloads to its own thread, which logs to rerun.

Never blocks SLAM: the hook (called in the tracking thread) only appends a small per-frame record
(pose, loss, sphere count, rates) to a list and drops the frame's heavy payload (images, the map
snapshot) into a ``LatestQueue`` of ``queue`` slots that discards the oldest when full. The viewer
thread logs every small record (scalars and trajectory: nothing lost) and the newest heavy payload:
input colour/depth, the map rendered at the estimated pose (rendered here, under ``no_grad``), the
camera (Transform3D + Pinhole: rerun draws the frustum) and, every ``map_every`` frames, the map as
Points3D (downsampled to ``max_points``). rerun is imported only when a viewer is attached.

Entity paths (timeline "frame" = source frame index):
    world/map                       Points3D, sphere centres, colours and radii (metres)
    world/trajectory/estimate       LineStrips3D, estimated camera positions
    world/trajectory/ground_truth   LineStrips3D, when the source has ground truth
    world/camera                    Transform3D, estimated camera-to-world pose
    world/camera/image              Pinhole (frustum), children rgb (JPEG), depth (DepthImage, uint16 mm)
    render/rgb, render/depth        the map rendered at the estimated pose
    grid                            Image, the occupancy grid (white free, black occupied, grey
                                    unknown; north = the grid's +y), when it changed, with the map
    metrics/fps | spheres | tracking_loss | peak_memory_mb   Scalars
"""
from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Optional

import cv2
import numpy as np
import torch

from slam.camera import scale_K
from slam.output.viewer_sinks import import_rerun, open_recording
from slam.runtime.recorder import peak_rss_mb

log = logging.getLogger("slam.output.viewer")

TIMELINE = "frame"
SCALARS = ("fps", "spheres", "tracking_loss", "peak_memory_mb")


class LatestQueue:
    """Bounded, never-blocking hand-off: ``put`` drops the oldest item when full."""

    def __init__(self, size: int = 2) -> None:
        self._items: deque = deque(maxlen=max(1, size))
        self._cond = threading.Condition()
        self.dropped = 0
        self.closed = False

    def put(self, item: Any) -> None:
        with self._cond:
            if len(self._items) == self._items.maxlen:
                self.dropped += 1
            self._items.append(item)
            self._cond.notify()

    def get(self, timeout: float = 0.5) -> Optional[Any]:
        """The oldest pending item, or None after ``timeout`` s / once closed and empty."""
        with self._cond:
            if not self._items and not self.closed:
                self._cond.wait(timeout)
            return self._items.popleft() if self._items else None

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()


@dataclass
class _Record:
    """Small per-frame record, never dropped."""
    index: int
    T_wc: np.ndarray
    gt_pose: Optional[np.ndarray]
    scalars: dict


@dataclass
class _Payload:
    """Heavy per-frame payload, dropped when the viewer falls behind."""
    index: int
    color: np.ndarray          # (H, W, 3) uint8
    depth: np.ndarray          # (H, W) float32 metres
    K: np.ndarray              # (3, 3)
    T_wc: np.ndarray           # (4, 4)
    snapshot: Any              # MapSnapshot or None


def peak_memory_mb(device: torch.device) -> float:
    """Peak GPU memory (CUDA) or the process's peak resident memory (CPU), MB."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e6
    return peak_rss_mb()


def default_blueprint(has_gt: bool = True):
    """3D map + trajectory on the left, input/rendered images on the right, scalars below."""
    import rerun.blueprint as rrb

    images = rrb.Grid(
        rrb.Spatial2DView(name="input colour", origin="world/camera/image", contents="$origin/rgb"),
        rrb.Spatial2DView(name="rendered colour", origin="render", contents="$origin/rgb"),
        rrb.Spatial2DView(name="input depth", origin="world/camera/image", contents="$origin/depth"),
        rrb.Spatial2DView(name="rendered depth", origin="render", contents="$origin/depth"),
        rrb.Spatial2DView(name="occupancy grid", origin="grid"),
        grid_columns=2,
    )
    plots = rrb.Horizontal(*[rrb.TimeSeriesView(name=name.replace("_", " "), origin=f"metrics/{name}")
                             for name in SCALARS])
    # the input depth is shown in 2D only: projected into the 3D view it would hide the map
    view3d = rrb.Spatial3DView(name="map and trajectory", origin="world",
                               contents=["+ $origin/**", "- /world/camera/image/depth"])
    left = rrb.Vertical(view3d, plots, row_shares=[3, 1])
    return rrb.Blueprint(rrb.Horizontal(left, images, column_shares=[3, 2]), collapse_panels=True)


class RerunViewer:
    """Owns a rerun ``RecordingStream`` and the logging thread. Use ``attach_viewer``."""

    def __init__(self, recording, device: torch.device, backend: str = "auto", map_every: int = 10,
                 max_points: int = 100_000, queue: int = 2, render_width: int = 320) -> None:
        self.rec = recording
        self.device = device
        self.backend = backend
        self.map_every = max(1, int(map_every))
        self.max_points = int(max_points)
        self.render_width = render_width
        self.payloads = LatestQueue(queue)
        self.grid_source = None          # () -> the latest GridSnapshot or None (attach_viewer)
        self._grid_version = -1
        self._records: list[_Record] = []
        self._lock = threading.Lock()
        self._last_hook: Optional[float] = None
        self._fps = float("nan")
        self._est: list[np.ndarray] = []
        self._gt: list[np.ndarray] = []
        self._last_map: Optional[int] = None
        self._last_snapshot = None
        self._last_index: Optional[int] = None
        self._static_done = False
        self.logged_payloads = 0
        self.hook_s = 0.0                 # wall time spent in the hook (tracking thread)
        self.thread_cpu_s = 0.0           # CPU time of the viewer thread (its own Python + torch calls)
        self.error: Optional[BaseException] = None
        self.live = None                  # viewer_sinks.LiveView when served to browsers
        self._thread = threading.Thread(target=self._loop, name="viewer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ tracking thread side
    def hook(self, frame, rec, snapshot) -> None:
        """``SlamSystem.frame_hooks`` entry: O(1), never blocks, never raises into SLAM."""
        t_in = time.perf_counter()
        try:
            now = t_in
            if self._last_hook is not None:
                inst = 1.0 / max(now - self._last_hook, 1e-6)
                self._fps = inst if math.isnan(self._fps) else 0.8 * self._fps + 0.2 * inst
            self._last_hook = now
            scalars = {"fps": self._fps, "spheres": float(snapshot.size) if snapshot is not None else 0.0,
                       "tracking_loss": float(rec.loss), "peak_memory_mb": peak_memory_mb(self.device)}
            with self._lock:
                self._records.append(_Record(rec.index, rec.T_wc, rec.gt_pose, scalars))
            self.payloads.put(_Payload(rec.index, frame.color, frame.depth, np.asarray(frame.K), rec.T_wc, snapshot))
        except Exception as exc:  # noqa: BLE001 - the viewer must never break SLAM
            self.error = self.error or exc
        self.hook_s += time.perf_counter() - t_in

    # ------------------------------------------------------------------ viewer thread
    def _loop(self) -> None:
        try:
            while True:
                item = self.payloads.get()
                c0 = time.thread_time()
                self._drain_records()
                if item is not None:
                    self._log_payload(item)
                self.thread_cpu_s += time.thread_time() - c0
                if item is None and self.payloads.closed:
                    break
        except Exception as exc:  # noqa: BLE001 - report at close, never propagate into SLAM
            self.error = exc
            log.error("viewer thread stopped: %s: %s", type(exc).__name__, exc)

    def _drain_records(self) -> None:
        import rerun as rr

        with self._lock:
            records, self._records = self._records, []
        for r in records:
            self._last_index = r.index
            self.rec.set_time(TIMELINE, sequence=r.index)
            for name, value in r.scalars.items():
                if math.isfinite(value):
                    self.rec.log(f"metrics/{name}", rr.Scalars(value))
            if np.all(np.isfinite(r.T_wc)):
                self._est.append(np.asarray(r.T_wc)[:3, 3].astype(np.float32))
            if r.gt_pose is not None and np.all(np.isfinite(r.gt_pose)):
                self._gt.append(np.asarray(r.gt_pose)[:3, 3].astype(np.float32))
        if records:
            self._log_trajectories()

    def _log_trajectories(self) -> None:
        import rerun as rr

        if len(self._est) >= 2:
            self.rec.log("world/trajectory/estimate", rr.LineStrips3D([np.stack(self._est)], colors=[[255, 140, 0]],
                                                                       radii=[0.005]))
        if len(self._gt) >= 2:
            self.rec.log("world/trajectory/ground_truth", rr.LineStrips3D([np.stack(self._gt)], colors=[[40, 180, 60]],
                                                                           radii=[0.004]))

    def _log_payload(self, p: _Payload) -> None:
        import rerun as rr

        self.rec.set_time(TIMELINE, sequence=p.index)
        h, w = p.depth.shape
        T = np.asarray(p.T_wc, dtype=np.float64)
        if np.all(np.isfinite(T)):
            self.rec.log("world/camera", rr.Transform3D(translation=T[:3, 3], mat3x3=T[:3, :3]))
        self.rec.log("world/camera/image", rr.Pinhole(image_from_camera=p.K, resolution=[w, h],
                                                      camera_xyz=rr.ViewCoordinates.RDF, image_plane_distance=0.3))
        self.rec.log("world/camera/image/rgb", _jpeg(p.color))
        self.rec.log("world/camera/image/depth", _depth_mm(p.depth))
        snap = p.snapshot
        if snap is not None and snap.size > 0 and np.all(np.isfinite(T)):
            color, depth = self._render(snap, p.K, w, h, T)
            self.rec.log("render/rgb", _jpeg(color))
            self.rec.log("render/depth", _depth_mm(depth))
            self._last_snapshot = snap
            if self._last_map is None or p.index - self._last_map >= self.map_every:
                self._log_map(snap)
                self._log_grid()
                self._last_map = p.index
        self.logged_payloads += 1

    @torch.no_grad()
    def _render(self, snap, K: np.ndarray, w: int, h: int, T_wc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The map at pose T_wc: colour (h', w', 3) uint8, depth (h', w') float32 m (0 = empty);
        at most ``render_width`` px wide."""
        factor = max(1, -(-w // self.render_width))
        out = snap.render(scale_K(K, factor), w // factor, h // factor, T_wc=T_wc, backend=self.backend)
        color = (out.color.clamp(0, 1) * 255).to(torch.uint8).cpu().numpy()
        depth = torch.where(out.alpha > 0.5, out.depth, torch.zeros_like(out.depth)).float().cpu().numpy()
        return color, depth

    def _log_map(self, snap) -> None:
        import rerun as rr

        n = snap.size
        idx = None
        if n > self.max_points:
            idx = torch.linspace(0, n - 1, self.max_points, device=snap.means.device).long()

        def sel(t: torch.Tensor) -> torch.Tensor:   # the shown subset of a per-sphere tensor
            return t if idx is None else t[idx]

        means = sel(snap.means).float().cpu().numpy()
        colors = (sel(snap.colors).clamp(0, 1) * 255).to(torch.uint8).cpu().numpy()
        radii = sel(snap.radii).float().cpu().numpy()
        self.rec.log("world/map", rr.Points3D(means, colors=colors, radii=radii))
        edges = loop_edge_segments(snap)
        if edges:
            self.rec.log("world/loop_edges", rr.LineStrips3D(edges, colors=[[220, 40, 200]], radii=[0.006]))

    def _log_grid(self) -> None:
        """The occupancy grid as a small grey image, when a new version was published."""
        import rerun as rr

        grid = self.grid_source() if self.grid_source is not None else None
        if grid is None or grid.version == self._grid_version:
            return
        self._grid_version = grid.version
        p = grid.occupancy
        px = np.where(p < 0, 160, 255 - (p.astype(np.int32) * 255) // 100).astype(np.uint8)[::-1]
        self.rec.log("grid", rr.Image(np.ascontiguousarray(px)))

    def stats(self) -> dict:
        """What the viewer did and cost (for metrics.json)."""
        return {"payloads_logged": self.logged_payloads, "payloads_dropped": self.payloads.dropped,
                "hook_ms_total": self.hook_s * 1e3, "thread_cpu_s": self.thread_cpu_s,
                "served": None if self.live is None else {"grpc": self.live.grpc_url, "page": self.live.page_url},
                "error": None if self.error is None else f"{type(self.error).__name__}: {self.error}"}

    # ------------------------------------------------------------------ shutdown
    def close(self, timeout: float = 30.0) -> None:
        """Log what is pending plus the final map and grid, flush the sinks, stop the thread. Never raises:
        a viewer that went away (closed window, no display) must not cost the run its outputs."""
        self.payloads.close()
        self._thread.join(timeout)
        try:
            self._drain_records()
            if self._last_snapshot is not None and self._last_index is not None:  # the final map
                self.rec.set_time(TIMELINE, sequence=self._last_index)      # (time is per thread)
                self._log_map(self._last_snapshot)
                self._log_grid()                                            # the final grid
            self.rec.flush(timeout_sec=timeout)
        except Exception as exc:  # noqa: BLE001 - see docstring
            self.error = self.error or exc
        finally:
            try:
                self.rec.disconnect()
            except Exception as exc:  # noqa: BLE001
                self.error = self.error or exc
        if self.payloads.dropped:
            log.info("viewer dropped %d stale frame payloads (scalars and trajectory are complete)",
                     self.payloads.dropped)
        if self.error is not None:
            log.warning("viewer: %s: %s", type(self.error).__name__, self.error)


def loop_edge_segments(snap) -> list:
    """The snapshot's accepted loop closures as line segments between the two keyframes' camera
    centres: a list of (2, 3) float32 arrays (metres, world)."""
    poses = snap.keyframe_poses
    return [np.stack([poses[a][:3, 3], poses[b][:3, 3]]).astype(np.float32)
            for a, b in snap.loop_edges if a in poses and b in poses]


def _jpeg(color: np.ndarray, quality: int = 90):
    """(H, W, 3) uint8 RGB -> rerun EncodedImage (JPEG): ~10x smaller recordings than raw RGB."""
    import rerun as rr

    ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(color[..., ::-1]), [cv2.IMWRITE_JPEG_QUALITY, quality])
    return rr.EncodedImage(contents=buf.tobytes(), media_type="image/jpeg") if ok else rr.Image(color)


def _depth_mm(depth: np.ndarray):
    """(H, W) float metres -> rerun DepthImage as uint16 millimetres (half the bytes; 0 = invalid)."""
    import rerun as rr

    mm = np.nan_to_num(np.asarray(depth, dtype=np.float32) * 1000.0, nan=0.0, posinf=0.0, neginf=0.0)
    return rr.DepthImage(np.clip(np.round(mm), 0, 65535).astype(np.uint16), meter=1000.0)


def attach_viewer(system, vcfg, connect: Optional[str] = None) -> RerunViewer:
    """Open the sinks ``vcfg`` (``ViewerConfig``) asks for and hook a viewer into ``system``;
    ``viewer.live`` says where browsers find a served view (``viewer.serve``), else None."""
    import_rerun()   # a clear error first when rerun is missing or too old
    rec, live = open_recording(vcfg.rrd, spawn=vcfg.enabled and not connect, connect=connect,
                               blueprint=default_blueprint(), serve=vcfg if vcfg.serve else None)
    viewer = RerunViewer(rec, system.device, system.cfg.raster.backend, vcfg.map_every, vcfg.max_points)
    viewer.live = live
    if getattr(system, "grid", None) is not None:
        viewer.grid_source = system.grid.latest
    system.frame_hooks.append(viewer.hook)
    return viewer
