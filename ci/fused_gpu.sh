#!/usr/bin/env bash
# GPU loop for attnbench's fused kernels (backends/kernels/, backends/flash/,
# backends/varlen/): build attnbench and their GPU suites with all cores, run the
# suites, compute-sanitizer memcheck and racecheck on small cases, print the
# kernels' register / spill report, and (optionally) benchmark through
# `attnbench run`. Logs under $OUT. Meant for the GPU machine; ci/gpu.sh runs
# everything.
#
#   ci/fused_gpu.sh [test] [sanitize] [bench SCENARIO [--cases RE]]...
#
# Environment: OUT (default ./out-fused), JOBS (default nproc), BACKENDS for bench
# (default flash,varlen,cudnn), TEST_ARGS (doctest filters for the suites),
# BUILD (default ./build-gpu), PREBUILT=1 (use the binaries in BUILD as they are:
# attnbench and tests/gpu_test_{flash,varlen,flex}, e.g. built elsewhere for sm_90a).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out-fused}
mkdir -p "$OUT"
BUILD=${BUILD:-$ROOT/build-gpu}
JOBS=${JOBS:-$(nproc)}
START=$(date +%s)
log() { printf '[fused_gpu %4ss] %s\n' "$(( $(date +%s) - START ))" "$*"; }
# shellcheck source=ci/find_cudnn.sh
source "$ROOT/ci/find_cudnn.sh"
cmake_args=(-S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_ARCHITECTURES=${ATTNBENCH_CUDA_ARCHS:-90a}")
if [[ -n "${CUDNN_ROOT:-}" ]]; then cmake_args+=("-DCUDNN_ROOT=$CUDNN_ROOT"); fi
if [[ "${PREBUILT:-0}" != 1 ]]; then
  cmake "${cmake_args[@]}" >"$OUT/configure.log" 2>&1 || { tail -n 30 "$OUT/configure.log"; exit 2; }
  log "build (log: $OUT/build.log)"
  if ! cmake --build "$BUILD" -j "$JOBS" --target attnbench gpu_test_flash gpu_test_varlen gpu_test_flex >"$OUT/build.log" 2>&1; then
    grep -E "error" "$OUT/build.log" | head -n 30
    exit 2
  fi
  grep -E "Registers are spilled" "$OUT/build.log" | sed 's/^/  /' || true
  log "build done"
fi
status=0
[[ $# -eq 0 ]] && set -- test sanitize
while [[ $# -gt 0 ]]; do
  case "$1" in
    test)
      for s in flash varlen flex; do
        log "gpu_test_$s (log: $OUT/test_$s.log)"
        if ! timeout 400 "$BUILD/tests/gpu_test_$s" ${TEST_ARGS:-} >"$OUT/test_$s.log" 2>&1; then status=1; fi
        grep -E "test cases|assertions|ERROR|FAILED" "$OUT/test_$s.log" | head -n 40
      done
      shift ;;
    sanitize)
      # memcheck and racecheck run side by side (independent processes on one GPU;
      # sequential they were most of ci/gpu.sh's 10-minute budget).
      sanitize_tool() {
        local tool=$1 rc=0
        timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 9 "$BUILD/tests/gpu_test_flash" \
          -tc="flash: padding*,flash: softcap*,flash: sanitizer-sized*" >"$OUT/sanitize_$tool.log" 2>&1 || rc=1
        timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 9 "$BUILD/tests/gpu_test_varlen" \
          -tc="varlen: document lengths*" >>"$OUT/sanitize_$tool.log" 2>&1 || rc=1
        timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 9 "$BUILD/tests/gpu_test_flex" \
          -tc="flex: sanitizer-sized*" >>"$OUT/sanitize_$tool.log" 2>&1 || rc=1
        return $rc
      }
      log "compute-sanitizer memcheck and racecheck on small cases (logs: $OUT/sanitize_{memcheck,racecheck}.log)"
      sanitize_tool memcheck &
      mem_pid=$!
      sanitize_tool racecheck &
      race_pid=$!
      wait "$mem_pid" || status=1
      wait "$race_pid" || status=1
      for tool in memcheck racecheck; do
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test cases" "$OUT/sanitize_$tool.log" | head -n 8
      done
      shift ;;
    bench)
      scen=$2; shift 2
      extra=()
      while [[ $# -gt 0 && "$1" == --* ]]; do extra+=("$1" "$2"); shift 2; done
      name=$(basename "$scen" .json)
      log "bench $scen ${extra[*]} (report: $OUT/bench_$name)"
      timeout 500 "$BUILD/attnbench" run "$scen" --backends "${BACKENDS:-flash,varlen,cudnn}" --out "$OUT/bench_$name" \
        "${extra[@]}" >"$OUT/bench_$name.log" 2>&1 || status=1
      tail -n 30 "$OUT/bench_$name.log" ;;
    *) echo "unknown step $1" >&2; exit 2 ;;
  esac
done
log "done, status $status"
exit $status
