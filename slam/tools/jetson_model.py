"""The model of ``slam_jetson_projection`` (``slam.tools.jetson_projection``: the tables): a
profile measured on one machine projected to NVIDIA Jetsons from published specs, the tracker
alone and, from a whole-system profile, the system (tracking, mapping and loop threads sharing one
GPU). Input: the JSON of ``slam_profile --json``: ``tracking`` (per tracked frame: host ms, GPU ms
by kernel class, kernel launches, host waits, wall ms) and, made with ``--mapping-keyframes``,
``mapping`` (the same per keyframe), ``keyframe_rate``, ``loop`` and ``grid``. A profile of the
older layout (the tracking figures at the top level) projects the tracker alone.

The tracker alone (the model, stated so it can be checked):

- Host work (Python, PyTorch dispatch, kernel launches, the 8x8 solve) scales with single-thread
  CPU speed: ``host_ms * cpu_ratio``. ``cpu_ratio`` is the measured machine's core against the
  Jetson's (clock x a per-clock factor: Cortex-A78AE ~ 0.55 of a recent x86 server core per
  clock, Carmel ~ 0.45; SPECint-style estimates, the weakest link of the model).
- GPU work scales per kernel class with what bounds it: our rasterizer and GEMM kernels with
  FP32 throughput (SMs x FP32 lanes per SM x clock); sorting, copies and element-wise kernels with
  memory bandwidth.
- A frame takes host + GPU: the tracker reads each frame's result back (its one host wait) before
  it can start the next frame's host work (the next frame's prior is this frame's pose), so a
  frame's host work and its GPU work take turns; only the queueing of kernels overlaps kernels
  already running. Host ms: the un-profiled wall time less the GPU time, or the profiler's host ms
  if larger (a profile without a wall time). Until 2026-12-05 the model took max(host, GPU) with
  fewer than two host waits a frame: on the profiled machine itself it then gave the tracker 0.98
  ms a frame against its measured 2.0 (H100, 2f61462), and the whole system 1.31x the measured rate.

The whole system, per input frame; r = keyframes per input frame (``keyframe_rate``: over every
frame the profile's own sequential run tracked; the sequence and the keyframe rules set it, not
the machine, and the profile stays one file from one machine):

- A thread's host work h is its un-profiled wall time less its GPU time (the tracker's: or its
  thread CPU time a frame in the profile's run, or its whole ``track_frame``'s wall time a frame
  there less its GPU time, whichever is largest) times ``cpu_ratio``: the profiler's operator time
  leaves the interpreter out and is inflated by the profiler; the replays of one frame leave out
  the work around the tracker (the frame's unroll and checks, keyframes, the journal) and the
  other threads' turns on the interpreter lock, which a run pays (H100, 2026-12-06: ``track_frame``
  4.6 ms a frame in the profile's run against 1.9 for the replays and 4.3 in threaded runs; the
  check's ratio 1.23, 1.27 from the same profile without this term). GPU ms g as above.
- The mapper per keyframe: T_m = h_m + g_m (it waits for the GPU inside a keyframe: the densify
  render's pair count, the loss after the steps).
- One GPU: the threads' kernels take turns, G = g_t + r (g_m + g_loop).
- The mapper's own thread: M = r T_m (it works through one keyframe at a time).
- One interpreter lock: the tracking and mapping threads have cores of their own, but one runs
  Python at a time. PyTorch's operators and the rasterizer's ops (``torch.ops.sphere_raster``,
  since issue 36's op registration) release it while they run, the render's wait for its pair
  count included (measured: a second thread kept running through a 0.9 s CPU render): L = h_t +
  r h_m counts the host work only. (With the earlier pybind bindings the mapper held the lock
  through its GPU waits.)
- The tracker waits for the mapper when it is ``system.max_unmapped_keyframes`` ahead, the mapper
  for keyframes: in steady state the slowest sets the pace, frame = max(t_t, M, L, G); system FPS =
  1000 / frame; the binding term is printed. t_t = h_t + g_t (as the tracker alone above, but with
  h_t from the whole ``track_frame``: the profile's thread CPU or run wall, as above). With
  ``max_unmapped_keyframes`` 0 (the profile's ``max_unmapped_keyframes``; 1 when absent) the
  tracker waits for each keyframe to be mapped: the tracking term is t_t + M (``tracking+mapping``)
  and the mapper has no term of its own.
- Loop and grid threads never hold the pipeline up (the mapper offers them keyframes, never
  waits: a busy loop stage skips keyframes, the grid takes what queued at once); their load is
  r (CPU ms * cpu_ratio + GPU ms) / frame, above 1 they fall behind. Their heavy calls (numpy,
  OpenCV, gtsam) release the lock: left out of L, as is the caller's thread (reading, uploads).
- Sequential (``system.threaded: false``: nothing overlaps): t_t + r (T_m + loop + grid).
- Not modelled: the lock's hand-over latency; a thread's waits lengthened by the other's kernels
  (its path counts its own GPU time, G the sum). The first is large: the loop and grid threads'
  Python between those heavy calls holds the lock that the tracker and the mapper need after each
  GPU wait (H200, 7-Scenes: 65 FPS measured, 89 with both threads off, 100 predicted;
  ``system.switch_interval_ms`` shortens the wait; docs/JETSON.md). ``--check`` shows that gap
  (H100, 2026-12-06, the default mode: the mapper 25.2 ms a keyframe in the runs against 20.3 in
  the profile's, the runs' start 0.94 s against 0.65).
  With ``max_unmapped_keyframes`` 1 (the Jetson configs) it is the mapper's: beside the tracker
  it took 46-47 ms a keyframe against 20-22 alone (H200, 2026-12-06), and the check predicted
  1.67x the measured rate: that mode's projections overstate (docs/benchmarks.md#jetson-projection).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


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
    # NVIDIA H100 SXM5 80 GB (torch names it "NVIDIA H100 80GB HBM3"): 132 SMs x 128 lanes, 1.98 GHz,
    # HBM3 3.35 TB/s; host taken as the H200's (the device machines of both kinds: x86 server cores).
    "h100": Machine("NVIDIA H100 (SXM)", 132 * 128, 1.98, 3350.0, 3.5, 1.0),
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
# The name torch gives each reference machine (``torch.cuda.get_device_name``, a profile's
# ``machine``): how ``reference_key`` finds the machine a profile was made on.
DEVICE_NAMES = {"h200": ("NVIDIA H200",), "h100": ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM")}
NANO_SUPER = Machine("Jetson Orin Nano 8GB (super)", 1024, 1.02, 102.0, 1.7, 0.55)
COMPUTE_BOUND = {"raster", "gemm"}   # everything else (sort, copy, elementwise) is memory bound


def reference_key(profile: dict) -> str:
    """The ``MACHINES`` key of the machine ``profile`` was made on (its ``machine``: the CUDA
    device's name); ``h200`` for a profile that does not name one (made before profiles did).
    Raises ValueError for a machine the model has no figures for (a CPU, another GPU)."""
    name = profile.get("machine")
    if name is None:
        return "h200"
    for key, prefixes in DEVICE_NAMES.items():
        if any(name.startswith(p) for p in prefixes):
            return key
    raise ValueError(f"the profile's machine {name!r} has no published figures in the model "
                     f"(known: {', '.join(m.name for k, m in MACHINES.items() if k in DEVICE_NAMES)}); "
                     f"pass the closest as --reference ({', '.join(sorted(DEVICE_NAMES))})")


def ratios(ref: Machine, target: Machine) -> tuple[float, float, float]:
    """How many times slower ``target`` is than ``ref``: (CPU core, FP32 throughput, bandwidth)."""
    return ((ref.cpu_ghz * ref.cpu_per_clock) / (target.cpu_ghz * target.cpu_per_clock),
            ref.fp32_tflops / target.fp32_tflops, ref.bandwidth_gbs / target.bandwidth_gbs)


def gpu_ms(part: dict, compute_ratio: float, bw_ratio: float) -> float:
    """A part's GPU ms per frame (keyframe) on the target: each kernel class scaled by what bounds it."""
    return sum(ms * (compute_ratio if cls in COMPUTE_BOUND else bw_ratio)
               for cls, ms in part.get("gpu_ms_by_class", {}).items())


def tracking_part(profile: dict) -> dict:
    """The tracking figures: ``profile["tracking"]``, or the profile itself (the older layout)."""
    return profile.get("tracking", profile)


def host_work(part: dict, floor: str = "thread_cpu_ms") -> float:
    """A thread's own host ms per unit on the profiled machine, the interpreter included: the
    un-profiled wall ms less the GPU ms, or ``part[floor]`` if larger (a thread in a run: its
    thread CPU ms; the tracker alone: the profiler's host ms, as the thread's CPU also holds the
    work around the tracker); without a wall time the profiler's host ms. A thread in a run
    (``floor`` "thread_cpu_ms"): also its wall ms per unit in the profile's sequential run less
    the GPU ms (``run_wall_ms``: the tracker's whole ``track_frame``), if larger."""
    if "wall_ms" not in part:
        return part["host_ms"]
    gpu = part.get("gpu_ms", 0.0)
    in_run = (part.get("run_wall_ms") or 0.0) - gpu if floor == "thread_cpu_ms" else 0.0
    return max(part["wall_ms"] - gpu, part.get(floor) or 0.0, in_run, 0.0)


def project(profile: dict, ref: Machine, target: Machine) -> dict:
    """The tracker alone on ``target``: host, GPU and frame (host + GPU) ms per frame and FPS. Host:
    the un-profiled wall time less the GPU time, or the profiler's host ms if larger."""
    part = tracking_part(profile)
    cpu_ratio, compute_ratio, bw_ratio = ratios(ref, target)
    host = host_work(part, floor="host_ms") * cpu_ratio
    gpu = gpu_ms(part, compute_ratio, bw_ratio)
    frame = host + gpu
    return {"machine": target.name, "cpu_ratio": cpu_ratio, "compute_ratio": compute_ratio, "bw_ratio": bw_ratio,
            "host_ms": host, "gpu_ms": gpu, "frame_ms": frame, "fps": 1e3 / frame if frame > 0 else float("inf")}


def thread_ms(part: dict, cpu_ratio: float, compute_ratio: float, bw_ratio: float) -> tuple[float, float, float]:
    """A thread's (host, GPU, own) ms per frame (keyframe) on the target: ``host_work`` times
    ``cpu_ratio``, GPU by kernel class, and their sum (they take turns)."""
    h, g = host_work(part) * cpu_ratio, gpu_ms(part, compute_ratio, bw_ratio)
    return h, g, h + g


def tracks_ahead(profile: dict) -> bool:
    """Whether the profiled run let the tracker run keyframes ahead of the map (its
    ``max_unmapped_keyframes`` above 0; 1 when the profile does not say)."""
    return profile.get("max_unmapped_keyframes", 1) != 0


def project_system(profile: dict, ref: Machine, target: Machine) -> Optional[dict]:
    """The whole system on ``target`` (the module's model), per input frame: ``terms`` (tracking,
    lock, GPU ms), ``frame_ms``, ``fps``, ``bound`` (the binding term), ``fps_tracking`` (the
    tracker alone, ``project``), ``mapping_ms`` (T_m per keyframe), ``fps_sequential``,
    ``loop_load`` / ``grid_load`` (None without the part). None without a mapping part."""
    if not profile.get("mapping"):
        return None
    ratio = ratios(ref, target)
    mapping, loop, grid = profile["mapping"], profile.get("loop"), profile.get("grid")
    r = profile["keyframe_rate"]
    h_t, g_t, t_t = thread_ms(tracking_part(profile), *ratio)
    h_m, g_m, map_ms = thread_ms(mapping, *ratio)
    g_loop = gpu_ms(loop or {}, *ratio[1:])
    loop_ms = ((loop or {}).get("cpu_ms") or 0.0) * ratio[0] + g_loop
    grid_ms = ((grid or {}).get("cpu_ms") or 0.0) * ratio[0]
    if not tracks_ahead(profile):     # each keyframe mapped before the next frame
        terms = {"tracking+mapping": t_t + r * map_ms}
    else:
        terms = {"tracking": t_t, "mapper": r * map_ms}
    terms.update({"lock": h_t + r * h_m, "GPU": g_t + r * (g_m + g_loop)})
    frame = max(terms.values())
    return {"machine": target.name, "terms": terms, "frame_ms": frame, "fps": 1e3 / frame if frame > 0 else float("inf"),
            "bound": max(terms, key=terms.get), "fps_tracking": project(profile, ref, target)["fps"],
            "mapping_ms": map_ms, "fps_sequential": 1e3 / (t_t + r * (map_ms + loop_ms + grid_ms)),
            "loop_load": r * loop_ms / frame if loop else None, "grid_load": r * grid_ms / frame if grid else None}
