#!/usr/bin/env bash
# Profile one forward and one backward of the `flash` backend with Nsight Compute
# (speed of light, occupancy, warp stalls, instruction mix) and write the SASS
# instruction histogram of the forward kernel. Needs build-gpu (ci/fused_gpu.sh).
#   tools/fused_profile.sh SCENARIO CASE_REGEX
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-out-fused}
mkdir -p "$OUT"
scen=$1 cases=$2
for k in attn_fwd attn_bwd_dkdv; do
  timeout 240 ncu --kernel-name "regex:$k" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis build-gpu/attnbench run "$scen" --cases "$cases" --backends flash \
    --check off --max-seconds 0.05 --out "$OUT/ncu_run" >"$OUT/ncu_$k.txt" 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy|Stall|Theoretical Occupancy|Bank|Executed Ipc" "$OUT/ncu_$k.txt" | head -n 30
done
cuobjdump -sass build-gpu/CMakeFiles/attnbench_backends.dir/backends/kernels/attn_hdim128.cu.o 2>/dev/null |
  awk '/Function : /{f = ($0 ~ /attn_fwd_kernelILi128ELb1/)} f' >"$OUT/fwd128.sass"
echo "SASS histogram of the D128 bf16 forward ($(wc -l <"$OUT/fwd128.sass") lines):"
grep -oE '^\s+/\*[0-9a-f]+\*/\s+(@!?U?P[0-9T] )?[A-Z0-9_]+' "$OUT/fwd128.sass" | awk '{print $NF}' | sort | uniq -c | sort -rn | head -n 25
