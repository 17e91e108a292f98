"""Where the peak GPU memory of a SLAM run goes (CUDA only).

    python -m slam.tools.gpu_memory_profile --config 7scenes.yaml [--set KEY=VALUE ...] [--top 15]

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

OURS = ("slam/", "rasterizer/")
MAX_EVENTS = 6_000_000


def _site(frames, depth: int = 2) -> str:
    """The innermost ``depth`` source lines of this project on an allocation's stack, innermost
    first (``a <- b``: a, called from b)."""
    ours = []
    for fr in frames or []:
        name = fr.get("filename", "")
        if any(k in name for k in OURS) and "memory_profile" not in name:
            short = name[name.rfind("slam/") if "slam/" in name else name.rfind("rasterizer/"):]
            ours.append(f"{short}:{fr.get('line')} {fr.get('name')}")
            if len(ours) == depth:
                break
    return " <- ".join(ours) if ours else "(outside the project: torch internals / CUDA extension)"


def live_at_peak(trace) -> tuple[int, dict, int]:
    """Replay alloc/free events of one device; returns (peak bytes, {address: (size, frames)}
    live at the peak, index of the peak's event)."""
    def replay(events):
        live, total = {}, 0
        for i, ev in enumerate(events):
            action, addr, size = ev["action"], ev["addr"], ev["size"]
            if action == "alloc":
                live[addr] = (size, ev.get("frames"))
                total += size
                yield i, total, live
            elif action == "free_completed" and addr in live:
                total -= live.pop(addr)[0]

    peak, at = 0, 0
    for i, total, _ in replay(trace):
        if total > peak:
            peak, at = total, i
    # Second pass up to the peak (copying the live set at every new maximum is quadratic).
    live = {}
    for i, _, live in replay(trace[: at + 1]):
        pass
    return peak, live, at


def main(argv=None) -> int:
    """Prints the peak and its allocation sites; 0 when done, 2 without CUDA."""
    import torch

    from slam.config import load_config
    from slam.data.sources import open_source
    from slam.runtime.system import SlamSystem

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--depth", type=int, default=2, help="project source lines per allocation site")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_memory_profile: needs a CUDA device", file=sys.stderr)
        return 2
    cfg = load_config(args.config, ["system.threaded=false", "system.progress=false"] + args.set)
    system = SlamSystem(cfg)
    torch.cuda.memory._record_memory_history(max_entries=MAX_EVENTS, stacks="python")
    system.run(open_source(cfg.data))
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = snap["device_traces"][system.device.index or 0]
    if len(trace) >= MAX_EVENTS:
        print("warning: the allocation history overflowed; use a shorter run (data.last=...)", file=sys.stderr)
    result = system.result()
    peak, live, at = live_at_peak(trace)
    by_site, blocks = collections.Counter(), collections.Counter()
    for size, frames in live.values():
        by_site[_site(frames, args.depth)] += size
        blocks[_site(frames, args.depth)] += 1
    print(f"peak (replayed) {peak / 1e6:.1f} MB, torch max_memory_allocated "
          f"{torch.cuda.max_memory_allocated() / 1e6:.1f} MB; spheres at the end {result.spheres:,}, "
          f"most at once {result.max_spheres_seen:,}; trace events {len(trace):,}, the peak at event {at:,}")
    for site, size in by_site.most_common(args.top):
        print(f"{size / 1e6:9.1f} MB {blocks[site]:5d} blocks  {site}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
