"""Batch job specs: a YAML file and/or ``--grid key=v1,v2`` options -> a list of ``Job``s, each one
``run_slam`` run (a config plus ``--set`` overrides), validated against the config schema before
anything runs.

A jobs file (every key optional):

    config: 7scenes.yaml            # the config of every job (a path or a shipped config's name)
    set: [mapping.final_iters=100]  # overrides of every job (a list of key=value, or a mapping)
    grid:                           # the cartesian product of these values ...
      pruner.enabled: [true, false]
      data.stride: [1, 2]
    jobs:                           # ... crossed with each of these (default: one empty job)
      - {name: kitchen, set: {data.path: 7scenes/redkitchen/seq-01}}
      - {name: fleet-bag, config: realsense.yaml, set: [data.path=/bags/robot1.bag]}
      - {name: one-off, set: {data.stride: 4}, grid: {}}   # its own grid ({}: none) instead of the file's

Each job's run folder name is decided by the job alone: its label made filename-safe plus a hash of
its resolved config (so the same job always maps to the same folder, and editing a config file
makes a new run instead of reusing a stale one).

Repeats (``BatchSpec.repeats`` = N, used by ``slam_suite``): every job is run N times. The N runs
have the same config, hence the same hash; what tells them apart is the repeat number, which is
part of the label (``... repeat=k``) and of the folder (``<label>-repeat<k>-<hash>``), not of the
config. Raising N later reuses the runs already finished. Without repeats (the default, 0) labels
and folders are as above.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from slam.config import ConfigError, load_config

FILE_KEYS = ("config", "set", "grid", "jobs")
JOB_KEYS = ("name", "config", "set", "grid")
# Keys that decide where and how a run reports, not what it computes: left out of the run's hash.
NOT_HASHED = {"output": ("root", "name"), "system": ("progress",)}


class BatchSpecError(ValueError):
    """A jobs file, ``--grid`` or ``--set`` option is invalid; the message names the file/job and key."""


@dataclass(frozen=True)
class Job:
    """One ``run_slam`` run of a batch.

    config: config path or shipped name as given; overrides: ``key=value`` strings in the order
    applied; label: what tells it apart in the batch (its name and grid values); params: grid and
    job values by key (the table's columns); folder: its run folder's name under ``<out>/runs``;
    repeat: which of the batch's repeats of the same run this is (1..N), 0 when the batch does not
    repeat its jobs; entry: the label of the jobs-file entry it comes from (its name, else its
    ``set`` words, else 'default'), the same for every grid value; grid: its grid values
    (``key=value`` words joined by spaces, '' without a grid).
    """

    config: str
    overrides: tuple
    label: str
    params: dict = field(hash=False, compare=False)
    folder: str = ""
    repeat: int = 0
    entry: str = ""
    grid: str = ""

    @property
    def base_label(self) -> str:
        """The label without its ``repeat=k`` suffix: the same for every repeat of one run."""
        suffix = f" repeat={self.repeat}"
        return self.label[: -len(suffix)] if self.repeat and self.label.endswith(suffix) else self.label


@dataclass
class BatchSpec:
    """What a jobs file and the command-line options describe, before expansion."""

    config: str = "default.yaml"
    overrides: list = field(default_factory=list)
    grid: dict = field(default_factory=dict)       # key -> list of values
    jobs: list = field(default_factory=lambda: [{}])
    source: str = "command line"                  # where it came from, for error messages
    repeats: int = 0                              # N >= 1: every job N times (module docstring); 0: once


def format_value(value: Any) -> str:
    """A value as YAML text that ``--set key=<text>`` parses back to the same value."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9).strip()
    if text.endswith("\n..."):  # a bare scalar document ends with an explicit end marker
        text = text[: -len("\n...")].strip()
    return text


def _override_list(value: Any, where: str) -> list[str]:
    """``set`` given as a list of key=value strings or as a mapping -> key=value strings."""
    if value is None:
        return []
    if isinstance(value, dict):
        return [f"{k}={format_value(v)}" for k, v in value.items()]
    if isinstance(value, list) and all(isinstance(v, str) and "=" in v for v in value):
        return list(value)
    raise BatchSpecError(f"{where}: 'set' must be a list of key=value strings or a mapping of keys to values, "
                         f"got {value!r}")


def parse_grid_option(text: str) -> tuple[str, list]:
    """``key=v1,v2,...`` -> (key, [v1, v2, ...]); values are YAML (``[1,2],[3,4]`` gives two lists)."""
    if "=" not in text:
        raise BatchSpecError(f"--grid '{text}': expected key=value1,value2,...")
    key, rhs = (s.strip() for s in text.split("=", 1))
    if not key or not rhs:
        raise BatchSpecError(f"--grid '{text}': expected key=value1,value2,...")
    try:
        values = yaml.safe_load(f"[{rhs}]")
    except yaml.YAMLError:
        values = [v.strip() for v in rhs.split(",")]
    return key, values


def _grid(value: Any, where: str) -> dict:
    """A ``grid`` mapping (key -> non-empty list of values), checked."""
    grid = value or {}
    if not isinstance(grid, dict):
        raise BatchSpecError(f"{where}: 'grid' must map config keys to lists of values")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise BatchSpecError(f"{where}: grid key '{key}' needs a non-empty list of values, got {values!r}")
    return {str(k): v for k, v in grid.items()}


def load_spec(path: Optional[str]) -> BatchSpec:
    """Read a jobs file (module docstring); ``None`` gives an empty spec (one job, default config)."""
    if path is None:
        return BatchSpec()
    where = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise BatchSpecError(f"{where}: cannot read jobs file ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise BatchSpecError(f"{where}: not valid YAML: {exc}") from None
    data = data or {}
    if not isinstance(data, dict):
        raise BatchSpecError(f"{where}: top level must be a mapping with keys {list(FILE_KEYS)}")
    unknown = [k for k in data if k not in FILE_KEYS]
    if unknown:
        raise BatchSpecError(f"{where}: unknown key '{unknown[0]}' (expected {list(FILE_KEYS)})")
    spec = BatchSpec(source=where)
    if data.get("config") is not None:
        spec.config = str(data["config"])
    spec.overrides = _override_list(data.get("set"), where)
    spec.grid = _grid(data.get("grid"), where)
    jobs = data.get("jobs")
    if jobs is not None:
        if not isinstance(jobs, list) or not jobs:
            raise BatchSpecError(f"{where}: 'jobs' must be a non-empty list of mappings")
        spec.jobs = []
        for i, job in enumerate(jobs):
            if not isinstance(job, dict):
                raise BatchSpecError(f"{where}: jobs[{i}] must be a mapping with keys {list(JOB_KEYS)}")
            bad = [k for k in job if k not in JOB_KEYS]
            if bad:
                raise BatchSpecError(f"{where}: jobs[{i}]: unknown key '{bad[0]}' (expected {list(JOB_KEYS)})")
            entry = {"name": job.get("name"), "config": job.get("config"),
                     "set": _override_list(job.get("set"), f"{where}: jobs[{i}]")}
            if "grid" in job:
                entry["grid"] = _grid(job["grid"], f"{where}: jobs[{i}]")
            spec.jobs.append(entry)
    return spec


def _keys(overrides: list[str]) -> list[str]:
    return [o.split("=", 1)[0].strip() for o in overrides]


def run_hash(cfg) -> str:
    """Hash of a resolved config, without the keys in ``NOT_HASHED``."""
    d = cfg.to_dict()
    for section, keys in NOT_HASHED.items():
        for k in keys:
            d.get(section, {}).pop(k, None)
    return hashlib.sha1(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:10]


def folder_name(label: str, cfg, repeat: int = 0) -> str:
    """Run folder name: the label made filename-safe (at most 100 characters) + '-' + the config hash;
    with ``repeat`` k >= 1, ``-repeat<k>`` goes between them (never cut off with a long label)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", label.replace("=", "-")).strip("_")[:100] or "run"
    return f"{slug}-repeat{repeat}-{run_hash(cfg)}" if repeat else f"{slug}-{run_hash(cfg)}"


def expand(spec: BatchSpec) -> list[Job]:
    """Every job of ``spec``: each entry of ``spec.jobs`` x the product of its grid (the entry's own
    ``grid`` if it has one, else the spec's), validated with ``slam.config.load_config`` (an unknown
    key or bad value fails here, naming the job and key); with ``spec.repeats`` N, each entry's grid
    N times, interleaved (repeat 1 of every grid value, then repeat 2, ...: run one after another,
    the values of a comparison share the machine's slow and fast spells alike)."""
    if not isinstance(spec.repeats, int) or spec.repeats < 0:
        raise BatchSpecError(f"{spec.source}: repeats must be a whole number >= 0, got {spec.repeats!r}")
    out: list[Job] = []
    for base in spec.jobs:
        grid = base["grid"] if "grid" in base else spec.grid
        keys = list(grid)
        variants = []                                   # (label, resolved config, the Job's other fields)
        for combo in itertools.product(*(grid[k] for k in keys)):
            grid_over = [f"{k}={format_value(v)}" for k, v in zip(keys, combo)]
            job_over = list(base.get("set") or [])
            overrides = list(spec.overrides) + job_over + grid_over
            params = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in job_over + grid_over}
            name = base.get("name")
            label = " ".join(([str(name)] if name else []) + (grid_over if name else job_over + grid_over)) or "default"
            config = str(base.get("config") or spec.config)
            dup = {k for k in _keys(grid_over) if _keys(job_over).count(k) or _keys(spec.overrides).count(k)}
            if dup:
                raise BatchSpecError(f"{spec.source}: job '{label}': '{sorted(dup)[0]}' is set by the grid and "
                                     f"by a 'set' as well: give it in one place")
            try:
                cfg = load_config(config, overrides)
            except (ConfigError, FileNotFoundError) as exc:
                raise BatchSpecError(f"{spec.source}: job '{label}': {exc}") from None
            entry = str(name) if name else " ".join(job_over) or "default"
            variants.append((label, cfg, {"config": config, "overrides": tuple(overrides), "params": params,
                                          "entry": entry, "grid": " ".join(grid_over)}))
        for repeat in range(1, spec.repeats + 1) if spec.repeats else [0]:
            for label, cfg, fields in variants:
                out.append(Job(label=f"{label} repeat={repeat}" if repeat else label,
                               folder=folder_name(label, cfg, repeat), repeat=repeat, **fields))
    seen: dict = {}
    for job in out:
        key = (job.folder.rsplit("-", 1)[1], job.repeat)
        if key in seen:
            raise BatchSpecError(f"{spec.source}: jobs '{seen[key]}' and '{job.label}' are the same run "
                                 f"(same config after overrides): remove one")
        seen[key] = job.label
    return out
