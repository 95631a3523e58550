#!/usr/bin/env bash
# Profile one launch of a fused kernel with Nsight Compute: speed of light, warp
# states and per-SASS-instruction source counters, then summarise where its warps
# wait (tools/ncu_source_summary.py: stall reasons, instructions per warp and
# step, sample share by code region, top stall sites). Run on the GPU host.
#   tools/fused_profile.sh SCENARIO CASE_REGEX [BACKEND] [KERNEL_REGEX]
# BACKEND defaults to flash, KERNEL_REGEX to attn_fwd_sm90 (the Hopper forward;
# attn_bwd_sm90 is the Hopper dK/dV kernel, attn_dq_sm90 the deterministic dQ one).
# Environment: BUILD (default build-gpu, from ci/fused_gpu.sh; any sm_90a build
# works), OUT (default out-fused). Writes $OUT/ncu_<name>.ncu-rep, the details page
# ($OUT/ncu_<name>_details.txt), the source page ($OUT/ncu_<name>_sass.csv.gz)
# and prints the summary. Method: docs/results/2026-11-29-h200-session26.md.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-out-fused}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
if [[ $# -lt 2 ]]; then
  sed -n 2,12p "$0" >&2
  exit 2
fi
scen=$1 cases=$2 backend=${3:-flash} kernel=${4:-attn_fwd_sm90}
name=$(basename "$scen" .json)-$backend-$kernel
timeout 300 ncu --kernel-name "regex:$kernel" --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SourceCounters --import-source no \
  -f -o "$OUT/ncu_$name" "$BUILD/attnbench" run "$scen" --cases "$cases" --backends "$backend" \
  --check off --max-seconds 0.05 --isolate off --out "$OUT/ncu_run_$name" >"$OUT/ncu_$name.log" 2>&1
rc=$?
if [[ $rc -ne 0 || ! -f "$OUT/ncu_$name.ncu-rep" ]]; then
  echo "fused_profile: ncu exited $rc (log: $OUT/ncu_$name.log)" >&2
  tail -n 20 "$OUT/ncu_$name.log" >&2
  exit 1
fi
ncu --import "$OUT/ncu_$name.ncu-rep" --page details >"$OUT/ncu_${name}_details.txt"
ncu --import "$OUT/ncu_$name.ncu-rep" --page source --csv --print-source sass | gzip -9 >"$OUT/ncu_${name}_sass.csv.gz"
grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued" \
  "$OUT/ncu_${name}_details.txt"
python3 tools/ncu_source_summary.py "$OUT/ncu_${name}_sass.csv.gz"
