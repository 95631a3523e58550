#!/usr/bin/env bash
# The main job on a GPU machine: the peers' workloads with every backend and
# PyTorch peer, reports under $OUT. Builds first unless build-gpu/attnbench exists
# (run ci/gpu.sh before it in the same session to reuse its build).
#
#   ci/bench_gpu.sh [dense|packed|repeat|split|trace|variants|forms|tune|peers|default|all]   (default all = dense + packed)
#
#   dense   the peers file's dense rows (DENSE_CASES) with cudnn, naive and peers
#   packed  packed CodeAlpaca (PACKED_CASES) with cudnn, naive and peers, checked
#   repeat  scenarios/repeatability.json cold and hot; ci/repeatability.py prints
#           the spread of the medians of identical cases timed twice in one run
#   split   cudnn on the packed cases with one cuDNN graph (the default) and with
#           length classes (cudnn[split=true]), timing only
#   trace   kernel traces (--kernel-trace, CUPTI) of cudnn on the peers file's
#           packed cases (default and dQ-accumulator backward) and dense rows
#   variants  tools/flex_variants.py on a kept torch-flex work dir (layout x mask_mod)
#   forms   cudnn backward forms: on the packed cases the default graphs (checked)
#           against dQ through the accumulator, the padded full-head dK/dV of
#           before (both timing only) and length classes; on the dense rows the
#           default against dQ direct (timing only)
#   tune    cudnn[autotune=true] on the packed and dense rows: the
#           engine's knobs, every candidate's time and the chosen plans
#   peers   scenarios/peers_h100.json (the peers file's workloads as it measured
#           them) with cudnn and every PyTorch peer; ci/peers_table.py table
#   default scenarios/default.json with every backend, timed (the quick start's job)
#
# Dense rows run with --check off (the reference for S=16384 is minutes of float64
# work; correctness is covered by the GPU tests and the smoke run); packed rows are
# checked (automatic mode: full or sampled slices).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out-bench}
mkdir -p "$OUT"
BUILD=$ROOT/build-gpu
what=${1:-all}
source "$ROOT/ci/host_env.sh"   # huge pages for the host side of large problems
TORCH_CUDNN=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn
if [[ -d "$TORCH_CUDNN" && -z "${CUDNN_ROOT:-}" ]]; then export CUDNN_ROOT=$TORCH_CUDNN; fi
if [[ -n "${CUDNN_ROOT:-}" ]]; then export LD_LIBRARY_PATH="$CUDNN_ROOT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
if [[ ! -x "$BUILD/attnbench" ]]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    ${CUDNN_ROOT:+-DCUDNN_ROOT=$CUDNN_ROOT} >"$OUT/bench_configure.log" 2>&1 || { tail -20 "$OUT/bench_configure.log"; exit 2; }
  cmake --build "$BUILD" -j "$(nproc)" --target attnbench >"$OUT/bench_build.log" 2>&1 || { grep error "$OUT/bench_build.log" | head -20; exit 2; }
fi
AB=$BUILD/attnbench
peers_dense=torch-sdpa-cudnn,torch-sdpa-flash,torch-flex
peers_packed=torch-flex,torch-varlen
status=0
if [[ $what == packed || $what == all ]]; then
  "$AB" run scenarios/packed_codealpaca.json --cases "${PACKED_CASES:-_greedy_fill1_padmax}" \
    --backends "${PACKED_BACKENDS:-cudnn,naive,$peers_packed}" --max-seconds 1 --out "$OUT/packed" >"$OUT/packed.log" 2>&1 || status=1
  tail -n 30 "$OUT/packed.log"
fi
if [[ $what == dense || $what == all ]]; then
  # The peers file's dense rows: causal S1024 B16, S4096 B4, S16384 B1 and full S4096 B4, D128.
  "$AB" run scenarios/dense_sweep.json --cases "${DENSE_CASES:-B16-S1024_D128_causal|B4-S4096_D128_(causal|full)|B1-S16384_D128_causal}" \
    --backends "${DENSE_BACKENDS:-cudnn,naive,$peers_dense}" --check off --no-determinism --max-seconds 1 --out "$OUT/dense" \
    >"$OUT/dense.log" 2>&1 || status=1
  tail -n 40 "$OUT/dense.log"
