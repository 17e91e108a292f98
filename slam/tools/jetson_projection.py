"""Project a tracking profile measured on one machine to NVIDIA Jetsons, from published specs.

Input: the JSON that ``slam_profile --json`` writes (per tracked frame: host ms,
GPU ms by kernel class, kernel launches, wall ms). The model, stated so it can be checked:

- Host work (Python, PyTorch dispatch, kernel launches, the 8x8 solve) scales with single-thread
  CPU speed: ``host_ms * cpu_ratio``. ``cpu_ratio`` is the measured machine's core against the
  Jetson's (clock x a per-clock factor: Cortex-A78AE ~ 0.55 of a recent x86 server core per
  clock, Carmel ~ 0.45; SPECint-style estimates, the weakest link of the model).
- GPU work scales per kernel class with what bounds it: our rasterizer and GEMM kernels with
  FP32 throughput (SMs x FP32 lanes per SM x clock); sorting, copies and element-wise kernels with
  memory bandwidth.
- A frame takes between max(host, GPU) (host and GPU fully overlap) and host + GPU (every LM
  iteration waits for the GPU). Which applies is measured: the profile's ``host_waits`` per frame
  (synchronise calls and reads into pageable memory). With fewer than two (the tracker's
  device LM: the host queues the whole frame, then reads the result back once; the occasional
  graph capture or profiler synchronisation adds a fraction) the host's work overlaps the GPU's
  and FPS comes from the lower bound; with more (a solver that waits for every evaluation, as the
  render-difference one did before issue 36), or in a profile without the figure, from the upper
  one. ``host_ms`` is the
  host's own work: the profile leaves its explicit waits for the GPU out.

Measure the real thing on a Jetson (same profile, no projection):
    slam_profile --config 7scenes.yaml --set data.path=DATA --json jetson.json
and the whole system: ``run_slam --config jetson_orin_agx.yaml --set data.path=DATA`` (metrics.json).

    slam_jetson_projection profile.json [--reference h200]
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Machine:
    """Published figures: FP32 lanes in all (SMs x lanes per SM), boost GPU clock (GHz), memory
    bandwidth (GB/s), CPU core clock (GHz) and per-clock factor relative to a recent x86 server core."""

    name: str
    fp32_lanes: int
    gpu_ghz: float
    bandwidth_gbs: float
    cpu_ghz: float
    cpu_per_clock: float

    @property
    def fp32_tflops(self) -> float:
        return 2 * self.fp32_lanes * self.gpu_ghz / 1e3


MACHINES = {
    # NVIDIA H200 SXM: 132 SMs x 128 FP32 lanes, 1.98 GHz, HBM3e 4.8 TB/s; host: x86 server core
    # ~3.5 GHz boost (the device machine's, taken as the per-clock reference 1.0).
    "h200": Machine("NVIDIA H200 (SXM)", 132 * 128, 1.98, 4800.0, 3.5, 1.0),
    # Jetson AGX Orin 64 GB: 2048 CUDA cores (16 SMs), 1.3 GHz, LPDDR5 204.8 GB/s, 12x Cortex-A78AE 2.2 GHz.
    "orin_agx": Machine("Jetson AGX Orin 64GB", 2048, 1.3, 204.8, 2.2, 0.55),
    # Jetson Orin NX 16 GB: 1024 CUDA cores (8 SMs), 0.918 GHz, 102.4 GB/s, 8x A78AE 2.0 GHz.
    "orin_nx": Machine("Jetson Orin NX 16GB", 1024, 0.918, 102.4, 2.0, 0.55),
    # Jetson Orin Nano 8 GB: 1024 CUDA cores (8 SMs), 0.625 GHz, 68 GB/s, 6x A78AE 1.5 GHz
    # (JetPack 6.2 "super" mode: 1.02 GHz, 102 GB/s, 1.7 GHz: pass --nano-super).
    "orin_nano": Machine("Jetson Orin Nano 8GB", 1024, 0.625, 68.0, 1.5, 0.55),
    # Jetson Xavier NX: 384 CUDA cores (6 Volta SMs), 1.1 GHz, 59.7 GB/s, 6x Carmel 1.9 GHz.
    "xavier_nx": Machine("Jetson Xavier NX", 384, 1.1, 59.7, 1.9, 0.45),
}
NANO_SUPER = Machine("Jetson Orin Nano 8GB (super)", 1024, 1.02, 102.0, 1.7, 0.55)
COMPUTE_BOUND = {"raster", "gemm"}   # everything else (sort, copy, elementwise) is memory bound


def project(profile: dict, ref: Machine, target: Machine) -> dict:
    """Projected per-frame host, GPU and frame ms (lower and upper bound) and FPS on ``target``."""
    cpu_ratio = (ref.cpu_ghz * ref.cpu_per_clock) / (target.cpu_ghz * target.cpu_per_clock)
    compute_ratio = ref.fp32_tflops / target.fp32_tflops
    bw_ratio = ref.bandwidth_gbs / target.bandwidth_gbs
    host = profile["host_ms"] * cpu_ratio
    gpu = sum(ms * (compute_ratio if cls in COMPUTE_BOUND else bw_ratio)
              for cls, ms in profile.get("gpu_ms_by_class", {}).items())
    overlap = profile.get("host_waits", float("inf")) < 2.0
    frame = max(host, gpu) if overlap else host + gpu
    return {"machine": target.name, "cpu_ratio": cpu_ratio, "compute_ratio": compute_ratio, "bw_ratio": bw_ratio,
            "host_ms": host, "gpu_ms": gpu, "frame_ms_low": max(host, gpu), "frame_ms_high": host + gpu,
            "overlap": overlap, "fps": 1e3 / frame if frame > 0 else float("inf")}


def table(profile: dict, ref_key: str, nano_super: bool) -> str:
    ref = MACHINES[ref_key]
    targets = [m for k, m in MACHINES.items() if k != ref_key]
    if nano_super:
        targets.append(NANO_SUPER)
    lines = [f"input: {profile.get('machine', '?')} ({profile.get('config', '?')} {' '.join(profile.get('overrides', []))}): "
             f"wall {profile['wall_ms']:.1f} ms, host {profile['host_ms']:.2f} ms, GPU {profile['gpu_ms']:.2f} ms "
             f"({', '.join(f'{k} {v:.2f}' for k, v in profile.get('gpu_ms_by_class', {}).items())}), "
             f"{profile['launches']:.0f} GPU operations ({profile.get('host_launches', float('nan')):.0f} host "
             f"launch calls), {profile.get('host_waits', float('nan')):.1f} host waits "
             f"({profile.get('host_wait_ms', float('nan')):.2f} ms) and {profile['renders']:.1f} renders per frame",
             "",
             "| machine | CPU / FP32 / bandwidth slower by | host ms | GPU ms | frame ms (overlap .. serial) | tracking FPS |",
             "|---|---|---|---|---|---|"]
    for m in targets:
        p = project(profile, ref, m)
        lines.append(f"| {p['machine']} | {p['cpu_ratio']:.1f}x / {p['compute_ratio']:.1f}x / {p['bw_ratio']:.1f}x | "
                     f"{p['host_ms']:.1f} | {p['gpu_ms']:.1f} | {p['frame_ms_low']:.1f} .. {p['frame_ms_high']:.1f} | "
                     f"{p['fps']:.1f} |")
    lines.append("")
    lines.append("FPS from the " + ("overlap (lower) bound: one host wait per frame" if p["overlap"] else
                                    "serial (upper) bound: host waits within the frame (or not measured)"))
    return "\n".join(lines)


def main(argv=None) -> int:
    """slam_jetson_projection: prints the projection table; 0 when done."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile", help="JSON from slam_profile --json")
    ap.add_argument("--reference", default="h200", choices=sorted(MACHINES), help="the machine the profile is from")
    ap.add_argument("--nano-super", action="store_true", help="also project the Orin Nano in JetPack 6.2 super mode")
    args = ap.parse_args(argv)
    print(table(json.loads(Path(args.profile).read_text()), args.reference, args.nano_super))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
