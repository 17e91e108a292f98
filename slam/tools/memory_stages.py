"""Where this process's resident memory (RSS) goes, stage by stage: what importing torch, the
CUDA context, the rasterizer, cuBLAS, the optimiser and a short SLAM run each add, and which
mappings grew (heap, anonymous memory, shared libraries by name).

    python -m slam.tools.memory_stages                                # CUDA if present, else CPU
    python -m slam.tools.memory_stages --config 7scenes.yaml --set data.path=/data/7s --frames 60
    python -m slam.tools.memory_stages --run-only --ops --frames 0   # what each torch op family adds
    python -m slam.tools.memory_stages --run-only --first-use --config 7scenes.yaml --set data.path=... --frames 100

On CUDA the driver loads a kernel's module into host memory the first time any kernel of it runs
(PyTorch's lazy module loading), so every torch operation family a run touches for the first time
costs host memory once: ``--ops`` runs the families a SLAM run uses, one stage each, in a fixed
order (a family sharing a module with an earlier one shows ~0).

``--first-use`` charges each torch operation's first call in a sequential run (its RSS growth and
wall time: a module's load) and lists every project line that calls each charged operation (a
family leaves a run only when all of them go); entering its
dispatch mode imports torch._dynamo (and so triton: ~50 MB in that stage, none of it a run's),
so read the first calls' charges, not the stage's total.

On a Jetson the CPU and the GPU share one DRAM, so every megabyte here is one the robot's other
programs lose. Figures are MB (10^6 bytes) from /proc/self/smaps; Linux only.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from itertools import islice

from slam.tools.measure_device import smaps_breakdown
from slam.tools.thread_sampler import package_frames


def rss_by_mapping() -> dict:
    """RSS of this process by mapping name ([heap], [anon], [stack], file base names), MB."""
    return smaps_breakdown(os.getpid(), top=None)


class Stages:
    """Prints each stage's RSS, its growth and the mappings that grew the most."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.before = rss_by_mapping()
        print(f"{'stage':44s} {'RSS MB':>8s} {'+MB':>7s} {'s':>5s}  largest growth (MB)")
        self.rows: list = []

    def run(self, name: str, fn) -> None:
        """Runs ``fn()`` as stage ``name`` and prints its row."""
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        now = rss_by_mapping()
        grown = sorted(((now[k] - self.before.get(k, 0.0), k) for k in now), reverse=True)[: self.top]
        total, delta = sum(now.values()), sum(now.values()) - sum(self.before.values())
        print(f"{name:44s} {total:8.1f} {delta:+7.1f} {dt:5.1f}  "
              + ", ".join(f"{k} {d:+.1f}" for d, k in grown if abs(d) >= 0.5), flush=True)
        self.rows.append((name, total, delta))
        self.before = now


def synthetic_stages(st: Stages, torch, rasterizer, dev, n: int) -> None:
    """The stages a run may or may not reach: one render + backward of ``n`` random spheres at
    320x240, the first cuBLAS call, one ``torch.optim.Adam`` step."""
    gen = torch.Generator().manual_seed(0)
    w, h = 320, 240
    means = (torch.rand(n, 3, generator=gen) * torch.tensor([2.0, 1.5, 2.0]) - torch.tensor([1.0, 0.75, -1.0])).to(dev)
    radii = (0.005 + 0.02 * torch.rand(n, generator=gen)).to(dev)
    colors = torch.rand(n, 3, generator=gen).to(dev)
    opac = (0.2 + 0.7 * torch.rand(n, generator=gen)).to(dev)
    K = torch.tensor([[260.0, 0, 159.5], [0, 260.0, 119.5], [0, 0, 1]])
    params = [p.requires_grad_() for p in (means, radii, colors, opac)]

    def render_backward():
        out = rasterizer.rasterize_spheres(*params, K, w, h)
        (out.color.sum() + out.depth.sum()).backward()
        if dev.type == "cuda":
            torch.cuda.synchronize()

    st.run(f"rasterizer: render + backward ({n:,} spheres)", render_backward)
    st.run("cuBLAS (addmm of points by a pose)",
           lambda: torch.addmm(torch.zeros(3, device=dev), means.detach(), torch.eye(3, device=dev)).sum().item())

    def adam_step():
        opt = torch.optim.Adam(params, lr=1e-3)
        opt.step()
        opt.zero_grad(set_to_none=True)

    st.run("Adam step", adam_step)


