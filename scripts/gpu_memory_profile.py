#!/usr/bin/env python3
"""Where the peak GPU memory of a SLAM run goes (CUDA only).

    python scripts/gpu_memory_profile.py --config 7scenes.yaml [--set KEY=VALUE ...] [--top 15]

Runs the system in-process (sequential mode by default, so the peak is reproducible;
``--set system.threaded=true`` profiles the threaded run, whose peak varies) with PyTorch's CUDA
allocation history recording on, replays the history to find the moment of the peak, and prints
the live bytes at that moment grouped by the innermost source line of this project that
allocated them. Also prints the peak (replayed and as torch reports it), the final sphere count
and the most spheres held at once.
"""
import argparse
import collections
import sys
from pathlib import Path

try:
    import slam  # noqa: F401
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

OURS = ("slam/", "rasterizer/")


def _site(frames) -> str:
    for fr in frames or []:
        name = fr.get("filename", "")
        if any(k in name for k in OURS) and "memory_profile" not in name:
            short = name[name.rfind("slam/") if "slam/" in name else name.rfind("rasterizer/"):]
            return f"{short}:{fr.get('line')} {fr.get('name')}"
    return "(outside the project: torch internals / CUDA extension)"


def live_at_peak(trace) -> tuple[int, dict]:
    """Replay alloc/free events of one device; returns (peak bytes, {address: (size, frames)})."""
    live, total, peak, at_peak = {}, 0, 0, {}
    for ev in trace:
        action, addr, size = ev["action"], ev["addr"], ev["size"]
        if action == "alloc":
            live[addr] = (size, ev.get("frames"))
            total += size
            if total > peak:
                peak, at_peak = total, dict(live)
        elif action == "free_completed" and addr in live:
            total -= live.pop(addr)[0]
    return peak, at_peak


def main(argv=None) -> int:
    import torch

    from slam.config import load_config
    from slam.data.sources import open_source
    from slam.system import SlamSystem

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_memory_profile: needs a CUDA device", file=sys.stderr)
        return 2
    cfg = load_config(args.config, ["system.threaded=false", "system.progress=false"] + args.set)
    system = SlamSystem(cfg)
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    system.run(open_source(cfg.data))
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = snap["device_traces"][system.device.index or 0]
    if len(trace) >= 2_000_000:
        print("warning: the allocation history overflowed; use a shorter run (data.last=...)", file=sys.stderr)
    peak, live = live_at_peak(trace)
    by_site = collections.Counter()
    for size, frames in live.values():
        by_site[_site(frames)] += size
    print(f"peak (replayed) {peak / 1e6:.1f} MB, torch max_memory_allocated "
          f"{torch.cuda.max_memory_allocated() / 1e6:.1f} MB; spheres at the end {system.smap.n:,}, "
          f"most at once {system.smap.peak_n:,}; trace events {len(trace):,}")
    for site, size in by_site.most_common(args.top):
        print(f"{size / 1e6:9.1f} MB  {site}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
