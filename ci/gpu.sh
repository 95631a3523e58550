#!/usr/bin/env bash
# GPU CI for attnbench: build, run the GPU and CPU test suites and the GPU smoke
# scenario on a machine with an NVIDIA GPU. Meant to finish in under 10 minutes
# on an H100 host from a clean tree.
#
#   ci/gpu.sh            # logs and reports under $OUT (default ./out-gpu)
#
# Environment:
#   OUT                   where logs and reports go (default ./out-gpu)
#   CUDNN_ROOT            a cuDNN tree (include/ + lib/) to use instead of the search below
#   ATTNBENCH_CUDA_ARCHS  CMAKE_CUDA_ARCHITECTURES (default: the GPU's own, e.g. 90a on
#                         Hopper; "90a;80" is the project default for release builds)
#   JOBS                  build parallelism (default: nproc)
#   GPU_TEST_LIMIT, CPU_TEST_LIMIT, SMOKE_LIMIT
#                         wall-clock caps in seconds for the three run steps
#                         (default 240, 180, 120) so that a hang cannot eat the budget
#   SANITIZE=0            skip the compute-sanitizer step (its result says "skipped")
#   BUILD_ONLY=1          configure and build build-gpu, report the build (warnings,
#                         spills, serialised wgmmas) and stop: for machines that cap one
#                         command's time, where a second `ci/gpu.sh` then finds the
#                         build done and runs everything else
#
# cuDNN choice: ci/find_cudnn.sh (the PyTorch wheel's cuDNN when present, else the
# newest one found; the system cuDNN 9.14 with known SDPA bugs is the last resort).
#
# Exit status: 0 when everything passed, 1 when a test or the smoke run failed,
# 2 when configuring or building failed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out-gpu}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD=$ROOT/build-gpu
JOBS=${JOBS:-$(nproc)}
GPU_TEST_LIMIT=${GPU_TEST_LIMIT:-240}
CPU_TEST_LIMIT=${CPU_TEST_LIMIT:-180}
SMOKE_LIMIT=${SMOKE_LIMIT:-120}
START=$(date +%s)

log() { printf '[gpu.sh %4ss] %s\n' "$(( $(date +%s) - START ))" "$*"; }

# ---------------------------------------------------------------- the device
log "nvidia-smi"
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu.sh: nvidia-smi not found: this script needs a machine with an NVIDIA GPU" >&2
  exit 2
fi
nvidia-smi | tee "$OUT/nvidia-smi.txt"
GPU_LINE=$(nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu \
           --format=csv,noheader | head -n 1)
GPU_CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
if [[ -z "${ATTNBENCH_CUDA_ARCHS:-}" ]]; then
  case "$GPU_CC" in
    90) ATTNBENCH_CUDA_ARCHS="90a" ;;   # wgmma / setmaxnreg need the arch-specific target
    "") ATTNBENCH_CUDA_ARCHS="90a;80" ;;
    *)  ATTNBENCH_CUDA_ARCHS="$GPU_CC" ;;
  esac
fi
log "GPU: $GPU_LINE (compute capability $GPU_CC, building for $ATTNBENCH_CUDA_ARCHS)"

# ---------------------------------------------------------------- cuDNN
# shellcheck source=ci/find_cudnn.sh
source "$ROOT/ci/find_cudnn.sh"   # sets CUDNN_ROOT / CUDNN_LIBDIR, extends LD_LIBRARY_PATH

