"""``slam_jetson_projection``: a profile of ``slam_profile --json`` projected to NVIDIA Jetsons,
the tracker alone and, from a whole-system profile (``--mapping-keyframes``), the whole system;
with ``--check``, the system FPS predicted for the profiled machine itself against runs measured
there. The model: ``slam.tools.jetson_model`` (printed below with ``--help``).

Measure the real thing on a Jetson: ``slam_profile --config 7scenes.yaml --set data.path=DATA
--mapping-keyframes 10 --json jetson.json`` and ``run_slam --config jetson_agx_orin.yaml --set
data.path=DATA`` (metrics.json). On the profiled machine ``--check RUN/metrics.json ...`` (runs of
the same config there) compares predicted and measured system FPS (exit 1 beyond ``--tolerance``);
scripts/system_projection_check.sh does it all on the 7-Scenes dev run.

    slam_jetson_projection profile.json [--reference auto|h200|h100] [--check RUN/metrics.json ...]
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Optional

from slam.tools import jetson_model
from slam.tools.jetson_model import (
    DEVICE_NAMES,
    MACHINES,
    NANO_SUPER,
    host_work,
    project,
    project_system,
    reference_key,
    tracking_part,
    tracks_ahead,
)


def targets(nano_super: bool) -> list:
    """The Jetsons projected to (every machine of the model but the reference GPUs)."""
    out = [m for k, m in MACHINES.items() if k not in DEVICE_NAMES]
    return out + [NANO_SUPER] if nano_super else out


def table(profile: dict, ref_key: str, nano_super: bool) -> str:
    """The tracker-alone table (markdown) for every Jetson."""
    ref, part = MACHINES[ref_key], tracking_part(profile)
    lines = [f"input: {profile.get('machine', '?')} ({profile.get('config', '?')} {' '.join(profile.get('overrides', []))}): "
             f"wall {part['wall_ms']:.1f} ms, host {part['host_ms']:.2f} ms, GPU {part['gpu_ms']:.2f} ms "
             f"({', '.join(f'{k} {v:.2f}' for k, v in part.get('gpu_ms_by_class', {}).items())}), "
             f"{part['launches']:.0f} GPU operations ({part.get('host_launches', float('nan')):.0f} host "
             f"launch calls), {part.get('host_waits', float('nan')):.1f} host waits "
             f"({part.get('host_wait_ms', float('nan')):.2f} ms) and {part['renders']:.1f} renders per frame",
             "",
             "| machine | CPU / FP32 / bandwidth slower by | host ms | GPU ms | frame ms (host + GPU) | tracking FPS |",
             "|---|---|---|---|---|---|"]
    for m in targets(nano_super):
        p = project(profile, ref, m)
        lines.append(f"| {p['machine']} | {p['cpu_ratio']:.1f}x / {p['compute_ratio']:.1f}x / {p['bw_ratio']:.1f}x | "
                     f"{p['host_ms']:.1f} | {p['gpu_ms']:.1f} | {p['frame_ms']:.1f} | {p['fps']:.1f} |")
    return "\n".join(lines)


# Printed under a system table of a profile that tracks keyframes ahead of the map (the Jetson configs).
AHEAD_NOTE = ("note: the tracker runs ahead of the map (system.max_unmapped_keyframes >= 1): the model leaves out "
              "the mapper's slowdown beside the tracker (on an H200 its keyframes took twice their time alone and "
              "--check measured well under the prediction: docs/benchmarks.md#jetson-projection); read these "
              "system rows as upper bounds")


def _load(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}"


def system_table(profile: dict, ref_key: str, nano_super: bool) -> str:
    """The whole-system table (markdown): the profiled machine itself first, then the Jetsons."""
    ref, m = MACHINES[ref_key], profile["mapping"]
    loop, grid = profile.get("loop") or {}, profile.get("grid") or {}
    lines = [f"whole system: {profile['keyframe_rate']:.3f} keyframes per frame; per keyframe on the profiled machine: "
             f"mapping {m['wall_ms']:.1f} ms (host {host_work(m):.1f}, GPU {m['gpu_ms']:.1f}, {m['host_waits']:.0f} "
             f"host waits), loop {(loop.get('cpu_ms') or 0.0):.1f} ms CPU + {loop.get('gpu_ms', 0.0):.2f} GPU, "
             f"grid {(grid.get('cpu_ms') or 0.0):.1f} ms CPU",
             "",
             "| machine | tracking alone FPS | mapping ms / keyframe | frame ms: "
             + " / ".join(project_system(profile, ref, ref)["terms"])
             + " | system FPS (bound) | sequential FPS | loop / grid load |",
             "|---|---|---|---|---|---|---|"]
    for target in [ref] + targets(nano_super):
        p = project_system(profile, ref, target)
        t = p["terms"]
        name = f"{p['machine']} (profiled)" if target is ref else p["machine"]
        lines.append(f"| {name} | {p['fps_tracking']:.1f} | {p['mapping_ms']:.0f} | "
                     + " / ".join(f"{v:.1f}" for v in t.values()) + f" | **{p['fps']:.1f}** ({p['bound']}) | "
                     f"{p['fps_sequential']:.1f} | "
                     f"{_load(p['loop_load'])} / {_load(p['grid_load'])} |")
    if tracks_ahead(profile):
        lines += ["", AHEAD_NOTE]
    return "\n".join(lines)


def check(profile: dict, ref_key: str, runs: list, tolerance: float) -> tuple[str, bool]:
    """The system FPS predicted for the profiled machine against runs measured there (``runs``:
    their metrics.json): report lines and whether predicted / measured (the runs' median) is
    within 1 +- ``tolerance``. A run of N frames pays the start once: the source's first frame
    staged (``first_frame_ms``; the tracker waits for it), then its tracking and the first
    keyframe's mapping (``start_ms``, kernel loading included): predicted N / (start + (N - 1) frame)."""
    ref = MACHINES[ref_key]
    p = project_system(profile, ref, ref)
    runs = [m for m in runs if m.get("fps_system")]
    if not runs:
        return "check: no run's metrics.json has an fps_system", False

    def median(key: str, sub: Optional[str] = None) -> float:
        vals = [(m.get(sub) or {}).get(key) if sub else m.get(key) for m in runs]
        vals = [float(v) for v in vals if v is not None]
        return statistics.median(vals) if vals else float("nan")

    measured, n = median("fps_system"), median("frames")
    start_ms = profile.get("first_frame_ms", 0.0) + profile.get("start_ms", 0.0)
    predicted = 1e3 * n / (start_ms + (n - 1) * p["frame_ms"])
    ratio = predicted / measured
    ok = abs(ratio - 1.0) <= tolerance
    fps = sorted(m["fps_system"] for m in runs)
    lines = [f"check on {ref.name}: system FPS predicted {predicted:.1f} for {n:.0f} frames ({p['fps']:.1f} steady, "
             f"{p['bound']}-bound; start {start_ms / 1e3:.2f} s, the first frame's "
             f"{profile.get('first_frame_ms', 0.0) / 1e3:.2f} of it), measured {measured:.1f} (median of "
             f"{len(runs)}: {', '.join(f'{x:.1f}' for x in fps)}): predicted / measured {ratio:.2f}, "
             f"{'within' if ok else 'OUTSIDE'} {tolerance:.0%}",
             f"  keyframes per frame: profile {profile['keyframe_rate']:.3f}, runs {median('keyframes') / n:.3f}",
             f"  mapping ms per keyframe: profile {profile['mapping']['wall_ms']:.1f} (alone), runs "
             f"{median('mapping_mean', 'stage_ms'):.1f} (beside the other threads)",
             f"  tracking ms per frame: profile {tracking_part(profile)['wall_ms']:.2f} (replays alone), "
             f"{tracking_part(profile).get('run_wall_ms') or float('nan'):.2f} (its sequential run), runs "
             f"{median('tracking_mean', 'stage_ms'):.2f} (threaded); the tracker waited "
             f"{median('tracking_waited_for_map_s'):.1f} s for the mapper, "
             f"{median('tracking_waited_for_frames_s'):.2f} s for frames ({median('tracking_waited_for_first_frame_s'):.2f} "
             "of it for the first: the model's first frame)"]
    if all(m.get("timeline_s") for m in runs):   # the runs' start ends at the second frame's record
        steady = median("frames", "timeline_s")
        lines.append(f"  timeline s: runs start {median('start', 'timeline_s'):.2f} (to the second frame), frames "
                     f"{steady:.2f} ({1e3 * steady / max(n - 2, 1):.2f} ms a frame), end {median('end', 'timeline_s'):.2f}; "
                     f"model start {(start_ms + p['frame_ms']) / 1e3:.2f}, frames {(n - 2) * p['frame_ms'] / 1e3:.2f} "
                     f"({p['frame_ms']:.2f} ms a frame), end none")
    return "\n".join(lines), ok


def main(argv=None) -> int:
    """slam_jetson_projection: prints the projection tables; 0 when done (with ``--check``: 1 when
    the prediction misses the run, 2 for a profile without a mapping part); 2 for a profile from a
    machine the model has no figures for, unless ``--reference`` names one."""
    ap = argparse.ArgumentParser(description=__doc__ + "\n" + jetson_model.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile", help="JSON from slam_profile --json")
    ap.add_argument("--reference", default="auto", choices=["auto", *sorted(MACHINES)],
                    help="the machine the profile is from (auto: the profile's own machine name)")
    ap.add_argument("--nano-super", action="store_true", help="also project the Orin Nano in JetPack 6.2 super mode")
    ap.add_argument("--check", nargs="+", default=None, metavar="METRICS_JSON",
                    help="runs' metrics.json from the profiled machine: predicted vs measured system FPS")
    ap.add_argument("--tolerance", type=float, default=0.15, help="--check: largest |predicted / measured - 1|")
    args = ap.parse_args(argv)
    profile = json.loads(Path(args.profile).read_text())
    if args.reference == "auto":
        try:
            args.reference = reference_key(profile)
        except ValueError as e:
            print(f"{args.profile}: {e}")
            return 2
    print(table(profile, args.reference, args.nano_super))
    if profile.get("mapping"):
        print("\n" + system_table(profile, args.reference, args.nano_super))
    if args.check is None:
        return 0
    if not profile.get("mapping"):
        print("--check needs a whole-system profile: slam_profile --mapping-keyframes K --json ...")
        return 2
    text, ok = check(profile, args.reference, [json.loads(Path(f).read_text()) for f in args.check], args.tolerance)
    print("\n" + text)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
