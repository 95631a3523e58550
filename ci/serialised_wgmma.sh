#!/usr/bin/env bash
# ci/serialised_wgmma.sh BUILD_LOG: one line per attnbench kernel whose wgmmas ptxas serialised,
# from the infos (C7510-C7520, printed without -v) that ptxas writes to a build's output: the
# reason and the kernel. Such a kernel loses the overlap of its tensor-core work with everything
# else. Only kernels of namespace attnbench count (tests/gpu/probe_wgmma.cu's probes are not
# timed). Prints nothing when there are none; exits 2 when the log cannot be read.
# Used by ci/build.sh (fails the build) and ci/gpu.sh (counts, fails the run).
set -euo pipefail
log=${1:?usage: ci/serialised_wgmma.sh BUILD_LOG}
[[ -r "$log" ]] || { echo "ci/serialised_wgmma.sh: cannot read $log" >&2; exit 2; }
{ grep "wgmma.mma_async instructions are serialized" "$log" || true; } |
  { grep "_ZN9attnbench" || true; } | sed 's/.*serialized due to //' | sort -u
