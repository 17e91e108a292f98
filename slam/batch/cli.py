"""``slam_batch``: many ``run_slam`` runs (sequences or bags x config overrides) on Ray, resumable,
with one table of results.

    slam_batch --grid pruner.enabled=true,false --grid data.stride=1,2 --set data.last=100
    slam_batch jobs.yaml --config 7scenes.yaml --out runs/tuning         # a jobs file (slam/batch/jobs.py)
    slam_batch jobs.yaml --address auto                                  # an existing Ray cluster
    slam_batch jobs.yaml --local                                         # no Ray: one job after another
Exit codes: 0 every job finished, 1 some job failed (the others still ran), 2 bad jobs or options,
130 interrupted. Running the same command again runs only the jobs not finished yet.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from slam.batch.execute import job_command
from slam.batch.jobs import BatchSpecError, expand, load_spec, parse_grid_option
from slam.batch.run import run_batch
from slam.batch.runner import RayMissing, RunOptions, import_ray
from slam.batch.storage import RunStorage


def build_parser() -> argparse.ArgumentParser:
    """The ``slam_batch`` command line."""
    p = argparse.ArgumentParser(prog="slam_batch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("jobs", nargs="?", default=None, help="YAML jobs file: config, set, grid, jobs (docs/BATCH.md)")
    p.add_argument("--config", default=None, help="config of every job (default: the jobs file's, else default.yaml)")
    add_run_options(p, "job", "runs/batch", "batch.md")
    return p


def add_run_options(p: argparse.ArgumentParser, unit: str, out: str, table: str, set_note: str = "") -> None:
    """The options ``slam_batch`` and ``slam_suite`` share (overrides, grids, output, where and how
    the runs go); ``unit``: what one run is called in the help ("job", "run"), ``out``: the default
    output root, ``table``: the table's file name under it, ``set_note``: added to --set's help."""
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help=f"override for every {unit} (repeatable{set_note})")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help=f"every {unit} with every value of KEY (repeatable: the product of all grids; values are YAML)")
    p.add_argument("--out", default=out,
                   help=f"output root: a path or an fsspec URL (run folders in OUT/runs, table in OUT/{table})")
    p.add_argument("--local", action="store_true", help=f"no Ray: run the {unit}s one after another in this process")
    p.add_argument("--address", default=None,
                   help="an existing Ray cluster (e.g. auto, or HOST:6379); default: start a local one")
    p.add_argument("--cpus-per-job", type=float, default=2.0, help="CPUs each Ray task reserves (default 2)")
    p.add_argument("--gpus-per-job", type=float, default=None,
                   help="GPUs each Ray task reserves (default: 1 when the cluster has GPUs, else 0; 0.5 = two share one)")
    p.add_argument("--max-retries", type=int, default=2, help="retries of a job whose worker was lost (default 2)")
    p.add_argument("--no-plots", action="store_true", help="no per-metric plots")
    p.add_argument("--dry-run", action="store_true", help=f"list the {unit}s, their folders and commands; run nothing")
    p.add_argument("--quiet", action="store_true", help=f"no progress bar (finished {unit}s are still listed)")


def list_or_check_ray(args, jobs: list, finished: list, storage: RunStorage, say) -> Optional[int]:
    """The step before running that ``slam_batch`` and ``slam_suite`` share: with ``--dry-run``
    print each job's state, folder and command (-> 0); without ``--local`` Ray must import (else
    ``say`` why, -> 2). None: go on and run."""
    if args.dry_run:
        for j in jobs:
            state = "finished" if j in finished else "to run"
            print(f"{j.label}\t{state}\t{storage.display('runs', j.folder)}\n    "
                  + " ".join(job_command(j, storage.run_path(j.folder), python="python")))
        return 0
    if not args.local:
        try:
            import_ray()
        except RayMissing as exc:
            say(str(exc))
            return 2
    return None


def _spec(args):
    spec = load_spec(args.jobs)
    if args.config:
        spec.config = args.config
    spec.overrides += args.overrides
    for text in args.grid:
        key, values = parse_grid_option(text)
        spec.grid[key] = values
    return spec


def main(argv: Optional[list[str]] = None) -> int:
    """``slam_batch``; returns the exit code (module docstring)."""
    args = build_parser().parse_args(argv)
    if args.cpus_per_job <= 0 or (args.gpus_per_job is not None and args.gpus_per_job < 0) or args.max_retries < 0:
        print("slam_batch: --cpus-per-job must be > 0, --gpus-per-job and --max-retries >= 0", file=sys.stderr)
        return 2
    try:
        jobs = expand(_spec(args))
        storage = RunStorage(args.out)
    except (BatchSpecError, ValueError, ImportError) as exc:
        print(f"slam_batch: {exc}", file=sys.stderr)
        return 2
    finished = [j for j in jobs if storage.finished_metrics(j.folder) is not None]
    print(f"slam_batch: {len(jobs)} jobs, {len(finished)} finished already (kept), output {storage.display()}",
          file=sys.stderr, flush=True)
    stop = list_or_check_ray(args, jobs, finished, storage, lambda msg: print(f"slam_batch: {msg}", file=sys.stderr))
    if stop is not None:
        return stop
    opts = RunOptions(local=args.local, address=args.address, cpus_per_job=args.cpus_per_job,
                      gpus_per_job=args.gpus_per_job, max_retries=args.max_retries, progress=not args.quiet)
    try:
        result = run_batch(jobs, args.out, opts, plots=not args.no_plots)
    except KeyboardInterrupt:
        print("slam_batch: interrupted; finished runs are kept: run the same command again to resume",
              file=sys.stderr)
        return 130
    except (RuntimeError, ValueError) as exc:
        print(f"slam_batch: {exc}", file=sys.stderr)
        return 2
    print(result.markdown())
    ran = len(result.ran)
    print(f"slam_batch: ran {ran} jobs ({ran - len(result.failed)} finished, {len(result.failed)} failed), "
          f"{len(jobs) - ran} finished earlier; table {result.written['markdown']} and {result.written['csv']}")
    return 1 if result.failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