def op_stages(st: Stages, torch, dev) -> None:
    """One stage per torch operation family that a SLAM run uses (the aten operators of a
    sequential run of the sample), each run once on 100k-element tensors of ``dev``."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(100_000, generator=gen).to(dev)
    y = torch.rand(100_000, generator=gen).to(dev)
    i = torch.randint(0, 1000, (100_000,), generator=gen).to(dev)
    u8 = torch.randint(0, 255, (100_000,), dtype=torch.uint8, generator=gen).to(dev)
    img = torch.rand(1, 3, 64, 64, generator=gen).to(dev)
    ops = [
        ("add / sub f32", lambda: x + y - x), ("mul f32", lambda: x * y), ("div f32", lambda: x / y),
        ("add i64", lambda: i + 1), ("floor_divide i64", lambda: i // 2),
        ("comparisons (gt, lt, ne, eq)", lambda: (x > y, x < y, x != y, x == y)),
        ("bitwise and / or / not", lambda: ((x > 0.5) & (y > 0.5)) | ~(x > y)),
        ("where", lambda: torch.where(x > 0.5, x, y)), ("abs", lambda: x.abs()), ("sgn", lambda: x.sgn()),
        ("exp", lambda: x.exp()), ("log", lambda: x.log()), ("sigmoid", lambda: x.sigmoid()),
        ("sigmoid backward", lambda: torch.ops.aten.sigmoid_backward(x, y)),
        ("clamp", lambda: x.clamp(0.1, 0.9)), ("clamp_min", lambda: x.clamp_min(0.1)), ("round", lambda: x.round()),
        ("pow", lambda: x.pow(2)), ("isfinite", lambda: x.isfinite()), ("nan_to_num", lambda: x.nan_to_num()),
        ("sum", lambda: x.sum()), ("mean", lambda: x.mean()), ("median", lambda: x.median()),
        ("sort", lambda: x.sort()), ("argsort i64", lambda: i.argsort()), ("gather", lambda: x.gather(0, i)),
        ("index (advanced indexing)", lambda: x[i]), ("nonzero", lambda: (x > 0.5).nonzero()),
        ("cat / stack", lambda: (torch.cat([x, y]), torch.stack([x, y]))),
        ("to: uint8 -> f32", lambda: u8.float()), ("to: f32 -> f64", lambda: x.double()),
        ("fill / zeros / arange", lambda: (torch.zeros(1000, device=dev), torch.arange(1000, device=dev))),
        ("randint", lambda: torch.randint(0, 10, (1000,), device=dev)),
        ("conv2d (SSIM's Gaussian)", lambda: torch.nn.functional.conv2d(img, torch.ones(3, 1, 11, 1, device=dev), groups=3)),
    ]

    def run(fn):
        fn()
        if dev.type == "cuda":
            torch.cuda.synchronize()

    for name, fn in ops:
        st.run(f"op: {name}", lambda fn=fn: run(fn))


class FirstUse:
    """A dispatch mode that charges host-memory growth and wall time to the first call of each
    torch operation (by name, device and dtypes) on the thread it is entered on: the RSS before and
    after that one call, and how long it took (a kernel's module is loaded at its first launch, on
    the calling thread, so no device wait is needed for either; the time also holds the kernel's
    launch, not its run). ``rss`` (MB now) and ``clock`` (s) may be replaced in tests."""

    def __init__(self, rss=None, clock=None) -> None:
        # imported here, not at the top: the tool's first stage measures importing torch
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        from slam.runtime.recorder import current_rss_mb

        self.rss = rss or current_rss_mb
        self.clock = clock or time.perf_counter
        self._tensor, self._leaves = torch.Tensor, tree_leaves   # for every dispatched call
        self.seen: set = set()
        self.rows: list = []        # (MB, op, (device and dtype, ...), call site, ms) of growing first calls
        self.first_s = 0.0          # the wall time of every first call
        self.sites: dict = {}       # (op, device and dtypes) -> {call site: calls}: where each is used
        owner = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return owner._call(func, args, kwargs or {})

        self.mode = _Mode()

    def _call(self, func, args, kwargs):
        tensors = [a for a in self._leaves((args, kwargs)) if isinstance(a, self._tensor)]
        kinds = tuple(sorted({f"{t.device.type} {str(t.dtype).replace('torch.', '')}" for t in tensors}))
        key = (func.name(), kinds)
        callers = self._callers()
        sites = self.sites.setdefault(key, {})
        sites[callers[0]] = sites.get(callers[0], 0) + 1
        if key in self.seen:
            return func(*args, **kwargs)
        self.seen.add(key)
        before, t0 = self.rss(), self.clock()
        out = func(*args, **kwargs)
        took = self.clock() - t0
        grown = self.rss() - before
        self.first_s += took
        if grown > 0.0:
            self.rows.append((grown, func.name(), kinds, " <- ".join(callers), 1e3 * took))
        return out

    @staticmethod
    def _callers(depth: int = 2) -> list[str]:
        """The project's innermost ``depth`` lines on the calling thread's stack, innermost first
        (this tool's own frames left out); ["(outside the project)"] when there is none."""
        ours = ((path, f) for path, f in package_frames(sys._getframe(1)) if "memory_stages" not in path)
        return [f"{path}:{f.f_lineno} {f.f_code.co_name}" for path, f in islice(ours, depth)] or ["(outside the project)"]

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)

    def report(self, total_mb: float, top: int = 40) -> str:
        """The first uses that grew RSS the most (with their wall ms), their sum and what grew
        outside them, and the time all first uses took."""
        rows = sorted(self.rows, reverse=True)
        charged = sum(r[0] for r in rows)
        lines = [f"{'MB':>6s} {'ms':>6s}  {'operation':34s} {'tensors':28s} call site"]
        lines += [f"{mb:6.1f} {ms:6.1f}  {op:34s} {', '.join(kinds):28s} {site}" for mb, op, kinds, site, ms in rows[:top]]
        lines.append(f"first uses: {charged:+.1f} MB over {len(rows)} operations ({len(self.seen)} seen); "
                     f"the rest of the stage's {total_mb:+.1f} MB grew outside them (allocations, other threads); "
                     f"they took {sum(r[4] for r in rows) / 1e3:.2f} s (those listed {sum(r[4] for r in rows[:top]) / 1e3:.2f}), "
                     f"all {len(self.seen)} first calls {self.first_s:.2f} s")
        return "\n".join(lines)

    def uses(self, top: int = 40) -> str:
        """For the operations whose first call grew RSS the most: every project line that called
        them and how often (an operation family leaves a run only when all of them go)."""
        lines = []
        for mb, op, kinds, _, _ in sorted(self.rows, reverse=True)[:top]:
            sites = sorted(self.sites.get((op, kinds), {}).items(), key=lambda kv: -kv[1])
            lines.append(f"{mb:6.1f} MB {op} ({', '.join(kinds)}): {len(sites)} call sites, "
                         + "; ".join(f"{site} x{n}" for site, n in sites[:6]) + (" ..." if len(sites) > 6 else ""))
        return "\n".join(lines)


