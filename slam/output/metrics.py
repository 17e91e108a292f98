"""Metrics of a finished (or stopped) run: accuracy, rendering quality, speed, memory, map size."""
from __future__ import annotations

import logging
from typing import Optional

import numpy as np
import torch

from slam.eval.depth_consistency import keyframe_consistency, revisit_consistency
from slam.eval.failures import quality_detector, silent_failures
from slam.eval.images import depth_l1, psnr, ssim
from slam.eval.stats import nanmedian
from slam.eval.trajectory import evaluate_trajectory
from slam.map.keyframes import KeyframeView
from slam.runtime.recorder import peak_rss_mb
from slam.runtime.result import RunResult
from slam.tracking.relocalise import summarise

log = logging.getLogger("slam.metrics")


def trajectory_metrics(frames: list) -> dict:
    """ATE / RPE (through evo, SE(3) Umeyama alignment, no scale) of the estimated poses against
    the ground truth carried by the frames, over all frames and over keyframes."""
    out: dict = {"trajectory": None, "trajectory_keyframes": None, "trajectory_ok": None, "trajectory_tracked": None}
    subsets = (("trajectory", frames), ("trajectory_keyframes", [f for f in frames if f.keyframe]),
               ("trajectory_ok", [f for f in frames if f.ok]), ("trajectory_tracked", frames))
    scopes = {"trajectory": "all frames", "trajectory_keyframes": "keyframes", "trajectory_ok": "frames reported ok",
              "trajectory_tracked": "all frames, poses as tracked (before the final keyframe poses: refinement "
                                    "and loop closure)"}
    out["frames_with_ground_truth"] = sum(1 for f in frames if f.gt_pose is not None)
    for key, subset in subsets:
        with_gt = [f for f in subset if f.gt_pose is not None]
        if len(with_gt) < 3:
            continue
        stamps = np.array([f.timestamp for f in with_gt])
        poses = [f.T_wc_as_tracked if key == "trajectory_tracked" else f.T_wc for f in with_gt]
        out[key] = evaluate_trajectory(np.stack(poses), stamps, np.stack([f.gt_pose for f in with_gt]), stamps,
                                       scope=scopes[key])
    out["silent_failures"] = silent_failures(frames)
    out["quality_detector"] = quality_detector(frames)
    return out


@torch.no_grad()
def image_metrics(result: RunResult, every: int = 1) -> Optional[dict]:
    """PSNR / SSIM / depth L1 of the final map rendered at the estimated keyframe poses,
    against the stored keyframe images (at the keyframe store's resolution). ``psnr`` counts
    every pixel; ``psnr_valid_depth`` only those with valid observed depth, where the map is
    seeded and optimised (no sphere can explain a pixel without depth: on a Kinect v1 frame with
    30 % of its depth missing that share alone held the whole-image PSNR near 12 dB on a
    keyframe the map fitted to 41 dB elsewhere). The map renders on its device; the images are
    compared on the host: on CUDA the comparison's operations (powers, logarithms, SSIM's
    filters) would each load their kernels into host memory for this one use at the end of the
    run (docs/benchmarks.md#host-memory)."""
    snap = result.snapshot
    kfs = result.keyframes[::every]
    if snap is None or not kfs:
        return None
    host = torch.device("cpu")
    vals = {"psnr": [], "psnr_valid_depth": [], "ssim": [], "depth_l1_m": []}
    for kf in kfs:
        view = KeyframeView.upload(kf, host)
        obs = view.observation()
        out = snap.render(obs.K, obs.width, obs.height, T_wc=kf.T_wc, backend=result.backend)
        color, depth = out.color.to(host).clamp(0, 1), out.depth.to(host)
        vals["psnr"].append(float(psnr(color, obs.color)))
        vals["psnr_valid_depth"].append(float(psnr(color, obs.color, mask=view.valid)))  # the mapper's mask
        vals["ssim"].append(float(ssim(color, obs.color)))
        vals["depth_l1_m"].append(float(depth_l1(depth, obs.depth)))
    res = {k: float(np.mean(v)) for k, v in vals.items()}
    res["keyframes"] = len(kfs)
    res["protocol"] = ("final map rendered at the estimated keyframe poses vs the stored keyframe images; "
                       "mean over keyframes; psnr over every pixel, psnr_valid_depth and depth L1 over "
                       "the pixels with valid observed depth")
    return res


def _reasons(frames: list) -> dict:
    """How many frames failed for each kind of reason (reasons read 'kind: details')."""
    out: dict = {}
    for f in frames:
        if f.reason:
            kind = f.reason.split(":")[0]
            out[kind] = out.get(kind, 0) + 1
    return out


