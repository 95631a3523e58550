#!/usr/bin/env bash
# The main job of the README: bootstrap, build, run `attnbench run` on the
# default scenario with every backend this machine supports (the PyTorch peers
# excepted) and, on a machine with a GPU, scenarios/quickstart_gpu.json (the
# CodeAlpaca pack of 4 x 8192 tokens and a dense causal row, Llama-3-8B heads)
# with the GPU backends and the peers, merged into one report; then write
# report.html beside report.json and print the verdict (`attnbench summary`:
# per backend pass / fail / unsupported counts, the fastest passing backend per
# case, where each failure comes from).
#
# Exits 0 when the run completed, even if rows failed the correctness rule:
# the run's own exit code (0 all pass, 1 a row failed or errored, docs/semantics.md
# section 12) is printed on the last line. Bad input (2) or an internal error (3)
# is passed through.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/bootstrap.sh
# shellcheck source=ci/find_cudnn.sh
source ci/find_cudnn.sh   # the same cuDNN for the build and on LD_LIBRARY_PATH for the run
# Build only what the main job runs (the attnbench binary), for the GPU present:
# its own architecture (sm_90a on Hopper) when nvidia-smi sees one, else no CUDA code
# at all (the GPU backends could not run; the verdict lists the CPU backend and the
# peers), in a build folder of its own so that ci/test.sh's full build keeps its
# configuration. BUILD_DIR and extra CMake arguments override.
cc=""
gpu=""
if command -v nvidia-smi >/dev/null 2>&1; then
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .' || true)
fi
if [[ "$cc" =~ ^[0-9]+$ ]]; then
  [[ "$cc" == 90 ]] && cc=90a   # wgmma / setmaxnreg need the arch-specific target
  gpu=1
  export BUILD_DIR=${BUILD_DIR:-build}
  config=(-DATTNBENCH_ENABLE_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$cc")
  echo "quickstart: GPU with compute capability ${cc}: building attnbench for it in $BUILD_DIR"
else
  export BUILD_DIR=${BUILD_DIR:-build-quickstart}
  config=(-DATTNBENCH_ENABLE_CUDA=OFF)
  echo "quickstart: no GPU found: building attnbench without CUDA in $BUILD_DIR"
fi
BUILD_TARGETS=attnbench ci/build.sh "${config[@]}" "$@"
bin="$BUILD_DIR/attnbench"
out=${OUT_DIR:-out/default}

# Chart bundles for report.html (vega, vega-lite, vega-embed) from npm when npm
# exists; without them the report has tables only, and says so.
if [[ ! -f reports/node_modules/vega/build/vega.min.js ]]; then
  if command -v npm >/dev/null 2>&1; then
    # The whole lock file (as ci/install_browser.sh installs it): --omit=dev would
    # prune the test tools (ajv, playwright-core) on a machine that also runs ci/test.sh.
    echo "quickstart: installing the chart bundles (npm ci in reports/)"
    (cd reports && npm ci --no-audit --no-fund --loglevel=error) ||
      echo "quickstart: WARNING: npm ci failed; report.html will have tables only" >&2
  else
    echo "quickstart: npm not found; report.html will have tables only (install node and npm for charts)"
  fi
fi

# run SCENARIO DIR [ARGS...]: attnbench run; exit code 0 or 1 folded into $status,
# anything else (bad input 2, internal error 3, a signal) ends the quick start.
status=0
run() {
  local rc=0
  "$bin" run "$1" --out "$2" "${@:3}" || rc=$?
  if [[ $rc -ne 0 && $rc -ne 1 ]]; then
    echo "quickstart: attnbench run $1 did not complete (exit code $rc)" >&2
    exit $rc
  fi
  ((rc > status)) && status=$rc
  return 0
}
# The GPU backends available here (`attnbench list backends`: device cuda, status available).
gpu_backends=""
if [[ -n "$gpu" ]]; then
  gpu_backends=$("$bin" list backends | awk 'NR > 1 && $2 == "cuda" && $3 == "available" {print $1}' | paste -sd, -)
fi
if [[ -n "$gpu_backends" ]]; then
  # The small cases with every available backend but the PyTorch peers, the real
  # packed workload and a dense row with the GPU backends and the peers (the cpu
  # backend would take minutes there), one report. The peers are left out of the
  # small cases: on an H100 (session 16) they took 83 of the small run's 154 s
  # (torch-flex compiles each shape: 72 s) to compare kernels of ~10 microseconds;
  # they compete on the real workload.
  small_backends=$("$bin" list backends | awk 'NR > 1 && $3 == "available" && $1 !~ /^torch-/ {print $1}' | paste -sd, -)
  run scenarios/default.json "$out/small" --backends "$small_backends"
  run scenarios/quickstart_gpu.json "$out/gpu" --backends "$gpu_backends"
  "$bin" merge "$out/small/report.json" "$out/gpu/report.json" -o "$out/report.json"
else
  run scenarios/default.json "$out"
fi
"$bin" report "$out/report.json" -o "$out/report.html"
echo
"$bin" summary "$out/report.json"
echo
echo "quickstart: report at $out/report.json and $out/report.html"
case $status in
  0) echo "quickstart: attnbench run exit code 0 (every row passed or was unsupported)" ;;
  1) echo "quickstart: attnbench run exit code 1 (a row failed the rule, errored, timed out or crashed: see failures above)" ;;
esac
exit 0
