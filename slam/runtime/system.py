"""The SLAM system: builds the stages from a ``Config`` and runs source -> tracking -> keyframes ->
mapping, threaded or sequential.

Threads (threaded mode, ``slam.runtime.threads``):
- caller's thread: reads the source, puts frames into ``frames`` (bounded: backpressure);
  catches Ctrl-C.
- tracking thread: owns the ``TrackingFrontend`` (tracker, lost policy, relocaliser) and the
  ``KeyframeSelector``; reads only published map snapshots; puts keyframes into ``keyframes``
  (bounded).
- mapping thread: owns the ``SphereMap``, ``KeyframeStore`` and ``Mapper`` (the only writer of
  the map); publishes a snapshot after every keyframe.
Sequential mode runs the same two steps (``track_frame``, ``map_keyframe``) in one thread in a
fixed order: identical results run to run. What outputs, metrics and wrappers read after a run is
``result()``: a ``RunResult``, not the system's internals.
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Iterable, Optional

import torch

from slam.config import Config
from slam.data.frame import Frame
from slam.map.map_io import load_saved_map
from slam.map.snapshot import MapSnapshot
from slam.map.sphere_map import SphereMap
from slam.mapping.keyframes import Keyframe, KeyframeSelector, KeyframeStore
from slam.mapping.mapper import Mapper, MappingReport
from slam.observation import Observation
from slam.runtime.device import prepare_device, resolve_device
from slam.runtime.profiling import profile_replay
from slam.runtime.recorder import FrameRecord, RunRecorder, current_rss_mb, gpu_memory_sample
from slam.runtime.result import RunResult
from slam.runtime.threads import run_sequential, run_threaded
from slam.tracking.frontend import TrackingFrontend
from slam.tracking.tracker import Tracker

log = logging.getLogger("slam.system")

FrameHook = Callable[[Frame, FrameRecord, Optional[MapSnapshot]], None]
KeyframeHook = Callable[[MappingReport], None]


class SlamSystem:
    """Build from a ``Config``; optionally ``use_saved_map``; call ``run(frames)``; read
    ``result()``. ``frame_hooks`` are called on the tracking thread after every frame with
    (frame, its record, the snapshot it was tracked against); ``keyframe_hooks`` on the mapping
    thread after every mapped keyframe with its ``MappingReport`` (they may read ``result()``:
    the mapping thread owns the map). Hooks must not block for long."""

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
        self.mode = "slam"                  # "slam" | "localize" (frozen map) | "continue"
        self._saved_keyframes: list = []    # localize: the saved map's keyframes, written back as they were

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
        rows, keyframes = load_saved_map(map_path)
        self.smap.load_rows(rows)
        if mode == "localize":
            self.smap.frozen = int(rows.shape[0])
            self._saved_keyframes = list(keyframes)
        self.smap.publish()
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

    def track_frame(self, frame: Frame) -> tuple[FrameRecord, Optional[Keyframe]]:
        """Track one frame (tracking thread); returns its record and the keyframe it makes, if any."""
        t0, c0 = time.perf_counter(), time.thread_time()
        obs = self.observation(frame)
        snap = self.smap.latest()
        res = self.frontend.process(obs, snap, frame.index, frame.timestamp, frame.gt_pose)
        self._last_frame = frame
        # On a saved map only verified poses make keyframes (localize: of the local layer).
        is_kf = (res.ok or self.mode == "slam") and self.selector.is_keyframe(res.T_wc, res.ok)
        ms, host_ms = (time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3
        rec = FrameRecord(frame.index, frame.timestamp, res.T_wc, frame.gt_pose, res.ok, res.recovered, res.loss,
                          ms, is_kf, res.quality, res.reason, res.reinit, res.reinit_ms, res.renders, host_ms)
        self.recorder.add_frame(rec)
        for hook in self.frame_hooks:
            hook(frame, rec, snap)
        kf = Keyframe.from_frame(frame, res.T_wc, self._keyframe_downscale) if is_kf else None
        return rec, kf

    def map_keyframe(self, kf: Keyframe) -> None:
        """Integrate one keyframe into the map and publish it (mapping thread)."""
        report = self.mapper.add_keyframe(kf)
        self.recorder.add_mapping(report, current_rss_mb(), self.store.nbytes() / 1e6,
                                  gpu_memory_sample(self.device))
        for hook in self.keyframe_hooks:
            hook(report)

    def finish_map(self) -> None:
        """End of input: the final refinement over all keyframes (not on Ctrl-C or errors; never
        in localize mode, where the saved map stays frozen)."""
        if self.cfg.mapping.final_iters > 0 and self.mode != "localize":
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
        return self.recorder

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
        )

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
