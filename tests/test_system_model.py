"""The whole-system model (slam.tools.jetson_model) on hand-made profiles: a mapping-bound system runs
at 1 / (keyframe rate x mapping ms), a tracking-bound one at the tracker's own rate, a GPU-bound one
at the shared GPU's; the host work of a thread is its un-profiled wall time less its GPU time; a
profile of the older tracking-only layout still projects (the tracker alone); the check against
runs' metrics.json (slam.tools.jetson_projection) passes and fails where it should."""
import json

import pytest

from slam.tools import jetson_model as model
from slam.tools import jetson_projection

H200 = model.MACHINES["h200"]
AGX = model.MACHINES["orin_agx"]


def _tracking(host=0.0, wall=0.0, raster=0.0, waits=1.0, **extra):
    return dict(host_ms=host, wall_ms=wall, gpu_ms=raster, gpu_ms_by_class={"raster": raster} if raster else {},
                host_waits=waits, launches=10.0, renders=10.0, **extra)


def _mapping(wall, raster=0.0, sort=0.0, waits=50.0):
    classes = {k: v for k, v in (("raster", raster), ("sort", sort)) if v}
    return dict(host_ms=1.0, wall_ms=wall, gpu_ms=raster + sort, gpu_ms_by_class=classes, host_waits=waits,
                launches=100.0)


def _profile(tracking, mapping, rate, loop=None, grid=None):
    return {"machine": "test", "tracking": tracking, "mapping": mapping, "keyframe_rate": rate, "loop": loop,
            "grid": grid}


def test_a_mapping_bound_system_runs_at_one_over_rate_times_mapping_ms():
    p = model.project_system(_profile(_tracking(), _mapping(100.0), 0.2), H200, H200)
    assert p["bound"] == "mapper" and p["mapping_ms"] == pytest.approx(100.0)
    assert p["fps"] == pytest.approx(1e3 / (0.2 * 100.0))          # 50 FPS
    # the tracker's own host work shares the interpreter lock with the mapper: it adds
    busy = model.project_system(_profile(_tracking(host=0.5, wall=2.0), _mapping(100.0), 0.2), H200, H200)
    assert busy["bound"] == "lock" and busy["fps"] == pytest.approx(1e3 / (2.0 + 0.2 * 100.0))
    # the lock holds host work only: a mapper that waits for the GPU (the rasterizer's ops release
    # the lock meanwhile) is bound by its own thread, and the tracker's host work then does not add
    gpu_mapper = model.project_system(_profile(_tracking(host=0.5, wall=2.0), _mapping(100.0, raster=60.0), 0.2),
                                      H200, H200)
    assert gpu_mapper["terms"]["lock"] == pytest.approx(2.0 + 0.2 * 40.0)
    assert gpu_mapper["bound"] == "mapper" and gpu_mapper["fps"] == pytest.approx(1e3 / (0.2 * 100.0))


def test_mapping_on_a_jetson_scales_host_by_cpu_and_gpu_by_kernel_class():
    cpu = (H200.cpu_ghz * H200.cpu_per_clock) / (AGX.cpu_ghz * AGX.cpu_per_clock)
    fp32 = (H200.fp32_lanes * H200.gpu_ghz) / (AGX.fp32_lanes * AGX.gpu_ghz)
    bw = H200.bandwidth_gbs / AGX.bandwidth_gbs
    mapping = _mapping(100.0, raster=10.0, sort=5.0)           # host work 100 - 15 = 85 ms a keyframe
    p = model.project_system(_profile(_tracking(), mapping, 0.25), H200, AGX)
    assert p["mapping_ms"] == pytest.approx(85.0 * cpu + 10.0 * fp32 + 5.0 * bw)
    assert p["terms"]["GPU"] == pytest.approx(0.25 * (10.0 * fp32 + 5.0 * bw))
    assert p["fps"] == pytest.approx(1e3 / max(0.25 * p["mapping_ms"], p["terms"]["GPU"]))
    # however few its host waits, a keyframe's host and GPU work take turns; the lock holds only the host work
    one_wait = model.project_system(_profile(_tracking(), dict(mapping, host_waits=1.0), 0.25), H200, AGX)
    assert one_wait["mapping_ms"] == pytest.approx(p["mapping_ms"])
    assert one_wait["terms"]["lock"] == pytest.approx(0.25 * 85.0 * cpu)


def test_a_tracking_bound_system_runs_at_the_trackers_rate():
    tracking = _tracking(host=4.0, wall=10.0, raster=6.0, waits=10.0)   # serial: 4 + 6 ms a frame
    prof = _profile(tracking, _mapping(50.0, raster=10.0), 0.05)        # lock 4 + 2.5, GPU 6 + 0.5
    p = model.project_system(prof, H200, H200)
    assert p["bound"] == "tracking"
    assert p["fps"] == pytest.approx(model.project(prof, H200, H200)["fps"]) == pytest.approx(100.0)
    assert p["fps_sequential"] == pytest.approx(1e3 / (10.0 + 0.05 * 50.0))


