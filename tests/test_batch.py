"""slam_batch: job specs (grid, YAML, errors before anything runs), and real batches of short runs
on the bundled sample: a 2x2 grid plus a job with bad input on a local Ray cluster with CPU workers
(table, resumption), a Ray worker killed mid-run (retried), an existing cluster (--address),
fsspec memory:// storage (--local).

The Ray tests start a local cluster in a subprocess (``python -m slam.batch.cli``); they need
``ray`` (the 'test' and 'batch' extras) and skip saying so without it.
"""
from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from slam.batch import BatchSpec, BatchSpecError, RunOptions, expand, load_spec, parse_grid_option, run_batch
from slam.batch.cli import main as batch_main
from slam.batch.storage import RunStorage
from slam.runtime.device import cpu_share

REPO = Path(__file__).resolve().parents[1]
# Short runs: 12 frames of the sample, few iterations, no per-run plots.
SHORT = ["data.last=12", "mapping.final_iters=5", "output.plots=false", "system.progress=false"]


def _has_ray() -> bool:
    try:
        import ray  # noqa: F401  optional: the 'batch' / 'test' extras
    except ImportError:
        return False
    return True


needs_ray = pytest.mark.skipif(not _has_ray(), reason="ray not installed (pip install '.[batch]' or '.[test]')")


