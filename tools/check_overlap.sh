#!/usr/bin/env bash
# Does --check-overlap rows disturb the timing of the rows that run beside a
# pending check (issue 29 item 2)? On a machine with a GPU:
#   tools/check_overlap.sh [BUILD_DIR] [OUT_DIR] [SCENARIO] [CASES_REGEX]
# (defaults: build, out/check_overlap, scenarios/quickstart_gpu.json (the
# CodeAlpaca pack, 4 x 8192 tokens, and a dense row), every case). Runs the
# scenario with the available in-process GPU backends (peers excluded) three
# times, A-B-A: `--check-overlap off`, `--check-overlap rows`, `--check-overlap
# off` again (EXTRA_ARGS, e.g. "--isolate off", go to every run; BACKENDS
# replaces the backend list), then prints
# each run's wall time and, per row, the fwd / bwd / fwd_bwd medians: the rows
# run's against the mean of the two off runs (the disturbance), beside the two
# off runs' own difference (the noise), and whether the row ran while another
# row's check was pending. Ends with one summary line per pass (median and max
# |rows/off - 1| of the rows that ran beside a check, and the same of the
# noise), whether every verdict matched, and how many references each case
# computed. Reports stay in OUT_DIR. Exits 77 without a GPU backend.
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-out/check_overlap}
SCENARIO=${3:-scenarios/quickstart_gpu.json}
CASES=${4:-}
BIN="$BUILD/attnbench"
cd "$(dirname "$0")/.."
gb=${BACKENDS:-$("$BIN" list backends 2>/dev/null |
                awk 'NR > 1 && $2 == "cuda" && $3 == "available" && $1 !~ /^(torch-|test-)/ {print $1}' | paste -sd, -)}
if [[ -z "$gb" ]]; then
  echo "check_overlap: no GPU backend available here (attnbench list backends): nothing to measure" >&2
  exit 77
fi
echo "check_overlap: $SCENARIO ${CASES:+(cases $CASES) }with $gb ${EXTRA_ARGS:+($EXTRA_ARGS)}"
mkdir -p "$OUT"
run_mode() {  # run_mode NAME MODE: wall seconds on stdout, report in $OUT/NAME
  local name=$1 mode=$2 t0 t1 rc=0
  rm -rf "${OUT:?}/$name"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$BIN" run "$SCENARIO" --backends "$gb" --out "$OUT/$name" --check-overlap "$mode" ${CASES:+--cases "$CASES"} \
    ${EXTRA_ARGS:-} >"$OUT/$name.log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  if [[ $rc -ne 0 && $rc -ne 1 ]]; then
    echo "check_overlap: run $name failed (exit $rc); see $OUT/$name.log" >&2
    exit "$rc"
  fi
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}'
}
w1=$(run_mode off1 off)
w2=$(run_mode rows rows)
w3=$(run_mode off2 off)
echo "wall: off ${w1} s, rows ${w2} s, off again ${w3} s"
python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
runs = {n: {(r["case_id"], r.get("variant") or r["backend"]): r for r in json.load(open(f"{out}/{n}/report.json"))["results"]}
        for n in ("off1", "rows", "off2")}
def med(r, p):
    t = (r.get("timing") or {}).get(p) or {}
    return t.get("median_ms")
def verdict(r):
    c = dict(r.get("check") or {})
    for k in ("reference_ms", "gold_ms", "gold_source"):
        c.pop(k, None)
    return r["status"], c
passes = ("fwd", "bwd", "fwd_bwd")
dist, noise = {p: [] for p in passes}, {p: [] for p in passes}
same, gold = True, {}
print(f'{"case":34} {"backend":14} {"beside":6} ' + " ".join(f'{p + " off/rows/off2 (ms)":>34}' for p in passes))
for key, r in runs["rows"].items():
    a, b = runs["off1"].get(key), runs["off2"].get(key)
    if a is None or b is None:
        continue
    same = same and verdict(a) == verdict(r) == verdict(b)
    co = (r.get("extra") or {}).get("check_overlap") or {}
    gold.setdefault(key[0], 0)
    gold[key[0]] += (r.get("check") or {}).get("gold_source") == "computed"
    # Did this row run while an earlier row's check was pending? (listed in that row's beside)
    ran_beside = any(key[0] + "|" + key[1] in ((o.get("extra") or {}).get("check_overlap") or {}).get("beside", [])
                     for o in runs["rows"].values())
    cells = []
    for p in passes:
        x, y, z = med(a, p), med(r, p), med(b, p)
        if None in (x, y, z):
            cells.append(f'{"-":>34}')
            continue
        base = (x + z) / 2
        if ran_beside:
            dist[p].append(abs(y / base - 1))
            noise[p].append(abs(x / z - 1))
        cells.append(f"{x:10.4f} {y:10.4f} {z:10.4f} {100 * (y / base - 1):+.1f}%")
    print(f'{key[0][:34]:34} {key[1][:14]:14} {"yes" if ran_beside else "no":6} ' + " ".join(cells))
for p in passes:
    if dist[p]:
        print(f"{p}: {len(dist[p])} rows ran beside a pending check: |rows/off - 1| median "
              f"{100 * statistics.median(dist[p]):.2f}% max {100 * max(dist[p]):.2f}%; noise |off/off2 - 1| median "
              f"{100 * statistics.median(noise[p]):.2f}% max {100 * max(noise[p]):.2f}%")
print("verdicts identical in the three runs:", "yes" if same else "NO")
print("references computed per case in the rows run:", gold)
PY
