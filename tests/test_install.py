"""scripts/install.sh's progress display, run against a fake venv (its python prints what pip and
the kernel build print, and stays silent for a while): numbered steps, one line per package or
compiled file, a heartbeat during silences, a failing step fails the install (the kernel build
only warns), a one-line summary with the total time. The real install takes minutes; its
measured timings are in docs/benchmarks.md#install-and-test-suite."""
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEARTBEAT_S = 1
POLL_S = 0.2
SILENCE_S = 3 * HEARTBEAT_S          # how long the fake pip and compiler print nothing

FAKE_PYTHON = r"""#!/usr/bin/env bash
# A stand-in for the venv's python: prints what pip / torch's JIT build print.
args="$*"
case "$args" in
  "-m pip install --upgrade pip")
    echo "Collecting pip"; echo "  Downloading pip-99.0-py3-none-any.whl (1.8 MB)"
    echo "Installing collected packages: pip"; echo "Successfully installed pip-99.0" ;;
  "-m pip install "*)
    echo "Collecting numpy>=1.24 (from sphere-slam==0.1.0)"
    echo "  Downloading numpy-2.1.0-cp311-cp311-manylinux_2_17_x86_64.whl (16.3 MB)"
    if [ "${FAKE_PIP_FAIL:-0}" = 1 ]; then
      echo "ERROR: No matching distribution found for open3d>=0.18"; exit 1
    fi
    echo "Collecting open3d>=0.18"
    echo "Installing collected packages: numpy, open3d"
    sleep "$FAKE_SILENCE_S"
    echo "Successfully installed numpy-2.1.0 open3d-0.19.0" ;;
  "-c import torch") exit 0 ;;
  *importlib.metadata*) echo "sphere-slam 0.1.0, torch 2.13.0" ;;
  *torch.cuda.is_available*) echo cpu ;;
  *cache_dir*) echo /fake/kernel/cache ;;
  *load_jit*)
    [ "${FAKE_KERNEL_FAIL:-0}" = 1 ] && { echo "error: no compiler"; exit 1; }
    echo "Emitting ninja build file /fake/build.ninja..."
    sleep "$FAKE_SILENCE_S"
    echo "[1/2] c++ -MMD -MF raster_cpu.o.d -O3 -c /fake/csrc/raster_cpu.cpp -o raster_cpu.o"
    echo "[2/2] c++ raster_cpu.o -shared -o _sphere_raster_cpu.so" ;;
  *torch.__version__*) echo 2.13.0 ;;
  *) echo "fake python: unexpected arguments: $args" >&2; exit 99 ;;
esac
"""


@pytest.fixture
def fake_env(tmp_path):
    """A venv whose python is FAKE_PYTHON, and an ldconfig that reports libusb (no apt-get)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin" / "python"
    py.write_text(FAKE_PYTHON)
    py.chmod(0o755)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "ldconfig").write_text("#!/bin/sh\necho 'libusb-1.0.so.0 (libc6,x86-64) => /lib/libusb-1.0.so.0'\n")
    (tools / "ldconfig").chmod(0o755)
    env = dict(os.environ, VENV=str(venv), TMPDIR=str(tmp_path), PATH=f"{tools}:{os.environ['PATH']}",
               INSTALL_HEARTBEAT_S=str(HEARTBEAT_S), INSTALL_POLL_S=str(POLL_S), FAKE_SILENCE_S=str(SILENCE_S))
    return venv, env


def _install(env, **extra):
    """Run install.sh; returns (exit status, [(seconds since start, stdout line)], stderr)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(["bash", str(REPO / "scripts/install.sh")], env=dict(env, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = [(time.monotonic() - t0, line.rstrip("\n")) for line in proc.stdout]
    stderr = proc.stderr.read()
    return proc.wait(timeout=60), lines, stderr


def test_install_prints_a_line_at_least_every_heartbeat_and_its_total_time(fake_env):
    venv, env = fake_env
    rc, lines, stderr = _install(env)
    assert rc == 0, stderr
    text = [t for _, t in lines]
    stamps = [0.0] + [s for s, _ in lines]
    # SECONDS counts whole seconds, and silence is checked every POLL_S: the bound of a gap.
    assert max(b - a for a, b in zip(stamps, stamps[1:])) < HEARTBEAT_S + 1 + POLL_S + 0.5, lines
    assert any("... installing the package" in t for t in text) and any("... compiling" in t for t in text)
    steps = [t for t in text if re.match(r"\[\d/\d\] ", t)]
    assert [s[:5] for s in steps] == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"]
    assert "      numpy>=1.24" in text and "      open3d>=0.18" in text      # one line per package
    assert "      unpacking 2 packages into the venv" in text and "      installed 2 packages" in text
    assert "      [1/2] raster_cpu.cpp" in text                               # one line per compiled file
    assert not any("Downloading" in t or "-MMD" in t for t in text)           # the rest goes to the log
    log = (venv / "install.log").read_text()
    assert "Downloading numpy" in log and "-MMD" in log
    last = text[-1]
    assert last.startswith("install.sh: installed sphere-slam 0.1.0, torch 2.13.0 (extras: viewer) "
                           f"into {venv} in ")
    assert re.search(r" in \d+ s; CPU kernels built in /fake/kernel/cache; full output: ", last)
    assert text[-2].startswith("install.sh: step times: [1] ") and "[4] " in text[-2]


def test_a_failed_pip_step_fails_the_install(fake_env):
    venv, env = fake_env
    rc, lines, stderr = _install(env, FAKE_PIP_FAIL="1")
    text = [t for _, t in lines]
    assert rc != 0
    assert "      ERROR: No matching distribution found for open3d>=0.18" in text   # pip's error shown
    assert "install.sh: failed (installing the package" in stderr and "No matching distribution" in stderr
    assert not any(t.startswith("[4/4]") or t.startswith("install.sh: installed") for t in text)


def test_a_failed_kernel_build_only_warns(fake_env):
    venv, env = fake_env
    rc, lines, stderr = _install(env, FAKE_KERNEL_FAIL="1")
    assert rc == 0
    assert "warning: the rasterizer kernels did not build" in stderr
    assert "CPU kernels NOT built" in lines[-1][1]


def test_ci_runs_the_readme_test_command_with_the_lint():
    """.ci/run's command is the README's test command, character for character, and it lints
    (ruff, from the test extra) before the tests."""
    command = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert "    " + command in (REPO / "README.md").read_text().splitlines()
    assert command.startswith("bash scripts/install.sh --test ")
    assert " && .venv/bin/python -m ruff check . && " in command
    assert "ruff" in (REPO / "setup.py").read_text().split('"test":', 1)[1].split("]", 1)[0]
