#!/usr/bin/env bash
# The whole-system projection (issue 34) checked on the machine it is made on, any CUDA machine
# (the model's reference figures: the machine the profile names, H200 or H100; REFERENCE=<key of
# slam.tools.jetson_model.MACHINES> for another):
#   1. the 7-Scenes dev run, RUNS times (default 3), one after another: the measured system FPS
#   2. the whole-system profile of the same sequence (slam_profile --mapping-keyframes 10)
#   3. slam_jetson_projection --check: the Jetsons' tables, then the system FPS predicted for this
#      machine against the runs' median and the ratio (exit 1 beyond 15 %)
# Usage: scripts/system_projection_check.sh DATA_DIR [OUT_DIR [extra --set overrides for every run...]]
#   (default OUT_DIR: $OUT, else system_check/); PROFILE_ARGS replaces the profile's frame counts.
# DATA_DIR: 7-Scenes redkitchen frames 0-499. Run from a checkout or an export, PYTHONPATH at it (or
# installed). ~2 min on an H200 once the CUDA kernels are built: a new folder compiles them first
# (step 0, minutes, cached for the next call).
set -uo pipefail
DATA=${1:?usage: system_projection_check.sh DATA_DIR [OUT_DIR [KEY=VALUE ...]]}
LOG=${2:-${OUT:-system_check}}
shift $(( $# < 2 ? $# : 2 ))
RUNS=${RUNS:-3}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16}
mkdir -p "$LOG"
SETS=(--config 7scenes.yaml --set "data.path=$DATA")
for o in "$@"; do SETS+=(--set "$o"); done
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"

start=$(date +%s)
if ! $PY -c "from rasterizer import _ext; _ext.ops('cuda')" > "$LOG/build.txt" 2>&1; then
  echo "CUDA kernels failed to build ($LOG/build.txt):"; tail -n 15 "$LOG/build.txt"; exit 2
fi
echo "kernels: $(( $(date +%s) - start )) s (compiled once per folder)"

metrics=()
for i in $(seq "$RUNS"); do
  start=$(date +%s)
  rm -rf "$LOG/run$i"
  if ! $PY -m slam.cli "${SETS[@]}" --set output.plots=false --out "$LOG/run$i" --quiet > "$LOG/run$i.txt" 2>&1; then
    echo "run $i failed ($LOG/run$i.txt):"; tail -n 15 "$LOG/run$i.txt"; exit 2
  fi
  metrics+=("$LOG/run$i/metrics.json")
  echo "run $i: $(( $(date +%s) - start )) s"
done

start=$(date +%s)
# shellcheck disable=SC2086  # PROFILE_ARGS: several words
if ! $PY -m slam.tools.profile_tracking "${SETS[@]}" ${PROFILE_ARGS:---map-frames 150 --frames 30 --mapping-keyframes 10} \
    --rows 0 --json "$LOG/profile.json" > "$LOG/profile.txt" 2>&1; then
  echo "profile failed ($LOG/profile.txt):"; tail -n 15 "$LOG/profile.txt"; exit 2
fi
echo "profile: $(( $(date +%s) - start )) s"
grep -E "^(tracking|mapping|keyframes|loop step|grid):" "$LOG/profile.txt"
echo
$PY -m slam.tools.jetson_projection "$LOG/profile.json" --reference "${REFERENCE:-auto}" --check "${metrics[@]}" \
  | tee "$LOG/projection.txt"
exit "${PIPESTATUS[0]}"
