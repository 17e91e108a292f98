"""A run folder that survives ``kill -9``: what is written while the run goes.

- ``RunJournal`` (a frame hook, tracking thread) appends each tracked frame to ``trajectory.txt``
  (TUM) and its status and quality to ``frames.csv`` as it is tracked. Every line is handed to
  the OS at once (a killed process loses nothing written); the files are synced to disk at most
  ``SYNC_PERIOD_S`` apart (a power cut loses at most that much).
- ``Autosaver`` (a keyframe hook, mapping thread: the map's one writer) writes ``map.ply``, its
  keyframe side file and a partial ``metrics.json`` every ``output.autosave_every`` keyframes,
  each atomically (written under a temporary name, then renamed): a half-written map never sits
  under the real name.
At the end of the run ``slam.output.run_folder.write_outputs`` replaces all of them atomically with
the final versions.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import logging
import math
import os
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from slam.config import Config
from slam.data.trajectory_io import TUM_COLUMNS, tum_line
from slam.map.map_io import save_map_pair
from slam.output.metrics import collect_metrics
from slam.runtime.result import RunResult

log = logging.getLogger("slam.output")

SYNC_PERIOD_S = 1.0
TRAJECTORY_HEADER = "estimated camera-to-world poses, all frames"
FRAME_COLUMNS = ["index", "timestamp", "status", "keyframe", "loss", "known", "depth_inliers", "color_inliers",
                 "conditioning", "prior_shift_m", "prior_turn_deg", "reinit", "track_ms", "reason"]


def frame_row(rec) -> list:
    """A ``FrameRecord`` as a ``frames.csv`` row (``FRAME_COLUMNS``)."""
    q = rec.quality
    qv = [getattr(q, k, float("nan")) if q is not None else float("nan")
          for k in ("known", "depth_inliers", "color_inliers", "conditioning", "prior_shift_m", "prior_turn_deg")]
    return [rec.index, f"{rec.timestamp:.6f}", rec.status, int(rec.keyframe), f"{rec.loss:.6g}",
            *(f"{v:.4g}" for v in qv), rec.reinit or "", f"{rec.track_ms:.2f}", rec.reason or ""]


def write_frames_csv(path: Path, frames: list) -> None:
    """All ``FrameRecord``s as ``frames.csv``, atomically."""
    tmp = Path(path).with_name(Path(path).name + ".tmp")
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(FRAME_COLUMNS)
        w.writerows(frame_row(f) for f in frames)
    tmp.replace(path)


class RunJournal:
    """Appends tracked frames to ``run_dir/trajectory.txt`` and ``run_dir/frames.csv``."""

    def __init__(self, run_dir: Path) -> None:
        run_dir = Path(run_dir)
        self._traj = open(run_dir / "trajectory.txt", "w", buffering=1)
        self._traj.write(f"# {TRAJECTORY_HEADER}\n{TUM_COLUMNS}\n")
        self._csv_file = open(run_dir / "frames.csv", "w", newline="", buffering=1)
        self._csv = csv.writer(self._csv_file)
        self._csv.writerow(FRAME_COLUMNS)
        self._lock = threading.Lock()
        self._synced = time.monotonic()
        self.closed = False

    def hook(self, frame, rec, snapshot) -> None:
        """Frame hook (``SlamSystem.frame_hooks``): append ``rec``."""
        with self._lock:
            if self.closed:
                return
            self._traj.write(tum_line(rec.timestamp, rec.T_wc) + "\n")
            self._csv.writerow(frame_row(rec))
            self._csv_file.flush()
            now = time.monotonic()
            if now - self._synced >= SYNC_PERIOD_S:
                for f in (self._traj, self._csv_file):
                    os.fsync(f.fileno())
                self._synced = now

    def close(self) -> None:
        with self._lock:
            if not self.closed:
                self.closed = True
                self._traj.close()
                self._csv_file.close()


class Autosaver:
    """Saves the map, its side file and partial metrics every ``output.autosave_every`` keyframes.

    The hook runs on the mapping thread and only takes a ``RunResult`` with the rows copied to the
    host (the map keeps changing); the files are written on a writer thread, so mapping pays the
    copy, not the disk. The writer still competes for the interpreter lock with tracking and
    mapping, so it keeps its CPU work small: the side file uncompressed, the partial metrics
    without the (evo) trajectory evaluation. A save still being written when the next one is due makes that one skip
    (counted). ``close()`` waits for the writer."""

    def __init__(self, run_dir: Path, cfg: Config, result: Callable[[], RunResult], source_stats=None) -> None:
        self.run_dir = Path(run_dir)
        self.cfg = cfg
        self.every = cfg.output.autosave_every
        self.result = result
        self.source_stats = source_stats
        self.keyframes = 0
        self.saves = 0
        self.skipped = 0
        self.hook_s = 0.0     # mapping-thread time spent in the hook
        self.write_s = 0.0    # writer-thread time
        self._writer: Optional[threading.Thread] = None

    def hook(self, report) -> None:
        """Keyframe hook (``SlamSystem.keyframe_hooks``, mapping thread)."""
        self.keyframes += 1
        if self.every <= 0 or self.keyframes % self.every:
            return
        if self._writer is not None and self._writer.is_alive():
            self.skipped += 1
            return
        t0 = time.perf_counter()
        result = self.result()
        anchors = result.map_anchors.detach().cpu().clone() if result.map_anchors is not None else None
        result = dataclasses.replace(result, map_rows=result.map_rows.detach().cpu().clone(), snapshot=None,
                                     map_anchors=anchors)
        self.hook_s += time.perf_counter() - t0
        self._writer = threading.Thread(target=self._write, args=(result, self.keyframes), name="autosave", daemon=True)
        self._writer.start()

    def _write(self, result: RunResult, keyframes: int) -> None:
        t0 = time.perf_counter()
        try:
            rows = result.map_rows
            if self.cfg.output.save_map and rows.shape[0] > 0 and result.map_keyframes:
                # the pair replaced together: a kill -9 never leaves a map with another map's keyframes
                save_map_pair(self.run_dir / "map.ply", rows, result.map_anchors, result.map_keyframes,
                              compress=False)
            metrics = collect_metrics(result, self.source_stats, eval_images_every=None, evaluate_trajectory=False)
            metrics["partial"] = f"autosave after {keyframes} keyframes"
            write_json_atomic(self.run_dir / "metrics.json", metrics)
            self.saves += 1
            log.info("autosaved after %d keyframes (%d spheres)", keyframes, rows.shape[0])
        except Exception as exc:  # noqa: BLE001 - an autosave problem must not stop the run
            log.error("autosave failed: %s: %s", type(exc).__name__, exc)
        self.write_s += time.perf_counter() - t0

    def close(self) -> None:
        """Wait for a save in progress (before the final outputs replace its files)."""
        if self._writer is not None:
            self._writer.join()

    def stats(self) -> dict:
        return {"every_keyframes": self.every, "saves": self.saves, "skipped_busy": self.skipped,
                "mapping_thread_s": self.hook_s, "writer_thread_s": self.write_s}


def jsonable(x):
    """``x`` with numpy scalars as Python numbers and non-finite floats as None (valid JSON)."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


def write_json_atomic(path: Path, data: dict) -> None:
    """Write ``data`` as JSON under a temporary name, then rename it over ``path``."""
    tmp = Path(path).with_name(Path(path).name + ".tmp")
    tmp.write_text(json.dumps(jsonable(data), indent=2) + "\n")
    tmp.replace(path)