def main(argv=None) -> int:
    """Prints the stages; 0 when done."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="default.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--frames", type=int, default=30, help="frames of the SLAM run stage (0: skip it)")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    ap.add_argument("--top", type=int, default=5, help="mappings listed per stage")
    ap.add_argument("--run-only", action="store_true",
                    help="skip the rasterizer, cuBLAS and Adam stages: what a run itself adds after CUDA init")
    ap.add_argument("--ops", action="store_true", help="a stage per torch operation family a run uses")
    ap.add_argument("--spheres", type=int, default=50_000, help="spheres of the rasterizer stage")
    ap.add_argument("--top-ops", type=int, default=40, help="--first-use: operations listed")
    ap.add_argument("--first-use", action="store_true",
                    help="run the SLAM stage sequentially and charge RSS growth to each operation's first call")
    args = ap.parse_args(argv)
    st = Stages(args.top)
    mods: dict = {}

    def import_torch():
        import numpy  # noqa: F401
        import torch
        mods["torch"] = torch

    st.run("import numpy, torch", import_torch)
    torch = mods["torch"]
    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))

    def import_slam():
        import rasterizer
        import slam.cli  # noqa: F401  (everything a run imports up front)
        mods["rasterizer"] = rasterizer

    st.run("import slam.cli, rasterizer", import_slam)
    if dev.type == "cuda":
        st.run("CUDA context (one tensor on the GPU)", lambda: torch.zeros(1, device=dev).sum().item())
    if not args.run_only:
        synthetic_stages(st, torch, mods["rasterizer"], dev, args.spheres)
    if args.ops:
        op_stages(st, torch, dev)
        print(f"torch operation families: {sum(r[2] for r in st.rows if r[0].startswith('op: ')):+.1f} MB in all")
    if args.frames > 0:
        from slam.cli import main as run_slam
        out = tempfile.mkdtemp(prefix="memory_stages_")
        run_args = ["--config", args.config, *sum((["--set", s] for s in args.set), []),
                    "--set", f"data.last={args.frames}", "--set", "output.plots=false", "--quiet", "--out", out]
        if args.device:
            run_args += ["--set", f"system.device={args.device}"]
        if args.first_use:     # one thread: the dispatch mode holds on the thread it is entered on
            run_args += ["--set", "system.threaded=false"]
            watch = FirstUse()

            def run_watched():
                with watch:
                    run_slam(run_args)

            st.run(f"SLAM run ({args.frames} frames, sequential, first uses charged)", run_watched)
            print(watch.report(st.rows[-1][2], args.top_ops))
            print("where each is called:")
            print(watch.uses(args.top_ops))
        else:
            st.run(f"SLAM run ({args.frames} frames, outputs written)", lambda: run_slam(run_args))
        print(f"(run folder: {out})")
    with open("/proc/self/status") as f:
        hwm = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    print(f"peak RSS of the process: {int(hwm) / 1024 * 1.048576:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
