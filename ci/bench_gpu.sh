#!/usr/bin/env bash
# The main job on a GPU machine: the peers' workloads with every backend and
# PyTorch peer, reports under $OUT. Builds first unless build-gpu/attnbench exists
# (run ci/gpu.sh before it in the same session to reuse its build).
#
#   ci/bench_gpu.sh [dense|packed|repeat|split|all]     (default all)
#
#   dense   the peers file's dense rows (DENSE_CASES) with cudnn, naive and peers
#   packed  packed CodeAlpaca (PACKED_CASES) with cudnn, naive and peers, checked
#   repeat  scenarios/repeatability.json cold and hot; ci/repeatability.py prints
#           the spread of the medians of identical cases timed twice in one run
#   split   cudnn on the packed cases with one cuDNN graph (the default) and with
#           length classes (ATTNBENCH_CUDNN_SPLIT=1), timing only
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
  for split in 0 1; do
    ATTNBENCH_CUDNN_SPLIT=$split "$AB" run scenarios/packed_codealpaca.json --cases "${PACKED_CASES:-_greedy_fill1_padmax}" \
      --backends cudnn --check off --no-determinism --out "$OUT/split$split" >"$OUT/split$split.log" 2>&1 || status=1
    echo "== ATTNBENCH_CUDNN_SPLIT=$split"
    tail -n 8 "$OUT/split$split.log"
  done
fi
exit $status
