"""The SLAM system: wires source -> tracking -> keyframes -> mapping, threaded or sequential.

Threads (threaded mode):
- caller's thread: reads the source, puts frames into ``frames`` (bounded: backpressure);
  catches Ctrl-C.
- tracking thread: owns the ``Tracker`` and ``KeyframeSelector``; reads only published map
  snapshots; puts keyframes into ``keyframes`` (bounded).
- mapping thread: owns the ``SphereMap``, ``KeyframeStore`` and ``Mapper`` (the only writer of
  the map); publishes a snapshot after every keyframe.
End of input closes the channels in order; an exception in any stage aborts every channel,
every stage stops, and ``run`` re-raises it after the outputs so far are returned. Sequential
mode runs the same steps in one thread in a fixed order: identical results run to run.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Optional

import numpy as np
import torch

from slam.runtime.channel import Channel, Closed
from slam.config import Config
from slam.data.frame import Frame
from slam.mapping.keyframes import Keyframe, KeyframeSelector, KeyframeStore
from slam.mapping.mapper import Mapper
from slam.observation import Observation
from slam.runtime.recorder import FrameRecord, RunRecorder
from slam.tracking.relocalise import RetrySchedule
from slam.output.metrics import current_rss_mb, gpu_memory_sample
from slam.map.sphere_map import MapSnapshot, SphereMap
from slam.tracking.tracker import Tracker

log = logging.getLogger("slam.runtime.system")


# cuBLAS keeps one workspace per (handle, stream), allocated through PyTorch's allocator: 32 MiB
# each on recent GPUs by default, and the tracking and mapping threads each have their own stream.
# SLAM's matrix products are tiny (8 x 81920 normal-equation bands, N x 3 x 3 transforms) and need
# no split-K scratch to speak of, so 128 KiB is plenty (the cuBLAS documentation's small setting);
# cuBLASLt (addmm with a bias) gets the same cap. Must be set before the first cuBLAS call; values
# the user set are kept.
CUBLAS_WORKSPACE = ":16:8"
CUBLASLT_WORKSPACE_KIB = "128"


def limit_cublas_workspace() -> None:
    """Cap the per-stream cuBLAS and cuBLASLt workspaces (see ``CUBLAS_WORKSPACE``) unless already
    configured."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    os.environ.setdefault("CUBLASLT_WORKSPACE_SIZE", CUBLASLT_WORKSPACE_KIB)


