#!/usr/bin/env bash
# One-command install into ./.venv (or $VENV): system library, torch first, then the package.
#   bash scripts/install.sh          # the package with its live viewer (extra "viewer": rerun-sdk)
#   bash scripts/install.sh --test   # the package plus test tools
#   NO_VIEWER=1 bash scripts/install.sh   # without rerun-sdk (a Jetson whose torch needs NumPy 1, docs/JETSON.md)
#   bash scripts/install.sh --test --ros1   # ... plus Debian's ROS 1 for the ROS integration test
#   bash scripts/install.sh --ros2          # ... plus ROS 2 Jazzy's Python client (rclpy + messages,
#                                           #     wheels from PyPI, CPython 3.11 x86-64 only) for the ROS 2 test
#   bash scripts/install.sh --browser       # ... plus Debian's Chromium + ChromeDriver (live web viewer test)
# torch is installed before the package so that pip never pulls a multi-GB CUDA build on a
# CPU machine. On a Jetson, install NVIDIA's torch wheel for your JetPack into the venv first
# (see README): an existing torch is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
EXTRAS="viewer"          # the rerun live view (optional in setup.py: not installable with NumPy 1)
if [ "${NO_VIEWER:-0}" = 1 ]; then EXTRAS=""; fi
ROS1=0
ROS2=0
BROWSER=0
for arg in "$@"; do
  case "$arg" in
    --test) EXTRAS="${EXTRAS:+$EXTRAS,}test" ;;
    --ros1) ROS1=1 ;;
    --ros2) ROS2=1 ;;
    --browser) BROWSER=1 ;;
    *) echo "install.sh: unknown option $arg (use --test, --ros1, --ros2, --browser)" >&2; exit 2 ;;
  esac
done

# open3d's and pyrealsense2's x86-64 wheels need libusb-1.0 at import time; Debian/Ubuntu images often lack it.
# (grep without -q: an early grep exit would SIGPIPE ldconfig and fail the pipeline under pipefail)
if ! ldconfig -p 2>/dev/null | grep libusb-1.0 >/dev/null; then
  if command -v apt-get >/dev/null; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    echo "installing libusb-1.0-0 (needed by open3d and pyrealsense2)"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq libusb-1.0-0 >/dev/null
  else
    echo "warning: libusb-1.0 not found; open3d (sample generation, mesh export) may fail to import" >&2
  fi
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
fi
"$VENV/bin/python" -m pip install -q ".${EXTRAS:+[$EXTRAS]}"
if [ "$ROS1" = 1 ]; then
  bash scripts/install_ros1.sh
fi
if [ "$ROS2" = 1 ]; then
  VENV="$VENV" bash scripts/install_ros2.sh
fi
if [ "$BROWSER" = 1 ]; then
  bash scripts/install_browser.sh
fi
# Build the installed package's rasterizer kernels now (CUDA where torch sees a GPU, else CPU),
# into the user's kernel cache, so that the first run does not spend its first minute or two
# compiling. Run from outside the checkout so that the installed package is the one built.
# SKIP_KERNEL_BUILD=1 leaves it to the first use.
if [ "${SKIP_KERNEL_BUILD:-0}" != 1 ]; then
  VENV_PY="$(cd "$VENV" && pwd)/bin/python"
  (cd / && "$VENV_PY" -c "import torch
from rasterizer import _build
_build.load_jit('cuda' if torch.cuda.is_available() else 'cpu')") \
    || echo "warning: the rasterizer kernels did not build (above); the first run will try again" >&2
fi
echo "installed into $VENV ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
