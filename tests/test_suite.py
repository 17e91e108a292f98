"""slam_suite: sequence discovery by layout (TUM, 7-Scenes, unknown), the data folder's default,
job expansion with variants and repeats (dry run: nothing generated, nothing run), the table's
median/spread over repeats from hand-made metrics.json (a failed run, missing keys), a generated
sequence skipped without open3d, and one real end-to-end run of the bundled sample (--local).
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from slam.batch import BatchSpec, expand
from slam.batch.results import METRICS, build_rows
from slam.batch.storage import RunStorage
from slam.batch.suite import GENERATED, LAYOUTS, Entry, discover, ensure_generated, find_data_dir, layout_of
from slam.batch.suite import main as suite_main
from slam.batch.suite_table import STATS, document, paired, spread, summarise, to_csv

REPO = Path(__file__).resolve().parents[1]


def _tum(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "rgb.txt").write_text("# timestamp filename\n")
    (folder / "depth.txt").write_text("# timestamp filename\n")
    return folder


def _seven_scenes(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "camera-intrinsics.txt").write_text("585 0 320\n0 585 240\n0 0 1\n")
    for i in range(2):
        for suffix in ("color.jpg", "depth.png", "pose.txt"):
            (folder / f"frame-{i:06d}.{suffix}").write_bytes(b"")
    return folder


@pytest.fixture
def data_dir(tmp_path):
    """A data folder: one TUM sequence, one 7-Scenes sequence, one unknown folder, clutter."""
    root = tmp_path / "data"
    _tum(root / "tum-seq")
    _seven_scenes(root / "kitchen")
    (root / "notes").mkdir()
    (root / "notes" / "readme.txt").write_text("not a sequence\n")
    _tum(root / ".hidden")
    (root / "README.md").write_text("# data\n")
    return root


# --------------------------------------------------------------------------- discovery
def test_sequences_are_found_by_layout_and_unknown_folders_reported(data_dir):
    found, skipped = discover(data_dir)
    assert [(s.name, s.layout) for s in found] == [("kitchen", "7scenes"), ("tum-seq", "tum")]
    assert all(s.path.is_absolute() and s.path.is_dir() for s in found)
    assert len(skipped) == 1 and str(data_dir / "notes") in skipped[0] and "no known layout" in skipped[0]
    both = data_dir / "both"
    _seven_scenes(both)
    (both / "rgb.txt").write_text("")
    (both / "depth.txt").write_text("")
    assert any(str(both) in s and "several layouts" in s for s in discover(data_dir)[1])


def test_data_folder_default_env_and_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("SPHERE_SLAM_SUITE_DATA", raising=False)
    with pytest.raises(ValueError, match="--data .*no such folder"):
        find_data_dir(str(tmp_path / "missing"))
    cwd = tmp_path / "checkout"
    cwd.mkdir()
    path, how = find_data_dir(None, cwd)
    assert path is None and str(tmp_path / "shared" / "data") in how and "SPHERE_SLAM_SUITE_DATA" in how
    env = tmp_path / "elsewhere"
    env.mkdir()
    monkeypatch.setenv("SPHERE_SLAM_SUITE_DATA", str(env))
    assert find_data_dir(None, cwd)[0] == env
    (tmp_path / "shared" / "data").mkdir(parents=True)
    assert find_data_dir(None, cwd)[0] == tmp_path / "shared" / "data"  # ../shared/data comes first


# --------------------------------------------------------------------------- jobs
def test_dry_run_lists_variants_and_repeats_generates_nothing(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPHERE_SLAM_DATA", str(tmp_path / "cache"))
    out = tmp_path / "suite"
    rc = suite_main(["--data", str(data_dir), "--repeats", "2", "--dry-run", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0
    lines = [ln for ln in captured.out.splitlines() if not ln.startswith(" ")]
    labels = [ln.split("\t")[0] for ln in lines]
    variants = [f"kitchen-{v}" for v in LAYOUTS["7scenes"]["variants"]]
    expected = ["kitchen", *variants, "tum-seq", *GENERATED]
    assert labels == [f"{name} repeat={k}" for name in expected for k in (1, 2)]
    folders = [ln.split("\t")[2] for ln in lines]
    assert len(set(folders)) == len(folders)
    assert "kitchen-stride8 repeat=1" in captured.out and "--set data.stride=8" in captured.out
    assert f"--config 7scenes.yaml --out {folders[0]}" in captured.out
    assert f"--set data.path={data_dir / 'kitchen'}" in captured.out
    assert "notes" in captured.err and "no known layout" in captured.err
    assert "would be generated" in captured.err and not (tmp_path / "cache" / "generated").exists()
    assert not out.exists()


def test_repeats_share_the_config_hash_and_keep_their_folders_when_raised():
    def jobs(n):
        return expand(BatchSpec(repeats=n, jobs=[{"name": "s", "set": ["data.last=12"]}]))
    three, five = jobs(3), jobs(5)
    assert [j.repeat for j in three] == [1, 2, 3] and {j.base_label for j in three} == {"s"}
    assert len({j.folder.rsplit("-", 1)[1] for j in five}) == 1         # one config: one hash
    assert [j.folder for j in five[:3]] == [j.folder for j in three]    # --repeats 5 reuses 1-3
    plain = expand(BatchSpec(jobs=[{"name": "s", "set": ["data.last=12"]}]))  # slam_batch: unchanged
    assert [(j.label, j.repeat) for j in plain] == [("s", 0)] and "repeat" not in plain[0].folder
    long = expand(BatchSpec(repeats=2, jobs=[{"name": "x" * 80}]))
    assert long[0].folder != long[1].folder                             # never cut off with the label


def test_repeats_of_a_grid_are_interleaved_so_its_values_share_the_machine_s_spells():
    jobs = expand(BatchSpec(repeats=2, grid={"mapping.keyframe_every": [10, 5]},
                            jobs=[{"name": "7scenes-redkitchen-0000-0499-stride16", "set": ["data.last=12"]}]))
    assert [(j.params["mapping.keyframe_every"], j.repeat) for j in jobs] == [("10", 1), ("5", 1), ("10", 2), ("5", 2)]
    assert [j.folder.split("-repeat")[0][-2:] for j in jobs] == ["10", "-5", "10", "-5"]   # the value kept in the name


def test_only_picks_a_subset_and_no_match_is_an_error(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPHERE_SLAM_DATA", str(tmp_path / "cache"))
    rc = suite_main(["--data", str(data_dir), "--only", "stride,tum", "--repeats", "1", "--dry-run",
                     "--out", str(tmp_path / "o")])
    labels = [ln.split("\t")[0] for ln in capsys.readouterr().out.splitlines() if not ln.startswith(" ")]
    variants = [f"kitchen-{v} repeat=1" for v in LAYOUTS["7scenes"]["variants"]]
    assert rc == 0 and labels == variants + ["tum-seq repeat=1"]
    rc = suite_main(["--data", str(data_dir), "--only", "nothing-like-this", "--dry-run", "--out", str(tmp_path / "o")])
    assert rc == 2 and "no sequence matches" in capsys.readouterr().err


def test_a_generated_sequence_is_made_once_into_the_cache(tmp_path, monkeypatch):
    pytest.importorskip("open3d", reason="the loop generator renders with open3d")
    monkeypatch.setenv("SPHERE_SLAM_DATA", str(tmp_path / "cache"))
    small = Entry("loop-small", "default.yaml", (), {"frames": 3, "total": 120, "width": 40, "height": 30})
    folder = ensure_generated(small)
    assert folder == tmp_path / "cache" / "generated" / "loop-small" and layout_of(folder) == ["tum"]
    assert [p.name for p in folder.parent.iterdir()] == ["loop-small"]  # no partial folder left
    stamp = (folder / "rgb.txt").stat().st_mtime_ns
    assert ensure_generated(small) == folder and (folder / "rgb.txt").stat().st_mtime_ns == stamp  # not again


def test_without_open3d_the_loop_sample_is_skipped_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPHERE_SLAM_DATA", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "open3d", None)  # import open3d -> ImportError
    empty = tmp_path / "empty"
    empty.mkdir()
    rc = suite_main(["--data", str(empty), "--only", "loop", "--local", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "nothing to run" in err
    assert [ln for ln in err.splitlines() if "open3d cannot be imported" in ln and "skipped" in ln]


# --------------------------------------------------------------------------- the table
def _metrics(ate_m, fps, flagged, frames=20, **extra):
    m = {"stop_reason": "end of input", "frames": frames, "tracking_failures": flagged, "fps_system": fps,
         "fps_tracking": 2 * fps, "peak_rss_mb": 300.0 + fps, "peak_gpu_mb": None,
         "silent_failures": {"count": flagged // 2}, "per_tracked_frame": {"renders": 3.0}}
    if ate_m is not None:
        for key in ("trajectory", "trajectory_tracked", "trajectory_ok"):
            m[key] = {"ate_rmse_m": ate_m}
    m.update(extra)
    return m


def test_median_and_spread_over_repeats_leave_out_failed_runs_and_missing_keys(tmp_path):
    jobs = expand(BatchSpec(repeats=3, jobs=[{"name": "a", "set": ["data.last=12"]},
                                             {"name": "b", "set": ["data.last=13"]}]))
    storage = RunStorage(str(tmp_path))
    revisit = {"final_mm": 11.0, "as_tracked_mm": 30.5, "ground_truth_mm": None}
    a_runs = [_metrics(0.021, 4.0, 2, quality_detector={"false_alarms": 1, "misses": 0},
                       revisit_depth_consistency=revisit, images={"psnr": 16.25, "psnr_valid_depth": 23.5}),
              _metrics(0.034, 5.0, 4, quality_detector={"false_alarms": 3, "misses": 2},
                       revisit_depth_consistency={**revisit, "final_mm": 13.0},
                       images={"psnr": 16.25, "psnr_valid_depth": 23.0}), None]
    b_runs = [_metrics(None, 6.0, 0), _metrics(None, 7.0, 0), _metrics(None, 8.0, 0)]  # no ground truth
    outcomes = {}
    for job, m in zip(jobs, a_runs + b_runs):
        folder = tmp_path / "runs" / job.folder
        folder.mkdir(parents=True)
        if m is None:
            outcomes[job.folder] = {"status": "failed", "error": "run_slam: bad input: frame 3 unreadable"}
            continue
        (folder / "metrics.json").write_text(json.dumps(m))
        outcomes[job.folder] = {"status": "done", "wall_s": 1.0}
    summary = summarise(jobs, build_rows(jobs, outcomes, storage))
    a, b = summary
    assert (a["sequence"], a["runs"], a["repeats"], len(a["failed"])) == ("a", 2, 3, 1)
    done = [m for m in a_runs if m]
    ates = [100 * m["trajectory"]["ate_rmse_m"] for m in done]
    assert a["stats"]["ate_cm"] == pytest.approx((statistics.median(ates), min(ates), max(ates)))
    pct = [100 * m["tracking_failures"] / m["frames"] for m in done]
    assert a["stats"]["flagged_pct"] == pytest.approx((statistics.median(pct), min(pct), max(pct)))
    assert a["stats"]["peak_gpu_mb"] is None and a["stats"]["gpu_ms_per_frame"] is None
    assert b["stats"]["ate_cm"] is None and b["stats"]["detector_misses"] is None and b["runs"] == 3
    fps = [m["fps_system"] for m in b_runs]
    assert b["stats"]["fps"] == (statistics.median(fps), min(fps), max(fps))

    text = document(summary, "header", ["a note"])
    table = [ln for ln in text.splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in table[0].strip("|").split("|")]
    row_a = dict(zip(head, (c.strip() for c in table[1].strip("|").split("|"))))
    row_b = dict(zip(head, (c.strip() for c in table[2].strip("|").split("|"))))
    assert row_a["runs"] == "2 (1 failed)"
    assert row_a["ATE cm (all frames)"] == f"{statistics.median(ates):.2f} [{min(ates):.2f}-{max(ates):.2f}]"
    assert row_a["peak GPU MB"] == "n/a" and row_a["GPU ms / tracked frame"] == "n/a"
    assert row_a["detector false alarms / misses"] != "n/a" and row_b["detector false alarms / misses"] == "n/a"
    assert row_b["ATE cm (all frames)"] == "n/a" and row_b["runs"] == "3"
    revisit_col = "revisit depth mm: final / as tracked / ground truth"
    assert row_a[revisit_col] == "12.0 / 30.5 / n/a" and row_b[revisit_col] == "n/a"
    psnr_col = "keyframe PSNR dB: all / valid depth"
    assert row_a[psnr_col] == "16.25 / 23.25 [23.00-23.50]" and row_b[psnr_col] == "n/a"
    assert "run_slam: bad input: frame 3 unreadable" in text and "a note" in text
    rows = list(csv.DictReader(io.StringIO(to_csv(summary))))
    assert [r["sequence"] for r in rows] == ["a", "b"] and rows[0]["failed"] == "1" and rows[1]["ate_cm_median"] == ""
    assert float(rows[0]["ate_cm_max"]) == pytest.approx(max(ates))


def test_a_grid_s_values_are_compared_run_by_run_against_the_first(tmp_path):
    jobs = expand(BatchSpec(repeats=3, grid={"mapping.keyframe_every": [10, 5]},
                            jobs=[{"name": "s", "set": ["data.last=12"]}, {"name": "t", "set": ["data.last=13"]}]))
    fps = {("s", "10"): [100.0, 80.0, 120.0], ("s", "5"): [90.0, 60.0, None], ("t", "10"): [50.0] * 3, ("t", "5"): [40.0] * 3}
    ate = {"10": 0.024, "5": 0.0247}
    psnr = {"10": 23.5, "5": 23.75}
    outcomes, storage = {}, RunStorage(str(tmp_path))
    for job in jobs:
        value = job.params["mapping.keyframe_every"]
        f = fps[(job.entry, value)][job.repeat - 1]
        (tmp_path / "runs" / job.folder).mkdir(parents=True)
        if f is None:                       # a failed run leaves its pair out
            outcomes[job.folder] = {"status": "failed", "error": "killed"}
            continue
        m = _metrics(ate[value] if job.entry == "s" else 0.02, f, 0,
                     images={"psnr": 20.0, "psnr_valid_depth": psnr[value] if job.entry == "s" else 23.5 - (value == "5") * 1e-3})
        (tmp_path / "runs" / job.folder / "metrics.json").write_text(json.dumps(m))
        outcomes[job.folder] = {"status": "done", "wall_s": 1.0}
    rows = build_rows(jobs, outcomes, storage)
    pairs = paired(jobs, rows)
    assert [(p["sequence"], p["value"], p["first"], p["pairs"]) for p in pairs] == [
        ("s", "mapping.keyframe_every=5", "mapping.keyframe_every=10", 2),
        ("t", "mapping.keyframe_every=5", "mapping.keyframe_every=10", 3)]
    s, t = pairs
    assert s["stats"]["fps"] == pytest.approx((0.825, 0.75, 0.9))     # 90 / 100 and 60 / 80, by repeat
    assert t["stats"]["fps_tracking"] == pytest.approx((0.8, 0.8, 0.8))
    assert s["stats"]["ate_cm"] == pytest.approx((0.07, 0.07, 0.07))
    assert s["stats"]["psnr_valid_depth_db"] == pytest.approx((0.25, 0.25, 0.25))
    assert s["stats"]["gpu_ms_per_frame"] is None                      # a CPU run has none
    text = document(summarise(jobs, rows), "header", [], pairs)
    assert "| s | mapping.keyframe_every=5 vs mapping.keyframe_every=10 | 2 | +0.07 | 0.82 [0.75-0.90] |" in text
    assert text.count("| +0.00 |") == 2 and "-0.00" not in text          # t: equal ATE, PSNR 0.001 dB lower
    assert paired(jobs[:1], rows[:1]) == [] and "Paired by repeat" not in document(summarise(jobs, rows), "h", [])


def test_all_runs_failed_shows_the_error_and_spread_ignores_non_numbers():
    assert spread([None, float("nan"), "x", True]) is None
    assert spread([3, None, 1, 2]) == (2, 1, 3)
    assert set(STATS) - {"flagged_pct"} <= {c for c, *_ in METRICS}
    jobs = expand(BatchSpec(repeats=2, jobs=[{"name": "c"}]))
    rows = [{"job": j.label, "folder": j.folder, "status": "failed", "error": "no such sequence"} for j in jobs]
    text = document(summarise(jobs, rows), "header", [])
    assert "| c | failed (2): no such sequence |" in text


# --------------------------------------------------------------------------- end to end
def _suite(cmd: list, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """Run ``cmd`` from the repository root (this tree's code, as the runs import it) in its own
    process group, interrupted as a whole on a timeout (Ctrl-C: a kernel build under way releases
    its lock in the kernel cache; no run_slam is left behind), killed if that does not end it."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def test_end_to_end_sample_twice_gives_one_row_with_a_finite_ate(tmp_path):
    empty, out = tmp_path / "empty", tmp_path / "suite"
    empty.mkdir()
    cmd = [sys.executable, "-m", "slam.batch.suite", "--local", "--only", "sample", "--repeats", "2",
           "--set", "data.last=12", "--set", "mapping.final_iters=5", "--set", "output.plots=false",
           "--no-plots", "--quiet", "--data", str(empty), "--out", str(out)]
    env = {**os.environ, "SPHERE_SLAM_DATA": str(tmp_path / "cache")}
    res = _suite(cmd, env, timeout=600)  # ~25 s; minutes only when the rasterizer kernels are compiled first
    assert res.returncode == 0, res.stderr[-3000:]
    assert "real sequences: 0 in" in res.stderr
    md = (out / "suite.md").read_text()
    assert md in res.stdout + "\n" and md.splitlines()[0].startswith("`slam_suite --local")
    assert "| speed: Python loop " in md.splitlines()[0] and "machine speed: " in res.stderr
    rows_md = [ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| sequence")]
    assert len(rows_md) == 1 and rows_md[0].startswith("| sample | 2 |")
    rows = list(csv.DictReader(open(out / "suite.csv")))
    assert [r["sequence"] for r in rows] == ["sample"] and rows[0]["runs"] == "2"
    assert math.isfinite(float(rows[0]["ate_cm_median"]))
    assert len(list((out / "runs").iterdir())) == 2
    again = _suite(cmd, env, timeout=120)
    assert again.returncode == 0 and "2 finished already" in again.stderr  # the runs are the cache


def test_speed_probe_measures_both_workloads_on_this_machine():
    from slam.batch import speed_probe

    speed = speed_probe.probe()
    assert speed["device"] in ("cpu", "cuda") and speed["python_ms"] > 0 and speed["render_ms"] > 0
    text = speed_probe.describe(speed)
    assert f"{speed['python_ms']:.0f} ms" in text and "20,000 spheres at 320x240" in text
