"""The tools around a run (slam/tools, slam/output/view_run.py, rasterizer/bench) on tiny inputs:
every console command of setup.py imports and answers --help; the device measurement samples a
child's memory; the tracking profile of a few sample frames projects to Jetsons; the memory
stages, the GPU-memory replay, the quality calibration, the pruner ablation's comparison, the
colour-registration estimate and both rasterizer benchmarks (CPU) run and print what they say."""
import ast
import importlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
# The tools added with slam/tools (the older commands have tests of their own).
TOOLS = ["slam_measure_device", "slam_profile", "slam_jetson_projection", "slam_color_registration",
         "slam_view_run", "slam_bench_rasterizer", "slam_bench_gauss_newton"]


def _console_scripts() -> dict:
    """{command: "module:function"} of setup.py's console_scripts (read, not run)."""
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "console_scripts"
                                              for k in node.keys):
            entries = ast.literal_eval(node)["console_scripts"]
            return dict(e.replace(" ", "").split("=", 1) for e in entries)
    raise AssertionError("setup.py has no console_scripts")


def _resolve(target: str):
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def test_every_console_command_imports_and_the_tools_answer_help(capsys):
    scripts = _console_scripts()
    assert set(TOOLS) <= set(scripts)
    for name, target in scripts.items():
        assert callable(_resolve(target)), name
    for name in TOOLS:
        with pytest.raises(SystemExit) as exit_:
            _resolve(scripts[name])(["--help"])
        assert exit_.value.code == 0, name
        assert "usage:" in capsys.readouterr().out, name


def test_scripts_hold_shell_only_and_nothing_edits_sys_path():
    assert sorted(p.suffix for p in (REPO / "scripts").iterdir()) == [".py"] + [".sh"] * 10   # resolve_aarch64.py
    for folder in ("slam/tools", "slam/data/synthetic", "rasterizer/bench"):
        for path in (REPO / folder).glob("*.py"):
            assert "sys.path" not in path.read_text(), path


@pytest.mark.skipif(not Path("/proc/self/smaps").is_file(), reason="reads /proc (Linux)")
def test_measure_samples_the_peak_memory_of_a_child():
    from slam.tools.measure_device import measure, smaps_breakdown

    own = smaps_breakdown(os.getpid(), top=None)
    assert own and all(v >= 0 for v in own.values())
    child = "import time; block = bytearray(80_000_000); block[::4096] = b'x' * len(block[::4096]); time.sleep(1.0)"
    res = measure([sys.executable, "-c", child], Path.cwd(), dict(os.environ), period_s=0.05)
    assert res["returncode"] == 0
    assert res["peak_rss_sampled_mb"] > 80, res                   # the 80 MB it touched
    assert res["rss_at_peak_by_mapping_mb"]                       # and what the RSS was made of


