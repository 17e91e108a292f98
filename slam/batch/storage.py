"""Where a batch's outputs go: run folders under ``<out>/runs/``, the table and plots under
``<out>/``. ``<out>`` is a local path (default) or an fsspec URL.

On a local path (or ``file://``) each run writes straight into its folder. On any other fsspec
filesystem a run writes into a local temporary folder on its worker, which is then uploaded file by
file, ``metrics.json`` last, so a folder is never taken for finished before all of it is there.
Finished run folders are the cache: a folder holds a finished run when its ``metrics.json`` is the
final one (no ``partial`` key) of a run that stopped at the end of its input.
"""
from __future__ import annotations

import json
import posixpath
from pathlib import Path
from typing import Optional

import fsspec
from fsspec.implementations.local import LocalFileSystem

RUNS = "runs"
METRICS = "metrics.json"
JOB_FILE = "job.json"          # what slam_batch ran in this folder: command, exit code, wall time
FINISHED = "end of input"      # metrics.json stop_reason of a run that processed all its input


class RunStorage:
    """A batch's output root. ``url``: a path or fsspec URL; after construction a local root is
    absolute, so workers on other processes resolve it the same way."""

    def __init__(self, url: str) -> None:
        self.fs, self.root = fsspec.core.url_to_fs(str(url))
        self.is_local = isinstance(self.fs, LocalFileSystem)
        self.url = self.root if self.is_local else str(url)
        self.protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]

    def path(self, *parts: str) -> str:
        """``root/parts...`` in the filesystem's own path form."""
        return posixpath.join(self.root, *parts)

    def display(self, *parts: str) -> str:
        """``path(...)`` as a user would type it (with the URL scheme when not local)."""
        p = self.path(*parts)
        return p if self.is_local else f"{self.protocol}://{p.lstrip('/')}"

    def run_path(self, folder: str) -> str:
        """A job's run folder: ``root/runs/folder``."""
        return self.path(RUNS, folder)

    def read_json(self, folder: str, name: str) -> Optional[dict]:
        """A JSON file of a run folder, or None when missing or unreadable."""
        try:
            return json.loads(self.fs.cat_file(posixpath.join(self.run_path(folder), name)))
        except (FileNotFoundError, OSError, ValueError):
            return None

    def finished_metrics(self, folder: str) -> Optional[dict]:
        """The run folder's final ``metrics.json`` when it holds a finished run, else None."""
        m = self.read_json(folder, METRICS)
        if not isinstance(m, dict) or "partial" in m or m.get("stop_reason") != FINISHED:
            return None
        return m

    def write_bytes(self, relpath: str, data: bytes) -> str:
        """Write ``root/relpath`` (parents created); returns its display path."""
        p = self.path(relpath)
        self.fs.makedirs(posixpath.dirname(p), exist_ok=True)
        self.fs.pipe_file(p, data)
        return self.display(relpath)

    def write_job_file(self, folder: str, record: dict) -> None:
        """Write ``job.json`` (what slam_batch ran there) into a run folder."""
        self.write_bytes(posixpath.join(RUNS, folder, JOB_FILE), (json.dumps(record, indent=2) + "\n").encode())

    def clear_run(self, folder: str) -> None:
        """Remove what an unfinished earlier attempt left in a run folder."""
        p = self.run_path(folder)
        if self.fs.exists(p):
            self.fs.rm(p, recursive=True)

    def publish(self, local_dir: Path, folder: str) -> None:
        """Upload a run written in ``local_dir`` into its folder, ``metrics.json`` last."""
        files = sorted(f for f in Path(local_dir).rglob("*") if f.is_file())
        files.sort(key=lambda f: f.name == METRICS)
        dest = self.run_path(folder)
        for f in files:
            target = posixpath.join(dest, f.relative_to(local_dir).as_posix())
            self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
            self.fs.put_file(str(f), target)
