#!/usr/bin/env bash
# `attnbench hunt` on an NVIDIA GPU machine (docs/hunt.md): each own GPU backend
# (flash, varlen, flex, cudnn) and each PyTorch peer hunted on its own for BUDGET
# with the same seed, then the regression corpus tests/data/hunt replayed on the
# own backends. Results under $OUT: <backend>/hunt.json, <backend>/corpus/ (the
# minimal failing problems, their rows and reproduction lines), <backend>.log, and
# summary.md (one table row per backend: counts, failure classes, minimal problems).
#
#   BUDGET=60s ci/hunt_gpu.sh          # a quick pass: about (60 s + shrinking) per backend
#   ci/hunt_gpu.sh                     # 10 minutes per backend
#
# Environment:
#   OUT           where results go (default ./out-hunt)
#   BUDGET        search time per backend: 90, 90s, 10m, 1h (default 10m)
#   SHRINK_TIME   each shrink may run this long past the budget (default 120s)
#   SEED          generator seed (default 1)
#   BACKENDS      space-separated (default: flash varlen flex cudnn and the torch-* peers)
#   MAX_SEQ, MAX_WORK   the generator's size budget (default 1100 and 2097152 =
#                 2^21: B*Hq*Sq*Sk*(Dqk+Dv)/128, so the host's float64 reference
#                 stays under a second or so per problem)
#   CASE_TIMEOUT  an isolated unit running longer is a `timeout` failure (default 120)
#   ISOLATE       on | off | auto (default auto: every in-process GPU unit in a child)
#   BUILD         build folder (default build-gpu; configured and built when it has
#                 no attnbench binary, or with REBUILD=1)
#   GPU_LIST      GPU indices to hunt on at once, e.g. "0 1 2 3": backend i runs on
#                 GPU_LIST[i % n] (CUDA_VISIBLE_DEVICES), all backends concurrently
#                 (default empty: one after another on the default device). On a
#                 four-GPU host the nine default backends then take about one
#                 budget instead of nine.
#
# Exit status: 0 when no hunt found anything, 1 when some backend failed, 2 when
# the build failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out-hunt}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
BUDGET=${BUDGET:-10m}
SHRINK_TIME=${SHRINK_TIME:-120s}
SEED=${SEED:-1}
BACKENDS=${BACKENDS:-"flash varlen flex cudnn torch-sdpa-flash torch-sdpa-cudnn torch-sdpa-efficient torch-flex torch-varlen"}
MAX_SEQ=${MAX_SEQ:-1100}
MAX_WORK=${MAX_WORK:-2097152}
CASE_TIMEOUT=${CASE_TIMEOUT:-120}
ISOLATE=${ISOLATE:-auto}
START=$(date +%s)
log() { printf '[hunt_gpu %5ss] %s\n' "$(( $(date +%s) - START ))" "$*"; }

# seconds of "90", "90s", "10m", "1h"
seconds_of() {
  local v=$1
  case "$v" in
    *h) echo $(( ${v%h} * 3600 )) ;;
    *m) echo $(( ${v%m} * 60 )) ;;
    *s) echo "${v%s}" ;;
    *) echo "$v" ;;
  esac
}

