"""The one-screen summary of a run (``run_slam``, the ROS nodes), read from its metrics dict.

Every figure that is missing says why beside its ``n/a`` (no ground truth, a CPU run, not
evaluated, ...); lists that are empty are left out rather than printed as ``{}``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from slam.eval.failures import MAX_SHIFT_M, MAX_TURN_DEG


def _num(value, fmt: str, scale: float = 1.0, why: str = "") -> str:
    """``value * scale`` formatted, or ``n/a (why)``."""
    if value is None:
        return f"n/a ({why})" if why else "n/a"
    return fmt.format(value * scale)


def trajectory_na_reason(metrics: dict) -> str:
    """Why the run has no ATE: evaluation failed, not evaluated, or too little ground truth."""
    if metrics.get("trajectory_error"):
        return f"evaluation failed: {metrics['trajectory_error']}"
    if "trajectory" not in metrics:
        return "not evaluated"
    with_gt = metrics.get("frames_with_ground_truth")
    if not with_gt:
        return "no ground truth in this sequence"
    return f"only {with_gt} frames with ground truth, 3 needed"


def images_na_reason(metrics: dict) -> str:
    """Why the run has no PSNR / SSIM."""
    if metrics.get("images_error"):
        return f"evaluation failed: {metrics['images_error']}"
    if "images" not in metrics:
        return "not evaluated: output.eval_images_every is off"
    return "no keyframe was mapped"


def _ate_line(metrics: dict) -> str:
    ate = (metrics.get("trajectory") or {}).get("ate_rmse_m")
    if ate is None:
        return f"ATE RMSE          n/a ({trajectory_na_reason(metrics)})"
    tracked = (metrics.get("trajectory_tracked") or {}).get("ate_rmse_m")
    return (f"ATE RMSE          {ate * 100:.2f} cm (all frames, SE(3)-aligned; as tracked, before the final "
            f"keyframe poses: {_num(tracked, '{:.2f} cm', 100, trajectory_na_reason(metrics))})")


def _images_line(metrics: dict) -> str:
    img = metrics.get("images") or {}
    if img.get("psnr") is None:
        return f"PSNR / SSIM       n/a ({images_na_reason(metrics)})"
    return (f"PSNR / SSIM       {img['psnr']:.2f} dB / {img['ssim']:.3f} "
            f"({_num(img.get('psnr_valid_depth'), '{:.2f} dB')} where the depth is valid; depth L1 "
            f"{_num(img.get('depth_l1_m'), '{:.2f} cm', 100, 'no valid depth')}) on keyframes")


def _loop_line(loop: dict) -> str:
    rejected = f"{loop['rejected']} rejected"
    if loop.get("rejected_by"):
        rejected += " (" + ", ".join(f"{why}: {n}" for why, n in sorted(loop["rejected_by"].items())) + ")"
    if "loops_closed" not in loop:      # metrics.json from before issue 32
        return (f"loop closure      {loop['candidates']} candidates verified: {loop['accepted']} closed, "
                f"{loop['consistent']} already consistent, {rejected}")
    deferred = f", {loop['deferred']} deferred" if loop.get("deferred") else ""
    return (f"loop closure      {loop['candidates']} candidates, {loop['verified']} verified: "
            f"{loop['loops_closed']} loops closed ({loop['accepted']} detections), {loop['consistent']} "
            f"already consistent{deferred}, {rejected}")


def _relocalisation_line(r: dict) -> str:
    """Saved map: how the start pose was found; SLAM: what the attempts while lost cost (they run
    off the tracking thread, so they cost the frames flagged meanwhile, not a stall)."""
    if r["mode"] != "slam":
        found = f"found at frame {r['frames_to_relocalise']}" if r["found"] else "NOT found"
        return (f"relocalisation    {found} ({r['attempts']} attempts, {r['ms_total'] / 1e3:.1f} s; "
                f"{r['relocalisations_later']} later)")
    return (f"relocalisation    {r['attempts']} attempts while lost, {r['succeeded']} found the camera; "
            f"{r['ms_mean']:.0f} ms each on average (max {r['ms_max']:.0f} ms), off the tracking thread")


def summary_text(metrics: dict, run_dir: Path, stopped: Optional[str] = None) -> str:
    """A one-screen summary of a run. ``stopped`` replaces the stop reason of the metrics (a
    caller that prints the error itself says here that the run stopped early)."""
    no_frames = "no frame was tracked"
    waited = metrics.get("tracking_waited_for_map_s")
    for_frames = metrics.get("tracking_waited_for_frames_s")
    lines = [
        f"run folder        {run_dir}",
        f"stopped           {stopped or metrics.get('stop_reason')}",
        f"frames            {metrics.get('frames')} tracked, {metrics.get('keyframes')} keyframes, "
        f"{metrics.get('skipped_frames')} skipped",
        _ate_line(metrics),
        _images_line(metrics),
        f"speed             {_num(metrics.get('fps_system'), '{:.1f} FPS', why=no_frames)} system, "
        f"{_num(metrics.get('fps_tracking'), '{:.1f} FPS', why=no_frames)} tracking alone"
        + (f", tracker waited {waited:.1f} s for the mapper" if waited is not None else "")
        + (f", {for_frames:.1f} s for frames" if waited is not None and for_frames is not None else ""),
        f"map               {metrics.get('spheres')} spheres, {_num(metrics.get('map_mb'), '{:.1f} MB')}",
        f"memory            peak GPU {_num(metrics.get('peak_gpu_mb'), '{:.0f} MB', why='CPU run')}, "
        f"peak process {_num(metrics.get('peak_rss_mb'), '{:.0f} MB', why='not measurable here')}",
        f"tracking          {metrics.get('tracking_failures')} failures, {metrics.get('tracking_recoveries')} recoveries, "
        f"{(metrics.get('reinit') or {}).get('frames', 0)} re-initialised from features (gaps, failed fast motion)",
    ]
    if (metrics.get("final_refine_s") or 0) >= 0.1:
        lines.insert(6, f"final refinement  {metrics['final_refine_s']:.1f} s after the last frame (not in the FPS)")
    if metrics.get("relocalisation"):
        lines.append(_relocalisation_line(metrics["relocalisation"]))
    detector = metrics.get("quality_detector")
    if detector:
        lines.append(f"quality test      {detector['flagged']} frames flagged: {detector['hits']} truly off, "
                     f"{detector['false_alarms']} false alarms (by ground truth)")
    loop = metrics.get("loop_closure")
    if loop:
        lines.append(_loop_line(loop))
    kc = metrics.get("keyframe_depth_consistency")
    if kc:
        worst = ", ".join(f"{a}->{b} {mm:.1f} mm" for a, b, mm in kc["worst"])
        lines.append(f"depth agreement   consecutive keyframes at their poses: median {kc['median_mm']:.1f} mm, "
                     f"{kc['within_1cm']:.0%} within 1 cm (no ground truth needed)" + (f"; worst {worst}" if worst else ""))
    rc = metrics.get("revisit_depth_consistency")
    if rc:
        at = lambda key: "n/a" if rc.get(key) is None else f"{rc[key]:.1f} mm"  # noqa: E731
        lines.append(f"                  places seen again ({rc['pairs']} keyframe pairs): median {at('final_mm')} "
                     f"at the final poses, {at('as_tracked_mm')} as tracked, {at('ground_truth_mm')} at the "
                     "ground truth's")
    silent = metrics.get("silent_failures")
    if silent is not None:
        lines.append(f"silent failures   {silent['count']} of {silent['checked']} frames reported ok "
                     f"(motion off ground truth by > {MAX_SHIFT_M * 100:.0f} cm / {MAX_TURN_DEG:.0f} deg)"
                     f"{': ' + str(silent['frames'][:10]) if silent['count'] else ''}")
    return "\n".join(lines)