def test_profile_of_the_sample_projects_to_jetsons(tmp_path, capsys):
    """Tracking and mapping profiled on the CPU (no GPU time there: the host figures, the keyframe
    rate, the loop and grid parts), projected as the tracker alone and as the whole system."""
    from slam.tools import jetson_projection, profile_tracking

    out = tmp_path / "profile.json"
    assert profile_tracking.main(["--map-frames", "3", "--frames", "2", "--rows", "3", "--mapping-keyframes", "1",
                                  "--json", str(out), "--set", "mapping.final_iters=0", "--set", "mapping.iters=2",
                                  "--set", "system.device=cpu"]) == 0
    printed = capsys.readouterr().out
    assert "ms/frame" in printed and "under the profiler" in printed and "ms/keyframe without the profiler" in printed
    profile = json.loads(out.read_text())
    tracking, mapping = profile["tracking"], profile["mapping"]
    assert tracking["wall_ms"] > 0 and tracking["renders"] > 0 and tracking["host_ms"] > 0
    # a thread's wall time holds its CPU time
    assert tracking["thread_cpu_ms"] > 0 and tracking["run_wall_ms"] >= 0.99 * tracking["thread_cpu_ms"]
    assert mapping["wall_ms"] > 0 and mapping["host_ms"] > 0 and mapping["count"] == 1 and mapping["timed"] == 1
    assert mapping["gpu_ms"] == 0 and mapping["launches"] == 0 and mapping["spheres"] > 0      # the CPU path
    # the mapping's host time by operation: our render among them, the list adding up to the host time
    host_ops = mapping["host_by_op"]
    assert any(name.startswith("sphere_raster::") for name in host_ops)
    assert abs(sum(us for us, _ in host_ops.values()) / 1e3 - mapping["host_ms"]) <= 1e-6 * mapping["host_ms"] + 1e-9
    assert "mapping's host operations a keyframe" in printed
    assert 0 < profile["keyframe_rate"] <= 1 and profile["rate_keyframes"] >= 3 and profile["start_ms"] > 0
    assert profile["first_frame_ms"] > 0
    assert profile["grid"]["cpu_ms"] >= 0 and profile["grid"]["keyframes"] >= 3
    from slam.loop.pose_graph import gtsam_available
    if gtsam_available():
        assert profile["loop"]["cpu_ms"] >= 0 and profile["loop"]["count"] == 1
    assert jetson_projection.main([str(out)]) == 2              # a CPU's profile: no published figures
    assert "pass the closest as --reference" in capsys.readouterr().out
    assert jetson_projection.main([str(out), "--reference", "h200"]) == 0
    table = capsys.readouterr().out
    assert all(m.name in table for m in jetson_projection.targets(nano_super=False))
    assert "tracking FPS" in table and "system FPS" in table


@pytest.mark.skipif(not Path("/proc/self/smaps").is_file(), reason="reads /proc (Linux)")
def test_memory_stages_prints_each_stage(capsys):
    from slam.tools import memory_stages

    assert memory_stages.main(["--frames", "0", "--device", "cpu", "--spheres", "500"]) == 0
    printed = capsys.readouterr().out
    for stage in ("import numpy, torch", "import slam.cli, rasterizer", "rasterizer: render + backward (500 spheres)",
                  "Adam step", "peak RSS of the process"):
        assert stage in printed, stage


def test_memory_stages_run_only_with_ops_skips_the_synthetic_stages(capsys):
    from slam.tools import memory_stages

    assert memory_stages.main(["--frames", "0", "--device", "cpu", "--run-only", "--ops"]) == 0
    printed = capsys.readouterr().out
    assert "rasterizer: render" not in printed and "Adam step" not in printed
    ops = [line for line in printed.splitlines() if line.startswith("op: ")]
    assert len(ops) > 30 and any(line.startswith("op: sort") for line in ops)
    assert "torch operation families:" in printed


def test_first_use_charges_rss_growth_to_each_operation_s_first_call_only():
    from slam.tools.memory_stages import FirstUse

    reads = iter(range(0, 1000, 5))        # a fake RSS that grows 5 MB between any two reads
    ticks = iter(range(0, 1000, 2))        # a fake clock: 2 s between any two reads
    watch = FirstUse(rss=lambda: float(next(reads)), clock=lambda: float(next(ticks)))
    x = torch.ones(4)
    with watch:
        x.exp(), x.exp(), x.exp().sigmoid(), x.to(torch.float64).exp()
    assert [(mb, op, ms) for mb, op, _, _, ms in watch.rows] == [
        (5.0, "aten::exp", 2000.0), (5.0, "aten::sigmoid", 2000.0), (5.0, "aten::_to_copy", 2000.0), (5.0, "aten::exp", 2000.0)]
    assert watch.rows[-1][2] == ("cpu float64",) and len(watch.seen) == 4 and watch.first_s == 8.0
    report = watch.report(30.0, top=3)
    assert "first uses: +20.0 MB over 4 operations (4 seen)" in report and "+30.0 MB" in report
    assert "they took 8.00 s (those listed 6.00), all 4 first calls 8.00 s" in report
    # every call is counted by its caller's line in the project (none here: this test's file)
    assert watch.sites[("aten::exp", ("cpu float32",))] == {"(outside the project)": 3}
    assert "aten::exp (cpu float32): 1 call sites, (outside the project) x3" in watch.uses()


