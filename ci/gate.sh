#!/usr/bin/env bash
# The performance and correctness regression gate, as CI uses it:
#
#   ci/gate.sh NEW_REPORT.json [BASELINE.json] [-- extra `attnbench compare` options]
#
# Compares a fresh run (on the GPU runner, e.g. `attnbench run scenarios/smoke.json
# --out out`) against the stored baseline in ci/baselines/ and writes the
# markdown summary to $GATE_SUMMARY (default: gate-summary.md; appended to
# $GITHUB_STEP_SUMMARY when that is set). Exit codes are attnbench compare's:
# 0 nothing regressed, 1 a slowdown beyond the tolerance or a correctness
# failure, 2 bad input (including a baseline from another GPU or driver).
#
# Environment:
#   ATTNBENCH          the attnbench binary (default: build/attnbench)
#   GATE_MAX_SLOWDOWN  tolerated slowdown of the median (default: 5%)
#   GATE_SUMMARY       markdown output file (default: gate-summary.md)
#   GATE_HISTORY_DB    judge NEW against the last accepted runs of this results
#                      history instead of a baseline file (`attnbench compare
#                      --history`, docs/history.md): a SQLite file or postgresql://...
#   GATE_HISTORY_RECORD  with GATE_HISTORY_DB, 1 = then store NEW in the history:
#                      accepted when the gate passed, as a candidate (never a
#                      baseline) when it failed
#
# Refreshing the baseline after an intended change, on the same GPU kind:
#   attnbench run scenarios/smoke.json --out out
#   cp out/report.json ci/baselines/<gpu>-smoke.json   # and commit it
# The files ci/baselines/example-h100*.json are synthetic stand-ins made by
# ci/baselines/make_example.py (they exercise the gate in tests); replace the
# default baseline with a recorded run of the GPU CI uses.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${ATTNBENCH:-$root/build/attnbench}"
new="${1:?usage: ci/gate.sh NEW_REPORT.json [BASELINE.json] [-- compare options]}"
shift
base="$root/ci/baselines/example-h100.json"
if [ $# -gt 0 ] && [ "$1" != "--" ]; then base="$1"; shift; fi
[ "${1:-}" = "--" ] && shift
summary="${GATE_SUMMARY:-gate-summary.md}"

if [ ! -x "$bin" ]; then
  echo "gate: $bin not found or not executable (set ATTNBENCH)" >&2
  exit 2
fi

set +e
if [ -n "${GATE_HISTORY_DB:-}" ]; then
  base="history $GATE_HISTORY_DB"
  "$bin" compare --history "$GATE_HISTORY_DB" "$new" --max-slowdown "${GATE_MAX_SLOWDOWN:-5%}" \
    --markdown "$summary" --quiet "$@"
  rc=$?
  if [ "${GATE_HISTORY_RECORD:-0}" = 1 ] && [ $rc -le 1 ]; then
    if [ $rc -eq 0 ]; then "$bin" history add --db "$GATE_HISTORY_DB" "$new"
    else "$bin" history add --db "$GATE_HISTORY_DB" --candidate "$new"; fi || rc=2
  fi
else
  "$bin" compare "$base" "$new" --max-slowdown "${GATE_MAX_SLOWDOWN:-5%}" \
    --markdown "$summary" --quiet "$@"
  rc=$?
fi
set -e

[ -f "$summary" ] && cat "$summary"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$summary" ]; then cat "$summary" >> "$GITHUB_STEP_SUMMARY"; fi
case $rc in
  0) echo "gate: OK (no regression against $(basename "$base"))" ;;
  1) echo "gate: FAILED: a regression or a correctness failure against $(basename "$base")" >&2 ;;
  *) echo "gate: bad input (exit $rc): see the message above" >&2 ;;
esac
exit $rc
