#!/usr/bin/env bash
# The main job of the README: bootstrap, build, run `attnbench run` on the
# default scenario with every backend this machine supports, print the report path.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/bootstrap.sh
# shellcheck source=ci/find_cudnn.sh
source ci/find_cudnn.sh   # the same cuDNN for the build and on LD_LIBRARY_PATH for the run
ci/build.sh "$@"
out=${OUT_DIR:-out/default}
status=0
"${BUILD_DIR:-build}/attnbench" run scenarios/default.json --out "$out" || status=$?
echo "quickstart: report at $out/report.json (exit code $status)"
exit $status
