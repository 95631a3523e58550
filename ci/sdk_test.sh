#!/usr/bin/env bash
# The plugin SDK as a plugin author uses it (docs/plugins.md), run by ctest as
# `sdk_install`: install BUILD_DIR into a temporary prefix, configure and build
# examples/plugins/cpu out of tree with find_package(attnbench) against that
# prefix only, then run the installed attnbench on the installed default
# scenario with the plugin; every row must pass the correctness rule.
# Usage: ci/sdk_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: ci/sdk_test.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/attnbench_sdk.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log"
for f in bin/attnbench include/attnbench/plugin.h lib/cmake/attnbench/attnbenchConfig.cmake \
         lib/cmake/attnbench/attnbenchConfigVersion.cmake lib/cmake/attnbench/attnbenchTargets.cmake; do
  [[ -e "$tmp/prefix/$f" ]] || { echo "sdk_test: FAIL: $f not installed"; cat "$tmp/install.log"; exit 1; }
done

# Out of tree: a copy of the example, nothing of the source tree on the include path.
cp -r "$src/examples/plugins/cpu" "$tmp/example"
cmake -S "$tmp/example" -B "$tmp/example-build" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/example-build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
plugin="$tmp/example-build/libexample_cpu.so"

# The scenario by name, from a directory without scenarios/: the installed
# binary finds PREFIX/share/attnbench/scenarios.
status=0
# Both variants of the example's declared option (order: ascending, descending).
(cd "$tmp" && "$tmp/prefix/bin/attnbench" run default --backends 'example-cpu,example-cpu[order=descending]' --plugin "$plugin" \
    --out "$tmp/out" --max-seconds 0.05 --min-samples 2) >"$tmp/run.log" 2>&1 || status=$?
cat "$tmp/run.log"
if [[ $status -ne 0 ]]; then echo "sdk_test: FAIL: attnbench run exited $status"; exit 1; fi
grep -q "attnbench: 16 rows: 16 pass, 0 fail, 0 unsupported, 0 error" "$tmp/run.log" ||
  { echo "sdk_test: FAIL: expected 16 passing rows of example-cpu (8 cases x 2 variants)"; exit 1; }
[[ $(grep -o '"variant":"example-cpu\[order=descending\]"' "$tmp/out/report.json" | wc -l) -eq 8 ]] ||
  { echo "sdk_test: FAIL: expected 8 rows of the variant example-cpu[order=descending]"; exit 1; }
grep -q "\"$tmp/prefix/share/attnbench/scenarios/default.json\"" "$tmp/out/report.json" ||
  { echo "sdk_test: FAIL: the installed binary did not resolve 'default' to PREFIX/share/attnbench/scenarios"; exit 1; }
echo "sdk_test: OK: installed SDK, out-of-tree example-cpu (both values of its option order) passes the rule on the installed default scenario"