def _reinit_summary(frames: list) -> dict:
    """Frames whose motion prior was not trusted and the coarse-pose search's cost (its budget)."""
    hit = [f for f in frames if f.reinit]
    kinds: dict = {}
    for f in hit:
        kind = f.reinit.split(" (")[0].split(" of ")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    ms = [f.reinit_ms for f in hit]
    return {"frames": len(hit), "reasons": kinds, "ms_total": float(sum(ms)),
            "ms_mean": float(np.mean(ms)) if ms else None}


def _quality_summary(frames: list) -> Optional[dict]:
    """Median of each quality figure over the tracked frames (per frame: frames.csv)."""
    qs = [f.quality for f in frames if f.quality is not None]
    if not qs:
        return None
    keys = qs[0].as_dict().keys()
    return {k: nanmedian([getattr(q, k) for q in qs]) for k in keys}


def _round_or_none(x: float):
    return None if x != x else round(float(x), 1)


def _grid_summary(result: RunResult) -> Optional[dict]:
    """metrics.json -> grid: the builder's figures, the grid's size and its frame in the world."""
    if result.grid_stats is None:
        return None
    out = dict(result.grid_stats)
    g = result.grid
    if g is not None and g.floor is not None:
        out.update({"resolution_m": g.resolution, "size_cells": list(g.shape), "origin_m": list(g.origin_xy),
                    "T_world_floor": g.floor.T_world_floor().round(6).tolist(),
                    "known_cells": int((g.occupancy >= 0).sum())})
    return out


def collect_metrics(result: RunResult, source_stats=None, eval_images_every: Optional[int] = 1,
                    evaluate_trajectory: bool = True) -> dict:
    """Everything that goes into metrics.json. ``eval_images_every``: evaluate PSNR/SSIM on every
    n-th keyframe (``output.eval_images_every``); None skips the image metrics;
    ``evaluate_trajectory=False`` skips ATE/RPE and the silent failures (partial metrics)."""
    rec = result.recorder
    frames, mapping, counts = rec.snapshot()
    m = {**_run_summary(result, frames, source_stats), **_speed(result, frames, mapping),
         **_tracking_outcome(frames), **_map_and_memory(result, mapping, counts)}
    _add_evaluations(m, result, frames, eval_images_every, evaluate_trajectory)
    return m


def _run_summary(result: RunResult, frames, source_stats) -> dict:
    """Why the run stopped, where it ran, its frames and keyframes, the input's skipped frames."""
    rec = result.recorder
    return {
        "stop_reason": rec.stop_reason,
        "device": str(result.device),
        "frames": len(frames),
        "keyframes": sum(1 for f in frames if f.keyframe),
        "skipped_frames": getattr(source_stats, "skipped", 0) if source_stats is not None else 0,
        "dropped_frames": getattr(source_stats, "dropped", 0) if source_stats is not None else 0,
        "skip_reasons": list(getattr(source_stats, "skip_reasons", [])[:20]) if source_stats is not None else [],
        "wall_s": rec.wall_s,
        "final_refine_s": rec.refine_s,
    }


def _speed(result: RunResult, frames, mapping) -> dict:
    """Frame rates, the tracker's waits, the run's timeline and the per-frame and per-stage costs."""
    rec = result.recorder
    track_ms = np.array([f.track_ms for f in frames]) if frames else np.zeros(0)
    map_ms = np.array([m.ms for m in mapping]) if mapping else np.zeros(0)
    prof = result.tracking_profile
    return {
        # Whole-system rate over the stream (tracking + mapping threads, queues, I/O); the final
        # refinement after the last frame is reported separately, not counted in the rate.
        "fps_system": len(frames) / (rec.wall_s - rec.refine_s) if rec.wall_s > rec.refine_s and frames else None,
        "fps_tracking": len(frames) / (track_ms.sum() / 1e3) if track_ms.sum() > 0 else None,
        # Threaded: seconds the tracker waited for the mapper (system.max_unmapped_keyframes) and
        # for its next frame (the source and the caller's thread behind it; the first frame's
        # wait, the source's start, also alone).
        "tracking_waited_for_map_s": rec.map_wait_s,
        "tracking_waited_for_frames_s": rec.frame_wait_s,
        "tracking_waited_for_first_frame_s": rec.first_frame_wait_s,
        # start (to the second frame's record: the first keyframe mapped) / frames (to the last
        # record) / end (after it, the final refinement left out): they add up to the time
        # fps_system divides by (RunRecorder.timeline_s)
        "timeline_s": rec.timeline_s(),
        "per_tracked_frame": {
            "renders": float(np.mean([f.renders for f in frames])) if frames else None,
            "host_ms": float(np.nanmean([f.host_ms for f in frames])) if frames else None,
            **({"gpu_ms": prof["gpu_ms"], "launches": prof["launches"], "host_launches": prof["host_launches"],
                "host_waits": prof["host_waits"], "profiled_host_wait_ms": prof["host_wait_ms"],
                "profiled_replays": prof["frames"], "profiled_host_ms": prof["host_ms"]} if prof else {}),
        },
        "stage_ms": {
            "tracking_mean": float(track_ms.mean()) if track_ms.size else None,
            "tracking_p95": float(np.percentile(track_ms, 95)) if track_ms.size else None,
            "mapping_mean": float(map_ms.mean()) if map_ms.size else None,
            "mapping_total": float(map_ms.sum()),
            "loop_per_keyframe": (result.loop or {}).get("ms_per_keyframe"),
        },
    }


