#!/usr/bin/env bash
# slam_batch on a CUDA machine: two 7-Scenes jobs (pruner on / off, 7scenes.yaml) run concurrently on
# a local Ray cluster, then the same two jobs one after another without Ray (--local); each part
# writes its own output root, so neither reuses the other's runs. Prints both wall times and tables.
#   scripts/batch_gpu_check.sh DATA_DIR OUT_DIR [extra --set overrides for every job...]
# Environment:
#   GPUS_PER_JOB   Ray GPUs per job (default 0.5: the two jobs share one GPU; 1 on a two-GPU
#                  machine: one GPU each; 0: CPU jobs, for a smoke test without a GPU)
#   CPUS_PER_JOB   Ray CPUs per job (default 4), passed to each run as OMP_NUM_THREADS
#   WHEELS         a folder of wheels to install ray from, offline (pip --no-index --find-links);
#                  a wheel split into NAME.whl.part-* pieces (split -b) is joined first
#   PARTS          "concurrent sequential" (default) or one of them
set -uo pipefail
cd "$(dirname "$0")/.."
DATA=${1:?usage: batch_gpu_check.sh DATA_DIR OUT_DIR [key=value ...]}
OUT=${2:?usage: batch_gpu_check.sh DATA_DIR OUT_DIR [key=value ...]}
shift 2
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=${RAY_USAGE_STATS_ENABLED:-0}  # offline: no Ray usage report
export SPHERE_RASTER_CACHE=${SPHERE_RASTER_CACHE:-/tmp/sphere_raster_cache}
mkdir -p "$OUT"
JOBS=(--config 7scenes.yaml --set "data.path=$DATA" --set output.plots=false --grid pruner.enabled=true,false)
for o in "$@"; do JOBS+=(--set "$o"); done
PARTS=${PARTS:-concurrent sequential}

if [ -n "${WHEELS:-}" ] && ! $PY -c "import ray" 2>/dev/null; then
  WH=$(mktemp -d)
  cp "$WHEELS"/*.whl "$WH"/ 2>/dev/null
  for first in "$WHEELS"/*.whl.part-aa; do
    [ -e "$first" ] && cat "${first%.part-aa}".part-* > "$WH/$(basename "${first%.part-aa}")"
  done
  $PY -m pip install -q --no-index --find-links "$WH" ray || echo "!! installing ray from $WHEELS failed"
fi
echo "== $(date -u '+%F %T') $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | paste -sd';')"
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'GPUs', torch.cuda.device_count())"
$PY -c "import ray; print('ray', ray.__version__)" 2>/dev/null || echo "ray: not installed"
# Compile the rasterizer once before timing (two jobs starting together would both wait for one build).
$PY -c "import torch; from rasterizer import _ext; _ext.ops('cuda' if torch.cuda.is_available() else 'cpu')" \
  || { echo "!! rasterizer build failed"; exit 1; }
cat "$DATA"/* > /dev/null 2>&1 || find "$DATA" -type f -exec cat {} + > /dev/null  # same page cache for both parts

status=0
declare -A WALL
for part in $PARTS; do
  case $part in
    concurrent) args=(--gpus-per-job "${GPUS_PER_JOB:-0.5}" --cpus-per-job "${CPUS_PER_JOB:-4}") ;;
    sequential) args=(--local) ;;
    *) echo "unknown part $part"; exit 2 ;;
  esac
  echo "== $part: slam_batch ${JOBS[*]} ${args[*]} --out $OUT/$part"
  start=$(date +%s.%N)
  $PY -m slam.batch.cli "${JOBS[@]}" "${args[@]}" --out "$OUT/$part" --quiet || status=1
  WALL[$part]=$($PY -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
done
echo "== wall time of the whole batch (two jobs; concurrent includes starting and stopping Ray)"
for part in $PARTS; do echo "$part: ${WALL[$part]} s"; done
exit $status
