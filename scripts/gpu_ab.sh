#!/usr/bin/env bash
# A kernel change measured against its base on one CUDA machine (the only comparison worth making:
# GPUs of one kind differ by up to ~30 %). Builds the base and this checkout side by side (each
# into its own kernel cache), then takes ROUNDS turns of: the tracker's profile (slam_profile on
# 7-Scenes by default) A then B, with BENCH=1 the fused pass's benchmark A then B, with SYSTEM=1
# a whole run_slam of DATA_DIR A then B; prints slam.tools.ab_compare's tables (medians, spread,
# B / A per frame figure, per kernel, per benchmark row and per run figure).
#   scripts/gpu_ab.sh BASE_DIR DATA_DIR [OUT_DIR]        (DATA_DIR "-": CONFIG's own data)
# BASE_DIR: an export of the base's code, e.g. `git archive <rev> slam rasterizer configs datasets | tar -x -C BASE_DIR`
#   (a copy sent to a GPU machine has no git history). DATA_DIR: 7-Scenes redkitchen frames 0-99
#   at least (SYSTEM=1: the whole sequence). OUT_DIR: default $OUT, else ab_logs/. Options
#   (environment): ROUNDS (2), BENCH (1), SYSTEM (0), PROFILE_ARGS (--map-frames 60 --frames 40),
#   CONFIG (7scenes.yaml), SETS (extra KEY=VALUE words, --set for every profile and run),
#   BENCH_ARGS (--no-cpu), ENV_A / ENV_B (VAR=VALUE words set for every command of side a / b:
#   the same code in two environments, e.g. BASE_DIR an export of this checkout and
#   ENV_B="MALLOC_MMAP_THRESHOLD_=131072"). Run from this checkout; PYTHONPATH may hold other
#   packages (it is prefixed with each tree in turn).
set -uo pipefail
BASE=$(cd "${1:?usage: gpu_ab.sh BASE_DIR DATA_DIR [OUT_DIR]}" && pwd) || exit 2
DATA=${2:?usage: gpu_ab.sh BASE_DIR DATA_DIR [OUT_DIR]}
cd "$(dirname "$0")/.."
NEW=$PWD
LOG=${3:-${OUT:-ab_logs}}
mkdir -p "$LOG"
LOG=$(cd "$LOG" && pwd)
PY=${PYTHON:-python3}
ROUNDS=${ROUNDS:-2}
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16}
[ -d "$BASE/rasterizer" ] && [ -d "$BASE/slam" ] || { echo "$BASE: no slam/ and rasterizer/ (an export of the base's code)"; exit 2; }

# in_tree TREE CACHE CMD...: CMD run from TREE with TREE first on PYTHONPATH and its own kernel cache
in_tree() { local tree=$1 cache=$2; shift 2
  (cd "$tree" && PYTHONPATH="$tree${PYTHONPATH:+:$PYTHONPATH}" SPHERE_RASTER_CACHE=$cache "$@"); }
A_CACHE=/tmp/sphere_raster_cache_ab_base
B_CACHE=${SPHERE_RASTER_CACHE:-/tmp/sphere_raster_cache}

echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
[ -n "${ENV_A:-}${ENV_B:-}" ] && echo "environment: a: ${ENV_A:-(as is)}; b: ${ENV_B:-(as is)}"
start=$(date +%s)
# the kernels of the device the profiles run on (CUDA where present; the CPU kernel: a smoke test)
BUILD="import torch; from rasterizer import _ext; _ext.ops('cuda' if torch.cuda.is_available() else 'cpu')"
in_tree "$BASE" "$A_CACHE" $PY -c "$BUILD" > "$LOG/build_a.txt" 2>&1 &
a_pid=$!
in_tree "$NEW" "$B_CACHE" $PY -c "$BUILD" > "$LOG/build_b.txt" 2>&1 \
  || { echo "B failed to build ($LOG/build_b.txt):"; tail -n 15 "$LOG/build_b.txt"; exit 2; }
wait $a_pid || { echo "A failed to build ($LOG/build_a.txt):"; tail -n 15 "$LOG/build_a.txt"; exit 2; }
echo "builds: $(( $(date +%s) - start )) s"

sets=(--config "${CONFIG:-7scenes.yaml}")
[ "$DATA" = - ] || sets+=(--set "data.path=$(cd "$DATA" && pwd)") || exit 2
for s in ${SETS:-}; do sets+=(--set "$s"); done
# on_side SIDE NAME CMD...: CMD in side a's (the base's) or b's tree, its output in $LOG/NAME.txt
on_side() { local tree=$NEW cache=$B_CACHE name=$2 envs=${ENV_B:-}
  [ "$1" = a ] && tree=$BASE cache=$A_CACHE envs=${ENV_A:-}
  shift 2
  # shellcheck disable=SC2086  # ENV_A / ENV_B: several VAR=VALUE words
  in_tree "$tree" "$cache" env $envs "$@" > "$LOG/$name.txt" 2>&1 \
    || { echo "$name failed ($LOG/$name.txt):"; tail -n 15 "$LOG/$name.txt"; exit 2; }
}
profile() {  # profile SIDE ROUND
  # shellcheck disable=SC2086  # PROFILE_ARGS: several words
  on_side "$1" "profile_$1$2" $PY -m slam.tools.profile_tracking "${sets[@]}" \
    ${PROFILE_ARGS:---map-frames 60 --frames 40} --rows 0 --json "$LOG/profile_$1$2.json"
}
bench() {  # bench SIDE ROUND
  # shellcheck disable=SC2086
  on_side "$1" "bench_$1$2" $PY -m rasterizer.bench.gauss_newton ${BENCH_ARGS:---no-cpu} --json "$LOG/bench_$1$2.json"
}
whole_run() {  # whole_run SIDE ROUND: one run_slam (system.profile_frames 5: its GPU ms a tracked frame)
  rm -rf "$LOG/run_$1$2"
  on_side "$1" "run_$1$2" $PY -m slam.cli "${sets[@]}" --set system.profile_frames=5 --set output.plots=false \
    --out "$LOG/run_$1$2" --quiet
}
for r in $(seq "$ROUNDS"); do
  profile a "$r"; profile b "$r"
  if [ "${BENCH:-1}" = 1 ]; then bench a "$r"; bench b "$r"; fi
  if [ "${SYSTEM:-0}" = 1 ]; then whole_run a "$r"; whole_run b "$r"; fi
  echo "round $r done: $(( $(date +%s) - start )) s"
done

args=(--a "$LOG"/profile_a*.json --b "$LOG"/profile_b*.json)
[ "${BENCH:-1}" = 1 ] && args+=(--bench-a "$LOG"/bench_a*.json --bench-b "$LOG"/bench_b*.json)
[ "${SYSTEM:-0}" = 1 ] && args+=(--runs-a "$LOG"/run_a*/metrics.json --runs-b "$LOG"/run_b*/metrics.json)
PYTHONPATH="$NEW${PYTHONPATH:+:$PYTHONPATH}" $PY -m slam.tools.ab_compare "${args[@]}" | tee "$LOG/ab.md"
