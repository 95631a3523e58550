#!/usr/bin/env bash
# The Hopper forward's GPU loop: build attnbench and the flash / varlen / flex GPU suites
# for sm_90a, show the HGMMA count and resources of the sm90 kernels, run the
# suites (each case on both forward paths), then time the forward on both paths
# through `attnbench run`. Logs under $OUT (default ./out-sm90).
#
#   tools/sm90_check.sh [test] [bench SCENARIO CASES_RE BACKENDS]... [table SCENARIO CASES_RE BACKENDS]...
#
# bench times the backends with their option fwd_path=sm90 and =sm80; bwdbench with
# atomic dQ (deterministic=false) and bwd_path=sm90 and =sm80 (forward on its default path);
# table once with the default paths (for comparisons with cudnn and the PyTorch peers).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out-sm90}
mkdir -p "$OUT"
BUILD=$ROOT/build-gpu
START=$(date +%s)
log() { printf '[sm90 %4ss] %s\n' "$(( $(date +%s) - START ))" "$*"; }
source "$ROOT/ci/find_cudnn.sh"
if [[ -n "${CUDNN_ROOT:-}" ]]; then export LD_LIBRARY_PATH="$CUDNN_ROOT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  ${CUDNN_ROOT:+-DCUDNN_ROOT=$CUDNN_ROOT} >"$OUT/configure.log" 2>&1 || { tail -n 30 "$OUT/configure.log"; exit 2; }
log "build"
cmake --build "$BUILD" -j "$(nproc)" --target attnbench gpu_test_flash gpu_test_varlen gpu_test_flex gpu_probe_wgmma >"$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head -n 30; exit 2; }
log "build done"
obj=$(find "$BUILD" -name 'attn_hdim128.cu.o' | head -n 1)
cuobjdump -sass "$obj" >"$OUT/hdim128.sass" 2>&1 || true
echo "  SASS of attn_hdim128 (sm_90a): $(grep -c HGMMA "$OUT/hdim128.sass") HGMMA, $(grep -c HMMA "$OUT/hdim128.sass") HMMA instructions"
grep -o "HGMMA\.[A-Z0-9x.]*" "$OUT/hdim128.sass" | sort | uniq -c | head -n 8
status=0
# variants LIST OPTIONS: every backend of the comma-separated LIST as NAME[OPTIONS]
# (backend options, docs/backend-options.md); deterministic=... is dropped for flex,
# which has no such option (its bwd_path=sm90 is the atomic backward).
variants() {
  local out="" b opts
  IFS=, read -ra names <<<"$1"
  for b in "${names[@]}"; do
    opts=$2
    [[ $b == flex ]] && opts=$(sed -E 's/(^|,)deterministic=[a-z]+//; s/^,//' <<<"$opts")
    out+="${out:+,}$b${opts:+[$opts]}"
  done
  echo "$out"
}
# both_paths NAME OPTION SCENARIO CASES_RE BACKENDS [EXTRA]: time the backends with
# OPTION=sm90 and OPTION=sm80 (plus the options EXTRA).
both_paths() {
  local name=$1 opt=$2 scen=$3 cases=$4 backends=$5 extra=${6:-} path
  for path in sm90 sm80; do
    log "$name $scen '$cases' $backends $opt=$path"
    timeout 300 "$BUILD/attnbench" run "$scen" --cases "$cases" --backends "$(variants "$backends" "$extra${extra:+,}$opt=$path")" \
      --check off --no-determinism --max-seconds 0.5 --out "$OUT/${name}_$path" >"$OUT/${name}_$path.log" 2>&1 || status=1
    python3 ci/timing_table.py "$OUT/${name}_$path/report.json" 2>&1 | tail -n 20
  done
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    test)
      "$BUILD/tests/gpu_probe_wgmma" | tail -n 5 || status=1
      for s in flash varlen flex; do
        log "gpu_test_$s"
        timeout 300 "$BUILD/tests/gpu_test_$s" ${TEST_ARGS:-} >"$OUT/test_$s.log" 2>&1 || status=1
        grep -E "test cases|assertions|ERROR|FAILED|error" "$OUT/test_$s.log" | head -n 30
      done
      shift ;;
    bench)
      both_paths bench fwd_path "$2" "$3" "$4"; shift 4 ;;
    bwdbench)  # atomic dQ (deterministic=false for flash and varlen)
      both_paths bwdbench bwd_path "$2" "$3" "$4" deterministic=false
      shift 4 ;;
    table)  # one run with the default forward path, every backend named, checked off
      scen=$2 cases=$3 backends=$4; shift 4
      name=$(basename "$scen" .json)
      log "table $scen '$cases' $backends"
      timeout 400 "$BUILD/attnbench" run "$scen" --cases "$cases" --backends "$backends" --check off \
        --no-determinism --max-seconds 0.3 --out "$OUT/table_$name" >"$OUT/table_$name.log" 2>&1 || status=1
      python3 ci/timing_table.py "$OUT/table_$name/report.json" 2>&1 | grep -v "^|---" | tail -n 40 ;;
    *) echo "unknown step $1" >&2; exit 2 ;;
  esac
done
log "done, status $status"
exit $status