def test_a_gpu_bound_system_counts_every_threads_kernels_and_the_loop_and_grid_loads():
    tracking = _tracking(host=0.2, wall=1.0, raster=0.8)
    loop, grid = {"cpu_ms": 20.0, "gpu_ms": 3.0, "gpu_ms_by_class": {"raster": 3.0}}, {"cpu_ms": 10.0}
    prof = _profile(tracking, _mapping(22.0, raster=20.0), 0.2, loop, grid)   # host work 2 ms a keyframe
    p = model.project_system(prof, H200, H200)
    assert p["bound"] == "GPU"
    assert p["terms"]["GPU"] == pytest.approx(0.8 + 0.2 * (20.0 + 3.0))
    assert p["loop_load"] == pytest.approx(0.2 * (20.0 + 3.0) / p["frame_ms"])
    assert p["grid_load"] == pytest.approx(0.2 * 10.0 / p["frame_ms"])
    assert p["fps_sequential"] == pytest.approx(1e3 / (1.0 + 0.2 * (22.0 + 23.0 + 10.0)))   # the tracker: its wall, 1 ms
    assert model.project_system(_profile(tracking, _mapping(22.0, raster=20.0), 0.2), H200, H200)["loop_load"] is None


def test_host_work_is_wall_less_gpu_or_the_thread_cpu_if_larger():
    assert model.host_work({"host_ms": 3.0, "wall_ms": 10.0, "gpu_ms": 4.0}) == pytest.approx(6.0)
    assert model.host_work({"host_ms": 3.0, "wall_ms": 10.0, "gpu_ms": 4.0, "thread_cpu_ms": 7.5}) == pytest.approx(7.5)
    assert model.host_work({"host_ms": 3.0}) == pytest.approx(3.0)                  # no wall time measured
    part = {"host_ms": 7.0, "wall_ms": 10.0, "gpu_ms": 4.0, "thread_cpu_ms": 9.0}
    assert model.host_work(part) == 9.0 and model.host_work(part, floor="host_ms") == 7.0   # the tracker alone's floor
    assert model.host_work({"host_ms": 3.0, "wall_ms": 2.0, "gpu_ms": 4.0}) == 0.0


def test_a_threads_host_work_counts_its_whole_frame_in_the_profiles_run():
    # The replays of one frame: 2 ms wall, 1 ms GPU; the run's track_frame: 4.5 ms wall a frame.
    part = _tracking(host=0.5, wall=2.0, raster=1.0, thread_cpu_ms=2.4, run_wall_ms=4.5)
    assert model.host_work(part) == pytest.approx(3.5)                     # 4.5 less the GPU's 1.0
    assert model.host_work(part, floor="host_ms") == pytest.approx(1.0)    # the tracker alone: the replays
    assert model.host_work(dict(part, run_wall_ms=3.0)) == pytest.approx(2.4)   # the thread CPU, if larger
    profile = _profile(part, _mapping(22.0, raster=20.0), 0.2)
    profile["max_unmapped_keyframes"] = 0
    p = model.project_system(profile, H200, H200)
    assert p["terms"]["tracking+mapping"] == pytest.approx(4.5 + 0.2 * model.thread_ms(profile["mapping"], 1, 1, 1)[2])


def test_an_old_tracking_only_profile_still_projects(tmp_path, capsys):
    old = dict(_tracking(host=0.7, wall=3.2, raster=2.0, waits=1.1), host_launches=5.0, host_wait_ms=1.0,
               machine="NVIDIA H200", config="7scenes.yaml", overrides=[])
    assert model.project(old, H200, AGX) == model.project({"tracking": old}, H200, AGX)
    assert model.project_system(old, H200, AGX) is None
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    assert jetson_projection.main([str(path)]) == 0
    printed = capsys.readouterr().out
    assert "tracking FPS" in printed and "whole system" not in printed
    assert jetson_projection.main([str(path), "--check", str(path)]) == 2    # nothing to check the system with
    assert "--mapping-keyframes" in capsys.readouterr().out


