"""Where this process's resident memory (RSS) goes, stage by stage: what importing torch, the
CUDA context, the rasterizer, cuBLAS, the optimiser and a short SLAM run each add, and which
mappings grew (heap, anonymous memory, shared libraries by name).

    python -m slam.tools.memory_stages                                # CUDA if present, else CPU
    python -m slam.tools.memory_stages --config 7scenes.yaml --set data.path=/data/7s --frames 60

On a Jetson the CPU and the GPU share one DRAM, so every megabyte here is one the robot's other
programs lose. Figures are MB (10^6 bytes) from /proc/self/smaps; Linux only.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

from slam.tools.measure_device import smaps_breakdown


def rss_by_mapping() -> dict:
    """RSS of this process by mapping name ([heap], [anon], [stack], file base names), MB."""
    return {k: v * 1.048576 for k, v in smaps_breakdown(os.getpid(), top=None).items()}   # MiB -> MB


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
    ap.add_argument("--spheres", type=int, default=50_000, help="spheres of the rasterizer stage")
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
    if args.frames > 0:
        from slam.cli import main as run_slam
        out = tempfile.mkdtemp(prefix="memory_stages_")
        run_args = ["--config", args.config, *sum((["--set", s] for s in args.set), []),
                    "--set", f"data.last={args.frames}", "--set", "output.plots=false", "--quiet", "--out", out]
        if args.device:
            run_args += ["--set", f"system.device={args.device}"]
        st.run(f"SLAM run ({args.frames} frames, outputs written)", lambda: run_slam(run_args))
        print(f"(run folder: {out})")
    with open("/proc/self/status") as f:
        hwm = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    print(f"peak RSS of the process: {int(hwm) / 1024 * 1.048576:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
