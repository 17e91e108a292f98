"""``GridBuilder``: keeps the occupancy grid current as keyframes arrive and move, on a thread of
its own (threaded runs) or inline after each mapped keyframe (``system.threaded: false``).

The mapping thread hands over each mapped keyframe with the keyframe poses it published
(``offer``: O(1), never waits). The grid thread then
1. keeps a ``Scan`` of the keyframe (an even sub-grid of its depth, camera frame: the keyframe
   store may drop the keyframe later, a loop closure may move it);
2. finds the floor (``slam.grid.floor``): from the config once, or estimated from the scans after
   ``floor_keyframes`` keyframes and again whenever their number has doubled; when the floor
   moved (``floor_rebuild_deg`` / ``floor_rebuild_m``) the grid is rebuilt from every scan
   (amortised: the rebuilds' total work is at most about twice the integrations');
3. integrates the new keyframes and integrates again, at their new pose, up to
   ``max_reintegrations`` keyframes that moved since (largest moves first), taking their old
   evidence out exactly (``GridCounts`` keeps counts);
4. bumps the grid's ``version``; the ``GridSnapshot`` (the columns projected) is made when it is
   read (``latest()``: the ROS node, the viewer, the outputs), once per version, on the reader's
   thread: a run nobody watches never pays for it, and one that is watched pays at the reader's
   rate, not the keyframes'.
``finish`` (end of the run, also after Ctrl-C or an error) drains what is left, estimates the
floor on every keyframe, integrates every moved keyframe at its final pose and returns the final
grid. It owns everything it writes; it reads the keyframes' depth arrays (never written after the
keyframe is made) and the published pose dictionaries (replaced, never edited, by the mapper);
``_counts_lock`` keeps a reader's snapshot off counts the grid thread is changing.
"""
from __future__ import annotations

import logging
import math
import threading
import time
import traceback
from typing import Optional

import numpy as np

from slam.config import GridConfig
from slam.geometry import rotation_angle
from slam.grid.floor import FloorFrame, estimate_floor, floor_from_camera
from slam.grid.occupancy import GridCounts, GridSnapshot
from slam.grid.raycast import Contribution, cast
from slam.grid.scan import Scan, make_scan

log = logging.getLogger("slam.grid")


def pose_change(T_a: np.ndarray, T_b: np.ndarray) -> tuple[float, float]:
    """(metres, degrees) between two (4, 4) poses."""
    # rotation_angle, not acos of the trace: a 7-Scenes ground-truth pose and its own copy read
    # 1.1 deg apart that way, and every keyframe was integrated again at every update.
    dt = float(np.linalg.norm(T_a[:3, 3] - T_b[:3, 3]))
    return dt, math.degrees(rotation_angle(T_a[:3, :3].T @ T_b[:3, :3]))