def resolve_device(name: str) -> torch.device:
    """'auto' -> cuda if available else cpu; anything else as given (checked)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"system.device is '{name}' but CUDA is not available on this machine")
    return dev


@dataclass
class _KeyframeMsg:
    keyframe: Keyframe


class SlamSystem:
    """Build from a ``Config``; call ``run(frames)``; read ``recorder``, ``smap``, ``store``."""

    def __init__(self, cfg: Config, device: Optional[torch.device] = None) -> None:
        self.cfg = cfg
        self.device = device or resolve_device(cfg.system.device)
        # Keyframes are stored at the tracking resolution unless the config says otherwise.
        self._keyframe_downscale = cfg.mapping.keyframe_downscale or cfg.tracking.downscale
        # Frames go to the device already at the tracking resolution (``observation``), so
        # tracker and relocaliser see downscale 1.
        self._track_cfg = replace(cfg.tracking, downscale=1)
        if self.device.type == "cuda":
            limit_cublas_workspace()
        torch.manual_seed(cfg.system.seed)
        if self.device.type == "cpu" and cfg.system.threaded:
            # Tracking and mapping each run CPU kernels at the same time: split the cores between
            # them. Oversubscribed OpenMP teams spin-wait on descheduled threads and run several
            # times slower than one thread each (measured: 3.5x on 2 cores).
            torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
        backend = cfg.raster.backend
        self.smap = SphereMap(
            self.device, cfg.map.max_spheres, cfg.map.max_mb, cfg.map.chunk,
            lrs={"means": cfg.mapping.lr_means, "radii": cfg.mapping.lr_radii,
                 "colors": cfg.mapping.lr_colors, "opacities": cfg.mapping.lr_opacities},
        )
        self.store = KeyframeStore(cfg.mapping.max_keyframes, seed=cfg.system.seed)
        self.tracker = Tracker(self._track_cfg, backend)
        self.selector = KeyframeSelector(cfg.mapping)
        self.mapper = Mapper(cfg.mapping, cfg.pruner, self.smap, self.store, backend, seed=cfg.system.seed)
        self.recorder = RunRecorder()
        self.frame_hooks: list[Callable[[Frame, FrameRecord, Optional[MapSnapshot]], None]] = []
        self._map_ready = threading.Event()
        self._errors: list[BaseException] = []
        self._aborted = False
        self._frames_ch = Channel(cfg.system.queue_size)
        self._kf_ch = Channel(cfg.system.queue_size)
        # --- saved-map modes (issue 5): set by use_saved_map ---
        self.mode = "slam"                  # "slam" | "localize" (frozen map) | "continue"
        self.saved_keyframes: list = []     # localize: the saved map's keyframes (written back as they were)
        self.relocaliser = None             # slam.tracking.relocalise.Relocaliser while the start pose is unknown
        self.relocalised = False
        self.reloc_results: list = []       # one RelocResult per relocalisation attempt
        self.relocalise_after = 5           # consecutive tracking failures on a saved map -> relocalise again
        self.lost_relocalise_after = 2      # SLAM mode: consecutive failures before relocalising
        self.retry = RetrySchedule()        # spaces out relocalisation attempts while lost
        self._lost_slam = 0
        self._lost = 0

    # ------------------------------------------------------------------ steps shared by both modes
    def observation(self, frame: Frame) -> Observation:
        """``frame`` on the device at the tracking resolution (input / ``tracking.downscale``):
        what the tracker and the relocaliser see. The full-resolution images are freed before
        tracking starts, so they never sit next to the tracker's Jacobian."""
        obs = Observation.from_numpy(frame.color, frame.depth, frame.K, self.device)
        return obs.downsampled(self.cfg.tracking.downscale)

    def _track_frame(self, frame: Frame) -> tuple[FrameRecord, Optional[Keyframe]]:
        t0 = time.perf_counter()
        obs = self.observation(frame)
        snap = self.smap.latest()
        if snap is None:  # first frame: it defines the world (ground-truth frame when known)
            T_wc = frame.gt_pose.copy() if frame.gt_pose is not None else np.eye(4)
            self.tracker.initialise(T_wc)
            ok, recovered, loss = True, False, 0.0
        elif self.relocaliser is not None and not self.relocalised:  # saved map, start pose unknown
            _wait_for(snap)
            if self.retry.should_try():
                T_wc, ok, recovered, loss = self._relocalise(obs, snap, frame.index)
            else:  # lost and waiting before the next attempt: report the last pose, not tracked
                T_wc, ok, recovered, loss = self.tracker.last_good_or_identity(), False, False, float("inf")
        else:
            _wait_for(snap)
            res = self.tracker.track(obs, snap)
            T_wc, ok, recovered, loss = res.T_wc, res.ok, res.recovered, res.loss
            if self.relocaliser is not None:
                ok = self._watch_tracking(ok and self.relocaliser.verify(obs, snap, T_wc))
            elif not ok:
                T_wc, ok, recovered, loss = self._recover_lost(obs, snap, frame.index, (T_wc, ok, recovered, loss))
            else:
                self._lost_slam = 0
        if self.mode == "slam":
            is_kf = self.selector.is_keyframe(T_wc, ok)
        else:  # saved map: only verified poses make keyframes (localize: of the local layer)
            is_kf = ok and self.selector.is_keyframe(T_wc, ok)
        ms = (time.perf_counter() - t0) * 1e3
        rec = FrameRecord(frame.index, frame.timestamp, T_wc, frame.gt_pose, ok, recovered, loss, ms, is_kf)
        self.recorder.add_frame(rec)
        for hook in self.frame_hooks:
            hook(frame, rec, snap)
        kf = Keyframe.from_frame(frame, T_wc, self._keyframe_downscale) if is_kf else None
        return rec, kf

    def _map_keyframe(self, kf: Keyframe) -> None:
        report = self.mapper.add_keyframe(kf)
        self.recorder.add_mapping(report, current_rss_mb(), self.store.nbytes() / 1e6,
                                  gpu_memory_sample(self.device))
        self._map_ready.set()

    # ------------------------------------------------------------------ saved maps (issue 5)
    def use_saved_map(self, map_path, mode: str) -> None:
        """Start from a saved map (``slam.map.map_io.load_saved_map``: the PLY and its keyframe side
        file; its keyframes join the keyframe store). ``localize`` keeps the saved spheres frozen
        (never optimised nor pruned, written back unchanged) and maps only a local layer of new
        spheres where the view leaves the saved map, so tracking bridges unmapped views (like
        visual odometry in a feature-based localisation mode); ``continue`` maps on top of the
        saved map and changes it. The start pose is unknown either way:
        frames are relocalised (``slam.tracking.relocalise``) until one is verified, then tracked. Call
        before ``run``. Raises ``FileNotFoundError`` / ``slam.map.map_io.MapFormatError``."""
        if mode not in ("localize", "continue"):
            raise ValueError(f"saved-map mode must be 'localize' or 'continue', got '{mode}'")
        from slam.map.map_io import load_saved_map
        from slam.tracking.relocalise import Relocaliser

        rows, keyframes = load_saved_map(map_path)
        self.smap.load_rows(rows)
        if mode == "localize":
            self.smap.frozen = int(rows.shape[0])
            self.saved_keyframes = list(keyframes)
        self.smap.publish()
        for kf in keyframes:  # continue: the mapper's window; both: the run folder stays self-contained
            self.store.add(kf)
        self.relocaliser = Relocaliser(keyframes, self._track_cfg, self.cfg.raster.backend)
        self.mode = mode
        log.info("saved map %s: %d spheres, %d keyframes, mode %s", map_path, rows.shape[0], len(keyframes), mode)

    def _relocalise(self, obs: Observation, snap: MapSnapshot, index: int) -> tuple[np.ndarray, bool, bool, float]:
        res = self.relocaliser.relocalise(obs, snap)
        res.frame = index
        self.reloc_results.append(res)
        log.info("relocalisation attempt %d: %s (inliers %.2f, %.0f ms, from saved keyframe %d)",
                 len(self.reloc_results), "found" if res.ok else "not found", res.inliers, res.ms, res.keyframe)
        if res.ok:
            self.tracker.initialise(res.T_wc)
            self.relocalised = True
            self.retry.succeeded()
        else:
            self.retry.failed()
        return res.T_wc, res.ok, False, res.loss

    def _watch_tracking(self, ok: bool) -> bool:
        """On a saved map, ``ok`` = the tracker passed and the map agrees with the frame at its
        pose. After ``relocalise_after`` consecutive failures, relocalise again. Returns ``ok``."""
        self._lost = 0 if ok else self._lost + 1
        if self._lost >= self.relocalise_after:
            log.warning("tracking lost for %d frames: relocalising against the saved map", self._lost)
            self.relocalised, self._lost = False, 0
        return ok

    def map_to_save(self) -> tuple[torch.Tensor, list]:
        """(rows (M, 8), keyframes) for map.ply and its side file: in localize mode the saved map
        as loaded (the local layer is dropped), otherwise the whole live map and keyframe store."""
        if self.mode == "localize":
            return self.smap.params[: self.smap.frozen], list(self.saved_keyframes)
        return self.smap.active(), list(self.store.items)

    # --- end of saved-map modes ---
    def _recover_lost(self, obs: Observation, snap: MapSnapshot, index: int, failed: tuple) -> tuple:
        """SLAM mode: after ``lost_relocalise_after`` consecutive failures (the tracker's own
        recovery did not work: a jump, a long dropout), relocalise against the keyframes mapped
        so far. Returns the relocalised (T_wc, ok, recovered, loss) or ``failed`` unchanged."""
        self._lost_slam += 1
        if self._lost_slam < self.lost_relocalise_after or len(self.store) == 0:
            return failed
        if float((obs.depth > 0).float().mean()) < self.cfg.tracking.min_known_fraction:
            return failed  # a dropout (black / depth-less frame): nothing to relocalise with
        if not self.retry.should_try():
            return failed
        from slam.tracking.relocalise import Relocaliser

        keyframes = list(self.store.items)  # a copy: the mapper may add or drop keyframes meanwhile
        res = Relocaliser(keyframes, self._track_cfg, self.cfg.raster.backend).relocalise(obs, snap)
        res.frame = index
        self.reloc_results.append(res)
        log.warning("tracking lost for %d frames: relocalisation against %d keyframes %s (%.0f ms)",
                    self._lost_slam, len(keyframes), "succeeded" if res.ok else "failed", res.ms)
        if not res.ok:
            self.retry.failed()
            return failed
        self.retry.succeeded()
        self._lost_slam = 0
        self.tracker.initialise(res.T_wc)
        self.tracker.recoveries += 1
        return res.T_wc, True, True, res.loss

    # ------------------------------------------------------------------ run
    def run(self, frames: Iterable[Frame], progress: Optional[Callable[[FrameRecord], None]] = None) -> RunRecorder:
        """Process every frame; returns the recorder. Re-raises the first stage error (after
        stopping every stage); ``KeyboardInterrupt`` stops cleanly and is re-raised too."""
        try:
            if self.cfg.system.threaded:
                self._run_threaded(frames, progress)
            else:
                self._run_sequential(frames, progress)
        finally:
            self.recorder.finish()
        return self.recorder

    def _finish_map(self) -> None:
        """End of input: the final refinement over all keyframes (not on Ctrl-C or errors)."""
        if self.cfg.mapping.final_iters > 0 and self.mode != "localize":  # localize: the saved map stays frozen
            t0 = time.perf_counter()
            loss = self.mapper.refine(self.cfg.mapping.final_iters)
            self.recorder.refine_s = time.perf_counter() - t0
            log.info("final refinement: %d steps in %.1f s, loss %.4f", self.cfg.mapping.final_iters,
                     time.perf_counter() - t0, loss)

    def _run_sequential(self, frames, progress) -> None:
        try:
            for frame in frames:
                rec, kf = self._track_frame(frame)
                if kf is not None:
                    self._map_keyframe(kf)
                if progress:
                    progress(rec)
            self._finish_map()
        except KeyboardInterrupt:
            self.recorder.finish("interrupted (Ctrl-C)")
            raise
        except Exception as exc:
            self.recorder.finish(f"error: {type(exc).__name__}: {exc}")
            raise

    def _run_threaded(self, frames, progress) -> None:
        tracking = threading.Thread(target=self._guard, args=(self._tracking_loop, progress), name="tracking", daemon=True)
        mapping = threading.Thread(target=self._guard, args=(self._mapping_loop,), name="mapping", daemon=True)
        tracking.start()
        mapping.start()
        try:
            for frame in frames:
                if self._errors:
                    break
                self._frames_ch.put(frame)
            self._frames_ch.close()
        except Closed:
            pass  # a stage failed and aborted the channels
        except KeyboardInterrupt:
            self.recorder.finish("interrupted (Ctrl-C)")
            self._abort()
            tracking.join()
            mapping.join()
            raise
        except BaseException as exc:  # the source itself failed
            self._errors.append(exc)
            self._abort()
        tracking.join()
        mapping.join()
        if self._errors:
            exc = self._errors[0]
            self.recorder.finish(f"error: {type(exc).__name__}: {exc}")
            raise exc

    def _guard(self, loop, *args) -> None:
        stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        try:
            with torch.cuda.stream(stream) if stream is not None else nullcontext():
                loop(*args)
        except Closed:
            pass
        except BaseException as exc:  # noqa: BLE001 - every stage error must reach the caller
            log.error("%s thread failed: %s: %s", threading.current_thread().name, type(exc).__name__, exc)
            self._errors.append(exc)
            self._abort()

    def _abort(self) -> None:
        self._aborted = True
        self._frames_ch.abort()
        self._kf_ch.abort()
        self._map_ready.set()

    def _tracking_loop(self, progress) -> None:
        try:
            while True:
                frame = self._frames_ch.get()
                rec, kf = self._track_frame(frame)
                if kf is not None:
                    self._kf_ch.put(_KeyframeMsg(kf))
                    if self.smap.latest() is None:
                        self._map_ready.wait()  # the first keyframe must be mapped before tracking
                if progress:
                    progress(rec)
        finally:
            self._kf_ch.close()

    def _mapping_loop(self) -> None:
        while True:
            try:
                msg = self._kf_ch.get()
            except Closed:
                if not self._errors and not self._aborted:
                    self._finish_map()
                return
            self._map_keyframe(msg.keyframe)


def _wait_for(snap: MapSnapshot) -> None:
    """Make the current CUDA stream wait for the snapshot's producer and keep its memory alive."""
    if snap.means.is_cuda:
        stream = torch.cuda.current_stream(snap.means.device)
        if snap.ready is not None:
            stream.wait_event(snap.ready)
        for t in (snap.means, snap.radii, snap.colors, snap.opacities):
            t.record_stream(stream)
