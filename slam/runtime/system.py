"""The SLAM system: builds the stages from a ``Config`` and runs source -> tracking -> keyframes ->
mapping, threaded or sequential.

Threads (threaded mode, ``slam.runtime.threads``):
- caller's thread: reads the source, puts frames into ``frames`` (bounded: backpressure);
  on CUDA it first uploads each frame at the tracking resolution on its own stream
  (``slam.runtime.staging``); catches Ctrl-C.
- tracking thread: owns the ``TrackingFrontend`` (tracker, lost policy, relocaliser) and the
  ``KeyframeSelector``; reads only published map snapshots; puts keyframes into ``keyframes``
  (bounded).
- mapping thread: owns the ``SphereMap``, ``KeyframeStore`` and ``Mapper`` (the only writer of
  the map and of the keyframe poses); publishes a snapshot after every keyframe; offers each
  mapped keyframe to the loop stage (never waits for it) and applies its corrections.
- loop thread (``loop.enabled``, gtsam installed): owns the ``LoopCloser`` (revisit detection,
  verification, pose graph); reads the keyframe and the snapshot it is handed.
- grid thread (``grid.enabled``): owns the ``GridBuilder`` (slam/grid/: the 2D occupancy grid);
  the mapping thread hands it each mapped keyframe with the poses it published, never waiting.
Sequential mode runs the same two steps (``track_frame``, ``map_keyframe``) in one thread in a
fixed order: identical results run to run. What outputs, metrics and wrappers read after a run is
``result()``: a ``RunResult``, not the system's internals.
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Iterable, Optional

import numpy as np
import torch

from slam.config import Config
from slam.data.frame import Frame
from slam.geometry import orthonormalize
from slam.grid.builder import GridBuilder
from slam.loop.closer import LoopCloser
from slam.loop.pose_graph import gtsam_available
from slam.map.keyframes import Keyframe
from slam.map.map_io import load_saved_map_anchored
from slam.map.snapshot import MapSnapshot
from slam.map.sphere_map import SphereMap
from slam.mapping.keyframes import KeyframeSelector, KeyframeStore
from slam.mapping.mapper import Mapper, MappingReport
from slam.observation import Observation
from slam.runtime.device import prepare_device, resolve_device
from slam.runtime.profiling import profile_replay
from slam.runtime.recorder import FrameRecord, RunRecorder, current_rss_mb, gpu_memory_sample
from slam.runtime.result import RunResult
from slam.runtime.threads import run_sequential, run_threaded
from slam.tracking.frontend import TrackingFrontend
from slam.tracking.quality import explores
from slam.tracking.tracker import Tracker

log = logging.getLogger("slam.system")

FrameHook = Callable[[Frame, FrameRecord, Optional[MapSnapshot]], None]
KeyframeHook = Callable[[MappingReport], None]
PhaseHook = Callable[[str], None]


class SlamSystem:
    """Build from a ``Config``; optionally ``use_saved_map``; call ``run(frames)``; read
    ``result()``. ``frame_hooks`` are called on the tracking thread after every frame with
    (frame, its record, the snapshot it was tracked against); ``keyframe_hooks`` on the mapping
    thread after every mapped keyframe with its ``MappingReport`` (they may read ``result()``:
    the mapping thread owns the map); ``phase_hooks`` with a one-line description when a phase
    after the last frame starts (the final refinement). Hooks must not block for long."""

    def __init__(self, cfg: Config, device: Optional[torch.device] = None) -> None:
        self.cfg = cfg
        self.device = device or resolve_device(cfg.system.device)
        prepare_device(self.device, cfg.system.threaded, cfg.system.seed)
        # Keyframes are stored at the tracking resolution unless the config says otherwise.
        self._keyframe_downscale = cfg.mapping.keyframe_downscale or cfg.tracking.downscale
        backend = cfg.raster.backend
        self.smap = SphereMap(self.device, cfg.map.max_spheres, cfg.map.max_mb, cfg.map.chunk)
        self.store = KeyframeStore(cfg.mapping.max_keyframes, seed=cfg.system.seed)
        # The tracking thread reads a copy of the keyframe list: the mapper may add or drop some.
        self.frontend = TrackingFrontend(cfg, lambda: list(self.store.items))
        self.selector = KeyframeSelector(cfg.mapping)
        self.mapper = Mapper(cfg.mapping, cfg.pruner, self.smap, self.store, backend, seed=cfg.system.seed)
        self.recorder = RunRecorder()
        self._last_frame: Optional[Frame] = None   # for profile_tracking after the run
        self._tracking_profile: Optional[dict] = None
        self.frame_hooks: list[FrameHook] = []
        self.keyframe_hooks: list[KeyframeHook] = []
        self.phase_hooks: list[PhaseHook] = []
        self.mode = "slam"                  # "slam" | "localize" (frozen map) | "continue"
        self._saved_keyframes: list = []    # localize: the saved map's keyframes, written back as they were
        self._next_kf_id = 0                # keyframe ids: unique within the map (saved ones kept)
        self._lost_since_keyframe = False   # tracking thread: a frame failed or was relocalised
        self._loss_not_sent = False         # mapping thread: a skipped loop message's loss
        # The occupancy grid (threaded: its own thread; sequential: inline after each keyframe).
        self.grid: Optional[GridBuilder] = GridBuilder(cfg.grid, cfg.system.threaded) if cfg.grid.enabled else None
        self.loop: Optional[LoopCloser] = None
        if cfg.loop.enabled:
            if gtsam_available():
                self.loop = LoopCloser(cfg.loop, cfg.tracking, cfg.quality, self.mapper.submit_correction, backend)
            else:
                log.error("loop closure needs gtsam (pip install gtsam; docs/ARCHITECTURE.md): running without it")

    # ------------------------------------------------------------------ saved maps
    def use_saved_map(self, map_path, mode: str) -> None:
        """Start from a saved map (``slam.map.map_io.load_saved_map``: the PLY and its keyframe
        side file; its keyframes join the keyframe store). ``localize`` keeps the saved spheres
        frozen (never optimised nor pruned, written back unchanged) and maps only a local layer of
        new spheres where the view leaves the saved map, so tracking bridges unmapped views (like
        visual odometry in a feature-based localisation mode); ``continue`` maps on top of the
        saved map and changes it. The start pose is unknown either way: frames are relocalised
        until one is verified, then tracked. Call before ``run``. Raises ``FileNotFoundError`` /
        ``slam.map.map_io.MapFormatError``."""
        if mode not in ("localize", "continue"):
            raise ValueError(f"saved-map mode must be 'localize' or 'continue', got '{mode}'")
        rows, keyframes, anchors = load_saved_map_anchored(map_path)
        self.smap.load_rows(rows, anchors)
        self.mapper.fix_keyframes(keyframes)      # the saved keyframes hold the gauge
        self._next_kf_id = max(kf.kf_id for kf in keyframes) + 1
        if self.loop is not None:
            self.loop.add_saved(keyframes)
        if mode == "localize":
            self.smap.frozen = int(rows.shape[0])
            self._saved_keyframes = list(keyframes)
        self.smap.publish(dict(self.mapper.keyframe_poses))
        for kf in keyframes:  # continue: the mapper's window; both: the run folder stays self-contained
            self.store.add(kf)
        self.frontend.use_saved_map(keyframes)
        self.mode = mode
        log.info("saved map %s: %d spheres, %d keyframes, mode %s", map_path, rows.shape[0], len(keyframes), mode)

    # ------------------------------------------------------------------ the two steps
    def observation(self, frame: Frame) -> Observation:
        """``frame`` on the device at the tracking resolution (input / ``tracking.downscale``):
        what the tracker and the relocaliser see. The full-resolution images are freed before
        tracking starts."""
        obs = Observation.from_numpy(frame.color, frame.depth, frame.K, self.device)
        return obs.downsampled(self.cfg.tracking.downscale)

    def latest_map(self) -> Optional[MapSnapshot]:
        """The map version the tracker uses now (None before the first keyframe is mapped)."""
        return self.smap.latest()

    def odom_correction(self) -> np.ndarray:
        """(4, 4) T_map_odom: every correction the map (loop closures, refinement) has moved the
        tracker by so far (tracking thread, e.g. a frame hook): ``inv(T_map_odom) @ T_wc`` is the
        frame's pose in a frame that never jumps (REP-105's odom)."""
        return self.frontend.T_map_odom.copy()

    def slow_stream(self) -> bool:
        """The input is slow (usual frame interval above ``system.slow_stream_interval_s``): the
        threaded runner then lets each keyframe be mapped before the next frame is tracked."""
        return self.frontend.clock.slow

    def end_tracking(self) -> None:
        """No more frames will be tracked (tracking thread, as it ends): work the tracker started
        off its thread (a relocalisation attempt) has been told to give up and has finished when
        this returns."""
        self.frontend.end()

    def track_frame(self, frame: Frame, obs: Optional[Observation] = None) -> tuple[FrameRecord, Optional[Keyframe]]:
        """Track one frame (tracking thread); returns its record and the keyframe it makes, if any.
        ``obs``: the frame's ``observation``, when it was staged ahead (``slam.runtime.staging``)."""
        t0, c0 = time.perf_counter(), time.thread_time()
        obs = self.observation(frame) if obs is None else obs
        # Rolling shutter and the depth's own time (data.rolling_shutter_s, data.sync_depth); also
        # the keyframe's images.
        unroll = self.frontend.unroller(frame.depth_offset_s)
        obs = unroll(obs)
        snap = self.smap.latest()
        self.frontend.follow_map(snap)     # the reference keyframe's refined / corrected pose
        res = self.frontend.process(obs, snap, frame.index, frame.timestamp, frame.gt_pose)
        self._last_frame = frame
        # On a saved map only verified poses make keyframes (localize: of the local layer); in SLAM
        # a flagged frame whose colour agrees closely with the map may (``quality.explores``).
        is_kf = (res.ok or self.mode == "slam") and self.selector.is_keyframe(
            res.T_wc, res.ok or explores(res.reason, res.quality, self.cfg.quality))
        kf_id = -1
        if is_kf:
            kf_id, self._next_kf_id = self._next_kf_id, self._next_kf_id + 1
            self.frontend.set_reference(kf_id, res.T_wc, len(snap.loop_later) if snap is not None else 0)
        ref_id, T_kc = self.frontend.relative_to_reference(res.T_wc)
        ms, host_ms = (time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3
        rec = FrameRecord(frame.index, frame.timestamp, res.T_wc, frame.gt_pose, res.ok, res.recovered, res.loss,
                          ms, is_kf, res.quality, res.reason, res.reinit, res.reinit_ms, res.renders, host_ms,
                          ref_id, T_kc)
        self.recorder.add_frame(rec)
        for hook in self.frame_hooks:
            hook(frame, rec, snap)
        self._lost_since_keyframe = self._lost_since_keyframe or not res.ok or res.recovered
        kf = self._keyframe(frame, obs, res.T_wc, kf_id, unroll) if is_kf else None
        if kf is not None:
            kf.map_loops = len(snap.loop_edges) if snap is not None else 0
            kf.after_loss, self._lost_since_keyframe = self._lost_since_keyframe and kf_id > 0, False
            kf.information = res.information
        return rec, kf

    def _keyframe(self, frame: Frame, obs: Observation, T_wc: np.ndarray, kf_id: int,
                  unroll: Callable[[Observation], Observation]) -> Keyframe:
        """The keyframe of ``frame``: from the tracking resolution's ``obs`` when keyframes are
        stored at that resolution (no second downscale on the tracking thread), else from the frame
        downscaled to the keyframe resolution and unrolled as ``obs`` was (``unroll``: the same
        turn rate, so both images are the same camera's)."""
        if self._keyframe_downscale == self.cfg.tracking.downscale:
            return Keyframe.from_observation(frame, obs, T_wc, self._keyframe_downscale, kf_id)
        kf_obs = Observation.from_numpy(frame.color, frame.depth, frame.K, self.device)
        return Keyframe.from_observation(frame, unroll(kf_obs.downsampled(self._keyframe_downscale)), T_wc,
                                         self._keyframe_downscale, kf_id)

    def map_keyframe(self, kf: Keyframe) -> None:
        """Integrate one keyframe into the map and publish it (mapping thread)."""
        report = self.mapper.add_keyframe(kf)
        self.recorder.add_mapping(report, current_rss_mb(), self.store.nbytes() / 1e6,
                                  gpu_memory_sample(self.device))
        if self.grid is not None:   # O(1) hand-over to the grid thread
            self.grid.offer(kf, self.smap.latest().keyframe_poses)
        for hook in self.keyframe_hooks:
            hook(report)

    def loop_message(self, kf: Keyframe) -> Optional[tuple]:
        """What the loop stage needs about a just-mapped keyframe (mapping thread): the keyframe,
        the snapshot published after it, the ids still in the store, and whether tracking was
        lost since the last keyframe the loop stage saw; None without a loop stage."""
        if self.loop is None:
            return None
        after_loss, self._loss_not_sent = kf.after_loss or self._loss_not_sent, False
        return kf, self.smap.latest(), {k.kf_id for k in self.store.items}, after_loss

    def loop_skipped(self, message: tuple) -> None:
        """The loop stage was busy and ``message`` was dropped (mapping thread): its loss, if
        any, goes with the next message."""
        self.loop.skipped += 1
        self._loss_not_sent = self._loss_not_sent or message[3]

    def loop_step(self, message: tuple) -> None:
        """Look for a loop at one keyframe (loop thread); corrections go to the mapper's inbox."""
        self.loop.process(*message)

    def finish_map(self) -> None:
        """End of input (also an input error's): apply the loop stage's last corrections and close
        the loops it deferred (``LoopCloser.finish``: the loop stage has ended), then the final
        refinement over all keyframes (not on Ctrl-C or a stage error; never in localize mode,
        where the saved map stays frozen). Tells ``phase_hooks`` first."""
        self.mapper.apply_pending()
        if self.loop is not None and self.mode != "localize" and self.loop.finish(self.smap.latest()) is not None:
            self.mapper.apply_pending()       # the loops deferred after the last closure, closed now
        if self.cfg.mapping.final_iters > 0 and self.mode != "localize":
            for hook in self.phase_hooks:
                hook(f"final refinement of the map: {self.cfg.mapping.final_iters} steps over "
                     f"{len(self.mapper.keyframe_poses)} keyframes (mapping.final_iters)")
            t0 = time.perf_counter()
            loss = self.mapper.refine(self.cfg.mapping.final_iters)
            self.recorder.refine_s = time.perf_counter() - t0
            log.info("final refinement: %d steps in %.1f s, loss %.4f", self.cfg.mapping.final_iters,
                     time.perf_counter() - t0, loss)

    # ------------------------------------------------------------------ run
    def run(self, frames: Iterable[Frame], progress: Optional[Callable[[FrameRecord], None]] = None) -> RunRecorder:
        """Process every frame; returns the recorder. Re-raises the first stage error (after
        stopping every stage); ``KeyboardInterrupt`` stops cleanly and is re-raised too."""
        try:
            if self.cfg.system.threaded:
                run_threaded(self, frames, progress)
            else:
                run_sequential(self, frames, progress)
        finally:
            self.recorder.finish()
            self._reexpress_trajectory()
            self._finish_grid()
        return self.recorder

    def _finish_grid(self) -> None:
        """Bring the grid to the final keyframe poses (every thread has ended; also after Ctrl-C
        or a stage error, so that a stopped run still writes its grid)."""
        if self.grid is not None:
            self.grid.finish(dict(self.mapper.keyframe_poses))

    def _reexpress_trajectory(self) -> None:
        """The trajectory through the final keyframe poses: every frame's pose becomes its
        reference keyframe's final pose times the relative pose it was tracked with (the pose as
        tracked stays in ``T_wc_tracked``). Runs once, after every thread has ended."""
        poses = self.mapper.keyframe_poses
        for rec in self.recorder.frames:
            if rec.T_wc_tracked is not None or rec.T_kc is None or rec.keyframe_id not in poses:
                continue
            rec.T_wc_tracked = rec.T_wc
            rec.T_wc = orthonormalize(poses[rec.keyframe_id] @ rec.T_kc)

    def result(self) -> RunResult:
        """What the run leaves for its outputs and metrics (call after ``run``, or after it was
        stopped). In localize mode the map to save is the saved map as loaded (the local layer
        is dropped); otherwise the whole live map and keyframe store."""
        if self.mode == "localize":
            rows, keyframes = self.smap.params[: self.smap.frozen], list(self._saved_keyframes)
        else:
            rows, keyframes = self.smap.active(), list(self.store.items)
        return RunResult(
            recorder=self.recorder, device=self.device, backend=self.cfg.raster.backend, mode=self.mode,
            map_rows=rows.detach(), map_keyframes=keyframes, keyframes=list(self.store.items),
            snapshot=self.smap.latest(), spheres=self.smap.n, sphere_budget=self.smap.budget,
            max_spheres_seen=self.smap.peak_n, map_bytes=self.smap.nbytes(),
            keyframe_store_bytes=self.store.nbytes(), relocalisations=list(self.frontend.relocalisations),
            tracking_profile=self._tracking_profile,
            map_anchors=(self.smap.anchors[: self.smap.frozen] if self.mode == "localize"
                         else self.smap.anchors[: self.smap.n]).detach(),
            loop=self.loop.summary() if self.loop is not None else None,
            pose_refinement=self._pose_refinement_summary(),
            grid=self.grid.last_made() if self.grid is not None else None,   # final once run() ended
            grid_stats=self.grid.stats() if self.grid is not None else None,
        )

    def _pose_refinement_summary(self) -> dict:
        """Keyframe pose refinement and loop corrections, for metrics.json."""
        _, mapping, _ = self.recorder.snapshot()
        return {"enabled": self.mapper.poses.enabled, "steps": self.mapper.poses.steps,
                "tracker_rebases": self.frontend.rebases,
                "mean_shift_mm_per_keyframe": float(np.mean([m.pose_shift_mm for m in mapping])) if mapping else None,
                "loop_corrections": list(self.mapper.applied)}

    def profile_tracking(self) -> Optional[dict]:
        """After the run (CUDA): GPU ms, host ms and kernel launches per tracked frame, from
        ``system.profile_frames`` replays of the last frame (``slam.runtime.profiling``); they go
        into ``result().tracking_profile``. None when not measured."""
        frames = self.recorder.frames
        snap = self.smap.latest()
        if self._last_frame is None or snap is None or len(frames) < 3:
            return None
        tracker = Tracker(self.cfg.tracking, self.cfg.quality, self.cfg.raster.backend)
        self._tracking_profile = profile_replay(tracker, self.observation(self._last_frame), snap, frames[-2].T_wc,
                                                frames[-3].T_wc, self.cfg.system.profile_frames)
        return self._tracking_profile