fi
if [[ $what == repeat ]]; then
  for mode in cold hot; do
    flag=""; [[ $mode == hot ]] && flag="--hot"
    "$AB" run scenarios/repeatability.json --backends "${REPEAT_BACKENDS:-cudnn,naive}" --check off --no-determinism \
      $flag --out "$OUT/repeat_$mode" >"$OUT/repeat_$mode.log" 2>&1 || status=1
    tail -n 12 "$OUT/repeat_$mode.log"
  done
  python3 ci/repeatability.py "$OUT/repeat_cold/report.json" "$OUT/repeat_hot/report.json" | tee "$OUT/repeatability.txt" ||
    status=1
fi
if [[ $what == split ]]; then
  for split in false true; do
    "$AB" run scenarios/packed_codealpaca.json --cases "${PACKED_CASES:-_greedy_fill1_padmax}" \
      --backends "cudnn[split=$split]" --check off --no-determinism --out "$OUT/split$split" >"$OUT/split$split.log" 2>&1 || status=1
    echo "== cudnn[split=$split]"
    tail -n 8 "$OUT/split$split.log"
  done
fi
if [[ $what == trace ]]; then
  # Kernel traces (CUPTI, --kernel-trace) of cudnn on the packed cases, default
  # backward form and dQ through the accumulator, and on the dense rows.
  # TRACE_FORMS picks the packed forms (default: all), TRACE_DENSE=0 skips the dense rows.
  for v in "default:" "accum:dq_direct=off" "split:split=true" "split-streams:split=true,split_streams=true"; do
    name=${v%%:*}; opts=${v#*:}
    [[ -n ${TRACE_FORMS:-} && " $TRACE_FORMS " != *" $name "* ]] && continue
    "$AB" run scenarios/peers_h100.json --cases "${TRACE_CASES:-codealpaca}" --backends "cudnn${opts:+[$opts]}" --check off \
      --no-determinism --max-seconds 0.5 --kernel-trace --out "$OUT/trace_$name" >"$OUT/trace_$name.log" 2>&1 || status=1
    echo "== packed $name ($opts)"; python3 ci/kernel_table.py "$OUT/trace_$name/report.json" || status=1
  done
  if [[ ${TRACE_DENSE:-1} != 0 ]]; then
    "$AB" run scenarios/peers_h100.json --cases dense --backends cudnn --check off --no-determinism --max-seconds 0.5 \
      --kernel-trace --out "$OUT/trace_dense" >"$OUT/trace_dense.log" 2>&1 || status=1
    echo "== dense"; python3 ci/kernel_table.py --top 6 "$OUT/trace_dense/report.json" || status=1
  fi
fi
if [[ $what == variants ]]; then
  ATTNBENCH_PEER_KEEP=1 ATTNBENCH_PEER_WORKDIR=$OUT/flexwd "$AB" run scenarios/packed_codealpaca.json \
    --cases llama3-8b_greedy_fill1_padmax --backends torch-flex --check off --no-timing --no-determinism \
    --out "$OUT/var_flex" >"$OUT/var_flex.log" 2>&1 || status=1
  wd=$(ls -d "$OUT"/flexwd/attnbench-peer-* 2>/dev/null | head -1)
  if [[ -n $wd ]]; then
    /opt/torch/.venv/bin/python3 tools/flex_variants.py "$wd" 2>"$OUT/flex_variants.err" | tee "$OUT/flex_variants.txt" || status=1
    tail -5 "$OUT/flex_variants.err"; rm -rf "$OUT/flexwd"
  else
    echo "no kept torch-flex work dir"; tail -5 "$OUT/var_flex.log"
  fi
fi
if [[ $what == forms ]]; then
  for v in "default:" "accum:dq_direct=off" "padded-accum:fullhead=padded,dq_direct=off" "split:split=true"; do
    name=${v%%:*}; opts=${v#*:}
    check="--check off"; [[ $name == default ]] && check=""
    "$AB" run scenarios/packed_codealpaca.json --cases "${PACKED_CASES:-_greedy_fill1_padmax}" \
      --backends "cudnn${opts:+[$opts]}" $check --out "$OUT/forms_$name" >"$OUT/forms_$name.log" 2>&1 || status=1
    echo "== packed $name ($opts)"; tail -n 6 "$OUT/forms_$name.log"
  done
  for v in "default:" "dqdirect:dq_direct=on,dp_workspace_limit=17179869184"; do
    name=${v%%:*}; opts=${v#*:}
    "$AB" run scenarios/dense_sweep.json --cases "${DENSE_CASES:-B16-S1024_D128_causal|B4-S4096_D128_(causal|full)|B1-S16384_D128_causal}" \
      --backends "cudnn${opts:+[$opts]}" --check off --no-determinism --out "$OUT/forms_dense_$name" >"$OUT/forms_dense_$name.log" 2>&1 || status=1
    echo "== dense $name ($opts)"; tail -n 8 "$OUT/forms_dense_$name.log"
  done
fi
if [[ $what == tune ]]; then
  "$AB" run scenarios/packed_codealpaca.json --cases "${PACKED_CASES:-_greedy_fill1_padmax}" \
    --backends "cudnn[autotune=true]" --out "$OUT/tune_packed" >"$OUT/tune_packed.log" 2>&1 || status=1
  "$AB" run scenarios/dense_sweep.json --cases "${DENSE_CASES:-B16-S1024_D128_causal|B4-S4096_D128_(causal|full)|B1-S16384_D128_causal}" \
    --backends "cudnn[autotune=true]" --check off --no-determinism --out "$OUT/tune_dense" >"$OUT/tune_dense.log" 2>&1 || status=1
  for r in tune_packed tune_dense; do
    python3 - "$OUT/$r/report.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    t = r.get("timing") or {}
    ms = {k: round(v["median_ms"], 4) for k, v in t.items() if isinstance(v, dict) and "median_ms" in v}
    b = (r.get("extra") or {}).get("backend") or {}
    print(r["case_id"], r["status"], ms)
    print("  knobs fwd", json.dumps((b.get("forward") or {}).get("knobs")), "bwd", json.dumps((b.get("backward") or {}).get("knobs")))
    for part in b.get("autotune") or []:
        for pas in ("forward", "backward"):
            c = part.get(pas) or {}
            cands = sorted((x for x in c.get("candidates", []) if x.get("ms")), key=lambda x: x["ms"])
            print(f"  {pas}: chosen {c.get('chosen')}; " + ", ".join(f"{x['plan']} {x['ms']:.4f}" for x in cands[:8]),
                  f"({len(c.get('candidates', []))} candidates)")
PY
  done
fi
if [[ $what == peers ]]; then
  # dense rows unchecked (the float64 reference of S16384 takes minutes), packed rows checked
  "$AB" run scenarios/peers_h100.json --cases dense --backends "${PEERS_BACKENDS:-cudnn,torch-sdpa-cudnn,torch-sdpa-flash,torch-sdpa-efficient,torch-flex,torch-varlen}" \
    --check off --no-determinism --max-seconds 1 --out "$OUT/peers_dense" >"$OUT/peers_dense.log" 2>&1 || status=1
  "$AB" run scenarios/peers_h100.json --cases codealpaca --backends "${PEERS_BACKENDS:-cudnn,torch-flex,torch-varlen}" \
    --max-seconds 1 --out "$OUT/peers_packed" >"$OUT/peers_packed.log" 2>&1 || status=1
  tail -n 25 "$OUT/peers_dense.log" "$OUT/peers_packed.log"
  python3 ci/peers_table.py "${PEERS_FILE:-$ROOT/docs/peers/torch-2.11-h100.json}" "$OUT/peers_dense/report.json" \
    "$OUT/peers_packed/report.json" | tee "$OUT/peers_table.md" || status=1
fi
if [[ $what == default ]]; then
  start=$(date +%s.%N)
  "$AB" run scenarios/default.json --out "$OUT/default" >"$OUT/default.log" 2>&1 || status=1
  end=$(date +%s.%N)
  tail -n 12 "$OUT/default.log"
  python3 - "$OUT/default/report.json" "$start" "$end" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["results"]
print(f"default.json: {float(sys.argv[3]) - float(sys.argv[2]):.1f} s wall, {len(rows)} rows")
per = {}
for r in rows:
    b = (r.get("extra") or {}).get("backend") or {}
    if "worker_process_s" in b:
        per.setdefault(r["backend"], []).append((b["worker_process_s"], b.get("worker_mode"), b.get("worker_request_index")))
for k, v in per.items():
    print(k, "worker s per case:", [round(x[0], 1) for x in v], "mode", v[0][1], "index", [x[2] for x in v])
print({s: sum(r["status"] == s for r in rows) for s in sorted({r["status"] for r in rows})})
PY
fi
exit $status
