"""Batch mapping and evaluation: many ``run_slam`` runs scheduled on Ray (``slam_batch``).

jobs (spec -> validated ``Job`` list, run folder names) -> runner (Ray tasks or one after another;
each job through execute: one ``run_slam`` process) -> storage (run folders on a path or fsspec URL;
finished folders are the cache) -> results (table, plots); progress on stderr; cli is ``slam_batch``.
Ray is optional (the ``batch`` extra) and imported only when jobs are scheduled on it.
"""
from slam.batch.jobs import BatchSpec, BatchSpecError, Job, expand, load_spec, parse_grid_option
from slam.batch.run import BatchResult, run_batch
from slam.batch.runner import RayMissing, RunOptions

__all__ = ["BatchSpec", "BatchSpecError", "Job", "expand", "load_spec", "parse_grid_option", "BatchResult",
           "run_batch", "RayMissing", "RunOptions"]
