#!/bin/sh
# Per-(case, backend) overhead of `attnbench run --isolate on` against
# `--isolate off`: the same 16 tiny cases on the cpu backend (work per case well
# under a millisecond, so the difference is the child process: posix_spawn, exec,
# loading the binary and its libraries, reading the request, writing the row),
# each mode run REPS times, the fastest wall time of each kept.
#   tools/isolation_overhead.sh [BUILD_DIR] [REPS]
set -eu
BUILD=${1:-build}
REPS=${2:-5}
BIN="$BUILD/attnbench"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat > "$TMP/tiny16.json" <<'JSON'
{"name": "tiny16", "description": "16 tiny cases for the isolation overhead",
 "base": {"batch": 1, "heads_q": 2, "heads_kv": 2, "head_dim": 16, "seq": 32, "dtype": "fp32"},
 "axes": {"seq": [16, 24, 32, 40], "mask": [[], [{"kind": "causal"}], [{"kind": "sliding_window", "left": 4, "right": 0}],
          [{"kind": "causal"}, {"kind": "sliding_window", "left": 8, "right": 0}]]}}
JSON
best() {  # best wall seconds of REPS runs of: attnbench run ... "$@"
  b=""
  i=0
  while [ "$i" -lt "$REPS" ]; do
    t0=$(date +%s.%N)
    "$BIN" run "$TMP/tiny16.json" --backends cpu --out "$TMP/out" "$@" >/dev/null 2>&1
    t1=$(date +%s.%N)
    b=$(echo "$t0 $t1 ${b:-1e9}" | awk '{d = $2 - $1; print (d < $3 ? d : $3)}')
    i=$((i + 1))
  done
  echo "$b"
}
for mode in "--check off --no-timing --no-determinism" "--no-timing --no-determinism"; do
  # shellcheck disable=SC2086
  off=$(best --isolate off $mode)
  # shellcheck disable=SC2086
  on=$(best --isolate on $mode)
  echo "$off $on" | awk -v m="$mode" '{printf "%-40s off %.3f s, on %.3f s: %.1f ms per (case, backend)\n", m, $1, $2, ($2 - $1) * 1000 / 16}'
done
