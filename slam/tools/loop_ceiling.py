"""What loop closure could gain on a finished run with ground truth, and whether its measurements
can resolve it. Two questions, answered from the run folder (config.yaml, trajectory.txt,
map.keyframes.npz) and the sequence's ground truth:

1. The ceiling: the run's keyframe pose graph (``slam.loop.pose_graph``, the run's ``loop.*``
   settings) with loop edges of the ground truth's own relative poses between revisits (keyframes
   at least ``--gap`` s apart within ``--distance`` m / ``--angle`` deg at the ground truth's
   poses), ``--edges`` of them at a time; each frame then moves with its keyframe. No loop
   closure does better than perfect measurements of real revisits.
2. The measurements: on the same pairs, the loop stage's own measurement (``LoopVerifier.measure``:
   ICP, RGB-D odometry on a flat view) from the run's relative pose, and RGB-D odometry started
   from the run's and from the ground truth's: each one's error against the ground truth, and how
   far the two starts' results lie apart. Where a measurement is as far from the ground truth as
   the run is, loop edges cannot lower the ATE against that ground truth (it may itself be off).
   Also how well each ICP measurement knows its own error: the squared Mahalanobis distance of the
   ground truth under its information with ``NOISE_INFLATION`` taken out; the median over the
   pairs / the 6-dof chi-square median is the inflation these pairs call for (``slam.loop.information``).

    python -m slam.tools.loop_ceiling runs/kitchen --set data.path=../shared/data/7scenes-... \\
        [--edges 1 5 20 0] [--gap 3 --distance 0.5 --angle 20] [--json out.json]

``--edges 0`` means every pair. Needs gtsam and open3d (as loop closure does).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Optional

import numpy as np

from slam.geometry import invert, motion_size

MAX_TIME_DIFF = 0.02


def relative_error(T_ref: np.ndarray, T: np.ndarray) -> tuple[float, float]:
    """(translation cm, rotation deg) of relative pose T (4, 4) against T_ref (4, 4)."""
    shift_m, turn_deg = motion_size(invert(T_ref) @ T)
    return shift_m * 100.0, turn_deg


def uninflated_chi2(measured, T_true: np.ndarray) -> Optional[float]:
    """e^T I e / NOISE_INFLATION's inverse: the squared Mahalanobis distance of the true relative
    pose T_true (4, 4) from an ICP measurement (``slam.loop.verify.Measurement``) under its
    information without the inflation (e = Logmap(inv(T_ab) T_true), rotation then translation);
    None for other measurements or without information."""
    from slam.geometry import se3_log
    from slam.loop.information import NOISE_INFLATION, mahalanobis2

    if measured is None or measured.information is None or measured.method != "icp":
        return None
    return mahalanobis2(se3_log(invert(measured.T_ab) @ T_true), measured.information) * NOISE_INFLATION


def frames_with_keyframes(stamps: np.ndarray, keyframes: list) -> np.ndarray:
    """(F,) index into ``keyframes`` (sorted by time) of each frame's reference keyframe: the last
    one at or before the frame's timestamp (the first keyframe for earlier frames)."""
    kf_stamps = np.array([k.timestamp for k in keyframes])
    return np.clip(np.searchsorted(kf_stamps, stamps + 1e-6, side="right") - 1, 0, len(keyframes) - 1)


def corrected_trajectory(poses: np.ndarray, ref: np.ndarray, keyframes: list, solved: dict) -> np.ndarray:
    """(F, 4, 4) frames moved with their reference keyframes (``ref`` from ``frames_with_keyframes``)
    from the keyframes' T_wc to ``solved`` (kf_id -> T_wc)."""
    moves = [solved[k.kf_id] @ invert(k.T_wc) for k in keyframes]
    return np.stack([moves[r] @ P for r, P in zip(ref, poses)])


def ground_truth(cfg) -> tuple[np.ndarray, np.ndarray]:
    """(stamps (G,), poses (G, 4, 4)) of the sequence's frames that have ground truth, as the loader
    gives it to them (TUM: interpolated at the colour's time; ``load_ground_truth`` returns the raw
    samples instead); SystemExit without one."""
    from slam.data.sources import open_source

    stamps, poses = [], []
    for frame in open_source(cfg.data):
        if frame.gt_pose is not None:
            stamps.append(frame.timestamp)
            poses.append(frame.gt_pose)
    if not poses:
        raise SystemExit(f"loop_ceiling: {cfg.data.path} has no ground truth")
    return np.array(stamps), np.stack(poses)


def at_stamps(stamps: np.ndarray, poses: np.ndarray, wanted: np.ndarray) -> list:
    """Pose (4, 4) at each of ``wanted`` (s) within MAX_TIME_DIFF, else None."""
    out = []
    for t in wanted:
        k = int(np.argmin(np.abs(stamps - t)))
        out.append(poses[k] if abs(stamps[k] - t) <= MAX_TIME_DIFF else None)
    return out


