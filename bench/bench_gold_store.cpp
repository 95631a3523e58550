// Speed of the gold store (harness/run/gold_cache.hpp; issue 29, "time to a checked
// result"): what an isolated child pays to get its case's inputs from the unit that
// computed them, on the problem of bench_host_passes.cpp (B8 S2048 H32 D96 bf16:
// q, k, v, dO of 50,331,648 elements, 400 MB each as float64):
//   SaveInputs   GoldStore::save_inputs (the unit that computed them publishes them)
//   LoadInputs   GoldStore::load_inputs (every later unit of the case, CRC-32 checked)
// The store is a folder under the temporary directory, as OUT/.gold is under --out.
// Counters: GB/s of float64 logical data (4 tensors of 400 MB) per wall second.
//
//   build/bench_gold_store --benchmark_min_time=1
//   (results: docs/results/2026-11-28-h100-session16.md)
#include <filesystem>

#include "bench/bench_problem.hpp"
#include "harness/model/tensors.hpp"
#include "harness/run/gold_cache.hpp"

using namespace attnbench;

namespace {

using bench::host_pass_inputs;
using bench::host_pass_problem;

void SaveInputs(benchmark::State& state) {
  host_pass_inputs();  // generated once, outside the timing
  const bench::ScratchDir d(std::filesystem::temp_directory_path(), "gold");
  const GoldStore store(d.path);
  for (auto _ : state) benchmark::DoNotOptimize(store.save_inputs(host_pass_problem(), host_pass_inputs()));
  bench::logical_rate(state, 4);
}

void LoadInputs(benchmark::State& state) {
  const bench::ScratchDir d(std::filesystem::temp_directory_path(), "gold");
  const GoldStore store(d.path);
  store.save_inputs(host_pass_problem(), host_pass_inputs());
  for (auto _ : state) {
    auto in = store.load_inputs(host_pass_problem());
    if (!in) state.SkipWithError("the published inputs did not load");
    benchmark::DoNotOptimize(in);
  }
  bench::logical_rate(state, 4);
}

}  // namespace

BENCHMARK(SaveInputs)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(LoadInputs)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
