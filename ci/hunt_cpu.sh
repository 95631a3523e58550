#!/usr/bin/env bash
# The bounded CPU hunt of CI (docs/hunt.md): `attnbench hunt --backends cpu` for
# HUNT_SECONDS (default 60) with a fixed seed; it must find nothing (exit 0).
#   ci/hunt_cpu.sh [BUILD_DIR]      # default: $BUILD_DIR or build
# Results in $OUT (default BUILD_DIR/hunt-cpu): hunt.json, and corpus/ if it found something.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-${BUILD_DIR:-build}}
OUT=${OUT:-$BUILD/hunt-cpu}
rm -rf "$OUT"
"$BUILD/attnbench" hunt --backends cpu --budget "${HUNT_SECONDS:-60}s" --seed "${HUNT_SEED:-20261127}" --out "$OUT"
