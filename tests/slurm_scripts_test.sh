#!/usr/bin/env bash
# The Slurm scripts' logic without Slurm, run by ctest as `slurm_scripts` on every
# machine: scripts/slurm/shard.sbatch is run as tasks 0..3 by setting
# SLURM_ARRAY_TASK_ID, then scripts/slurm/merge.sbatch (1) with one shard's report
# removed must exit 1, name that shard in summary.txt and still merge the other
# shards' rows; (2) with every shard must exit 0 with exactly the (case, backend,
# status) rows of an unsharded run, and write report.html and summary.txt.
# Usage: tests/slurm_scripts_test.sh ATTNBENCH_BINARY
set -euo pipefail
bin=$(cd "$(dirname "${1:?usage: tests/slurm_scripts_test.sh ATTNBENCH_BINARY}")" && pwd)/$(basename "$1")
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/attnbench_slurm_scripts.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "slurm_scripts: FAIL: $*"; exit 1; }

cat >"$tmp/scenario.json" <<'JSON'
{"name": "slurm-scripts-test", "description": "five tiny cpu cases",
 "base": {"batch": 1, "heads_q": 2, "heads_kv": 1, "head_dim": 16, "seq": 40, "dtype": "bf16"},
 "axes": {"mask": [[], [{"kind": "causal"}], [{"kind": "sliding_window", "left": 8, "right": 0}],
                   [{"kind": "prefix_lm", "prefix_len": 9}], [{"kind": "causal", "align": "top_left"}]]}}
JSON
args=(--backends cpu --no-timing)
"$bin" run "$tmp/scenario.json" "${args[@]}" --out "$tmp/unsharded" >"$tmp/unsharded.log" 2>&1 ||
  { cat "$tmp/unsharded.log"; fail "unsharded run"; }
for i in 0 1 2 3; do
  SLURM_ARRAY_TASK_ID=$i bash "$src/scripts/slurm/shard.sbatch" "$bin" "$tmp/scenario.json" 4 "$tmp/sweep" "${args[@]}" \
    >"$tmp/shard-$i.log" 2>&1 || { cat "$tmp/shard-$i.log"; fail "shard $i exited $?"; }
  [[ $(cat "$tmp/sweep/shard-$i/exit_code") == 0 ]] || fail "shard $i recorded exit code $(cat "$tmp/sweep/shard-$i/exit_code")"
done

rows() {
  python3 -c 'import json,sys; [print(r["case_id"], r["backend"], r["status"]) for r in json.load(open(sys.argv[1]))["results"]]' "$1" | sort
}

# (1) shard 2 lost its report: exit 1, named, the rest merged.
cp -r "$tmp/sweep" "$tmp/partial"
rm "$tmp/partial/shard-2/report.json"
status=0
bash "$src/scripts/slurm/merge.sbatch" "$bin" 4 "$tmp/partial" >"$tmp/partial.log" 2>&1 || status=$?
[[ $status == 1 ]] || { cat "$tmp/partial.log"; fail "merge with a missing shard exited $status, expected 1"; }
grep -q "shards without a report: 2" "$tmp/partial/summary.txt" || fail "summary.txt does not name the missing shard 2"
want_partial=$( (rows "$tmp/sweep/shard-0/report.json"; rows "$tmp/sweep/shard-1/report.json"; rows "$tmp/sweep/shard-3/report.json") | sort)
[[ $(rows "$tmp/partial/report.json") == "$want_partial" ]] || fail "partial merge does not hold exactly shards 0, 1 and 3"

# (2) every shard: exit 0, the unsharded rows.
bash "$src/scripts/slurm/merge.sbatch" "$bin" 4 "$tmp/sweep" >"$tmp/merge.log" 2>&1 || { cat "$tmp/merge.log"; fail "merge exited $?"; }
for f in report.json report.html summary.txt; do [[ -s $tmp/sweep/$f ]] || fail "no $f"; done
want=$(rows "$tmp/unsharded/report.json")
[[ $(rows "$tmp/sweep/report.json") == "$want" ]] || { echo "want: $want"; echo "got: $(rows "$tmp/sweep/report.json")"; fail "merged rows differ"; }
[[ $(echo "$want" | grep -c " cpu pass$") == 5 ]] || fail "expected 5 passing rows, got: $want"
grep -q "failures: none" "$tmp/sweep/summary.txt" || fail "summary.txt has no verdict"
# (3) submit.sh refuses (exit 2, before any sbatch) an OUT_DIR Slurm would read as a
# pattern and a log folder it cannot create; a failing sbatch fails it.
mkdir -p "$tmp/fakebin"
printf '#!/bin/sh\necho "sbatch: error: refused" >&2\nexit 1\n' >"$tmp/fakebin/sbatch"
chmod +x "$tmp/fakebin/sbatch"
submit() { PATH="$tmp/fakebin:$PATH" ATTNBENCH_BIN="$bin" bash "$src/scripts/slurm/submit.sh" "$tmp/scenario.json" 2 "$1" >"$tmp/submit.log" 2>&1; }
for bad in "$tmp/out%j" "$tmp/out\\x"; do
  status=0; submit "$bad" || status=$?
  [[ $status == 2 ]] || { cat "$tmp/submit.log"; fail "submit.sh with OUT_DIR $bad exited $status, expected 2"; }
  grep -q "file-name pattern" "$tmp/submit.log" || fail "submit.sh does not say why it refused $bad"
done
mkdir -p "$tmp/blocked" && : >"$tmp/blocked/logs"
status=0; submit "$tmp/blocked" || status=$?
[[ $status == 2 ]] || { cat "$tmp/submit.log"; fail "submit.sh with an unwritable log folder exited $status, expected 2"; }
status=0; submit "$tmp/ok" || status=$?
[[ $status != 0 ]] || fail "submit.sh exited 0 although sbatch failed"
echo "slurm_scripts: OK: 4 shards via shard.sbatch, merge.sbatch names a missing shard (exit 1) and otherwise equals the unsharded run; submit.sh refuses pattern OUT_DIRs and unwritable logs"
