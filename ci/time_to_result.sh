#!/usr/bin/env bash
# Issue 29's GPU measurements, in one command on a machine with a GPU:
#   ci/time_to_result.sh [BUILD_DIR] [OUT_DIR]
# 1. scenarios/quickstart_gpu.json (the CodeAlpaca pack and a dense row) with the
#    available GPU backends (peers excluded), twice: default (the check overlaps
#    the timing) and --no-overlap; prints each run's wall time and, per row, the
#    forward / backward medians of both runs side by side (the overlap must not
#    move them beyond noise), where the row's reference came from and what it
#    cost, and the throttle-discarded sample counts;
# 2. two cases of scenarios/gpu_smoke.json timed with --timer events and --timer
#    graph, medians side by side (graph replay takes launch overhead out);
# 3. tests/gpu/test_timer (graph capture, per-sample NVML clocks) when built.
# Reports stay in OUT_DIR (default out/time_to_result). Exits 77 without a GPU backend.
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-out/time_to_result}
BIN="$BUILD/attnbench"
cd "$(dirname "$0")/.."
gb=$("$BIN" list backends 2>/dev/null | awk 'NR > 1 && $2 == "cuda" && $3 == "available" && $1 !~ /^torch-/ {print $1}' |
     paste -sd, -)
if [[ -z "$gb" ]]; then
  echo "time_to_result: no GPU backend available here (attnbench list backends): nothing to measure" >&2
  exit 77
fi
echo "time_to_result: GPU backends $gb"
mkdir -p "$OUT"
timed_run() {  # timed_run NAME SCENARIO ARGS...: wall seconds on stdout, report in $OUT/NAME
  local name=$1 scenario=$2 t0 t1 rc=0
  shift 2
  t0=$(date +%s.%N)
  "$BIN" run "$scenario" --backends "$gb" --out "$OUT/$name" "$@" >"$OUT/$name.log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  if [[ $rc -ne 0 && $rc -ne 1 ]]; then
    echo "time_to_result: run $name failed (exit $rc); see $OUT/$name.log" >&2
    exit "$rc"
  fi
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}'
}
side_by_side() {  # side_by_side A B: per row, both runs' medians and facts
  python3 - "$OUT/$1/report.json" "$OUT/$2/report.json" "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
rows_b = {(r["case_id"], r["backend"]): r for r in b["results"]}
def med(r, p):
    t = (r.get("timing") or {}).get(p) or {}
    return t.get("median_ms")
print(f'{"case":32} {"backend":10} {"status":8} {"fwd " + sys.argv[3]:>16} {"fwd " + sys.argv[4]:>16} {"bwd " + sys.argv[3]:>16} '
      f'{"bwd " + sys.argv[4]:>16}  gold (source/ms)  discarded  timer')
for r in a["results"]:
    o = rows_b.get((r["case_id"], r["backend"]), {})
    c = r.get("check") or {}
    f = (r.get("timing") or {}).get("fwd") or {}
    fmt = lambda x: "-" if x is None else f"{x:.4f}"
    print(f'{r["case_id"][:32]:32} {r["backend"]:10} {r["status"]:8} {fmt(med(r, "fwd")):>16} {fmt(med(o, "fwd")):>16} '
          f'{fmt(med(r, "bwd")):>16} {fmt(med(o, "bwd")):>16}  {c.get("gold_source", "-")}/{round(c.get("gold_ms") or 0)}'
          f'  {f.get("throttle_discarded", "-")}  {f.get("timer", "-")} {f.get("graph_fallback", "")[:50]}')
PY
}
echo "== scenarios/quickstart_gpu.json: overlapped check vs --no-overlap"
w1=$(timed_run overlap scenarios/quickstart_gpu.json)
w2=$(timed_run no_overlap scenarios/quickstart_gpu.json --no-overlap)
echo "wall: ${w1} s with the overlap, ${w2} s without"
side_by_side overlap no_overlap
echo "== scenarios/gpu_smoke.json (2 cases): --timer events vs --timer graph"
timed_run events scenarios/gpu_smoke.json --cases 'dense-bf16-d64|causal-bf16-d128' --check off >/dev/null
timed_run graph scenarios/gpu_smoke.json --cases 'dense-bf16-d64|causal-bf16-d128' --check off --timer graph >/dev/null
side_by_side events graph
if [[ -x "$BUILD/tests/gpu_test_timer" ]]; then
  echo "== tests/gpu/test_timer"
  "$BUILD/tests/gpu_test_timer" | tail -3
fi
