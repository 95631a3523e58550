// Speed of attnbench's side of the peer file protocol (docs/peers.md; issue 29,
// "time to a checked result"): what a PyTorch peer row costs the harness before and
// after the worker runs, on the problem of bench_host_passes.cpp (B8 S2048 H32 D96
// bf16: four tensors of 50,331,648 elements, 400 MB each as float64):
//   WriteWorkDir   write_work_dir: problem.json, request.json, q / k / v / dO .npy
//   ReadResult     read_result with gradients: o, lse, dq, dk, dv as the worker
//                  writes them (the problem dtype's bits, "encoding" in result.json)
// The work directory is under ATTNBENCH_PEER_WORKDIR's default (peer_config.cpp:
// /dev/shm when it exists, else the temporary directory).
// Counters: GB/s of float64 logical data (4 tensors of 400 MB) per wall second.
//
//   build/bench_peer_protocol --benchmark_min_time=1
//   (results: docs/results/2026-11-28-peer-protocol.md)
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backends/peers/peer_config.hpp"
#include "backends/peers/peer_protocol.hpp"
#include "harness/model/npy.hpp"
#include "bench/bench_problem.hpp"
#include "harness/model/tensors.hpp"

using namespace attnbench;

namespace {

namespace fs = std::filesystem;

Problem problem() { return bench::host_pass_problem(); }

const ProblemData& inputs() {
  static const ProblemData in = make_inputs(problem());
  return in;
}

/// A fresh work directory under the peers' default work root, removed at exit.
struct Dir {
  fs::path path;
  Dir() {
    path = fs::path(peers::resolve_launch_config({}).work_root) / ("attnbench-bench-" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~Dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void rate(benchmark::State& state) {
  state.counters["GB/s"] = benchmark::Counter(4 * 8.0 * static_cast<double>(inputs().q.data.size()) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void WriteWorkDir(benchmark::State& state) {
  inputs();  // generated once, outside the timing
  Dir d;
  peers::RunContext ctx;
  for (auto _ : state) peers::write_work_dir(d.path.string(), "torch-sdpa-flash", problem(), inputs(), ctx);
  rate(state);
}

void ReadResult(benchmark::State& state) {
  Dir d;
  // The outputs as a worker writes them: the inputs' files stand in for o, dq, dk,
  // dv (same shapes and dtype), lse as float32.
  peers::RunContext ctx;
  peers::write_work_dir(d.path.string(), "torch-sdpa-flash", problem(), inputs(), ctx);
  const Problem p = problem();
  for (const char* name : {"q", "k", "v", "do"}) {
    const char* out = name[0] == 'q' ? "dq" : name[0] == 'k' ? "dk" : name[0] == 'v' ? "dv" : "o";
    fs::copy_file(d.path / (std::string(name) + ".npy"), d.path / (std::string(out) + ".npy"),
                  fs::copy_options::overwrite_existing);
  }
  std::vector<float> lse(static_cast<size_t>(p.batch * p.heads_q * p.seq_q), 1.5f);
  npy::write((d.path / "lse.npy").string(), {p.batch, p.heads_q, p.seq_q}, lse.data());
  const nlohmann::json request = nlohmann::json::parse(std::ifstream(d.path / "request.json"));
  nlohmann::json result = {{"protocol", peers::kProtocolVersion}, {"status", "ok"}};
  if (request.contains("encoding")) result["encoding"] = {{"o", "bf16"}, {"dq", "bf16"}, {"dk", "bf16"}, {"dv", "bf16"}};
  std::ofstream((d.path / "result.json").string()) << result.dump();
  for (auto _ : state) benchmark::DoNotOptimize(peers::read_result(d.path.string(), p, true).outputs.o.data.data());
  rate(state);
}

}  // namespace

BENCHMARK(WriteWorkDir)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(ReadResult)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
