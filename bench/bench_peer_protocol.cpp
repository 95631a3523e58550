// Speed of attnbench's side of the peer file protocol (docs/peers.md; issue 29,
// "time to a checked result"): what a PyTorch peer row costs the harness before and
// after the worker runs, on the problem of bench_host_passes.cpp (B8 S2048 H32 D96
// bf16: four tensors of 50,331,648 elements, 400 MB each as float64):
//   WriteWorkDir   write_work_dir: problem.json, request.json, q / k / v / dO .npy
//   ReadResult     read_result with gradients: o, lse, dq, dk, dv as the worker
//                  writes them (the problem dtype's bits)
// The work directory is under $ATTNBENCH_PEER_WORKDIR, else the temporary directory
// (run it with ATTNBENCH_PEER_WORKDIR=/dev/shm for the memory file system).
// Counters: GB/s of float64 logical data (4 tensors of 400 MB) per wall second.
//
//   build/bench_peer_protocol --benchmark_min_time=1
//   (results: docs/results/2026-11-28-peer-protocol.md)
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backends/peers/peer_config.hpp"
#include "backends/peers/peer_protocol.hpp"
#include "bench/bench_problem.hpp"
#include "harness/model/npy.hpp"
#include "harness/model/tensors.hpp"

using namespace attnbench;

namespace {

namespace fs = std::filesystem;
using bench::host_pass_inputs;

Problem problem() { return bench::host_pass_problem(); }

/// The peers' default work root (peer_config.cpp: the temporary directory, or
/// $ATTNBENCH_PEER_WORKDIR).
fs::path work_root() { return peers::resolve_launch_config({}).work_root; }

void WriteWorkDir(benchmark::State& state) {
  host_pass_inputs();  // generated once, outside the timing
  const bench::ScratchDir d(work_root(), "peer");
  peers::RunContext ctx;
  for (auto _ : state) peers::write_work_dir(d.path.string(), "torch-sdpa-flash", problem(), host_pass_inputs(), ctx);
  bench::logical_rate(state, 4);
}

void ReadResult(benchmark::State& state) {
  const bench::ScratchDir d(work_root(), "peer");
  // The outputs as a worker writes them: the inputs' files stand in for o, dq, dk,
  // dv (same shapes and dtype), lse as float32.
  peers::RunContext ctx;
  peers::write_work_dir(d.path.string(), "torch-sdpa-flash", problem(), host_pass_inputs(), ctx);
  const Problem p = problem();
  for (const char* name : {"q", "k", "v", "do"}) {
    const char* out = name[0] == 'q' ? "dq" : name[0] == 'k' ? "dk" : name[0] == 'v' ? "dv" : "o";
    fs::copy_file(d.path / (std::string(name) + ".npy"), d.path / (std::string(out) + ".npy"),
                  fs::copy_options::overwrite_existing);
  }
  std::vector<float> lse(static_cast<size_t>(p.batch * p.heads_q * p.seq_q), 1.5f);
  npy::write((d.path / "lse.npy").string(), {p.batch, p.heads_q, p.seq_q}, lse.data());
  nlohmann::json result = {{"protocol", peers::kProtocolVersion}, {"status", "ok"}};
  std::ofstream((d.path / "result.json").string()) << result.dump();
  for (auto _ : state) benchmark::DoNotOptimize(peers::read_result(d.path.string(), p, true).outputs.o.data.data());
  bench::logical_rate(state, 4);
}

}  // namespace

BENCHMARK(WriteWorkDir)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(ReadResult)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
