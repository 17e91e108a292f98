"""One batch job = one ``run_slam`` process (``python -m slam.cli --config C --set ... --out DIR``):
exactly the run a user gets, and a crash or kill of the run cannot take the caller (a Ray worker or
``slam_batch --local``) down with it.

``execute_job`` is what a worker runs. It skips a job whose folder already holds a finished run
(an earlier attempt got that far), clears what an unfinished attempt left, runs the process with
the run's stdout/stderr saved in the folder, writes ``job.json`` (command, exit code, attempt, wall
time, host), uploads the folder when the storage is not local, and returns an ``Outcome`` dict.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from slam.batch.jobs import Job
from slam.batch.storage import JOB_FILE, RunStorage

STDOUT, STDERR = "run_slam.stdout.txt", "run_slam.stderr.txt"

# Linux's prctl(PR_SET_PDEATHSIG): a child asks for a signal when its parent dies. Resolved here,
# not in the forked child (which must not load libraries between fork and exec).
_PR_SET_PDEATHSIG = 1
try:
    import ctypes
    _prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):
    _prctl = None


class RunKilled(RuntimeError):
    """``run_slam`` was ended by a signal it does not handle (e.g. SIGKILL from the out-of-memory
    killer): raised so that the job is retried, like a lost worker."""


def job_command(job: Job, run_dir: str | Path, python: Optional[str] = None) -> list[str]:
    """The ``run_slam`` command line of a job writing into ``run_dir``."""
    cmd = [python or sys.executable, "-m", "slam.cli", "--config", job.config, "--out", str(run_dir), "--quiet"]
    for o in job.overrides:
        cmd += ["--set", o]
    return cmd


def _dies_with(parent: int):
    """``preexec_fn`` of a child of process ``parent``: on Linux the child gets SIGKILL when
    ``parent`` dies, so the run of a lost Ray worker (or a killed ``slam_batch --local``) ends with
    it instead of writing on into the folder its retry clears and reuses (Ray's own clean-up of a
    dead worker's children came too late on a loaded 2-core machine: the orphan finished the run).
    None elsewhere (nothing to arm)."""
    if _prctl is None:
        return None

    def arm() -> None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:   # the parent died before the request took effect
            os._exit(128 + signal.SIGKILL)
    return arm


def run_process(cmd: list[str], stdout, stderr, env: dict, cwd: Optional[str]) -> int:
    """Run ``cmd`` to its end (stdin closed, output into the open files ``stdout`` / ``stderr``);
    returns its exit code (negative: the signal that ended it). The process dies with the caller
    (``_dies_with``)."""
    return subprocess.run(cmd, stdout=stdout, stderr=stderr, env=env, stdin=subprocess.DEVNULL, cwd=cwd,
                          preexec_fn=_dies_with(os.getpid())).returncode


def _error_line(stderr_file: Path) -> str:
    """The run's own error message: its last ``run_slam:`` line, else its last non-empty line."""
    try:
        lines = [ln.strip() for ln in stderr_file.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    own = [ln for ln in lines if ln.startswith("run_slam:")]
    return (own or lines or [""])[-1][:500]


def outcome(job: Job, status: str, **extra) -> dict:
    """What the scheduler gets back: folder, label, status (done / failed / cached) and details."""
    return {"folder": job.folder, "label": job.label, "status": status, **extra}


def execute_job(job: Job, storage_url: str, cwd: Optional[str] = None, cpus: Optional[float] = None) -> dict:
    """Run one job into its folder under ``storage_url``; returns an ``outcome``.

    cwd: working directory of the run (relative config and data paths resolve from it; ignored
    when it does not exist on this machine). cpus: the job's CPU share, passed to the run as
    ``OMP_NUM_THREADS`` (None: the run uses the whole machine). Raises ``RunKilled`` when the
    run was killed by a signal.
    """
    storage = RunStorage(storage_url)
    if storage.finished_metrics(job.folder) is not None:
        return outcome(job, "cached", note="finished by an earlier attempt")
    previous = storage.read_json(job.folder, JOB_FILE) or {}
    attempt = int(previous.get("attempt", 0)) + 1 if previous.get("status") == "running" else 1
    storage.clear_run(job.folder)
    tmp = None if storage.is_local else Path(tempfile.mkdtemp(prefix="slam_batch_"))
    run_dir = Path(storage.run_path(job.folder)) if tmp is None else tmp / job.folder
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = job_command(job, run_dir)
    record = {"label": job.label, "config": job.config, "overrides": list(job.overrides), "command": cmd,
              "attempt": attempt, "status": "running", "host": socket.gethostname(),
              "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
              "started": _dt.datetime.now().astimezone().isoformat(timespec="seconds")}
    storage.write_job_file(job.folder, record)  # marks the attempt (a retry after a lost worker counts on)
    env = dict(os.environ)
    if cpus is not None:
        env["OMP_NUM_THREADS"] = str(max(1, int(cpus)))
    t0 = time.monotonic()
    try:
        with open(run_dir / STDOUT, "wb") as out, open(run_dir / STDERR, "wb") as err:
            try:
                rc = run_process(cmd, out, err, env, cwd if cwd and os.path.isdir(cwd) else None)
            except OSError as exc:  # the interpreter could not be started: this job fails, not the batch
                rc, record["error"] = 127, f"cannot start {cmd[0]}: {exc}"
        record.update(returncode=rc, wall_s=round(time.monotonic() - t0, 3))
        record["status"] = "finished" if rc == 0 else "failed"
        if rc != 0 and "error" not in record:
            record["error"] = _error_line(run_dir / STDERR) or f"run_slam exited with code {rc}"
        if rc < 0:
            record["status"] = "running"  # the retry counts this attempt
        if tmp is None:
            storage.write_job_file(job.folder, record)
        else:
            (run_dir / JOB_FILE).write_text(json.dumps(record, indent=2) + "\n")
            storage.publish(run_dir, job.folder)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if rc < 0:
        raise RunKilled(f"job '{job.label}': run_slam killed by signal {-rc} (attempt {attempt})")
    if rc != 0:
        return outcome(job, "failed", returncode=rc, error=record["error"], wall_s=record["wall_s"], attempt=attempt)
    if storage.finished_metrics(job.folder) is None:
        return outcome(job, "failed", returncode=rc, wall_s=record["wall_s"], attempt=attempt,
                       error="run_slam exited 0 but left no finished metrics.json")
    return outcome(job, "done", returncode=0, wall_s=record["wall_s"], attempt=attempt)