def test_the_check_compares_the_prediction_with_the_runs_median(tmp_path, capsys):
    prof = dict(_profile(_tracking(), _mapping(100.0), 0.2), start_ms=500.0)   # 20 ms a frame steady
    predicted = 1e3 * 500 / (500.0 + 499 * 20.0)                              # 47.6 FPS over 500 frames
    runs = [{"fps_system": f, "frames": 500, "keyframes": 100, "stage_ms": {"mapping_mean": 110.0}} for f in (40.0, 47.0, 60.0)]
    text, ok = jetson_projection.check(prof, "h200", runs, 0.15)
    assert ok and f"predicted {predicted:.1f}" in text and "median of 3" in text
    assert f"predicted / measured {predicted / 47.0:.2f}" in text
    text, ok = jetson_projection.check(prof, "h200", runs[:1], 0.15)       # 47.6 / 40: 19 % off
    assert not ok and "OUTSIDE" in text
    # the first frame's wait counts in the start: 500 + 300 ms
    text, _ = jetson_projection.check(dict(prof, first_frame_ms=300.0), "h200", runs, 0.15)
    assert f"predicted {1e3 * 500 / (800.0 + 499 * 20.0):.1f}" in text and "start 0.80 s" in text
    assert "timeline" not in text                                          # runs from before the timeline
    timed = [dict(r, timeline_s={"start": 0.6, "frames": 9.96, "end": 0.4}) for r in runs]
    text, _ = jetson_projection.check(prof, "h200", timed, 0.15)
    assert ("timeline s: runs start 0.60 (to the second frame), frames 9.96 (20.00 ms a frame), end 0.40; "
            "model start 0.52, frames 9.96 (20.00 ms a frame)") in text
    files = []
    for i, run in enumerate(runs[:1]):
        files.append(tmp_path / f"metrics{i}.json")
        files[-1].write_text(json.dumps(run))
    (tmp_path / "profile.json").write_text(json.dumps(dict(prof, machine="NVIDIA H200")))
    assert jetson_projection.main([str(tmp_path / "profile.json"), "--check", *map(str, files)]) == 1
    printed = capsys.readouterr().out
    jetsons = [m.name for k, m in model.MACHINES.items() if k not in model.DEVICE_NAMES]
    assert all(name in printed for name in jetsons) and "system FPS" in printed
    assert f"{H200.name} (profiled)" in printed and model.MACHINES["h100"].name not in printed
    assert jetson_projection.main([str(tmp_path / "profile.json"), "--check", str(files[0]), "--tolerance", "0.25"]) == 0


def test_the_systems_tracker_is_its_wall_time_and_threads_never_lose_to_running_in_turn():
    # a CPU profile: the profiler sees a fraction of the host work (the kernels' bindings are no operators)
    prof = _profile(_tracking(host=2.5, wall=200.0, waits=0.0), _mapping(600.0, waits=0.0), 0.4,
                    {"cpu_ms": 40.0, "gpu_ms_by_class": {}}, {"cpu_ms": 10.0})
    p = model.project_system(prof, H200, H200)
    assert p["terms"]["tracking"] == pytest.approx(200.0)
    assert p["terms"]["lock"] == pytest.approx(200.0 + 0.4 * 600.0)
    assert p["fps_sequential"] == pytest.approx(1e3 / (200.0 + 0.4 * 650.0)) and p["fps_sequential"] <= p["fps"]


def test_a_tracker_that_waits_for_each_keyframe_adds_the_mapping_to_its_frames():
    # system.max_unmapped_keyframes 0: the tracker and the mapper take turns
    prof = dict(_profile(_tracking(host=0.5, wall=2.0), _mapping(100.0, raster=60.0), 0.2), max_unmapped_keyframes=0)
    p = model.project_system(prof, H200, H200)
    assert "mapper" not in p["terms"] and p["bound"] == "tracking+mapping"
    assert p["fps"] == pytest.approx(1e3 / (2.0 + 0.2 * 100.0))
    ahead = model.project_system(dict(prof, max_unmapped_keyframes=1), H200, H200)
    assert ahead["fps"] == pytest.approx(1e3 / (0.2 * 100.0)) and ahead["fps"] > p["fps"]


def test_a_profile_that_tracks_ahead_of_the_map_prints_its_rows_as_upper_bounds():
    prof = dict(_profile(_tracking(host=0.5, wall=2.0), _mapping(100.0, raster=60.0), 0.2), max_unmapped_keyframes=1)
    assert jetson_projection.AHEAD_NOTE in jetson_projection.system_table(prof, "h200", False)
    turns = jetson_projection.system_table(dict(prof, max_unmapped_keyframes=0), "h200", False)
    assert "upper bounds" not in turns


def test_the_reference_is_the_machine_the_profile_names(tmp_path, capsys):
    """An H100's profile projects from the H100's figures (its bandwidth is 0.7 of the H200's), a
    profile naming no machine from the H200's, one from a machine the model has no figures for
    stops with the file named unless --reference says which figures to use."""
    assert model.reference_key({"machine": "NVIDIA H100 80GB HBM3"}) == "h100"
    assert model.reference_key({"machine": "NVIDIA H200"}) == "h200"
    assert model.reference_key({}) == "h200"
    with pytest.raises(ValueError, match="NVIDIA GeForce RTX 4090"):
        model.reference_key({"machine": "NVIDIA GeForce RTX 4090"})
    prof = _profile(_tracking(host=0.5, wall=2.0, raster=0.5), _mapping(20.0, raster=5.0, sort=5.0), 0.2)
    h100 = model.project_system(prof, model.MACHINES["h100"], AGX)
    h200 = model.project_system(prof, H200, AGX)
    assert h100["fps"] > h200["fps"]          # the same sort ms on a slower-memory machine: less work
    path = tmp_path / "p.json"
    path.write_text(json.dumps(dict(prof, machine="NVIDIA H100 80GB HBM3")))
    assert jetson_projection.main([str(path)]) == 0
    assert "NVIDIA H100 (SXM) (profiled)" in capsys.readouterr().out
    path.write_text(json.dumps(dict(prof, machine="cpu")))
    assert jetson_projection.main([str(path)]) == 2
    assert f"{path}: the profile's machine 'cpu'" in capsys.readouterr().out
    assert jetson_projection.main([str(path), "--reference", "h200"]) == 0