def _slam_batch(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``slam_batch ARGS`` from the repository root (this tree's code, as the workers import it)."""
    return subprocess.run([sys.executable, "-m", "slam.batch.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def _table(out: Path) -> dict:
    with open(out / "batch.csv") as f:
        return {r["job"]: r for r in csv.DictReader(f)}


# --------------------------------------------------------------------------- job specs
def test_grid_option_values_are_yaml():
    assert parse_grid_option("data.stride=1,2,4") == ("data.stride", [1, 2, 4])
    assert parse_grid_option("pruner.enabled=true,false") == ("pruner.enabled", [True, False])
    assert parse_grid_option("data.intrinsics=[1,2,3,4],[5,6,7,8]")[1] == [[1, 2, 3, 4], [5, 6, 7, 8]]
    with pytest.raises(BatchSpecError, match="key=value1,value2"):
        parse_grid_option("data.stride")


def test_grid_expands_to_product_with_deterministic_distinct_folders():
    spec = BatchSpec(overrides=["data.last=12"], grid={"data.stride": [1, 2], "pruner.enabled": [True, False]})
    jobs = expand(spec)
    assert [j.label for j in jobs] == ["data.stride=1 pruner.enabled=true", "data.stride=1 pruner.enabled=false",
                                       "data.stride=2 pruner.enabled=true", "data.stride=2 pruner.enabled=false"]
    assert jobs[3].overrides == ("data.last=12", "data.stride=2", "pruner.enabled=false")
    assert jobs[3].params == {"data.stride": "2", "pruner.enabled": "false"}
    assert len({j.folder for j in jobs}) == 4
    assert [j.folder for j in expand(spec)] == [j.folder for j in jobs]  # same jobs, same folders


def test_unknown_key_fails_naming_it_before_any_job_runs(tmp_path, capsys):
    out = tmp_path / "batch"
    rc = batch_main(["--grid", "pruner.enabeld=true,false", "--out", str(out), "--local"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "unknown config key 'pruner.enabeld'" in err and "did you mean 'pruner.enabled'" in err
    assert not out.exists()
    with pytest.raises(BatchSpecError, match="job 'data.stride=0'.*data.stride: must be >= 1"):
        expand(BatchSpec(grid={"data.stride": [0]}))


def test_jobs_file_errors_name_file_and_key(tmp_path):
    bad = tmp_path / "jobs.yaml"
    for text, message in [("grids: {data.stride: [1]}\n", "unknown key 'grids'"),
                          ("grid: {data.stride: 2}\n", "grid key 'data.stride' needs a non-empty list"),
                          ("jobs: [{name: a, sett: {}}]\n", r"jobs\[0\]: unknown key 'sett'"),
                          ("set: [data.stride]\n", "'set' must be a list of key=value"),
                          ("grid: [\n", "not valid YAML")]:
        bad.write_text(text)
        with pytest.raises(BatchSpecError, match=message) as info:
            load_spec(str(bad))
        assert str(bad) in str(info.value)
    with pytest.raises(BatchSpecError, match="cannot read jobs file"):
        load_spec(str(tmp_path / "missing.yaml"))


def test_jobs_file_jobs_cross_grid_and_own_grid(tmp_path):
    f = tmp_path / "jobs.yaml"
    f.write_text(yaml.safe_dump({"set": ["data.last=12"], "grid": {"data.stride": [1, 2]},
                                 "jobs": [{"name": "a"}, {"name": "b", "set": {"mapping.iters": 5}},
                                          {"name": "c", "set": {"data.path": "/nowhere"}, "grid": {}}]}))
    jobs = expand(load_spec(str(f)))
    assert [j.label for j in jobs] == ["a data.stride=1", "a data.stride=2", "b data.stride=1", "b data.stride=2", "c"]
    assert jobs[3].overrides == ("data.last=12", "mapping.iters=5", "data.stride=2")


def test_same_run_twice_and_key_in_two_places_are_errors():
    with pytest.raises(BatchSpecError, match="are the same run"):
        expand(BatchSpec(jobs=[{"name": "x"}, {"name": "y", "set": ["pruner.enabled=true"]}]))  # true is the default
    with pytest.raises(BatchSpecError, match="'data.stride' is set by the grid and by a 'set'"):
        expand(BatchSpec(overrides=["data.stride=2"], grid={"data.stride": [1, 2]}))


def test_folder_follows_the_resolved_config_not_just_the_command(tmp_path):
    cfg = tmp_path / "my.yaml"
    cfg.write_text("inherit_from: default.yaml\nmapping:\n  iters: 5\n")
    before = expand(BatchSpec(config=str(cfg)))[0].folder
    cfg.write_text("inherit_from: default.yaml\nmapping:\n  iters: 6\n")
    assert expand(BatchSpec(config=str(cfg)))[0].folder != before  # an edited config is a new run
    # where a run reports (output root/name, progress bar) is not part of what it computes
    assert expand(BatchSpec(config=str(cfg), overrides=["system.progress=false"]))[0].folder == \
        expand(BatchSpec(config=str(cfg)))[0].folder


def test_cache_rule_only_finished_runs(tmp_path):
    storage = RunStorage(str(tmp_path))
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    assert storage.finished_metrics("r") is None
    for metrics, finished in [({"stop_reason": "end of input", "partial": "autosave after 20 keyframes"}, False),
                              ({"stop_reason": "interrupted (Ctrl-C)"}, False),
                              ({"stop_reason": "error: RuntimeError: x"}, False),
                              ({"stop_reason": "end of input", "frames": 3}, True)]:
        (run / "metrics.json").write_text(json.dumps(metrics))
        assert (storage.finished_metrics("r") is not None) is finished, metrics
    (run / "metrics.json").write_text("{trunc")
    assert storage.finished_metrics("r") is None


def test_without_ray_the_command_says_how_to_get_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    rc = batch_main(["--grid", "data.stride=1,2", "--out", str(tmp_path / "b")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "pip install '.[batch]'" in err and "--local" in err


def test_cpu_share_follows_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cpu_share() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "junk")
    assert cpu_share() == (os.cpu_count() or 2)
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert cpu_share() == (os.cpu_count() or 2)


# --------------------------------------------------------------------------- real batches
@needs_ray
def test_grid_on_local_ray_table_failure_and_resume(tmp_path):
    out = tmp_path / "batch"
    grid = {"data.stride": [1, 2], "mapping.iters": [5, 10]}
    good = {"set": SHORT, "grid": grid, "jobs": [{"name": "sample"}]}
    bad_job = {"name": "bad-input", "set": {"data.path": str(tmp_path / "no_such_sequence")}, "grid": {}}
    with_bad = dict(good, jobs=good["jobs"] + [bad_job])
    (tmp_path / "with_bad.yaml").write_text(yaml.safe_dump(with_bad))
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(good))

    first = _slam_batch(str(tmp_path / "with_bad.yaml"), "--out", str(out), "--cpus-per-job", "1")
    assert first.returncode == 1, first.stdout + first.stderr  # one job failed, the batch went on
    assert "ran 5 jobs (4 finished, 1 failed)" in first.stdout
    assert "failed bad-input" in first.stderr and "no_such_sequence" in first.stderr
    # progress: two 1-CPU jobs at a time on this 2-CPU (at least) local cluster, and the end state
    assert "done 4 (+0 cached), running 0, queued 0, failed 1" in first.stderr
    if (os.cpu_count() or 1) >= 2:
        assert "running 2" in first.stderr
    table = _table(out)
    assert len(table) == 5
    bad = table["bad-input"]
    assert bad["status"] == "failed" and "no_such_sequence" in bad["error"] and bad["ate_cm"] == ""
    md = (out / "batch.md").read_text()
    assert md.count("\n| sample ") == 4 and "| bad-input | failed: run_slam:" in md
    for stride in (1, 2):
        for iters in (5, 10):
            row = table[f"sample data.stride={stride} mapping.iters={iters}"]
            assert row["status"] == "done"
            run = out / "runs" / row["folder"]
            metrics = json.loads((run / "metrics.json").read_text())
            cfg = yaml.safe_load((run / "config.yaml").read_text())
            assert (cfg["data"]["stride"], cfg["mapping"]["iters"]) == (stride, iters)  # overrides reached the run
            assert int(row["frames"]) == metrics["frames"] == 12 // stride
            assert math.isclose(float(row["ate_cm"]), metrics["trajectory"]["ate_rmse_m"] * 100)
            assert 0 < float(row["ate_cm"]) < 5.0
            assert 0 < float(row["rpe_trans_cm"]) < 5.0
            assert float(row["psnr_db"]) > 15.0
            assert float(row["fps"]) > 0 and float(row["peak_rss_mb"]) > 50
            assert row["peak_gpu_mb"] == ""  # CPU workers: no GPU figure, not a made-up one
            assert int(row["spheres"]) == metrics["spheres"] > 1000
            assert int(row["silent_failures"]) == 0
    assert {p.name for p in (out / "plots").iterdir()} >= {"ate_cm.png", "psnr_db.png", "fps.png", "spheres.png"}

    finished = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("sample*/metrics.json")}
    assert len(finished) == 4
    second = _slam_batch(str(tmp_path / "good.yaml"), "--out", str(out), "--cpus-per-job", "1", "--quiet")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "ran 0 jobs" in second.stdout and "4 finished earlier" in second.stdout
    assert {r["status"] for r in _table(out).values()} == {"cached"}
    assert {p: p.stat().st_mtime_ns for p in finished} == finished  # no run folder was written again

    third = _slam_batch(str(tmp_path / "with_bad.yaml"), "--out", str(out), "--local", "--quiet")
    assert third.returncode == 1 and "ran 1 jobs (0 finished, 1 failed)" in third.stdout  # only the failed job


def _run_slam_process(marker: str) -> tuple[int, int] | None:
    """(pid, parent pid) of a run_slam process whose command line contains ``marker``."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "slam.cli" in cmd and marker in cmd:
                return int(d.name), int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return None


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (Linux /proc)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_a_run_dies_with_the_process_that_started_it(tmp_path):
    """``execute.run_process``: when its caller (a Ray worker) is killed, the run ends too and does
    not write on into the folder that the retry clears and reuses."""
    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    parent = ("import os, sys; from slam.batch.execute import run_process; "
              f"run_process([sys.executable, '-c', {child!r}], None, None, dict(os.environ), None)")
    proc = subprocess.Popen([sys.executable, "-c", parent], cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(pid_file.read_text())
        assert _alive(pid)
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), "the run outlived the process that started it"
    finally:
        if proc.poll() is None:
            proc.kill()


@needs_ray
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the Ray worker through /proc (Linux)")
def test_lost_worker_is_retried(tmp_path):
    out = tmp_path / "batch"
    proc = subprocess.Popen([sys.executable, "-m", "slam.batch.cli", "--out", str(out), "--cpus-per-job", "1",
                             "--quiet", "--no-plots", *sum((["--set", s] for s in SHORT), []),
                             "--set", "data.last=40"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        found, deadline = None, time.monotonic() + 120
        while found is None and time.monotonic() < deadline and proc.poll() is None:
            found = _run_slam_process(str(out))
            time.sleep(0.1)
        assert found is not None, "the run never started"
        run_pid, worker_pid = found
        worker_cmd = Path(f"/proc/{worker_pid}/cmdline").read_bytes().decode(errors="replace")
        assert "ray" in worker_cmd, worker_cmd  # its parent is a Ray worker
        time.sleep(1.0)
        os.kill(worker_pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stdout + stderr
    assert "attempt 2" in stderr
    (row,) = _table(out).values()
    assert row["status"] == "done" and row["attempt"] == "2" and int(row["frames"]) == 40
    job = json.loads((out / "runs" / row["folder"] / "job.json").read_text())
    assert job["attempt"] == 2 and job["returncode"] == 0
    assert not Path(f"/proc/{run_pid}").exists()  # the first attempt's run died with its worker


@needs_ray
def test_existing_cluster_by_address_is_used_and_left_running(tmp_path):
    import ray  # optional: the 'batch' / 'test' extras
    ctx = ray.init(include_dashboard=False, logging_level="WARNING", num_cpus=2)
    try:
        gcs = ctx.address_info["gcs_address"]
        res = _slam_batch("--address", gcs, "--out", str(tmp_path / "b"), "--cpus-per-job", "1", "--quiet",
                          "--no-plots", *sum((["--set", s] for s in SHORT), []), "--set", "data.stride=2")
        assert res.returncode == 0, res.stdout + res.stderr
        (row,) = _table(tmp_path / "b").values()
        assert row["status"] == "done" and int(row["frames"]) == 6
        # the cluster this test started is still there after slam_batch disconnected
        assert ray.get(ray.remote(lambda: "alive").remote()) == "alive"
    finally:
        ray.shutdown()


def test_fsspec_memory_storage_local(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    url = f"memory://slam-batch-test-{os.getpid()}"
    jobs = expand(BatchSpec(overrides=SHORT, grid={"data.stride": [2]}))
    res = run_batch(jobs, url, RunOptions(local=True, progress=False), plots=False, cwd=str(REPO))
    fs = fsspec.filesystem("memory")
    root = url[len("memory://"):]
    files = {Path(p).name for p in fs.ls(f"/{root}/runs/{jobs[0].folder}", detail=False)}
    assert {"metrics.json", "trajectory.txt", "map.ply", "config.yaml", "job.json"} <= files
    assert json.loads(fs.cat_file(f"/{root}/runs/{jobs[0].folder}/metrics.json"))["frames"] == 6
    assert res.rows[0]["status"] == "done" and res.rows[0]["frames"] == 6
    assert fs.cat_file(f"/{root}/batch.md").decode() == res.markdown()
    again = run_batch(jobs, url, RunOptions(local=True, progress=False), plots=False, cwd=str(REPO))
    assert [r["status"] for r in again.rows] == ["cached"]
    if _has_ray():
        with pytest.raises(ValueError, match="memory:// storage lives inside one process"):
            run_batch(expand(BatchSpec(overrides=SHORT, grid={"data.stride": [3]})), url, RunOptions(progress=False))
    fs.rm(f"/{root}", recursive=True)
