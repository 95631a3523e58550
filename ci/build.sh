#!/usr/bin/env bash
# Configure and build attnbench into ${BUILD_DIR:-build} (Release) with all cores.
# Extra CMake arguments pass through, e.g. ci/build.sh -DCUDNN_ROOT=/path.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >"${build}.configure.log" 2>&1 || {
  cat "${build}.configure.log"; exit 1; }
grep -E "attnbench:|Found CUDNN|CUDA compiler identification" "${build}.configure.log" || true
cmake --build "$build" -j"$(nproc)"
