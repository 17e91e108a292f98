"""A whole batch in one call: jobs -> runs (skipping finished ones) -> table and plots."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from slam.batch.jobs import Job
from slam.batch.results import build_rows, markdown, write_results
from slam.batch.runner import RunOptions, run_jobs
from slam.batch.storage import RunStorage


@dataclass
class BatchResult:
    """rows: the table (``results.build_rows``); outcomes: {folder: outcome}; written: {what: path}."""

    rows: list
    outcomes: dict
    written: dict

    @property
    def failed(self) -> list:
        """Rows of the jobs that failed."""
        return [r for r in self.rows if r["status"] == "failed"]

    @property
    def ran(self) -> list:
        """Rows of the jobs that this call ran (not found finished in their folders)."""
        return [r for r in self.rows if r["status"] != "cached"]

    def markdown(self) -> str:
        """The table as markdown (``results.markdown``)."""
        return markdown(self.rows)


def run_batch(jobs: list[Job], out: str, opts: Optional[RunOptions] = None, plots: bool = True,
              cwd: Optional[str] = None) -> BatchResult:
    """Run ``jobs`` into ``out`` (a path or fsspec URL) and write the table and plots there."""
    storage = RunStorage(out)
    outcomes = run_jobs(jobs, storage, opts or RunOptions(), cwd=cwd)
    rows = build_rows(jobs, outcomes, storage)
    return BatchResult(rows=rows, outcomes=outcomes, written=write_results(rows, storage, plots=plots))
