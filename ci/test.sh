#!/usr/bin/env bash
# The test command of the README: bootstrap, build, run every test through ctest.
# GPU suites report "Skipped" (exit 77, with the reason printed) on machines
# without a CUDA device, and the Slurm test (slurm_sweep) where slurm-wlm and
# munge cannot be installed; everything else runs everywhere, including the
# plugin SDK test (sdk_install: install, out-of-tree example plugin, its run).
set -euo pipefail
cd "$(dirname "$0")/.."
ci/bootstrap.sh
[[ -x ci/install_browser.sh ]] && ci/install_browser.sh
ci/install_slurm.sh
ci/build.sh "$@"
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j"$(nproc)"
