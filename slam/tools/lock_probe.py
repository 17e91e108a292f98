"""What the loop and grid threads' per-keyframe work costs a thread that waits on the GPU: the
interpreter lock. A probe thread queues 20 tiny tensor ops and synchronises, again and again (the
tracker's and the mapper's pattern: every op and every wait hands the lock over); a job thread
meanwhile runs one background stage's work over a sequence's keyframes. The probe's time per
iteration beside each job, against its time alone, is what that job's lock use costs the others.

    python -m slam.tools.lock_probe --config 7scenes.yaml --set data.path=/data/7s
    python -m slam.tools.lock_probe --keyframes 8                     # the bundled sample, quick

Jobs: ``frames`` (the loader reading and preparing the frames the keyframes came from: decoding,
registration; per keyframe that is ``--every`` frames), ``orb`` (ORB features and the global
descriptor of each keyframe: OpenCV, lock released), ``bridges`` (the loop stage's ICP of each
keyframe against the previous one, the host kernel), ``bridges-numpy`` (the same with the NumPy
ICP, ``icp_reference``), ``grid`` (the occupancy grid integrating every keyframe: its scan and ray
casting kernels and the counts). Keyframes: every ``--every``-th frame at the tracking resolution,
at the ground-truth pose. Figures: docs/benchmarks.md#the-other-threads-cost.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

import numpy as np
import torch

from slam.config import load_config
from slam.data.sources import open_source
from slam.geometry import invert
from slam.grid.builder import GridBuilder
from slam.loop.descriptor import global_descriptor
from slam.loop.verify import LoopVerifier
from slam.map.keyframes import Keyframe
from slam.tracking.features import orb_features

PROBE_OPS = 20     # tiny tensor ops per probe iteration, then one synchronise
MIN_PROBES = 20    # a job repeats (up to MAX_REPEATS) until the probe has iterated this often beside it
MAX_REPEATS = 50


def load_keyframes(cfg, count: int, every: int) -> list:
    """Every ``every``-th frame of the configured sequence, up to ``count``, as keyframes at the
    tracking resolution and their ground-truth poses."""
    out = []
    for i, frame in enumerate(open_source(cfg.data)):
        if i % every:
            continue
        if frame.gt_pose is None:
            raise SystemExit(f"lock_probe: frame {frame.index} of {cfg.data.path} has no ground-truth pose")
        out.append(Keyframe.from_frame(frame, frame.gt_pose, downscale=cfg.tracking.downscale, kf_id=len(out)))
        if len(out) == count:
            break
    if len(out) < 2:
        raise SystemExit(f"lock_probe: {cfg.data.path} gave {len(out)} keyframes; at least 2 are needed")
    return out


def jobs(cfg, keyframes: list, every: int) -> dict:
    """name -> a function running that stage's work over every keyframe once."""
    kernel = LoopVerifier(cfg.loop, cfg.tracking, cfg.quality, "cpu")
    numpy_icp = LoopVerifier(cfg.loop, cfg.tracking, cfg.quality, "reference")

    def frames():
        for i, _ in enumerate(open_source(cfg.data)):
            if i + 1 >= len(keyframes) * every:
                break

    def orb():
        for kf in keyframes:
            orb_features(kf.color)
            global_descriptor(kf.color)

    def bridges(verifier):
        def run():
            for a, b in zip(keyframes[:-1], keyframes[1:]):
                verifier.measure(b, a, invert(a.T_wc) @ b.T_wc)
        return run

    def grid():
        builder = GridBuilder(cfg.grid, threaded=False)
        for kf in keyframes:
            builder.offer(kf, {k.kf_id: k.T_wc for k in keyframes[: kf.kf_id + 1]})

    return {"frames": frames, "orb": orb, "bridges": bridges(kernel), "bridges-numpy": bridges(numpy_icp),
            "grid": grid}


def probe_beside(job, device: torch.device, repeats: int) -> dict:
    """Runs ``job`` ``repeats`` times (more until the probe has MIN_PROBES iterations beside it) on
    a thread while the probe loops on another. Returns the job's wall and CPU seconds per repeat
    and the probe's iteration times (s)."""
    x = torch.zeros(1000, device=device)
    times: list = []
    stop = threading.Event()

    def probe():
        while not stop.is_set():
            t = time.perf_counter()
            for _ in range(PROBE_OPS):
                x.add_(1.0)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t)

    out: dict = {}

    def run_job():
        c, t, done = time.thread_time(), time.perf_counter(), 0
        while done < repeats or (len(times) - n0 < MIN_PROBES and done < MAX_REPEATS):
            job()
            done += 1
        out["wall"], out["cpu"] = (time.perf_counter() - t) / done, (time.thread_time() - c) / done

    th = threading.Thread(target=probe, name="lock-probe")
    th.start()
    time.sleep(0.1)                                   # the probe warms up
    n0 = len(times)
    jt = threading.Thread(target=run_job, name="lock-probe-job")
    jt.start()
    jt.join()
    n1 = len(times)
    stop.set()
    th.join()
    out["probe"] = times[n0:n1]
    return out


def main(argv=None) -> int:
    """Prints one row per job and switch interval; 0 when done."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="default.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--keyframes", type=int, default=30)
    ap.add_argument("--every", type=int, default=5, help="a keyframe every this many frames")
    ap.add_argument("--repeats", type=int, default=2, help="times each job runs over the keyframes")
    ap.add_argument("--switch-interval-ms", type=float, action="append", default=None,
                    help="Python's switch interval(s) to probe at (default: 5 and 0.5)")
    ap.add_argument("--jobs", default="frames,orb,bridges,bridges-numpy,grid")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, args.set)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    keyframes = load_keyframes(cfg, args.keyframes, args.every)
    available = jobs(cfg, keyframes, args.every)
    chosen = [j.strip() for j in args.jobs.split(",") if j.strip()]
    unknown = [j for j in chosen if j not in available]
    if unknown:
        ap.error(f"unknown job(s) {unknown}; known: {', '.join(available)}")
    for job in chosen:                                # first calls: kernels loaded, caches warm
        available[job]()
    n = len(keyframes)
    print(f"{n} keyframes of {cfg.data.path}, {device.type}; probe: {PROBE_OPS} tiny ops + synchronise")
    print("| switch interval ms | job | job ms/keyframe wall / CPU | probe ms median / mean | vs alone |")
    print("|---|---|---|---|---|")
    old = sys.getswitchinterval()
    try:
        for ms in args.switch_interval_ms or [5.0, 0.5]:
            sys.setswitchinterval(ms / 1e3)
            alone = probe_beside(lambda: time.sleep(0.3), device, 1)["probe"]
            base = statistics.median(alone)
            print(f"| {ms:g} | (none) | - | {1e3 * base:.3f} / {1e3 * np.mean(alone):.3f} | 1.00 |")
            for job in chosen:
                r = probe_beside(available[job], device, args.repeats)
                med = statistics.median(r["probe"]) if r["probe"] else float("nan")
                print(f"| {ms:g} | {job} | {1e3 * r['wall'] / n:.2f} / {1e3 * r['cpu'] / n:.2f} | "
                      f"{1e3 * med:.3f} / {1e3 * np.mean(r['probe']):.3f} | {med / base:.2f} |", flush=True)
    finally:
        sys.setswitchinterval(old)
    return 0


if __name__ == "__main__":
    sys.exit(main())
