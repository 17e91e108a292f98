"""Scheduling a batch's jobs: one after another in this process (``local``), or as Ray tasks on a
local cluster that this call starts and stops, or on an existing cluster (``address``).

Each Ray task asks for ``cpus_per_job`` CPUs and ``gpus_per_job`` GPUs (default: 1 when the
cluster has GPUs, else 0; a fraction shares a GPU, Ray sets the task's ``CUDA_VISIBLE_DEVICES``).
Tasks are retried ``max_retries`` times when their worker is lost (Ray's ``max_retries``) or their
run is killed by a signal (``RunKilled``); a run that fails on its own (bad input, an error) is
reported as failed and the other jobs go on. Jobs whose folders already hold finished runs are
not scheduled at all.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from slam.batch.execute import RunKilled, execute_job, outcome
from slam.batch.jobs import Job
from slam.batch.progress import BatchProgress
from slam.batch.storage import RunStorage

INSTALL_HINT = ("slam_batch needs Ray to schedule jobs: pip install '.[batch]' (or pip install ray), "
                "or run the jobs one after another with --local")
# Each Ray worker in its own process group, killed as a group when the worker exits, even by SIGKILL
# (Ray's documented mechanism): a retried job never shares its folder with an orphaned run_slam of
# an earlier attempt. (Ray's other mechanism, the raylet as subreaper, breaks subprocess exit codes:
# every run then reads as exit code 0.)
PROCESS_GROUP_ENV = "RAY_process_group_cleanup_enabled"
LOCAL_OBJECT_STORE_BYTES = 200 * 1024 ** 2  # results are small dicts; don't reserve GBs of /dev/shm


@dataclass
class RunOptions:
    """How to schedule: ``local`` (no Ray), ``address`` (existing cluster; None = start a local
    one), per-job resources, retries, progress bar."""

    local: bool = False
    address: Optional[str] = None
    cpus_per_job: float = 2.0
    gpus_per_job: Optional[float] = None
    max_retries: int = 2
    progress: bool = True


class RayMissing(RuntimeError):
    """Ray is not installed; the message says how to get it."""


def run_jobs(jobs: list[Job], storage: RunStorage, opts: RunOptions, cwd: Optional[str] = None) -> dict:
    """Run every job not finished yet; returns {folder: outcome} for all jobs (cached included)."""
    cwd = cwd or os.getcwd()
    results = {j.folder: outcome(j, "cached") for j in jobs if storage.finished_metrics(j.folder) is not None}
    todo = [j for j in jobs if j.folder not in results]
    progress = BatchProgress(len(jobs), cached=len(results), enabled=opts.progress)
    try:
        if todo:
            run = _run_local if opts.local else _run_ray
            results.update(run(todo, storage, opts, cwd, progress))
    finally:
        progress.close()
    return results


def _run_local(todo: list[Job], storage: RunStorage, opts: RunOptions, cwd: str, progress: BatchProgress) -> dict:
    out = {}
    for i, job in enumerate(todo):
        progress.running(1, len(todo) - i)
        res = None
        for _ in range(opts.max_retries + 1):
            try:
                res = execute_job(job, storage.url, cwd)
                break
            except RunKilled as exc:
                res = outcome(job, "failed", error=str(exc))
        out[job.folder] = res
        progress.running(0, len(todo) - i - 1)
        progress.finished(res, len(todo) - i - 1)
    return out


def import_ray():
    """The ``ray`` module, or ``RayMissing`` saying how to install it."""
    try:
        import ray  # optional heavy dependency: the 'batch' extra
    except ImportError:
        raise RayMissing(INSTALL_HINT) from None
    return ray


def _task_body(job: Job, storage_url: str, cwd: str, cpus: float, board) -> dict:
    """A Ray task: tell the board the job started, run it, tell the board it ended."""
    board.started.remote(job.folder)
    try:
        return execute_job(job, storage_url, cwd, cpus)
    finally:
        board.ended.remote(job.folder)


class _Board:
    """Which jobs have started on a worker (a Ray actor: the driver asks it for 'running')."""

    def __init__(self) -> None:
        self.live: set = set()

    def started(self, folder: str) -> None:
        self.live.add(folder)

    def ended(self, folder: str) -> None:
        self.live.discard(folder)

    def running(self) -> list:
        return sorted(self.live)


def _check_feasible(ray, cpus: float, gpus: float, local: bool) -> None:
    total = ray.cluster_resources()
    short = [f"{need:g} {name} per job but the cluster has {total.get(name, 0):g}"
             for name, need in (("CPU", cpus), ("GPU", gpus)) if need > total.get(name, 0)]
    if short:
        msg = "cannot schedule the jobs: " + "; ".join(short) + " (see --cpus-per-job / --gpus-per-job)"
        if local:
            raise RuntimeError(msg)
        print(f"slam_batch: warning: {msg}; jobs wait until an autoscaler adds such nodes", flush=True)


def _run_ray(todo: list[Job], storage: RunStorage, opts: RunOptions, cwd: str, progress: BatchProgress) -> dict:
    ray = import_ray()
    if storage.protocol == "memory":
        raise ValueError("memory:// storage lives inside one process; Ray workers cannot see it: use --local")
    started_here = not ray.is_initialized()
    if started_here:
        kwargs = dict(include_dashboard=False, logging_level="WARNING", log_to_driver=False)
        if opts.address is None:
            kwargs["object_store_memory"] = LOCAL_OBJECT_STORE_BYTES
        before = os.environ.get(PROCESS_GROUP_ENV)
        os.environ.setdefault(PROCESS_GROUP_ENV, "true")  # read by the local cluster's raylet as it starts
        try:
            ray.init(address=opts.address, **kwargs)
        finally:
            if before is None:
                del os.environ[PROCESS_GROUP_ENV]
    try:
        gpus = opts.gpus_per_job
        if gpus is None:
            gpus = 1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0
        _check_feasible(ray, opts.cpus_per_job, gpus, local=opts.address is None)
        board = ray.remote(_Board).options(num_cpus=0).remote()
        task = ray.remote(_task_body).options(num_cpus=opts.cpus_per_job, num_gpus=gpus,
                                              max_retries=opts.max_retries, retry_exceptions=[RunKilled])
        refs = {task.remote(job, storage.url, cwd, opts.cpus_per_job, board): job for job in todo}
        return _collect(ray, refs, board, progress)
    finally:
        if started_here:
            ray.shutdown()


def _collect(ray, refs: dict, board, progress: BatchProgress) -> dict:
    """Wait for the tasks, reporting each as it ends; a task's error is that job's failure."""
    out = {}
    while refs:
        ready, _ = ray.wait(list(refs), num_returns=1, timeout=1.0)
        pending = {j.folder for j in refs.values()}
        for ref in ready:
            job = refs.pop(ref)
            pending.discard(job.folder)
            try:
                res = ray.get(ref)
            except ray.exceptions.RayError as exc:  # worker lost past its retries, RunKilled, ...
                cause = getattr(exc, "cause", None) or exc
                lines = str(cause).strip().splitlines() or [""]
                res = outcome(job, "failed", error=f"{type(cause).__name__}: {lines[-1]}")
            out[job.folder] = res
            running = set(ray.get(board.running.remote())) & pending
            progress.running(len(running), len(pending))
            progress.finished(res, len(pending))
        if not ready:
            running = set(ray.get(board.running.remote())) & pending
            progress.running(len(running), len(pending))
    return out