if [[ ! -x "$BUILD/attnbench" || "${REBUILD:-0}" == 1 ]]; then
  # shellcheck source=ci/find_cudnn.sh
  source "$ROOT/ci/find_cudnn.sh"
  cmake_args=(-S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_ARCHITECTURES=${ATTNBENCH_CUDA_ARCHS:-90a}")
  if [[ -n "${CUDNN_ROOT:-}" ]]; then cmake_args+=("-DCUDNN_ROOT=$CUDNN_ROOT"); fi
  log "configure and build attnbench in $BUILD (logs: $OUT/configure.log, $OUT/build.log)"
  cmake "${cmake_args[@]}" >"$OUT/configure.log" 2>&1 || { tail -n 30 "$OUT/configure.log"; exit 2; }
  cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target attnbench >"$OUT/build.log" 2>&1 ||
    { grep -E "error" "$OUT/build.log" | head -n 30; exit 2; }
elif [[ -f "$ROOT/ci/find_cudnn.sh" ]]; then
  # shellcheck source=ci/find_cudnn.sh
  source "$ROOT/ci/find_cudnn.sh" >/dev/null 2>&1 || true  # the same cuDNN at run time
fi
EXE=$BUILD/attnbench
# The outer limit only guards against a hunt that cannot stop: budget, one shrink
# per failure class (a handful), a slow last unit.
LIMIT=$(( $(seconds_of "$BUDGET") + 4 * $(seconds_of "$SHRINK_TIME") + 2 * CASE_TIMEOUT + 60 ))

read -r -a gpus <<<"${GPU_LIST:-}"
status=0
hunt_one() {  # backend, GPU index (empty: the default device)
  local b=$1 gpu=$2
  rm -rf "${OUT:?}/$b"
  if [[ -n "$gpu" ]]; then export CUDA_VISIBLE_DEVICES=$gpu; fi  # in this function's subshell only when backgrounded
  timeout --signal=INT --kill-after=30 "$LIMIT" "$EXE" hunt \
    --backends "$b" --budget "$BUDGET" --seed "$SEED" --shrink-time "$SHRINK_TIME" --max-seq "$MAX_SEQ" \
    --max-work "$MAX_WORK" --case-timeout "$CASE_TIMEOUT" --isolate "$ISOLATE" --out "$OUT/$b" >"$OUT/$b.log" 2>&1
  echo "$?" >"$OUT/$b.rc"
}
i=0
for b in $BACKENDS; do
  if [[ ${#gpus[@]} -gt 0 ]]; then
    g=${gpus[$(( i % ${#gpus[@]} ))]}
    log "hunt $b for $BUDGET on GPU $g (log: $OUT/$b.log)"
    hunt_one "$b" "$g" &
    i=$(( i + 1 ))
  else
    log "hunt $b for $BUDGET (log: $OUT/$b.log)"
    hunt_one "$b" ""
    tail -n 4 "$OUT/$b.log" | sed 's/^/  /'
  fi
done
wait
for b in $BACKENDS; do
  if [[ "$(cat "$OUT/$b.rc" 2>/dev/null)" == 1 ]]; then status=1; fi
done

log "replay tests/data/hunt on the own backends (log: $OUT/replay.log)"
for b in flash varlen flex cudnn; do
  "$EXE" hunt --replay "$ROOT/tests/data/hunt" --backends "$b" --out "$OUT/replay-$b" --isolate "$ISOLATE" \
    >>"$OUT/replay.log" 2>&1 || { [[ $? -eq 1 ]] && status=1; }
done
grep -E "replay:|attnbench hunt:" "$OUT/replay.log" | sed 's/^/  /' || true

# summary.md: one row per backend from its hunt.json.
python3 - "$OUT" "$BUDGET" "$SEED" $BACKENDS >"$OUT/summary.md" <<'PY'
import json, os, sys
out, budget, seed, backends = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
print(f"# attnbench hunt: {budget} per backend, seed {seed}\n")
print("| backend | exit | generated | run | unsupported | passed | failed | failure classes (minimal problem) |")
print("|---|---|---|---|---|---|---|---|")
for b in backends:
    rc = open(os.path.join(out, b + ".rc")).read().strip() if os.path.exists(os.path.join(out, b + ".rc")) else "?"
    path = os.path.join(out, b, "hunt.json")
    if not os.path.exists(path):
        print(f"| {b} | {rc} | | | | | | not run (see {b}.log) |")
        continue
    h = json.load(open(path))
    c = h["counts"]
    found = "; ".join(
        f"{f['class']}: `{os.path.relpath(f['problem_file'], out)}` ({f['shrink']['steps']} steps"
        + ("" if f["shrink"]["complete"] else ", incomplete") + ")"
        for f in h["failures"]) or "none"
    print(f"| {b} | {rc} | {c['generated']} | {c['run']} | {c['unsupported']} | {c['passed']} | {c['failed']} | {found} |")
PY
cat "$OUT/summary.md"
log "done: $OUT/summary.md"
exit $status
