#!/usr/bin/env bash
# Install Debian's slurm-wlm and munge for the Slurm scale-out test
# (tests/slurm_test.sh, ctest `slurm_sweep`), idempotently. Only the packages are
# installed; the test starts its own private single-node cluster and stops it.
# Where apt-get cannot install them, warns and returns 0: the test then skips
# loudly, saying why.
set -uo pipefail
if command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1; then
  echo "install_slurm: slurm-wlm and munge present"
  exit 0
fi
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
echo "install_slurm: installing slurm-wlm and munge"
if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
         --no-install-recommends slurm-wlm munge >/dev/null; }; then
  echo "install_slurm: WARNING: could not install slurm-wlm and munge; the slurm_sweep test will skip" >&2
fi
exit 0
