#!/usr/bin/env bash
# Configure and build attnbench into ${BUILD_DIR:-build} (Release) with all cores.
# Extra CMake arguments pass through, e.g. ci/build.sh -DCUDNN_ROOT=/path;
# BUILD_TARGETS limits the build to some targets.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
# The cuDNN to build against (the newest present; CUDNN_ROOT set by the caller wins).
# shellcheck source=ci/find_cudnn.sh
source ci/find_cudnn.sh
cudnn_args=()
if [[ -n "${CUDNN_ROOT:-}" ]]; then cudnn_args+=("-DCUDNN_ROOT=$CUDNN_ROOT"); fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "${cudnn_args[@]}" "$@" >"${build}.configure.log" 2>&1 || {
  cat "${build}.configure.log"; exit 1; }
grep -E "attnbench:|Found CUDNN|CUDA compiler identification" "${build}.configure.log" || true
# BUILD_TARGETS (space-separated) builds only those targets (ci/quickstart.sh: attnbench).
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
# The build's output also goes to ${build}.build.log, where ptxas says when it serialised the
# wgmmas of a Hopper kernel; a build where that happened to one of attnbench's kernels fails
# here, naming them (ci/serialised_wgmma.sh).
cmake --build "$build" -j"$(nproc)" "${targets[@]}" 2>&1 | tee "${build}.build.log"
serialised=$(ci/serialised_wgmma.sh "${build}.build.log")
if [[ -n "$serialised" ]]; then
  echo "ci/build.sh: ptxas serialised the wgmmas of these kernels (${build}.build.log):" >&2
  sed 's/^/  /' <<<"$serialised" >&2
  exit 1
fi
