"""Where each thread of a run spends its time: a sampling profiler of one in-process ``run_slam``.

A sampler thread wakes every ``--interval-ms`` and records, for every other thread, the line
it is on: the innermost frame of the package's own code (``slam/``, ``rasterizer/``) and the
innermost frame of all (a torch or threading call: ``synchronize``, ``wait``, ``acquire``...). A
thread blocked in C (a GPU wait, a channel, a lock) shows the Python line that called it, so the
counts say where the wall time of each thread goes: its channels, its GPU waits, its Python work.
It cannot tell a thread running Python from one waiting for the interpreter lock at the same line;
the sampler itself takes the lock once a sample (set ``--interval-ms`` well above the switch
interval, ``system.switch_interval_ms``).

    python -m slam.tools.thread_sampler --config 7scenes.yaml --set data.path=/data/7s
    python -m slam.tools.thread_sampler --set data.last=60              # the bundled sample

Prints, per thread (the run's: tracking, mapping, loop, grid, and the caller's, which reads and
stages the frames), its samples and the ``--top`` lines by share of that thread's samples, then
the ``--functions`` package functions by inclusive share (the samples with the function anywhere
on the thread's stack: a keyframe's densification against its steps, whatever lines they spend
it on).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from itertools import islice

# The package's own source folders: a frame in these is "ours" (the line the thread is on).
_TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_ROOTS = tuple(os.path.join(_TOP, d) + os.sep for d in ("slam", "rasterizer"))


def package_frames(frame):
    """The package's frames on a thread's stack from ``frame`` outwards: (path relative to the
    checkout, frame), innermost first."""
    f = frame
    while f is not None:
        path = f.f_code.co_filename
        if path.startswith(_ROOTS):
            yield os.path.relpath(path, _TOP), f
        f = f.f_back


def _where(frame, depth: int = 2) -> tuple[str, str]:
    """(the innermost ``depth`` lines of the package's code, innermost first, and the innermost
    call of all) of a thread's ``frame``: ``"slam/runtime/channel.py:59 get < slam/runtime/
    threads.py:140 tracking_loop"``, ``"wait"``."""
    ours = [f"{path}:{f.f_lineno} {f.f_code.co_name}" for path, f in islice(package_frames(frame), depth)]
    return " < ".join(ours) or "(outside the package)", frame.f_code.co_name


def _functions(frame) -> set[str]:
    """The package functions on a thread's stack (``"slam/mapping/mapper.py add_keyframe"``),
    each once however often it recurs."""
    return {f"{path} {f.f_code.co_name}" for path, f in package_frames(frame)}


class ThreadSampler:
    """Samples every thread but itself every ``interval_s`` until ``stop()``; ``counts[name]``
    is a Counter of ``_where`` pairs, ``inclusive[name]`` one of ``_functions`` entries,
    ``samples[name]`` the samples taken of that thread."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.counts: dict[str, Counter] = defaultdict(Counter)
        self.inclusive: dict[str, Counter] = defaultdict(Counter)
        self.samples: Counter = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> "ThreadSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval_s):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                name = names.get(ident, f"thread {ident}")
                self.counts[name][_where(frame)] += 1
                self.inclusive[name].update(_functions(frame))
                self.samples[name] += 1

    def report(self, top: int, functions: int = 0) -> str:
        """Per thread: its samples, its ``top`` lines by share (%, package line, innermost call),
        then its ``functions`` package functions by inclusive share."""
        lines = []
        for name, n in self.samples.most_common():
            lines.append(f"{name}: {n} samples")
            for (ours, inner), c in self.counts[name].most_common(top):
                lines.append(f"  {100.0 * c / n:5.1f} %  {ours}  [{inner}]")
            if functions > 0 and self.inclusive[name]:
                lines.append("  inclusive (the function anywhere on the stack):")
                for func, c in self.inclusive[name].most_common(functions):
                    lines.append(f"  {100.0 * c / n:5.1f} %  {func}")
        return "\n".join(lines)


def main(argv=None) -> int:
    """Runs run_slam in this process under the sampler; prints the report. Returns run_slam's code."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="default.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--interval-ms", type=float, default=2.0, help="time between samples (default 2)")
    ap.add_argument("--top", type=int, default=12, help="lines listed per thread")
    ap.add_argument("--functions", type=int, default=12,
                    help="package functions listed per thread by inclusive share (0: none)")
    ap.add_argument("--out", default=None, help="the run's folder (default: a temporary one)")
    args = ap.parse_args(argv)
    if args.interval_ms <= 0:
        ap.error("--interval-ms must be > 0")
    if args.functions < 0:
        ap.error("--functions must be >= 0")
    from slam.cli import main as run_slam
    out = args.out or tempfile.mkdtemp(prefix="thread_sampler_")
    run_args = ["--config", args.config, *sum((["--set", s] for s in args.set), []),
                "--set", "output.plots=false", "--quiet", "--out", out]
    caller, name = threading.current_thread(), threading.current_thread().name
    caller.name = "caller (frames)"
    sampler = ThreadSampler(args.interval_ms / 1000.0).start()
    t0 = time.perf_counter()
    try:
        code = run_slam(run_args)
    finally:
        sampler.stop()
        caller.name = name
    print(f"run: {time.perf_counter() - t0:.1f} s, exit {code}, folder {out}; "
          f"one sample every {args.interval_ms:g} ms")
    print(sampler.report(args.top, args.functions))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
