#!/usr/bin/env bash
# SLAM acceptance runs on a CUDA machine, on 7-Scenes redkitchen frames 0-499:
#   1. pruner ablation at 640x480 (on = the main run; off; on with half the unpruned budget), one
#      slam_batch run after another (--local: no Ray needed)
#   2. the same sequence at half resolution
#   3. map frames 0-249, save, then localise frames 250-499 against the saved map
# Usage: scripts/gpu_slam_check.sh DATA_DIR OUT_DIR [extra --set overrides for every run...]
set -uo pipefail
DATA=${1:?usage: gpu_slam_check.sh DATA_DIR OUT_DIR}
OUT=${2:?usage: gpu_slam_check.sh DATA_DIR OUT_DIR}
shift 2
mkdir -p "$OUT"
SETS=(--set "data.path=$DATA" --set output.plots=false)
for o in "$@"; do SETS+=(--set "$o"); done
PY=${PYTHON:-python3}
echo "== $(date -u +%F) $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null)"
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

echo "== 1. pruner ablation (640x480)"
$PY -m slam.tools.pruner_ablation --config 7scenes.yaml --out "$OUT/ablation" --local "${SETS[@]}"

echo "== 2. half resolution (320x240)"
$PY -m slam.cli --config 7scenes.yaml --out "$OUT/half" --quiet "${SETS[@]}" --set data.downscale=2 --set tracking.downscale=1

echo "== 3. map 0-249, localise 250-499"
$PY -m slam.cli --config 7scenes.yaml --out "$OUT/map_first_half" --quiet "${SETS[@]}" --set data.last=250
$PY -m slam.cli --config 7scenes.yaml --out "$OUT/localise_second_half" --quiet "${SETS[@]}" --set data.first=250 \
    --map "$OUT/map_first_half/map.ply" --mode localize
