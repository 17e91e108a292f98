"""``RunResult``: the narrow, read-only view of a finished (or stopped) run that the run folder,
the metrics and the wrappers read, instead of reaching into ``SlamSystem``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from slam.grid.occupancy import GridSnapshot
from slam.map.snapshot import MapSnapshot
from slam.runtime.recorder import RunRecorder


@dataclass(frozen=True)
class RunResult:
    """recorder: the per-frame and per-keyframe records; device, backend: where the run rendered;
    mode: "slam" | "localize" | "continue"; map_rows: (M, 8) parameter rows to save
    (``slam.map.sphere_map`` layout; in localize mode the saved map as loaded) with
    map_keyframes, their side file's keyframes; keyframes: every keyframe in the store (image
    metrics, mesh); snapshot: the last published map (None if nothing was mapped); spheres,
    sphere_budget, max_spheres_seen: live / allowed / most-ever sphere counts; map_bytes,
    keyframe_store_bytes: memory of the map's rows and of the stored keyframes; relocalisations:
    every relocalisation attempt's ``RelocResult``; tracking_profile: GPU ms, host ms and kernel
    launches per tracked frame over the profiled window (CUDA only, ``slam.runtime.profiling``);
    map_anchors: (M,) int32 anchor keyframe ids of map_rows; loop: the loop stage's summary (None
    without one); pose_refinement: keyframe pose refinement and applied loop corrections; grid:
    the latest occupancy grid (``slam.grid.occupancy.GridSnapshot``; None when ``grid.enabled``
    is off or before the floor is known), grid_stats: its builder's figures."""

    recorder: RunRecorder
    device: torch.device
    backend: str
    mode: str
    map_rows: torch.Tensor
    map_keyframes: list
    keyframes: list
    snapshot: Optional[MapSnapshot]
    spheres: int
    sphere_budget: int
    max_spheres_seen: int
    map_bytes: int
    keyframe_store_bytes: int
    relocalisations: list
    tracking_profile: Optional[dict] = None
    map_anchors: Optional[torch.Tensor] = None
    loop: Optional[dict] = None
    pose_refinement: Optional[dict] = None
    grid: Optional[GridSnapshot] = None
    grid_stats: Optional[dict] = None