# ---------------------------------------------------------------- build
log "configure -> $BUILD (log: $OUT/configure.log)"
cmake_args=(-S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_ARCHITECTURES=$ATTNBENCH_CUDA_ARCHS")
if [[ -n "${CUDNN_ROOT:-}" ]]; then cmake_args+=("-DCUDNN_ROOT=$CUDNN_ROOT"); fi
if ! cmake "${cmake_args[@]}" >"$OUT/configure.log" 2>&1; then
  tail -n 40 "$OUT/configure.log"
  echo "gpu.sh: configure failed (full log: $OUT/configure.log)" >&2
  exit 2
fi
grep -E "CUDNN|CUDA|attnbench" "$OUT/configure.log" | sed 's/^/  /' || true

log "build with -j$JOBS (log: $OUT/build.log)"
BUILD_FAILED=0
if ! cmake --build "$BUILD" -j "$JOBS" -- -k >"$OUT/build.log" 2>&1; then
  BUILD_FAILED=1
  grep -E "error" "$OUT/build.log" | head -n 40 || true
  echo "gpu.sh: some targets failed to build (full log: $OUT/build.log); running what did build" >&2
  if [[ ! -x "$BUILD/attnbench" ]]; then exit 2; fi
fi
WARNINGS=$(grep -c "warning" "$OUT/build.log" || true)
SPILLS=$(grep -c "Registers are spilled" "$OUT/build.log" || true)  # ptxas -warn-spills
# attnbench kernels whose wgmmas ptxas serialised (as ci/build.sh): listed, and the run fails
SERIALISED_LIST=$("$ROOT/ci/serialised_wgmma.sh" "$OUT/build.log")
SERIALISED=0
if [[ -n "$SERIALISED_LIST" ]]; then
  SERIALISED=$(wc -l <<<"$SERIALISED_LIST")
  sed 's/^/  /' <<<"$SERIALISED_LIST"
  BUILD_FAILED=1
fi
log "build done ($WARNINGS warning lines, $SPILLS kernels reporting spills, $SERIALISED with serialised wgmmas)"
if [[ "${BUILD_ONLY:-0}" == 1 ]]; then
  log "BUILD_ONLY=1: stopping after the build (result: $([[ $BUILD_FAILED -eq 0 ]] && echo PASS || echo FAIL))"
  exit "$BUILD_FAILED"
fi

# ---------------------------------------------------------------- versions loaded
{
  echo "# ldd build-gpu/attnbench (cuDNN / cuBLAS / CUDA runtime)"
  ldd "$BUILD/attnbench" | grep -Ei "cudnn|cublas|cudart" || echo "(no dynamic cuDNN/cuBLAS: static or not linked)"
} | tee "$OUT/libraries.txt"
CUDNN_LOADED="not linked"
if [[ -n "$CUDNN_LIBDIR" ]]; then
  # Ask the library itself: the version the dynamic loader resolves at run time.
  probe=$OUT/cudnn_version_probe
  if printf '#include <cstdio>\n#include <cstddef>\nextern "C" size_t cudnnGetVersion(void);\nint main(){std::printf("%%zu\\n", cudnnGetVersion());}\n' |
       g++ -x c++ - -o "$probe" -L"$CUDNN_LIBDIR" -l:libcudnn.so.9 -Wl,-rpath,"$CUDNN_LIBDIR" 2>"$OUT/cudnn_probe.log"; then
    raw=$("$probe" 2>>"$OUT/cudnn_probe.log" || true)
    if [[ "$raw" =~ ^[0-9]+$ ]]; then
      CUDNN_LOADED="$((raw / 10000)).$(((raw % 10000) / 100)).$((raw % 100)) ($(ldd "$probe" | awk '/libcudnn.so/{print $3}'))"
    fi
  fi
  log "cuDNN loaded at run time: $CUDNN_LOADED" | tee -a "$OUT/libraries.txt"
fi

# ---------------------------------------------------------------- tests
status=$BUILD_FAILED
log "GPU tests: ctest -L gpu (log: $OUT/ctest_gpu.log)"
if ! timeout "$GPU_TEST_LIMIT" ctest --test-dir "$BUILD" -L gpu -j 3 --output-on-failure >"$OUT/ctest_gpu.log" 2>&1; then
  status=1
fi
GPU_SUMMARY=$(grep -E "tests passed|tests failed" "$OUT/ctest_gpu.log" | tail -n 1 || true)
if [[ -z "$GPU_SUMMARY" ]]; then GPU_SUMMARY="no summary: killed after ${GPU_TEST_LIMIT}s?"; fi
grep -E "^\s*[0-9]+/[0-9]+ Test|tests passed|tests failed|Skipped|SKIPPED" "$OUT/ctest_gpu.log" || true
if [[ $status -ne 0 ]]; then tail -n 60 "$OUT/ctest_gpu.log"; fi

# compute-sanitizer memcheck and racecheck on small cases of attnbench's fused
# kernels (flash, varlen, flex), through ci/fused_gpu.sh (the build above is reused).
SANITIZE_STATUS="not run"
if [[ "${SANITIZE:-1}" == "0" ]]; then
  SANITIZE_STATUS="skipped (SANITIZE=0)"
  log "sanitizer: skipped (SANITIZE=0)"
elif command -v compute-sanitizer >/dev/null 2>&1; then
  log "sanitizer: ci/fused_gpu.sh sanitize (log: $OUT/sanitize.log)"
  if timeout "${SANITIZE_LIMIT:-360}" env OUT="$OUT/sanitize" JOBS="$JOBS" ATTNBENCH_CUDA_ARCHS="$ATTNBENCH_CUDA_ARCHS" \
       "$ROOT/ci/fused_gpu.sh" sanitize >"$OUT/sanitize.log" 2>&1; then
    SANITIZE_STATUS="clean"
  else
    SANITIZE_STATUS="FAILED"
    status=1
  fi
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize.log" || true
else
  SANITIZE_STATUS="compute-sanitizer not found"
fi

log "CPU tests: ctest -L cpu (log: $OUT/ctest_cpu.log)"
# The report-schema and headless-Chromium tests need node, Chromium and the npm
# bundles (ci/install_browser.sh, run by the CPU CI). GPU machines often lack
# them: there those two tests print a loud SKIPPED instead of failing.
if [[ -z "${ATTNBENCH_ALLOW_BROWSER_SKIP:-}" ]] &&
   { ! command -v node >/dev/null 2>&1 || [[ ! -x /usr/bin/chromium ]] || [[ ! -d "$ROOT/reports/node_modules/playwright-core" ]]; }; then
  export ATTNBENCH_ALLOW_BROWSER_SKIP=1
  log "node / Chromium / reports/node_modules missing: the browser tests will report SKIPPED (covered by the CPU CI)"
fi
cpu_status=0
if ! timeout "$CPU_TEST_LIMIT" ctest --test-dir "$BUILD" -L cpu --output-on-failure -j "$JOBS" >"$OUT/ctest_cpu.log" 2>&1; then
  cpu_status=1
  status=1
fi
CPU_SUMMARY=$(grep -E "tests passed|tests failed" "$OUT/ctest_cpu.log" | tail -n 1 || true)
if [[ -z "$CPU_SUMMARY" ]]; then CPU_SUMMARY="no summary: killed after ${CPU_TEST_LIMIT}s?"; fi
if [[ $cpu_status -ne 0 ]]; then grep -E "Failed|\*\*\*|Timeout" "$OUT/ctest_cpu.log" | head -n 20 || true; fi

# ---------------------------------------------------------------- smoke scenario
SMOKE_OUT=$OUT/gpu_smoke
SMOKE_STATUS="not run"
if [[ -f "$ROOT/scenarios/gpu_smoke.json" ]]; then
  # The cpu backend is left out here: it is checked by the CPU tests, and at these
  # sizes its timing alone would take most of the smoke budget.
  log "smoke: attnbench run scenarios/gpu_smoke.json --backends naive,cudnn,flash,varlen,flex (log: $OUT/gpu_smoke.log)"
  smoke_rc=0
  timeout "$SMOKE_LIMIT" "$BUILD/attnbench" run "$ROOT/scenarios/gpu_smoke.json" --backends naive,cudnn,flash,varlen,flex --max-seconds 0.5 --out "$SMOKE_OUT" \
    >"$OUT/gpu_smoke.log" 2>&1 || smoke_rc=$?
  tail -n 25 "$OUT/gpu_smoke.log"
  SMOKE_STATUS="exit $smoke_rc"
  if [[ $smoke_rc -eq 124 ]]; then SMOKE_STATUS="killed after ${SMOKE_LIMIT}s"; fi
  if [[ $smoke_rc -ne 0 ]]; then status=1; fi
else
  SMOKE_STATUS="missing scenarios/gpu_smoke.json"
  status=1
fi

# ---------------------------------------------------------------- summary
{
  echo "==================== attnbench GPU CI summary ===================="
  echo "GPU        : $GPU_LINE"
  echo "CUDA archs : $ATTNBENCH_CUDA_ARCHS"
  echo "cuDNN      : ${CUDNN_ROOT:-none} -> loaded $CUDNN_LOADED"
  echo "build      : $WARNINGS warning lines, $SPILLS kernels with spills, $SERIALISED with serialised wgmmas"
  echo "GPU tests  : ${GPU_SUMMARY:-no summary (see ctest_gpu.log)}"
  echo "sanitizer  : $SANITIZE_STATUS (fused kernels, memcheck + racecheck)"
  echo "CPU tests  : ${CPU_SUMMARY:-no summary (see ctest_cpu.log)}"
  echo "smoke      : $SMOKE_STATUS, report $SMOKE_OUT/report.json"
  echo "logs       : $OUT"
  echo "elapsed    : $(( $(date +%s) - START )) s"
  echo "result     : $([[ $status -eq 0 ]] && echo PASS || echo FAIL)"
} | tee "$OUT/summary.txt"
exit $status
