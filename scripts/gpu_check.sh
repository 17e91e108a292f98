#!/usr/bin/env bash
# Builds the sphere rasterizer's CUDA extension (for this GPU, and once more for sm_87 / Jetson
# Orin to show it compiles there), runs the CUDA tests (render, fused Gauss-Newton pass and device
# LM, the map's Adam, parametrisation and loss, the frame kernels) and
# the benchmarks. Any CUDA machine:
#   scripts/gpu_check.sh [LOG_DIR]        (default: gpu_check_logs/; $OUT when set)
# Needs: python with torch (CUDA build), nvcc, ninja, pytest and the package's own dependencies (checked
# first: a missing one is named and nothing runs); gsplat for the comparisons.
# Options (environment): SKIP_SM87=1 skips the sm_87 build; GSPLAT_WARMUP=1 compiles gsplat's
# kernels (its first call) in the background while ours build; BENCH_ARGS for the render benchmark,
# GN_BENCH_ARGS for the Gauss-Newton one (e.g. --no-cpu). Run from a checkout, PYTHONPATH at the repo
# or the package installed (the benchmarks are python -m rasterizer.bench.*, slam_bench_* when installed).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${1:-${OUT:-gpu_check_logs}}
mkdir -p "$LOG"
PY=${PYTHON:-python3}
export MAX_JOBS=${MAX_JOBS:-16} PYTHONUNBUFFERED=1
export SPHERE_RASTER_CACHE=${SPHERE_RASTER_CACHE:-/tmp/sphere_raster_cache}
status=0

# The package's Python dependencies first (what a run imports up front): a test that imports a
# missing one would fail deep inside and read as a kernel's failure (2026-12-07: test_step_graph.py
# without pytorch_msssim).
if ! missing=$($PY -c "import pytest, slam.cli" 2>&1); then
  echo "gpu_check: the package's dependencies are not all installed (pip install -e . or carry wheels):" | tee "$LOG/env.txt"
  echo "$missing" | tail -n 1 | tee -a "$LOG/env.txt"
  exit 2
fi

{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
} 2>&1 | tee "$LOG/env.txt"

# Orin (sm_87) build in the background, into its own cache, while the native build runs.
sm87_pid=
[ "${SKIP_SM87:-0}" = 1 ] || ( export TORCH_CUDA_ARCH_LIST="8.7" SPHERE_RASTER_CACHE=/tmp/sphere_raster_cache_sm87
  start=$(date +%s)
  $PY -c "from rasterizer import _build; _build.load_jit('cuda')" \
    && echo "sm_87 build OK in $(( $(date +%s) - start )) s" \
    && cuobjdump --list-elf $(find /tmp/sphere_raster_cache_sm87 -name "*.so" -path "*_sphere_raster_cuda*") | grep -c sm_87 \
       | sed 's/^/sm_87 ELF images: /'
) > "$LOG/build_sm87.txt" 2>&1 &
[ "${SKIP_SM87:-0}" = 1 ] || sm87_pid=$!
gsplat_pid=
if [ "${GSPLAT_WARMUP:-0}" = 1 ]; then
  ( start=$(date +%s)
    $PY -c "from gsplat.cuda._backend import _C" && echo "gsplat compiled in $(( $(date +%s) - start )) s"
  ) > "$LOG/gsplat_warmup.txt" 2>&1 &
  gsplat_pid=$!
fi

start=$(date +%s)
$PY -c "import rasterizer, torch; from rasterizer import _ext; _ext.ops('cuda'); print('native build OK')" \
  2>&1 | tee "$LOG/build.txt" || status=1
echo "native build took $(( $(date +%s) - start )) s" | tee -a "$LOG/build.txt"

# One pytest process per file: a file that crashes the process (a fault in a kernel) fails alone and
# the others still run (one process for all hid six files behind a crash on 2026-12-04).
CUDA_TESTS=(tests/test_rasterizer_cuda.py tests/test_rasterizer_ops.py tests/test_gauss_newton_cuda.py
            tests/test_lm_state_cuda.py tests/test_lm_state.py tests/test_adam.py tests/test_activation.py
            tests/test_sphere_map.py tests/test_frame_downsample.py
            tests/test_frame_edge_mask.py tests/test_frame_unroll.py tests/test_frame_unpack.py tests/test_median.py
            tests/test_observation_upload.py tests/test_render_loss.py tests/test_tensor_ops.py tests/test_densify.py
            tests/test_pruner.py
            tests/test_step_graph.py)
: > "$LOG/pytest_cuda.txt"
failed_files=()
for f in "${CUDA_TESTS[@]}"; do
  echo "== $f" | tee -a "$LOG/pytest_cuda.txt"
  $PY -m pytest -q -rs "$f" 2>&1 | tee -a "$LOG/pytest_cuda.txt"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || failed_files+=("$f (exit $rc)")
done
if [ ${#failed_files[@]} = 0 ]; then
  echo "CUDA tests: ${#CUDA_TESTS[@]} files, all passed" | tee -a "$LOG/pytest_cuda.txt"
else
  status=1
  echo "CUDA tests: ${#failed_files[@]} of ${#CUDA_TESTS[@]} files failed: ${failed_files[*]}" | tee -a "$LOG/pytest_cuda.txt"
fi
[ -z "$gsplat_pid" ] || wait $gsplat_pid
[ -z "$sm87_pid" ] || wait $sm87_pid || status=1  # no compiler running during the timings
echo "benchmark starts $(date -u +%T)"
$PY -m rasterizer.bench.render ${BENCH_ARGS:-} 2>&1 | tee "$LOG/bench.txt" || status=1
$PY -m rasterizer.bench.gauss_newton ${GN_BENCH_ARGS:-} 2>&1 | tee "$LOG/bench_gn.txt" || status=1

[ -z "$sm87_pid" ] || cat "$LOG/build_sm87.txt"
exit $status
