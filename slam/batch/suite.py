"""``slam_suite``: the benchmark suite. Every real sequence in a data folder plus the generated
sequences, each with its shipped config, each run ``--repeats`` times through ``slam_batch``'s
machinery (``run_batch``: ``--local`` here one after another, else on Ray), then one table of the
median over the repeats (``slam.batch.suite_table``). How every change of a default is judged.

    slam_suite --local                                  # ../shared/data (or $SPHERE_SLAM_SUITE_DATA) + generated
    slam_suite --local --only sample,loop --repeats 5   # a subset (substring of the sequence label)
    slam_suite --set tracking.iters=20 --out runs/suite-iters20   # a changed default, on Ray
Exit codes: 0 every run finished, 1 some run failed (the others still ran), 2 bad options or
nothing to run, 130 interrupted. Running the same command again runs only the runs not finished.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from slam.batch.cli import add_run_options, list_or_check_ray
from slam.batch.jobs import BatchSpec, BatchSpecError, expand, parse_grid_option
from slam.batch.run import run_batch
from slam.batch.runner import RunOptions
from slam.batch.speed_probe import describe
from slam.batch.storage import RunStorage
from slam.batch.suite_table import header_line, paired, summarise, write_suite

# --------------------------------------------------------------------------- the suite's definition
# Real sequences: every sub-folder of the data folder whose files match one layout's patterns (each
# pattern must match at least one file) runs with that layout's config and data.path = the folder,
# once as it is (label: the folder's name) and once per variant (label: <name>-<variant>).
LAYOUTS = {
    "tum": {
        "files": ("rgb.txt", "depth.txt"),                          # TUM RGB-D (slam/data/tum.py)
        "config": "tum.yaml",
        "variants": {},
    },
    "7scenes": {
        # camera-intrinsics.txt is optional: the loader falls back to the published model
        "files": ("frame-[0-9]*.color.*", "frame-[0-9]*.depth.png"),  # 7-Scenes (slam/data/sevenscenes.py)
        "config": "7scenes.yaml",
        "variants": {"stride8": ("data.stride=8",), "stride16": ("data.stride=16",)},
    },
}
# Generated sequences: the bundled sample; the loop sample (a full turn around the sample's room
# and past its start: a real loop, loop closure's test); the spin sample (a turn and a half in
# place, 84 deg/s on average and up to 130, roll and pitch swinging, like TUM fr1/rpy: fast
# rotation, and revisits with almost no travel). Written by slam.data.synthetic.loop's
# generate_loop(**generate) into <data cache>/generated/<name> when absent.
GENERATED = {
    "sample": {"config": "default.yaml", "path": "sample"},
    "loop-120x90": {"config": "default.yaml",
                    "generate": {"frames": 140, "total": 120, "width": 120, "height": 90}},
    "spin-120x90": {"config": "default.yaml",
                    "generate": {"frames": 180, "total": 150, "width": 120, "height": 90, "trajectory": "spin"}},
}
DATA_ENV = "SPHERE_SLAM_SUITE_DATA"
DEFAULT_DATA = Path("..") / "shared" / "data"      # relative to the current directory
DEFAULT_REPEATS = 3


@dataclass(frozen=True)
class Sequence:
    """A sequence folder found in the data folder: name (the folder's), layout (a ``LAYOUTS`` key), path."""

    name: str
    layout: str
    path: Path


@dataclass(frozen=True)
class Entry:
    """One row of the suite before repeats and grids: label, config, overrides (``key=value``);
    ``generate``: generate_loop's arguments when the data must be generated first, else None."""

    label: str
    config: str
    overrides: tuple
    generate: Optional[dict] = None


def layout_of(folder: Path) -> list[str]:
    """The ``LAYOUTS`` keys whose file patterns all match files in ``folder``."""
    return [name for name, lay in LAYOUTS.items()
            if all(any(p.is_file() for p in folder.glob(pat)) for pat in lay["files"])]


def discover(data_dir: Path) -> tuple[list[Sequence], list[str]]:
    """Sequence folders directly under ``data_dir`` (sorted by name) and one message per sub-folder
    skipped (no layout matches, or more than one does); hidden folders and files are ignored."""
    found, skipped = [], []
    for folder in sorted(p for p in Path(data_dir).iterdir() if p.is_dir() and not p.name.startswith(".")):
        layouts = layout_of(folder)
        if len(layouts) == 1:
            found.append(Sequence(folder.name, layouts[0], folder.resolve()))
        elif not layouts:
            expected = "; ".join(f"{k}: {' + '.join(v['files'])}" for k, v in LAYOUTS.items())
            skipped.append(f"{folder}: matches no known layout ({expected}): skipped")
        else:
            skipped.append(f"{folder}: matches several layouts ({', '.join(layouts)}): skipped")
    return found, skipped


def find_data_dir(given: Optional[str], cwd: Optional[Path] = None) -> tuple[Optional[Path], str]:
    """The data folder and how it was chosen. ``given`` (``--data``) must exist (ValueError);
    otherwise ``../shared/data`` from ``cwd`` if it exists, else ``$SPHERE_SLAM_SUITE_DATA``;
    (None, where it looked) when neither exists."""
    if given is not None:
        path = Path(given).expanduser()
        if not path.is_dir():
            raise ValueError(f"--data {given}: no such folder")
        return path.resolve(), "--data"
    default = (Path(cwd or os.getcwd()) / DEFAULT_DATA).resolve()
    if default.is_dir():
        return default, f"default ({DEFAULT_DATA} from the current directory)"
    env = os.environ.get(DATA_ENV)
    if env and Path(env).expanduser().is_dir():
        return Path(env).expanduser().resolve(), f"${DATA_ENV}"
    env_note = f"${DATA_ENV}={env} (no such folder)" if env else f"${DATA_ENV} (not set)"
    return None, f"looked at {default} (no such folder) and {env_note}"


def generated_dir(name: str) -> Path:
    """Where a generated sequence lives: ``<data cache>/generated/<name>`` (``$SPHERE_SLAM_DATA``,
    default ``~/.cache/sphere-slam``, as ``slam.data.fetch.data_root``)."""
    from slam.data.fetch import data_root  # pooch: only when a generated sequence is asked for
    return data_root() / "generated" / name


def entries(sequences: list[Sequence]) -> list[Entry]:
    """The suite's rows: each real sequence and its layout's variants, then the generated sequences."""
    out = []
    for seq in sequences:
        lay = LAYOUTS[seq.layout]
        base = (f"data.path={seq.path}",)
        out.append(Entry(seq.name, lay["config"], base))
        out += [Entry(f"{seq.name}-{v}", lay["config"], base + tuple(over)) for v, over in lay["variants"].items()]
    for name, gen in GENERATED.items():
        if "generate" in gen:
            out.append(Entry(name, gen["config"], (f"data.path={generated_dir(name)}",), gen["generate"]))
        else:
            out.append(Entry(name, gen["config"], (f"data.path={gen['path']}",)))
    return out


class GenerationUnavailable(RuntimeError):
    """A generated sequence cannot be made here (open3d missing); the message says why."""


def _loop_generator():
    """slam.data.synthetic.loop's ``generate_loop``, once open3d (its renderer) imports."""
    try:
        import open3d  # noqa: F401  the generator's renderer; fails without libusb-1.0 on Debian
    except Exception as exc:  # noqa: BLE001  ImportError, OSError of a missing system library
        raise GenerationUnavailable(f"open3d cannot be imported ({type(exc).__name__}: {exc})") from None
    from slam.data.synthetic.loop import generate_loop
    return generate_loop


def ensure_generated(entry: Entry) -> Path:
    """The entry's generated sequence folder, generated first when absent (into a temporary sibling,
    renamed when complete: an interrupted generation never leaves a folder that looks finished).
    Raises ``GenerationUnavailable``."""
    dest = generated_dir(entry.label)
    if dest.is_dir():
        return dest
    generate = _loop_generator()
    tmp = dest.with_name(f"{dest.name}.partial-{os.getpid()}")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    generate(tmp, **entry.generate)
    try:
        tmp.rename(dest)
    except OSError:  # made meanwhile by another suite: keep that one
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


# The kernels the runs will use (CUDA where torch sees a GPU, else CPU), as install.sh builds them.
KERNELS = ("import torch\nfrom rasterizer import _ext\n"
           "_ext.ops('cuda' if torch.cuda.is_available() else 'cpu')")


def build_kernels(cwd: Optional[str] = None) -> Optional[str]:
    """Build the rasterizer kernels now, or load them from the kernel cache, in a subprocess started
    from ``cwd`` (the runs' directory: the same rasterizer package as theirs), so that no run's
    time includes a compilation or a wait for another process's; returns None, or why it failed
    (the runs then build them, or fail, on their own)."""
    proc = subprocess.Popen([sys.executable, "-c", KERNELS], cwd=cwd or os.getcwd(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate()
    except KeyboardInterrupt:  # let the build release its lock in the kernel cache before going
        proc.wait(timeout=60)
        raise
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return None if proc.returncode == 0 else (lines[-1] if lines else f"exit code {proc.returncode}")


def measure_speed(cwd: Optional[str] = None) -> Optional[dict]:
    """``slam.batch.speed_probe`` in a subprocess started from ``cwd`` (after the kernels are built):
    its figures, or None when it failed (the table's header then goes without them)."""
    proc = subprocess.run([sys.executable, "-m", "slam.batch.speed_probe"], cwd=cwd or os.getcwd(),
                          capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return None
    return json.loads(lines[-1])


def select(jobs: list, only: Optional[str]) -> list:
    """The jobs whose label (without its repeat) contains one of ``only``'s comma-separated names."""
    if not only:
        return jobs
    names = [n.strip() for n in only.split(",") if n.strip()]
    return [j for j in jobs if any(n in j.base_label for n in names)]


def build_parser() -> argparse.ArgumentParser:
    """The ``slam_suite`` command line (slam_batch's options where they apply)."""
    p = argparse.ArgumentParser(prog="slam_suite", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=None, metavar="DIR",
                   help=f"folder of real sequences (default: {DEFAULT_DATA} from here if it exists, else ${DATA_ENV})")
    p.add_argument("--only", default=None, metavar="NAME[,NAME]",
                   help="only the sequences whose label contains one of these names")
    p.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                   help=f"runs of every sequence (default {DEFAULT_REPEATS}); the table shows their median")
    add_run_options(p, "run", "runs/suite", "suite.md", set_note="; a sequence's own data.path / variant keys win")
    return p


def _say(msg: str) -> None:
    print(f"slam_suite: {msg}", file=sys.stderr, flush=True)


def plan(args) -> tuple[list, list[Entry], list[str]]:
    """(jobs, entries, notes) of the parsed options: sequences found, expanded with repeats and grids,
    selected by ``--only``; notes: one line per thing skipped. Raises BatchSpecError / ValueError."""
    notes: list[str] = []
    data_dir, how = find_data_dir(args.data)
    sequences: list[Sequence] = []
    if data_dir is None:
        notes.append(f"no data folder ({how}): real sequences skipped")
    else:
        sequences, skipped = discover(data_dir)
        notes.append(f"real sequences: {len(sequences)} in {data_dir} ({how})")
        notes += skipped
    rows = entries(sequences)
    grid = dict(parse_grid_option(g) for g in args.grid)
    spec = BatchSpec(overrides=list(args.overrides), grid=grid, repeats=args.repeats, source="slam_suite",
                     jobs=[{"name": e.label, "config": e.config, "set": list(e.overrides)} for e in rows])
    jobs = select(expand(spec), args.only)
    if not jobs:
        raise ValueError(f"--only {args.only}: no sequence matches (sequences: {', '.join(e.label for e in rows)})")
    return jobs, rows, notes


def _generate(jobs: list, rows: list[Entry], storage: RunStorage, dry_run: bool, notes: list[str]) -> list:
    """Generate the generated sequences the jobs still need; returns the jobs, less those of a
    sequence that cannot be generated here (one note each)."""
    for entry in (e for e in rows if e.generate is not None):
        users = [j for j in jobs if entry.overrides[0] in j.overrides]  # the jobs reading its data.path
        where = generated_dir(entry.label)
        if where.is_dir() or all(storage.finished_metrics(j.folder) is not None for j in users):
            continue  # there already, or not needed (no run of it left to do)
        if dry_run:
            _say(f"{entry.label}: would be generated into {where}")
            continue
        try:
            _say(f"{entry.label}: generating into {where}")
            ensure_generated(entry)
        except GenerationUnavailable as exc:
            notes.append(f"{entry.label}: cannot generate ({exc}): skipped")
            _say(notes[-1])
            jobs = [j for j in jobs if j not in users]
    return jobs


def _options_error(args) -> Optional[str]:
    if args.repeats < 1 or args.cpus_per_job <= 0 or args.max_retries < 0 \
            or (args.gpus_per_job is not None and args.gpus_per_job < 0):
        return "--repeats must be >= 1, --cpus-per-job > 0, --gpus-per-job and --max-retries >= 0"
    return None


def main(argv: Optional[list[str]] = None) -> int:
    """``slam_suite``; returns the exit code (module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        error = _options_error(args)
        if error:
            raise ValueError(error)
        jobs, rows, notes = plan(args)
        storage = RunStorage(args.out)
    except (BatchSpecError, ValueError, ImportError) as exc:
        _say(str(exc))
        return 2
    for note in notes:
        _say(note)
    jobs = _generate(jobs, rows, storage, args.dry_run, notes)
    if not jobs:
        _say("nothing to run")
        return 2
    finished = [j for j in jobs if storage.finished_metrics(j.folder) is not None]
    n_rows = len({j.base_label for j in jobs})
    _say(f"{len(jobs)} runs ({n_rows} {'row' if n_rows == 1 else 'rows'} x {args.repeats} repeats), "
         f"{len(finished)} finished already (kept), output {storage.display()}")
    stop = list_or_check_ray(args, jobs, finished, storage, _say)
    if stop is not None:
        return stop
    opts = RunOptions(local=args.local, address=args.address, cpus_per_job=args.cpus_per_job,
                      gpus_per_job=args.gpus_per_job, max_retries=args.max_retries, progress=not args.quiet)
    speed = None
    try:
        if len(finished) < len(jobs):
            t0 = time.monotonic()
            error = build_kernels()
            _say(f"rasterizer kernels ready ({time.monotonic() - t0:.0f} s)" if error is None
                 else f"warning: building the rasterizer kernels failed ({error}); the runs will try again")
            speed = measure_speed() if error is None else None
            if speed is not None:
                _say(f"machine speed: {describe(speed)}")
        header = header_line("slam_suite " + shlex.join(argv), speed=speed)
        result = run_batch(jobs, args.out, opts, plots=not args.no_plots)
    except KeyboardInterrupt:
        _say("interrupted; finished runs are kept: run the same command again to resume")
        return 130
    except (RuntimeError, ValueError) as exc:
        _say(str(exc))
        return 2
    text, written = write_suite(summarise(jobs, result.rows), storage, header, notes,
                                paired(jobs, result.rows))
    print(text)
    _say(f"{len(result.ran)} runs ran ({len(result.failed)} failed), {len(jobs) - len(result.ran)} finished earlier; "
         f"table {written['markdown']} and {written['csv']}")
    return 1 if result.failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