def test_gpu_memory_replay_finds_the_peak_and_its_live_blocks():
    from slam.tools.gpu_memory_profile import _site, live_at_peak

    here = [{"filename": "/x/slam/map/sphere_map.py", "line": 10, "name": "grow"},
            {"filename": "/x/slam/runtime/system.py", "line": 5, "name": "run"}]
    trace = [{"action": "alloc", "addr": 1, "size": 100, "frames": here},
             {"action": "alloc", "addr": 2, "size": 50, "frames": []},
             {"action": "free_completed", "addr": 1, "size": 100},
             {"action": "alloc", "addr": 3, "size": 120, "frames": here},      # 170 live: the peak
             {"action": "free_completed", "addr": 3, "size": 120}]
    peak, live, at = live_at_peak(trace)
    assert (peak, at) == (170, 3) and sorted(live) == [2, 3]
    assert _site(here) == "slam/map/sphere_map.py:10 grow <- slam/runtime/system.py:5 run"
    assert _site([]).startswith("(outside the project")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_gpu_memory_profile_without_cuda_says_so(capsys):
    from slam.tools import gpu_memory_profile

    assert gpu_memory_profile.main(["--config", "default.yaml"]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err


def test_quality_calibration_prints_both_labels_and_the_rule_table(tmp_path, capsys, sample_run):
    from slam.tools import calibrate_quality

    out = tmp_path / "samples.json"
    sets = sum((["--set", s] for s in ["data.last=6", *sample_run.FAST]), [])
    assert calibrate_quality.main([*sets, "--every", "4", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "right n=" in printed and "wrong n=" in printed and "false alarms among right" in printed
    samples = json.loads(out.read_text())
    assert samples and {"frame", "label", "quality"} <= set(samples[0])


def test_pruner_ablation_adds_the_half_budget_job_and_compares(tmp_path, monkeypatch, capsys):
    from slam.batch.results import METRICS
    from slam.batch.run import BatchResult
    from slam.tools import pruner_ablation

    def row(job, peak, ate, rss):
        """A batch-table row (``slam.batch.results.build_rows``'s keys) of a finished job."""
        return {**{key: None for key, *_ in METRICS}, "job": job, "status": "done", "wall_s": 1.0, "folder": job,
                "spheres": peak - 10, "spheres_peak": peak, "peak_rss_mb": rss, "ate_cm": ate, "psnr_db": 20.0,
                "fps": 3.0, "tracking_failures": 0}

    calls = []

    def fake_run_batch(jobs, out, opts, plots=True):
        calls.append([j.label for j in jobs])
        rows = [row("pruner on", 600, 2.2, 400.0), row("pruner off", 1000, 2.0, 500.0)]
        if len(jobs) == 3:
            rows.append(row(jobs[2].label, 480, 2.5, 380.0))
        return BatchResult(rows=rows, outcomes={}, written={"markdown": str(tmp_path / "batch.md")})

    monkeypatch.setattr(pruner_ablation, "run_batch", fake_run_batch)
    assert pruner_ablation.main(["--local", "--out", str(tmp_path)]) == 0
    assert len(calls) == 2 and len(calls[1]) == 3 and "budget 500" in calls[1][2]   # half of the off run's peak
    ratios = json.loads((tmp_path / "ablation.json").read_text())["ratios"]
    assert ratios["sphere_peak_reduction"] == pytest.approx(0.4) and ratios["budget_held"] is True
    assert ratios["peak_memory_reduction"] == pytest.approx(0.2)
    assert "pruner on vs off: spheres -40 %" in capsys.readouterr().out


def test_colour_registration_of_the_registered_sample_is_the_depth_camera(capsys):
    pytest.importorskip("scipy", reason="the estimate fits with scipy")
    from slam.data.synthetic.room import CX, CY, FX
    from slam.tools import color_registration

    assert color_registration.main(["--config", "default.yaml", "--frames", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    intr = next(ln for ln in lines if "color_intrinsics" in ln)
    fx, fy, cx, cy = (float(v) for v in intr.split("[")[1].rstrip("]").split(","))
    # The sample's colour and depth come from one camera: the fit lands near its intrinsics. Not on
    # them: on 160x120 frames it prefers fx 127.8, cx 76.7, cy 62.2 and a 2.6 cm baseline (3 frames
    # or 10), which raise its edge score 53.9 -> 56.2; a limit of the estimate at this size.
    assert abs(fx - FX) < 0.03 * FX and abs(cx - CX) < 4 and abs(cy - CY) < 4, intr
    trans = next(ln for ln in lines if "color_translation" in ln)
    assert abs(float(trans.split("[")[1].split(",")[0])) < 0.05, trans
    before, after = (float(v) for v in lines[0].split(": ")[1].split(" unregistered -> ")[0:1] +
                     [lines[0].split(" -> ")[1].split(" ")[0]])
    assert after >= before


def test_rasterizer_benchmarks_run_on_the_cpu(capsys):
    from rasterizer.bench import gauss_newton, render

    assert render.main(["--cpu-only", "--cpu-n", "200", "--cpu-res", "32x24", "--cpu-reps", "1"]) == 0
    printed = capsys.readouterr().out
    assert "| 200 | 32x24 | cpu |" in printed and "| 200 | 32x24 | reference |" in printed
    assert "cpu kernel speed-up over reference" in printed
    assert gauss_newton.main(["--cpu-only", "--cpu-sizes", "200", "--cpu-res", "32x24", "--cpu-reps", "1"]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| 200 | 32x24 |")]
    assert [ln.split("|")[3].strip() for ln in rows] == ["forward", "gauss_newton", "cost_only"]
    assert all(np.isfinite(float(ln.split("|")[4])) for ln in rows)


def test_lock_probe_runs_each_job_beside_the_probe(capsys):
    from slam.tools.lock_probe import main

    assert main(["--keyframes", "4", "--repeats", "1", "--switch-interval-ms", "0.5",
                 "--jobs", "frames,bridges,bridges-numpy,grid"]) == 0
    out = capsys.readouterr().out
    assert "4 keyframes of" in out
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| 0.5 |")]
    assert [r[1].strip() for r in rows] == ["(none)", "frames", "bridges", "bridges-numpy", "grid"]
    for r in rows[1:]:                      # each job ran (its ms per keyframe) and the probe ran beside it
        wall = float(r[2].split("/")[0])
        ratio = float(r[4])
        assert wall > 0 and ratio > 0
    with pytest.raises(SystemExit):
        main(["--keyframes", "2", "--jobs", "nothing"])


def test_thread_cost_runs_the_settings_and_tables_them(tmp_path, capsys):
    from slam.tools.thread_cost import main, table

    assert main(["--config", "default.yaml", "--set", "data.last=5", "--runs", "1", "--out", str(tmp_path),
                 "--settings", "default,both off"]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in out.splitlines()
            if line.startswith("| default") or line.startswith("| both off")}
    assert set(rows) == {"default", "both off"}
    assert float(rows["default"][0]) > 0 and rows["both off"][1].strip() == "+0 %"
    # paired: run i against run i (a machine's drift between rounds cancels)
    fake = {"default": [{"fps_system": f, "stage_ms": {"tracking_mean": 1.0, "mapping_mean": 1.0}} for f in (90, 45)],
            "both off": [{"fps_system": f, "stage_ms": {"tracking_mean": 1.0, "mapping_mean": 1.0}} for f in (100, 50)]}
    assert "| default | 67.5 [45.0-90.0] | -10 % |" in table(fake)
    from slam.tools.thread_cost import costs
    four = {name: [{"fps_system": f} for f in fps] for name, fps in
            {"default": (80, 40), "grid off": (90, 45), "loop off": (100, 44), "both off": (100, 50)}.items()}
    lines = costs(four).splitlines()
    assert lines[0] == "- loop stage, grid on: 14.5 % of the system frame rate (rounds 9.1 to 20.0)"
    assert lines[3] == "- grid, loop stage off: 6.0 % of the system frame rate (rounds 0.0 to 12.0)"
    assert costs({"default": four["default"], "both off": four["both off"]}) == ""
    assert rows["both off"][4].strip() == "-" and rows["both off"][5].strip() == "-"   # no loop, no grid
    assert float(rows["default"][6]) > 0                           # peak RSS, MB
    assert rows["default"][7].strip() == "-"                       # no GPU memory on the CPU
    assert (tmp_path / "default_1" / "metrics.json").is_file()
    assert (tmp_path / "table.md").read_text().startswith("1 of 1 rounds")


def test_tile_lists_walk_renders_the_reference_alpha_at_any_tile_side():
    """The tool's lists and walks are the render's: every pixel's alpha from walking its tile's
    list equals the PyTorch reference render's, for 8x8 and 16x16 tiles (the result does not
    depend on the tiling), and a smaller tile lists fewer spheres a pixel."""
    import rasterizer
    from slam.tools import tile_lists as TL

    g = torch.Generator().manual_seed(3)
    n, w, h = 400, 40, 24
    z = torch.rand(n, generator=g) * 3 + 1
    u, v = torch.rand(n, generator=g) * (w + 8) - 4, torch.rand(n, generator=g) * (h + 8) - 4
    K = np.array([[30.0, 0, (w - 1) / 2], [0, 30.0, (h - 1) / 2], [0, 0, 1]])
    means = torch.stack([(u - K[0, 2]) * z / 30, (v - K[1, 2]) * z / 30, z], 1)
    radii = (torch.rand(n, generator=g) * 2 + 0.3) * z / 30
    opac = torch.rand(n, generator=g) * 0.9 + 0.05
    ref = rasterizer.rasterize_spheres(means, radii, torch.rand(n, 3, generator=g), opac,
                                       torch.tensor(K, dtype=torch.float32), w, h, backend="reference")
    s = TL.project(means.numpy(), radii.numpy(), opac.numpy(), K, w, h)
    per_pixel = {}
    for tile in (8, 16):
        alpha = np.zeros((h, w))
        tiles_x = -(-w // tile)
        for t, ids in enumerate(TL.tile_lists(s, w, h, tile)):
            x0, y0 = (t % tiles_x) * tile, (t // tiles_x) * tile
            x1, y1 = min(x0 + tile, w), min(y0 + tile, h)
            alpha[y0:y1, x0:x1] = TL.walk_tile(s, ids, x0, y0, x1, y1)[2].reshape(y1 - y0, x1 - x0)
        np.testing.assert_allclose(alpha, ref.alpha.numpy(), atol=2e-5)
        per_pixel[tile] = TL.list_figures(s, w, h, tile)["walk_per_pixel"]
    assert 0 < per_pixel[8] < per_pixel[16]


def test_tile_lists_prints_its_table_on_the_sample(capsys):
    from slam.tools import tile_lists

    assert tile_lists.main(["--set", "system.device=cpu", "--map-frames", "8", "--tiles", "8,16"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "x" in line.split("|")[1]]
    assert len(rows) == 4       # two pyramid levels x two tile sides


def test_profile_average_keeps_each_kernel_mean_over_the_calls_largest_first():
    from slam.tools.profile_tracking import average

    calls = [{"frames": 1, "gpu_ms": 1.0, "gpu_by_kernel": {"adam": [10.0, 2.0]}},
             {"frames": 1, "gpu_ms": 3.0, "gpu_by_kernel": {"adam": [20.0, 2.0], "raster": [50.0, 1.0]}}]
    out = average(calls)
    assert out["gpu_ms"] == 2.0 and out["count"] == 2 and "frames" not in out
    assert list(out["gpu_by_kernel"]) == ["raster", "adam"]                 # largest mean first
    assert out["gpu_by_kernel"]["raster"] == [25.0, 0.5]                    # absent in one call: 0 there
    assert out["gpu_by_kernel"]["adam"] == [15.0, 2.0]
    hosts = average([{"frames": 1, "host_ms": 1.0, "host_by_op": {"aten::lt": [4.0, 2.0]}},
                     {"frames": 1, "host_ms": 1.0, "host_by_op": {"aten::nonzero": [10.0, 1.0]}}])
    assert hosts["host_by_op"] == {"aten::nonzero": [5.0, 0.5], "aten::lt": [2.0, 1.0]}