class GridBuilder:
    """See the module docstring. ``threaded``: work on the grid thread (else inline in ``offer``)."""

    def __init__(self, cfg: GridConfig, threaded: bool) -> None:
        self.cfg = cfg
        self.threaded = threaded
        self.layers = max(1, int(math.ceil((cfg.max_height - cfg.min_height) / cfg.resolution - 1e-9)))
        self.counts = GridCounts(self.layers)
        self.scans: dict[int, Scan] = {}
        self.integrated: dict[int, np.ndarray] = {}   # kf id -> the pose it was integrated at
        self.poses: dict[int, np.ndarray] = {}
        self.floor: Optional[FloorFrame] = None
        self._floor_at = 0                      # scans at the last floor estimate
        self._snapshot: Optional[GridSnapshot] = None   # the last one made (latest()), maybe older
        self._version = 0
        self._counts_lock = threading.Lock()      # counts, floor, integrated: updates vs latest()
        self._inbox: list = []
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._closing = False
        self.error: Optional[str] = None
        # statistics (metrics.json -> grid)
        self.keyframe_ms: list[float] = []      # per offered keyframe: its share of the update's wall time
        self.keyframe_cpu_ms: list[float] = []  # ... and of the grid thread's CPU time
        self.finish_ms = 0.0
        self.floor_ms = 0.0
        self.reintegrations = 0
        self.rebuilds = 0
        self.floor_estimates = 0
        self.peak_bytes = 0
        self._scan_bytes = 0                    # kept as a sum: stats() may run on another thread

    # ------------------------------------------------------------------ mapping thread
    def offer(self, kf, poses: dict) -> None:
        """A mapped keyframe (``Keyframe``: kf_id, depth (h, w) float16 m, K, T_wc) and the
        keyframe poses published with it (id -> (4, 4) T_wc). Never waits for the grid."""
        item = (kf.kf_id, kf.depth, kf.K, kf.T_wc, poses)
        if not self.threaded:
            self._guarded([item], final=False)
            return
        with self._cond:
            if self._closing:
                return
            self._inbox.append(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="slam-grid", daemon=True)
                self._thread.start()
            self._cond.notify()

    @property
    def version(self) -> int:
        """Increases with every update of the grid (0: none yet); cheap, any thread."""
        return self._version

    def last_made(self) -> Optional[GridSnapshot]:
        """The grid ``latest()`` last made (None if none yet), without making one: what a caller on
        the mapping thread takes (the autosave's result); after ``finish`` it is the final grid."""
        return self._snapshot

    def latest(self) -> Optional[GridSnapshot]:
        """The grid as it is now (None before the floor is known); made here when the grid
        changed since the last call (any thread; waits while the grid thread updates)."""
        snap = self._snapshot
        if snap is not None and snap.version == self._version:
            return snap
        with self._counts_lock:
            if self.floor is None:
                return None
            if self._snapshot is None or self._snapshot.version != self._version:
                cfg = self.cfg
                self._snapshot = self.counts.snapshot(self.floor, cfg.resolution, cfg.log_odds_hit, cfg.log_odds_miss,
                                                      cfg.occupied_thresh, cfg.free_thresh, cfg.free_coverage,
                                                      self._version, len(self.integrated))
            return self._snapshot

    # ------------------------------------------------------------------ the grid thread
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._inbox and not self._closing:
                    self._cond.wait()
                if not self._inbox and self._closing:
                    return
                items, self._inbox = self._inbox, []
            self._guarded(items, final=False)

    def _guarded(self, items: list, final: bool, poses: Optional[dict] = None) -> None:
        """``_update``; an error is logged once and stops the grid, never the SLAM run."""
        if self.error is not None:
            return
        try:
            self._update(items, final, poses)
        except Exception as exc:  # noqa: BLE001 - the grid is an output: it must not stop SLAM
            self.error = f"{type(exc).__name__}: {exc}"
            log.error("occupancy grid stopped: %s", traceback.format_exc())

    def _update(self, items: list, final: bool, poses: Optional[dict] = None) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        cfg = self.cfg
        for kf_id, depth, K, T_wc, published in items:
            scan = make_scan(kf_id, depth, K, cfg.points_per_keyframe, cfg.min_range)
            self._scan_bytes += scan.nbytes() - (self.scans[kf_id].nbytes() if kf_id in self.scans else 0)
            self.scans[kf_id] = scan
            self.poses.update(published)
            self.poses.setdefault(kf_id, T_wc)
        if poses is not None:
            self.poses.update(poses)
        with self._counts_lock:
            self._update_floor(final)
            if self.floor is not None:
                for kf_id in [k for k in self.scans if k not in self.integrated]:
                    self._integrate(kf_id)
                self._reintegrate_moved(None if final else cfg.max_reintegrations)
                self._version += 1
        self.peak_bytes = max(self.peak_bytes, self.nbytes())
        if items:
            ms, cpu = (time.perf_counter() - t0) * 1e3 / len(items), (time.thread_time() - c0) * 1e3 / len(items)
            self.keyframe_ms.extend([ms] * len(items))
            self.keyframe_cpu_ms.extend([cpu] * len(items))
        if final:
            self.finish_ms = (time.perf_counter() - t0) * 1e3

    def _pose(self, kf_id: int) -> np.ndarray:
        return np.asarray(self.poses[kf_id], dtype=np.float64)

    def _evidence(self, kf_id: int, T_wc: np.ndarray) -> Contribution:
        cfg = self.cfg
        return cast(self.scans[kf_id].points_c, T_wc, self.floor, cfg.resolution, cfg.min_height, cfg.max_height,
                    cfg.max_range)

    def _integrate(self, kf_id: int) -> None:
        T = self._pose(kf_id).copy()
        self.counts.add(self._evidence(kf_id, T), +1)
        self.integrated[kf_id] = T

    def _reintegrate_moved(self, limit: Optional[int]) -> None:
        moved = []
        for kf_id, T_used in self.integrated.items():
            dt, dr = pose_change(T_used, self._pose(kf_id))
            if dt > self.cfg.reintegrate_m or dr > self.cfg.reintegrate_deg:
                moved.append((dt / self.cfg.reintegrate_m + dr / self.cfg.reintegrate_deg, kf_id))
        moved.sort(reverse=True)
        for _, kf_id in moved[:limit]:
            # The old evidence is cast again at the old pose (deterministic) and taken out: cheaper
            # in memory than keeping every keyframe's voxels.
            self.counts.add(self._evidence(kf_id, self.integrated.pop(kf_id)), -1)
            self._integrate(kf_id)
            self.reintegrations += 1

    def _update_floor(self, final: bool) -> None:
        cfg = self.cfg
        if cfg.floor == "camera":
            if self.floor is None and self.poses:
                self.floor = floor_from_camera(self._pose(min(self.poses)), cfg.camera_height, cfg.camera_tilt_deg)
            return
        n = len(self.scans)
        # Until a floor is found: again when the keyframes grew by a quarter; then when doubled.
        # Either way the estimates' total work stays proportional to the keyframes'.
        grown = n >= (self._floor_at + max(1, self._floor_at // 4) if self.floor is None else 2 * self._floor_at)
        due = n >= cfg.floor_keyframes and (grown or (final and n > self._floor_at))
        if not due:
            return
        t0 = time.perf_counter()
        floor = self._estimate_floor()
        self._floor_at = n
        self.floor_estimates += 1
        self.floor_ms += (time.perf_counter() - t0) * 1e3
        if floor is None:
            if self.floor is None:
                log.info("grid: no floor found in %d keyframes yet", n)
            return
        if self.floor is not None:
            ang, dh = self.floor.moved(floor)
            if ang <= cfg.floor_rebuild_deg and dh <= cfg.floor_rebuild_m:
                return
            self.counts.clear()
            self.integrated.clear()
            self.rebuilds += 1
        log.info("grid: floor from %d keyframes: up %s, height %.3f m", n, np.round(floor.up, 4), floor.height)
        self.floor = floor

    def _estimate_floor(self) -> Optional[FloorFrame]:
        pts, nrm, centres, downs = [], [], [], []
        for kf_id, scan in self.scans.items():
            T = self._pose(kf_id)
            R, t = T[:3, :3], T[:3, 3]
            pts.append(scan.points_c[scan.normal_rows].astype(np.float64) @ R.T + t)
            nrm.append(scan.normals_c.astype(np.float64) @ R.T)
            centres.append(t)
            downs.append(R[:, 1])
        return estimate_floor(np.concatenate(pts), np.concatenate(nrm), np.stack(centres), np.stack(downs))

    # ------------------------------------------------------------------ end of the run
    def finish(self, poses: dict) -> Optional[GridSnapshot]:
        """Stop the grid thread, then bring the grid up to date with the final keyframe poses
        (id -> (4, 4) T_wc; every moved keyframe integrated again). Returns the final grid."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()
        with self._cond:
            items, self._inbox = self._inbox, []
        self._guarded(items, final=True, poses=dict(poses))
        return self.latest()

    def nbytes(self) -> int:
        """Host memory the grid holds: scans and counts (any thread)."""
        return self._scan_bytes + self.counts.nbytes()

    def stats(self) -> dict:
        """For metrics.json -> grid (any thread: the autosave reads it on the mapping thread)."""
        ms = np.asarray(self.keyframe_ms) if self.keyframe_ms else np.zeros(1)
        cpu = np.asarray(self.keyframe_cpu_ms) if self.keyframe_cpu_ms else np.zeros(1)
        snap = self._snapshot
        return {"keyframes": len(self.scans), "integrated": len(self.integrated), "threaded": self.threaded,
                "ms_per_keyframe_mean": float(ms.mean()), "ms_per_keyframe_p95": float(np.percentile(ms, 95)),
                "cpu_ms_per_keyframe_mean": float(cpu.mean()), "cpu_ms_total": float(cpu.sum()) if self.keyframe_cpu_ms else 0.0,
                "ms_total": float(np.sum(self.keyframe_ms)), "finish_ms": self.finish_ms, "floor_ms": self.floor_ms,
                "floor_estimates": self.floor_estimates, "rebuilds": self.rebuilds,
                "reintegrations": self.reintegrations, "memory_mb": self.nbytes() / 1e6,
                "peak_memory_mb": self.peak_bytes / 1e6, "cells": list(snap.shape) if snap is not None else None,
                "floor_up": self.floor.up.tolist() if self.floor is not None else None,
                "floor_height_m": self.floor.height if self.floor is not None else None,
                "error": self.error}
