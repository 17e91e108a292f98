"""The tracking-cost figures: the profiler summary (slam.runtime.profiling) and the Jetson
projection's tracker-alone frame time, host + GPU (slam.tools.jetson_projection)."""
from types import SimpleNamespace

import pytest
import torch

from slam.runtime import profiling
from slam.tools import jetson_projection


def _event(key, cpu_us=0.0, dev_us=0.0, count=1, cuda=False):
    return SimpleNamespace(key=key, self_cpu_time_total=cpu_us, self_device_time_total=dev_us, count=count,
                           device_type="DeviceType.CUDA" if cuda else "DeviceType.CPU")


def test_summary_separates_waits_launches_and_gpu_work():
    events = [_event("aten::add", 300.0), _event("cudaLaunchKernel", 100.0, count=4),
              _event("cudaGraphLaunch", 50.0), _event("cudaEventSynchronize", 2000.0),
              _event("gn_tile_kernel", dev_us=1500.0, count=10, cuda=True),
              _event("Memcpy DtoH (Device -> Pageable)", dev_us=10.0, count=2, cuda=True)]
    prof = SimpleNamespace(key_averages=lambda: events)
    s = profiling.summarise(prof, 2, kernel_class=lambda name: "raster" if "gn_" in name else "copy")
    assert s["host_ms"] == pytest.approx(0.225)         # 450 us of own work over 2 frames, waits left out
    assert s["host_wait_ms"] == pytest.approx(1.0)
    assert s["host_waits"] == pytest.approx(1.5)        # one synchronise + two pageable reads, over 2 frames
    assert s["host_launches"] == pytest.approx(2.5) and s["launches"] == pytest.approx(6.0)
    assert s["gpu_ms_by_class"] == pytest.approx({"copy": 0.005, "raster": 0.75})


def test_summary_of_a_real_cpu_profile():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            torch.ones(100).add_(1).sum()
    s = profiling.summarise(prof, 3)
    assert s["host_ms"] > 0 and s["gpu_ms"] == 0 and s["launches"] == 0 and s["host_waits"] == 0


def test_the_tracker_alone_takes_host_plus_gpu_a_frame():
    """One host wait a frame or many: the frame's result is read before the next frame's host work
    starts, so they take turns. Host: the un-profiled wall time less the GPU time, or the
    profiler's host ms if larger; on the profiled machine the frame is then its wall time."""
    proj = jetson_projection
    prof = dict(host_ms=0.5, wall_ms=2.0, gpu_ms=1.5, gpu_ms_by_class={"raster": 1.0, "sort": 0.5}, host_waits=1.13)
    ref, agx = proj.MACHINES["h200"], proj.MACHINES["orin_agx"]
    same = proj.project(prof, ref, ref)
    assert same["host_ms"] == pytest.approx(0.5) and same["frame_ms"] == pytest.approx(2.0)
    for p in (proj.project(prof, ref, agx), proj.project(dict(prof, host_waits=24.0), ref, agx)):
        assert p["fps"] == pytest.approx(1e3 / (p["host_ms"] + p["gpu_ms"]))
        assert p["host_ms"] == pytest.approx(0.5 * p["cpu_ratio"])
    old_layout = proj.project({k: v for k, v in prof.items() if k != "wall_ms"}, ref, ref)   # no wall time
    assert old_layout["host_ms"] == pytest.approx(0.5) and old_layout["frame_ms"] == pytest.approx(2.0)


def test_summary_per_kernel_sums_each_name_per_frame():
    events = [_event("gn_tile_kernel<true, 4>(x)", dev_us=900.0, count=6, cuda=True),
              _event("sort_tiles_kernel(y)", dev_us=100.0, count=10, cuda=True),
              _event("aten::add", 300.0)]
    prof = SimpleNamespace(key_averages=lambda: events)
    s = profiling.summarise(prof, 2, by_kernel=True)
    assert list(s["gpu_by_kernel"]) == ["gn_tile_kernel<true, 4>(x)", "sort_tiles_kernel(y)"]   # longest first
    assert s["gpu_by_kernel"]["gn_tile_kernel<true, 4>(x)"] == pytest.approx([450.0, 3.0])      # us, runs a frame
    assert "gpu_by_kernel" not in profiling.summarise(prof, 2)
