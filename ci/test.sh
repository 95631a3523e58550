#!/usr/bin/env bash
# The test command of the README: bootstrap, build, run every test through ctest.
# GPU suites report "Skipped" (exit 77, with the reason printed) on machines
# without a CUDA device; everything that needs no GPU runs everywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/bootstrap.sh
[[ -x ci/install_browser.sh ]] && ci/install_browser.sh
ci/build.sh "$@"
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j"$(nproc)"