def _tracking_outcome(frames) -> dict:
    """Frames flagged and recovered, why, the re-initialisations and the quality test's figures."""
    return {
        "tracking_failures": sum(1 for f in frames if not f.ok),
        "tracking_recoveries": sum(1 for f in frames if f.recovered),
        "failure_reasons": _reasons(frames),
        "reinit": _reinit_summary(frames),
        "quality": _quality_summary(frames),
    }


def _map_and_memory(result: RunResult, mapping, counts) -> dict:
    """The map (spheres, budget, pruning), the other threads' summaries and the memory figures."""
    rec = result.recorder
    return {
        # keyframes where a step graph's render ran out of pair room (slam/mapping/step_graph.py)
        "mapping_pair_overflows": sum(1 for m in mapping if m.pair_overflow),
        "spheres": result.spheres,
        "sphere_budget": result.sphere_budget,
        "max_spheres_seen": result.max_spheres_seen,
        "map_mb": result.map_bytes / 1e6,
        "sphere_counts": [[int(i), int(c)] for i, c in counts],
        # [frame, process RSS, keyframe store, GPU allocated, GPU peak so far] MB
        "memory_over_time_mb": [[int(row[0])] + [_round_or_none(x) for x in row[1:]] for row in rec.memory_mb],
        "pruned": {
            "low_importance": sum(r.pruned.removed_low for r in mapping),
            "transparent": sum(r.pruned.removed_transparent for r in mapping),
            "oversized": sum(r.pruned.removed_oversized for r in mapping),
            "budget": sum(r.pruned.removed_budget for r in mapping),
        },
        "keyframe_store_mb": result.keyframe_store_bytes / 1e6,
        "pose_refinement": result.pose_refinement,
        "loop_closure": result.loop,
        "grid": _grid_summary(result),
        "peak_rss_mb": peak_rss_mb(),
        "peak_gpu_mb": (torch.cuda.max_memory_allocated(result.device) / 1e6) if result.device.type == "cuda" else None,
    }


def _add_evaluations(m: dict, result: RunResult, frames, eval_images_every: Optional[int],
                     evaluate_trajectory: bool) -> None:
    """Adds the evaluations to ``m``: trajectory (ATE, RPE, silent failures), depth consistency,
    relocalisation, images. Evaluation must never cost the run its outputs: a failure is logged
    (and for the trajectory and the images recorded as ``<name>_error``), not raised."""
    def put(key: Optional[str], what: str, evaluate, error_key: Optional[str] = None) -> None:
        """m[key] = evaluate() (key None: m.update); a failure logged as ``what``."""
        try:
            value = evaluate()
        except Exception as exc:  # noqa: BLE001
            log.error("%s failed: %s: %s", what, type(exc).__name__, exc)
            if error_key is not None:
                m[error_key] = f"{type(exc).__name__}: {exc}"
            return
        if key is None:
            m.update(value)
        else:
            m[key] = value

    if evaluate_trajectory:
        put(None, "trajectory evaluation", lambda: trajectory_metrics(frames), "trajectory_error")
        put("keyframe_depth_consistency", "keyframe depth consistency", lambda: keyframe_consistency(result.keyframes))
        put("revisit_depth_consistency", "revisit depth consistency", lambda: revisit_consistency(
            result.keyframes, {f.index: f.T_wc_as_tracked for f in frames},
            {f.index: f.gt_pose for f in frames if f.gt_pose is not None}))
    if result.mode != "slam" or result.relocalisations:
        m["relocalisation"] = summarise(result.relocalisations, result.mode)
    if eval_images_every is not None:
        put("images", "image evaluation", lambda: image_metrics(result, eval_images_every), "images_error")
