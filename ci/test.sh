#!/usr/bin/env bash
# The test command of the README: bootstrap, build, run every test through ctest.
# GPU suites report "Skipped" (exit 77, with the reason printed) on machines
# without a CUDA device, and the Slurm test (slurm_sweep) where slurm-wlm and
# munge cannot be installed; everything else runs everywhere, including the
# plugin SDK test (sdk_install: install, out-of-tree example plugin, its run).
# Then ci/fuzz.sh (bounded libFuzzer runs) when clang has libFuzzer.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/bootstrap.sh
[[ -x ci/install_browser.sh ]] && ci/install_browser.sh
ci/install_slurm.sh
ci/install_postgres.sh
ci/build.sh "$@"
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j"$(nproc)")
# A bounded differential hunt of the cpu backend against the reference (docs/hunt.md):
# it must find nothing. ATTNBENCH_NO_HUNT=1 skips it; HUNT_SECONDS sets its time (default 60).
if [[ "${ATTNBENCH_NO_HUNT:-0}" != 1 ]]; then
  ci/hunt_cpu.sh "${BUILD_DIR:-build}"
fi
# Bounded fuzzing of every input parser when clang's libFuzzer is installed (it
# says so and passes when not); ATTNBENCH_NO_FUZZ=1 skips it, FUZZ_SECONDS sets
# the time per target (default 30: four targets, about 2 minutes plus the build).
if [[ "${ATTNBENCH_NO_FUZZ:-0}" != 1 ]]; then
  FUZZ_SECONDS="${FUZZ_SECONDS:-30}" ci/fuzz.sh
fi
