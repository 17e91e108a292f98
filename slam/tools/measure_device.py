"""FPS and memory of one SLAM run on this machine: the one command to run on a Jetson.

    slam_measure_device --config jetson_orin_nano_8gb.yaml --set data.path=/data/7scenes-redkitchen
    slam_measure_device --set tracking.downscale=1       # the bundled sample (160x120), default.yaml
    slam_measure_device --repo /tmp/old_checkout --config 7scenes.yaml --set data.path=/tmp/7s

Runs ``python -m slam.cli --quiet --out OUT <your arguments>`` as a child process (the code of
``--repo``, a source checkout; default: the ``slam`` this command imports) and samples every 0.2 s:
- the child's resident memory (RSS): its true peak, the end-of-run evaluation included;
- the machine's used memory (total - available). On a Jetson the CPU and the GPU share this
  DRAM, so its rise over the run is what SLAM costs the robot, GPU allocations included (they
  are not in the process's RSS there). On a machine with its own GPU memory, the metrics' peak
  GPU figure (torch's max_memory_allocated) is the device side;
- at the RSS peak, what the RSS is made of (/proc/<pid>/smaps: heap, anonymous, largest files).
Then reads the run's metrics.json (FPS of the whole system and of tracking alone, peak RSS and
peak GPU memory as the run saw them, spheres, keyframes) and prints one table; everything also
goes to ``measure.json`` in the run folder.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import psutil


def smaps_breakdown(pid: int, top: Optional[int] = 12) -> dict:
    """RSS of process ``pid`` by mapping: [heap], [anon], [stack] and files by name, MB (10^6
    bytes), largest first (``top`` of them; None: all)."""
    agg: collections.Counter = collections.Counter()
    name = "[anon]"
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                    parts = line.split()
                    name = os.path.basename(parts[5]) if len(parts) > 5 and parts[5].startswith("/") else \
                        (parts[5] if len(parts) > 5 else "[anon]")
                elif line.startswith("Rss:"):
                    agg[name] += int(line.split()[1])
    except OSError:
        return {}
    return {k: v * 1024 / 1e6 for k, v in agg.most_common(top)}   # smaps' kB are KiB


def used_mb() -> float:
    """The machine's used memory (total - available), MB."""
    vm = psutil.virtual_memory()
    return (vm.total - vm.available) / 1e6


def measure(cmd: list, cwd: Path, env: dict, period_s: float = 0.2) -> dict:
    """Run ``cmd`` and sample it until it ends -> peaks and the breakdown at the RSS peak."""
    before = used_mb()
    proc = subprocess.Popen(cmd, cwd=str(cwd), env=env)
    child = psutil.Process(proc.pid)
    peak_rss, peak_used, breakdown, t0 = 0.0, before, {}, time.monotonic()
    while proc.poll() is None:
        try:
            rss = child.memory_info().rss / 1e6
        except psutil.Error:
            break
        if rss > peak_rss:
            peak_rss = rss
            if rss > 1.02 * max(1.0, breakdown.get("_rss", 0.0)):   # refresh the breakdown as the peak grows
                breakdown = {"_rss": rss, **smaps_breakdown(proc.pid)}
        peak_used = max(peak_used, used_mb())
        time.sleep(period_s)
    proc.wait()
    breakdown.pop("_rss", None)
    return {"returncode": proc.returncode, "wall_s": time.monotonic() - t0, "peak_rss_sampled_mb": peak_rss,
            "system_used_before_mb": before, "system_used_peak_mb": peak_used,
            "system_used_rise_mb": peak_used - before, "rss_at_peak_by_mapping_mb": breakdown}


def main(argv=None) -> int:
    """slam_measure_device: runs, measures, prints; the run's exit code."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="Any other argument goes to run_slam (--config, --set, --map ...).")
    ap.add_argument("--repo", default=None,
                    help="source checkout whose code runs (default: the installed / importable slam)")
    ap.add_argument("--out", default=None, help="run folder (default: runs/measure_<time>)")
    args, run_args = ap.parse_known_args(argv)
    out = Path(args.out or Path("runs") / time.strftime("measure_%Y%m%d_%H%M%S")).resolve()
    cwd, env = Path.cwd(), dict(os.environ)
    if args.repo:
        # the checkout first, then whatever PYTHONPATH already holds (packages installed with --target)
        cwd = Path(args.repo).resolve()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(cwd), os.environ.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "slam.cli", "--quiet", "--out", str(out), *run_args]
    print("running:", " ".join(cmd), f"(in {cwd})", flush=True)
    res = measure(cmd, cwd, env)
    metrics_path = out / "metrics.json"
    m = json.loads(metrics_path.read_text()) if metrics_path.is_file() else {}
    res.update({"command": cmd, "repo": str(cwd) if args.repo else None,
                "fps_system": m.get("fps_system"), "fps_tracking": m.get("fps_tracking"),
                "peak_rss_run_mb": m.get("peak_rss_mb"), "peak_gpu_allocated_mb": m.get("peak_gpu_mb"),
                "frames": m.get("frames"), "keyframes": m.get("keyframes"), "spheres": m.get("spheres"),
                "map_mb": m.get("map_mb"), "keyframe_store_mb": m.get("keyframe_store_mb"),
                "ate_rmse_m": (m.get("trajectory") or {}).get("ate_rmse_m"), "device": m.get("device")})
    if out.is_dir():
        (out / "measure.json").write_text(json.dumps(res, indent=1))

    def f(x, fmt="{:.1f}"):
        return "n/a" if x is None else fmt.format(x)

    print(f"\nrun folder         {out}  (exit code {res['returncode']}, {res['wall_s']:.0f} s, device {res['device']})")
    print(f"frames             {res['frames']} ({res['keyframes']} keyframes), {res['spheres']} spheres")
    print(f"FPS                {f(res['fps_system'])} system, {f(res['fps_tracking'])} tracking alone")
    print(f"process RSS        {f(res['peak_rss_run_mb'], '{:.0f}')} MB peak during the run (metrics.json), "
          f"{res['peak_rss_sampled_mb']:.0f} MB sampled peak incl. the end")
    print(f"GPU allocated      {f(res['peak_gpu_allocated_mb'], '{:.0f}')} MB peak (torch max_memory_allocated)")
    print(f"machine memory     +{res['system_used_rise_mb']:.0f} MB used at the peak ({res['system_used_before_mb']:.0f} -> "
          f"{res['system_used_peak_mb']:.0f} MB; on a Jetson: CPU + GPU of the run together)")
    print("RSS at its peak    " + ", ".join(f"{k} {v:.1f}" for k, v in res["rss_at_peak_by_mapping_mb"].items()))
    return res["returncode"]


if __name__ == "__main__":
    sys.exit(main())
