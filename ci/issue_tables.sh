#!/usr/bin/env bash
# The benchmark tables of the kernel issues on a GPU machine: each step runs one
# scenario with our fused backend, cuDNN and the PyTorch peers the issue names
# (checked: --check ${CHECK:-sample}; a table's speed claims count only from a
# checked run beside its peers), prints the
# timing table (ci/timing_table.py) and copies report.json to $OUT/STEP.json
# (run directories stay under $RUNS, so that $OUT holds few files).
#
#   ci/issue_tables.sh STEP...
#
#   dense        scenarios/dense_sweep.json: flash, cudnn, torch-sdpa-flash, torch-sdpa-cudnn
#   peers-dense  scenarios/peers_h100.json dense rows: the same backends plus flex, torch-flex
#   trace-dense  kernel trace (--kernel-trace) of flash and cudnn on causal S16384
#   packed       scenarios/packed_codealpaca.json: varlen, cudnn, torch-varlen, torch-flex
#   long         scenarios/packed_long_docs.json: the same backends
#   flex-packed  scenarios/packed_codealpaca.json: flex, varlen, torch-flex, cudnn
#   flex-long    scenarios/packed_long_docs.json: flex, varlen, torch-flex
#   trace-packed kernel trace of varlen (direct dQ rows on and off) and cudnn on the packed Llama-3-8B row
#   masks        scenarios/masks.json: flex, flash, cudnn (every case), torch-flex (MASKS_PEER_CASES)
#   window       scenarios/sliding_window.json: flex, flash, cudnn, torch-flex
#   bias         scenarios/flex_bias.json: flex, torch-flex
#   flex-variants scenarios/masks.json: flex at block 128 and 64, with the deterministic Hopper
#                backward (default), dQ by atomics (bwd_path=sm90) and the portable backward,
#                as variants of one run (FLEX_VARIANT_CASES narrows the cases)
#
# A step stopped by STEP_LIMIT leaves report.json (marked interrupted) and its
# journal: RESUME=1 on the same machine continues it with `attnbench run --resume`,
# so that one report holds every case.
#
# Environment: CHECK (--check, default sample), OUT (default ./out-tables), RUNS (default /tmp/attnbench-tables),
# STEP_LIMIT (seconds per attnbench run, default 280), MAX_SECONDS (timing cap per
# row and pass, default 0.3), ISOLATE (--isolate, default off: a child process per
# GPU row cost about 6 s per row on the H100 in session 9, against about 0.2 s for
# the masks rows in process; the backends timed here pass the GPU suites, and a
# crash leaves the journal for --resume), ATTNBENCH_PEER_WORKDIR (default /dev/shm
# when it has 16 GB free), BUILD (default ./build-gpu). Builds attnbench first unless BUILD has it.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out-tables}
RUNS=${RUNS:-/tmp/attnbench-tables}
BUILD=${BUILD:-$ROOT/build-gpu}
LIMIT=${STEP_LIMIT:-280}
MAXS=${MAX_SECONDS:-0.3}
MASKS_PEER_CASES=${MASKS_PEER_CASES:-_nomod$}
mkdir -p "$OUT" "$RUNS"
START=$(date +%s)
log() { printf '[tables %4ss] %s\n' "$(($(date +%s) - START))" "$*"; }
source "$ROOT/ci/find_cudnn.sh"
source "$ROOT/ci/host_env.sh"   # huge pages for the host side of large problems
# The PyTorch peers exchange inputs and outputs as .npy files (about 2.7 GB per
# packed Llama-3-8B row): on a tmpfs with room for them when there is one.
if [[ -z "${ATTNBENCH_PEER_WORKDIR:-}" && -d /dev/shm ]] &&
   (( $(df -Pk /dev/shm | awk 'NR==2{print $4}') > 16 * 1024 * 1024 )); then
  export ATTNBENCH_PEER_WORKDIR=/dev/shm
fi
log "peer work directories under ${ATTNBENCH_PEER_WORKDIR:-the system temp directory}"
if [[ -n "${CUDNN_ROOT:-}" ]]; then export LD_LIBRARY_PATH="$CUDNN_ROOT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
if [[ ! -x "$BUILD/attnbench" ]]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release ${CUDNN_ROOT:+-DCUDNN_ROOT=$CUDNN_ROOT} >"$OUT/configure.log" 2>&1 &&
    cmake --build "$BUILD" -j "$(nproc)" --target attnbench >"$OUT/build.log" 2>&1 || { tail -n 30 "$OUT/build.log"; exit 2; }
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
status=0

# run NAME SCENARIO CASES_RE BACKENDS [attnbench run options...]
run() {
  local name=$1 scen=$2 cases=$3 backends=$4
  shift 4
  log "$name: attnbench run scenarios/$scen.json --cases '$cases' --backends $backends $*"
  local resume=()
  if [[ "${RESUME:-0}" == "1" && -f "$RUNS/$name/journal.jsonl" ]]; then
    resume=(--resume)   # continue a step an earlier call's time limit stopped
  else
    rm -rf "${RUNS:?}/$name"
    : >"$OUT/$name.log"
  fi
  timeout "$LIMIT" "$BUILD/attnbench" run "$ROOT/scenarios/$scen.json" --cases "$cases" --backends "$backends" \
    --check "${CHECK:-sample}" --no-determinism --max-seconds "$MAXS" --isolate "${ISOLATE:-off}" "$@" "${resume[@]}" \
    --out "$RUNS/$name" >>"$OUT/$name.log" 2>&1 || status=1
  if [[ -f "$RUNS/$name/report.json" ]]; then
    cp "$RUNS/$name/report.json" "$OUT/$name.json"
    python3 "$ROOT/ci/timing_table.py" "$OUT/$name.json" | grep -v '^|---'
  else
    echo "  no report.json (see $name.log):"
    tail -n 5 "$OUT/$name.log"
  fi
}

for step in "$@"; do
  case "$step" in
    dense) run dense dense_sweep '.' flash,cudnn,torch-sdpa-flash,torch-sdpa-cudnn ;;
    peers-dense) run peers_dense peers_h100 'dense' flash,flex,cudnn,torch-sdpa-flash,torch-sdpa-cudnn,torch-flex ;;
    trace-dense) run trace_dense peers_h100 'dense-causal-S16384' flash,cudnn --kernel-trace ;;
    packed) run packed packed_codealpaca '.' varlen,cudnn,torch-varlen,torch-flex ;;
    long) run long packed_long_docs '.' varlen,cudnn,torch-varlen,torch-flex ;;
    flex-packed) run flex_packed packed_codealpaca '.' flex,varlen,torch-flex,cudnn ;;
    flex-long) run flex_long packed_long_docs '.' flex,varlen,torch-flex ;;
    trace-packed) run trace_packed packed_codealpaca 'llama3-8b_greedy_fill1_padmax' 'varlen,varlen[dq_direct=off],cudnn' --kernel-trace ;;
    masks)
      run masks masks '.' flex,flash,cudnn
      run masks_peer masks "$MASKS_PEER_CASES" torch-flex ;;
    window) run window sliding_window '.' flex,flash,cudnn,torch-flex ;;
    flex-variants)  # one report: flex's block sizes and dQ modes side by side (backend variants)
      run flex_variants masks "${FLEX_VARIANT_CASES:-.}" \
        'flex,flex[block=64],flex[bwd_path=sm90],flex[bwd_path=sm80],flex[block=64,bwd_path=sm80]' ;;
    bias) run bias flex_bias '.' flex,torch-flex ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
log "done, status $status"
exit $status