def measurement_rows(pairs: list, verifier, gt_of: dict) -> list[dict]:
    """Per revisit pair (old a, new b: ``Keyframe``s at the run's final poses): the errors (cm, deg)
    against the ground truth of the run's relative pose, of the loop stage's measurement from it,
    and of RGB-D odometry from the run's and from the ground truth's; the two odometries' gap."""
    from slam.loop.verify import rgbd_odometry

    rows = []
    for a, b in pairs:
        T_gt = invert(gt_of[a.kf_id]) @ gt_of[b.kf_id]
        T_run = invert(a.T_wc) @ b.T_wc
        row = {"a": a.frame_index, "b": b.frame_index, "a_id": a.kf_id, "b_id": b.kf_id,
               "run": relative_error(T_gt, T_run)}
        measured, why = verifier.measure(b, a, T_run)
        row["measure"] = relative_error(T_gt, measured.T_ab) if measured is not None else None
        row["measure_method"] = measured.method if measured is not None else why
        row["chi2"] = uninflated_chi2(measured, T_gt)
        odo_run, odo_gt = rgbd_odometry(b, a, T_run), rgbd_odometry(b, a, T_gt)
        row["rgbd_from_run"] = relative_error(T_gt, odo_run) if odo_run is not None else None
        row["rgbd_from_gt"] = relative_error(T_gt, odo_gt) if odo_gt is not None else None
        row["rgbd_starts_apart"] = (relative_error(odo_gt, odo_run)
                                    if odo_run is not None and odo_gt is not None else None)
        row["measured_T_ab"] = measured
        depth_mm = {"gt": T_gt, "run": T_run, "measure": measured.T_ab if measured is not None else None}
        row["depth_mm"] = {name: _disagreement_mm(a, b, T) for name, T in depth_mm.items() if T is not None}
        rows.append(row)
    return rows


def _disagreement_mm(a, b, T_ab: np.ndarray) -> float:
    """Median |depth difference| (mm) of keyframe a's depth moved into b's camera by T_ab (b in a)."""
    from slam.eval.depth_consistency import depth_disagreement

    d = depth_disagreement(a.depth.astype(np.float32), b.depth.astype(np.float32), np.asarray(a.K, np.float64),
                           invert(T_ab))
    return d["median_m"] * 1e3


def ceiling_ate(edges: list, keyframes: list, loop_cfg, poses: np.ndarray, ref: np.ndarray,
                stamps: np.ndarray, gt_stamps: np.ndarray, gt_poses: np.ndarray) -> tuple[float, int]:
    """ATE (cm) of the run's frames after the keyframe pose graph with ``edges`` (``LoopEdge``s),
    and how many of them the robust back end kept (weight >= 0.5)."""
    from slam.eval.trajectory import evaluate_ate
    from slam.loop.pose_graph import optimise_pose_graph

    kf_poses = {k.kf_id: k.T_wc for k in keyframes}
    solution = optimise_pose_graph(kf_poses, edges, loop_cfg, gauge=keyframes[0].kf_id,
                                   information={k.kf_id: k.information for k in keyframes
                                                if k.information is not None})
    moved = corrected_trajectory(poses, ref, keyframes, solution.poses)
    kept = sum(1 for w in (solution.weights or {}).values() if w >= 0.5)
    return evaluate_ate(moved, stamps, gt_poses, gt_stamps)["ate_rmse_m"] * 100.0, kept


def _median(rows: list, key: str) -> Optional[tuple]:
    values = np.array([r[key] for r in rows if r[key] is not None])
    return tuple(round(float(v), 3) for v in np.median(values, axis=0)) if len(values) else None


