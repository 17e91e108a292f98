"""slam.tools.ab_compare: two builds' profiles and benchmark rows side by side (scripts/gpu_ab.sh)."""
import json

import pytest

from slam.tools import ab_compare


def _profile(gpu_ms, kernels, wall_ms=2.0):
    return {"machine": "GPU X", "tracking": {"wall_ms": wall_ms, "host_ms": 0.5, "gpu_ms": gpu_ms, "renders": 10.0,
                                            "launches": 120.0, "gpu_by_kernel": kernels}}


def test_short_kernel_names():
    assert ab_compare.short_kernel_name(
        "void (anonymous namespace)::gn_tile_kernel<true, 4>(sr::Camera, double const*)") == "gn_tile_kernel<true, 4>"
    assert ab_compare.short_kernel_name("(anonymous namespace)::sort_tiles_kernel(int2 const*, int)") == "sort_tiles_kernel"
    assert ab_compare.short_kernel_name("Memcpy HtoD (Pageable -> Device)") == "Memcpy HtoD (Pageable -> Device)"


def test_frame_figures_are_medians_with_spread_and_ratio():
    a = [_profile(0.95, {}), _profile(0.97, {}), _profile(0.96, {})]
    b = [_profile(0.93, {}), _profile(0.93, {})]
    rows = {r[0]: r[1:] for r in ab_compare.frame_rows(a, b)}
    assert rows["GPU ms"] == ["0.960 [0.950-0.970]", "0.930", f"{0.93 / 0.96:.3f}"]
    assert rows["renders"] == ["10.000", "10.000", "1.000"]


def test_kernels_one_side_lacks_and_names_that_merge():
    a = [_profile(1.0, {"void k_sort(int)": [120.0, 10.0], "void gn<1>(a)": [500.0, 10.0]})]
    b = [_profile(1.0, {"void k_short(int)": [80.0, 10.0], "void k_sort(int)": [20.0, 10.0],
                        "void gn<1>(a)": [300.0, 6.0], "void gn<1>(b)": [200.0, 4.0]})]
    rows = {r[0]: r[1:] for r in ab_compare.kernel_rows(a, b, top=10)}
    assert list(rows)[0] == "gn<1>"                        # the longest first
    assert rows["gn<1>"][:3] == ["500.0", "500.0", "1.000"]   # two overloads' times added in B
    assert rows["gn<1>"][3:] == ["50.00", "50.00"]            # us a run
    assert rows["k_short"][:3] == ["-", "80.0", "-"]
    assert rows["k_sort"][2] == f"{20 / 120:.3f}"
    assert len(ab_compare.kernel_rows(a, b, top=2)) == 2


def test_bench_rows_and_command_line(tmp_path, capsys):
    def rows(g):
        return {"gpu": "GPU X", "rows": [{"n": 50000, "image": "320x240", "call": "gauss_newton",
                                          "gpu_ms": g, "host_ms": g + 0.02}]}

    files = {}
    for name, content in {"pa": _profile(0.95, {"void k(int)": [100.0, 10.0]}),
                          "pb": _profile(0.90, {"void k(int)": [90.0, 10.0]}),
                          "ba1": rows(0.275), "ba2": rows(0.273), "bb1": rows(0.33)}.items():
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(content))
    assert ab_compare.bench_rows([rows(0.275), rows(0.273)], [rows(0.33)]) == [
        ["50000", "320x240", "gauss_newton", "0.274 [0.273-0.275]", "0.330", f"{0.33 / 0.274:.3f}"]]
    assert ab_compare.main(["--a", str(files["pa"]), "--b", str(files["pb"]), "--bench-a", str(files["ba1"]),
                            str(files["ba2"]), "--bench-b", str(files["bb1"])]) == 0
    out = capsys.readouterr().out
    assert "| GPU ms | 0.950 | 0.900 | 0.947 |" in out and "| k | 100.0 | 90.0 | 0.900 |" in out
    assert "| 50000 | 320x240 | gauss_newton |" in out


def test_missing_or_broken_file_is_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(SystemExit, match="bad.json: not JSON"):
        ab_compare.main(["--a", str(bad)])
    with pytest.raises(SystemExit, match="nope.json: no such file"):
        ab_compare.main(["--a", str(tmp_path / "nope.json")])


def test_whole_runs_from_metrics(tmp_path, capsys):
    def metrics(ate_m, fps, gpu_ms=None, loops=None):
        m = {"trajectory": {"ate_rmse_m": ate_m}, "fps_system": fps, "fps_tracking": 240.0,
             "stage_ms": {"tracking_mean": 4.0, "mapping_mean": 28.0}, "tracking_failures": 0,
             "peak_rss_mb": 1200.0, "loop_closure": None if loops is None else {"loops_closed": loops},
             "memory_over_time_mb": [[0, 800.0, 0.4], [60, 900.0 + loops if loops else 900.0, 3.5], [120, 1200.0, 6.5]]}
        if gpu_ms is not None:
            m["per_tracked_frame"] = {"gpu_ms": gpu_ms}
        return m

    rows = {r[0]: r[1:] for r in ab_compare.run_rows([metrics(0.0244, 80.0, 1.25, loops=1), metrics(0.0242, 84.0, 1.27, loops=1)],
                                                     [metrics(0.0243, 90.0, loops=0)])}
    assert rows["ATE cm"] == ["2.43 [2.42-2.44]", "2.43", "1.000"]
    assert rows["FPS system"] == ["82.0 [80.0-84.0]", "90.0", f"{90 / 82:.3f}"]
    assert rows["GPU ms a tracked frame"] == ["1.260 [1.250-1.270]", "-", "-"]   # a CPU run has none
    assert "peak GPU MB" not in rows                                              # in no run
    assert rows["loops closed"][:2] == ["1", "0"]      # RSS is like for like only where these agree
    assert rows["RSS MB at the middle keyframe"][:2] == ["901", "900"]   # the middle row's RSS
    assert ab_compare.rss_at_middle_keyframe({"memory_over_time_mb": []}) is None
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(metrics(0.0244, 80.0)))
    assert ab_compare.main(["--runs-a", str(path), "--runs-b", str(path)]) == 0
    assert "| FPS system | 80.0 | 80.0 | 1.000 |" in capsys.readouterr().out
