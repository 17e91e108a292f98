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

source scripts/install_progress.sh
STEP_TOTAL=4
NEED_LIBUSB=0
# open3d's and pyrealsense2's x86-64 wheels need libusb-1.0 at import time; Debian/Ubuntu images often lack it.
# (grep without -q: an early grep exit would SIGPIPE ldconfig and fail the pipeline under pipefail)
if ! ldconfig -p 2>/dev/null | grep libusb-1.0 >/dev/null; then NEED_LIBUSB=1; STEP_TOTAL=$((STEP_TOTAL + 1)); fi
STEP_TOTAL=$((STEP_TOTAL + ROS1 + ROS2 + BROWSER))
if [ "${SKIP_KERNEL_BUILD:-0}" = 1 ]; then STEP_TOTAL=$((STEP_TOTAL - 1)); fi
# Every command's whole output goes to a log (moved into the venv at the end); pip runs unbuffered
# so that its lines reach the progress display as they happen.
LOG=$(mktemp "${TMPDIR:-/tmp}/sphere-slam-install.XXXXXX")
install_log_start "$LOG"
export PYTHONUNBUFFERED=1
# Expected times: measured on a 2-core x86-64 machine with a fast PyPI mirror
# (docs/benchmarks.md#install-and-test-suite); more cores mostly shorten the kernel build.
echo "install.sh: installing sphere-slam into $VENV (on a 2-core machine 4-8 min: pip, then the kernel build;"\
     "full output: $LOG, then $VENV/install.log)"

if [ "$NEED_LIBUSB" = 1 ]; then
  if command -v apt-get >/dev/null; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    step "system library libusb-1.0-0 (needed by open3d and pyrealsense2)" "about 30 s"
    run_step all "apt-get" bash -c "$SUDO apt-get update -qq && $SUDO apt-get install -y -qq libusb-1.0-0"
    step_done
  else
    STEP_TOTAL=$((STEP_TOTAL - 1))
    echo "warning: libusb-1.0 not found; open3d (sample generation, mesh export) may fail to import" >&2
  fi
fi

step "virtual environment $VENV and an up-to-date pip" "about 15 s"
[ -x "$VENV/bin/python" ] || run_step all "creating the venv" "$PY" -m venv "$VENV"
run_step pip "upgrading pip" "$VENV/bin/python" -m pip install --upgrade pip
step_done

if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  step "torch ${TORCH_VERSION:-2.13.0}, before the package so that a CPU machine never gets the multi-GB CUDA build" \
       "about 1-2 min"
  run_step pip "installing torch" "$VENV/bin/python" -m pip install "torch==${TORCH_VERSION:-2.13.0}"
else
  step "torch: already in $VENV ($("$VENV/bin/python" -c 'import torch; print(torch.__version__)')), kept"
fi
step_done

step "sphere-slam and its dependencies${EXTRAS:+ (extras: $EXTRAS)}" "about 3 min"
run_step pip "installing the package" "$VENV/bin/python" -m pip install ".${EXTRAS:+[$EXTRAS]}"
step_done

if [ "$ROS1" = 1 ]; then
  step "ROS 1 from Debian (about 630 MB)" "a few minutes"
  run_step all "installing ROS 1" bash scripts/install_ros1.sh
  step_done
fi
if [ "$ROS2" = 1 ]; then
  step "ROS 2 Jazzy's Python client (wheels, about 250 MB)" "about 1 min"
  run_step all "installing ROS 2" env VENV="$VENV" bash scripts/install_ros2.sh
  step_done
fi
if [ "$BROWSER" = 1 ]; then
  step "Chromium and ChromeDriver (live web viewer test)" "about 1 min"
  run_step all "installing the browser" bash scripts/install_browser.sh
  step_done
fi
# Build the installed package's rasterizer kernels now (the CPU library, which declares the ops, and
# the CUDA one where torch sees a GPU), into the user's kernel cache, so that the first run does not
# spend minutes compiling. Run from
# outside the checkout so that the installed package is the one built. SKIP_KERNEL_BUILD=1 leaves
# it to the first use. A failed build only warns (the reference backend needs no compiler).
VENV_PY="$(cd "$VENV" && pwd)/bin/python"
KERNELS="not built (SKIP_KERNEL_BUILD=1: the first run builds them)"
if [ "${SKIP_KERNEL_BUILD:-0}" != 1 ]; then
  KIND=$(cd / && "$VENV_PY" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
  if [ "$KIND" = cuda ]; then EXPECT="a few minutes"; else EXPECT="about 1 min on 2 idle cores, up to 3 when they are busy; less with more cores"; fi
  step "compiling the rasterizer's ${KIND^^} kernels (once; the first run then starts at once)" "$EXPECT"
  if (cd / && run_step ninja "compiling" env SPHERE_RASTER_VERBOSE=1 "$VENV_PY" -c "from rasterizer import _build
for kind in dict.fromkeys(('cpu', '$KIND')): _build.load_jit(kind)"); then
    KERNELS="${KIND^^} kernels built in $(cd / && "$VENV_PY" -c "from rasterizer import _build
print(_build.cache_dir(_build.CUDA_NAME if '$KIND' == 'cuda' else _build.CPU_NAME))")"
  else
    KERNELS="${KIND^^} kernels NOT built (see above; the first run will try again)"
    echo "warning: the rasterizer kernels did not build (above); the first run will try again" >&2
  fi
  step_done
fi
mv "$LOG" "$VENV/install.log"
VERSIONS=$(cd / && "$VENV_PY" -c 'import importlib.metadata as m, torch
print("sphere-slam", m.version("sphere-slam") + ", torch", torch.__version__)')
echo "install.sh: step times: $(IFS=,; echo "${STEP_TIMES[*]}" | sed 's/,/, /g')"
echo "install.sh: installed $VERSIONS${EXTRAS:+ (extras: $EXTRAS)} into $(cd "$VENV" && pwd) in" \
     "$(elapsed_text $((SECONDS - INSTALL_START))); $KERNELS; full output: $VENV/install.log"