def main(argv: Optional[list] = None) -> int:
    """Prints the measurement and ceiling tables; 0 when done."""
    from slam.config import load_config
    from slam.data.trajectory_io import read_tum_trajectory
    from slam.eval.depth_consistency import revisit_pairs
    from slam.eval.trajectory import evaluate_ate
    from slam.loop.pose_graph import LoopEdge
    from slam.loop.verify import LoopVerifier
    from slam.map.map_io import load_keyframes

    ap = argparse.ArgumentParser(prog="python -m slam.tools.loop_ceiling", description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a finished run folder (config.yaml, trajectory.txt, map.keyframes.npz)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--edges", type=int, nargs="+", default=[1, 5, 20, 0],
                    help="ground-truth loop edges per graph (0: every revisit pair)")
    ap.add_argument("--gap", type=float, default=3.0, help="s between a revisit's keyframes, at least")
    ap.add_argument("--distance", type=float, default=0.5, help="m between their cameras, at most")
    ap.add_argument("--angle", type=float, default=20.0, help="deg between their optical axes, at most")
    ap.add_argument("--max-pairs", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0, help="which pairs a graph of --edges N takes")
    ap.add_argument("--json", dest="json_out", type=Path)
    args = ap.parse_args(argv)

    cfg = load_config(args.run / "config.yaml", args.overrides)
    stamps, poses = read_tum_trajectory(args.run / "trajectory.txt")
    keyframes = sorted(load_keyframes(args.run / "map.keyframes.npz"), key=lambda k: k.timestamp)
    gt_stamps, gt_poses = ground_truth(cfg)
    gt_at_kf = at_stamps(gt_stamps, gt_poses, np.array([k.timestamp for k in keyframes]))
    gt_of = {k.kf_id: T for k, T in zip(keyframes, gt_at_kf) if T is not None}
    by_id = {k.kf_id: k for k in keyframes}
    at_gt = [dataclasses.replace(k, T_wc=gt_of[k.kf_id]) for k in keyframes if k.kf_id in gt_of]
    pairs = [(by_id[a.kf_id], by_id[b.kf_id])
             for a, b in revisit_pairs(at_gt, args.gap, args.distance, args.angle, args.max_pairs)]
    run_ate = evaluate_ate(poses, stamps, gt_poses, gt_stamps)["ate_rmse_m"] * 100.0
    print(f"{args.run}: ATE {run_ate:.3f} cm, {len(keyframes)} keyframes, {len(pairs)} revisit pairs "
          f"(>= {args.gap} s apart, within {args.distance} m / {args.angle} deg at the ground truth)")
    if not pairs:
        return 0

    loop_cfg = cfg.loop
    verifier = LoopVerifier(loop_cfg, cfg.tracking, cfg.quality, backend="cpu")
    rows = measurement_rows(pairs, verifier, gt_of)
    print("\nagainst the ground truth's relative pose (median over pairs: cm, deg)")
    for key, what in (("run", "the run's relative pose"), ("measure", "loop stage's measurement, from the run's"),
                      ("rgbd_from_run", "RGB-D odometry from the run's"),
                      ("rgbd_from_gt", "RGB-D odometry from the ground truth's"),
                      ("rgbd_starts_apart", "  the two odometries apart")):
        n = sum(r[key] is not None for r in rows)
        print(f"  {what:<44} {_median(rows, key)}  ({n} of {len(rows)})")
    depth = {name: float(np.median([r["depth_mm"][name] for r in rows if name in r["depth_mm"]]))
             for name in ("gt", "run", "measure") if any(name in r["depth_mm"] for r in rows)}
    print("  median |depth difference| across the pair (mm): "
          + ", ".join(f"{name} {v:.1f}" for name, v in depth.items()))
    chi2 = [r["chi2"] for r in rows if r["chi2"] is not None]
    if chi2:
        from slam.loop.information import chi2_quantile
        print(f"  ICP's own information, inflation out: median chi-square of the truth {np.median(chi2):.0f} "
              f"({len(chi2)} pairs): {np.median(chi2) / chi2_quantile(0.5, 6):.0f} x the 6-dof median, the "
              f"inflation these pairs call for")

    ref = frames_with_keyframes(stamps, keyframes)
    measured = [r for r in rows if r["measured_T_ab"] is not None]
    report = {"run": str(args.run), "ate_cm": run_ate, "pairs": len(pairs),
              "medians": {k: _median(rows, k) for k in ("run", "measure", "rgbd_from_run", "rgbd_from_gt",
                                                        "rgbd_starts_apart")}, "depth_mm": depth,
              "chi2_median": float(np.median(chi2)) if chi2 else None, "ceiling": []}
    print("\nATE (cm) after the keyframe pose graph with loop edges (kept by the back end / given)")
    for count in args.edges:
        rng = np.random.default_rng([args.seed, count])     # a count's pairs do not depend on the others
        take = sorted(rng.choice(len(rows), size=min(count, len(rows)), replace=False)) if count else range(len(rows))
        chosen = [rows[i] for i in take]
        gt_edges = [LoopEdge(r["a_id"], r["b_id"], invert(gt_of[r["a_id"]]) @ gt_of[r["b_id"]]) for r in chosen]
        ate_gt, kept_gt = ceiling_ate(gt_edges, keyframes, loop_cfg, poses, ref, stamps, gt_stamps, gt_poses)
        line = f"  {len(chosen):4d} pairs: ground truth's {ate_gt:.3f} ({kept_gt}/{len(gt_edges)})"
        entry = {"pairs": len(chosen), "ground_truth_edges_cm": ate_gt, "kept": kept_gt}
        mine = [r for r in chosen if r["measured_T_ab"] is not None]
        if mine:
            edges = [LoopEdge(r["a_id"], r["b_id"], r["measured_T_ab"].T_ab, r["measured_T_ab"].information)
                     for r in mine]
            ate_m, kept_m = ceiling_ate(edges, keyframes, loop_cfg, poses, ref, stamps, gt_stamps, gt_poses)
            line += f", measured {ate_m:.3f} ({kept_m}/{len(edges)})"
            entry.update(measured_edges_cm=ate_m, measured_kept=kept_m, measured=len(edges))
        print(line)
        report["ceiling"].append(entry)
    print(f"({len(measured)} of {len(rows)} pairs measured; run ATE {run_ate:.3f})")
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
