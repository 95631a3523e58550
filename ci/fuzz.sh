#!/usr/bin/env bash
# Bounded libFuzzer runs of every input parser (tests/fuzz/): scenario/problem
# JSON, packing data files, report JSON (compare, merge, report) and .npy files.
# Needs clang with libFuzzer (Debian: clang, libclang-rt-dev or libfuzzer-dev);
# without it this script says so and exits 0. Seeds: the scenarios, their data
# files, the example reports and small .npy files. A crash leaves the input under
# $FUZZ_DIR/crashes/<target>/ and fails the script (exit 1); add it to the
# mutation test's regression inputs (tests/test_fuzz_mutation.cpp) with the fix.
#   FUZZ_SECONDS  per target (default 30)    FUZZ_DIR  work dir (default build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-30}"
dir="${FUZZ_DIR:-build-fuzz}"
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found; fuzzing skipped (apt-get install clang libfuzzer-dev)"; exit 0
fi
probe=$(mktemp -d)
echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' > "$probe/p.cpp"
if ! clang++ -fsanitize=fuzzer "$probe/p.cpp" -o "$probe/p" 2>/dev/null; then
  rm -rf "$probe"; echo "fuzz: clang++ has no libFuzzer; fuzzing skipped (apt-get install libfuzzer-dev)"; exit 0
fi
rm -rf "$probe"
CC=clang CXX=clang++ cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTNBENCH_FUZZ=ON \
  -DATTNBENCH_ENABLE_CUDA=OFF -DBUILD_TESTING=OFF >/dev/null
targets=(scenario packing_data report npy_file)
cmake --build "$dir" -j"${JOBS:-$(nproc)}" --target "${targets[@]/#/fuzz_}"

# Seed corpora from the repository's own inputs.
corpus="$dir/corpus"
rm -rf "$corpus" && mkdir -p "$corpus"/{scenario,packing_data,report,npy_file}
cp scenarios/*.json "$corpus/scenario/"
cp scenarios/data/*.json "$corpus/packing_data/"
for f in ci/baselines/*.json; do head -c 200000 "$f" > "$corpus/report/$(basename "$f")"; done
python3 - "$corpus/npy_file" <<'PY'
import struct, sys
def npy(descr, shape, payload):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + payload
out = sys.argv[1]
open(out + "/f8.npy", "wb").write(npy("<f8", "(2, 3)", struct.pack("<6d", *range(6))))
open(out + "/i4.npy", "wb").write(npy("<i4", "(5,)", struct.pack("<5i", *range(5))))
open(out + "/scalar.npy", "wb").write(npy("<f4", "()", struct.pack("<f", 1.5)))
PY

status=0
for t in "${targets[@]}"; do
  mkdir -p "$dir/crashes/$t"
  echo "fuzz: $t for ${seconds}s"
  if ! "$dir/fuzz_$t" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=4096 \
       -artifact_prefix="$dir/crashes/$t/" -print_final_stats=1 "$corpus/$t" 2>"$dir/fuzz_$t.log"; then
    echo "fuzz: $t FOUND A CRASH (inputs in $dir/crashes/$t/, log $dir/fuzz_$t.log)"; tail -40 "$dir/fuzz_$t.log"
    status=1
  else
    grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$dir/fuzz_$t.log" | sed "s/^/fuzz: $t /"
  fi
done
exit $status
