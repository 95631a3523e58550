// What the host-pass benchmarks share (bench_host_passes, bench_peer_protocol,
// bench_gold_store): the problem B8 S2048 H32 (MHA) D96 bf16 BSHD, seed 7 (four
// tensors of 50,331,648 elements, 400 MB each as float64), its inputs generated
// once, a scratch folder, and the GB/s counter.
#pragma once

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "harness/model/problem.hpp"
#include "harness/model/tensors.hpp"

namespace attnbench::bench {

inline Problem host_pass_problem() {
  Problem p;
  p.batch = 8;
  p.heads_q = p.heads_kv = 32;
  p.seq_q = p.seq_k = 2048;
  p.head_dim = p.head_dim_v = 96;
  p.dtype = DType::bf16;
  p.layout = Layout::bshd;
  p.seed = 7;
  return p;
}

/// make_inputs(host_pass_problem()), generated on first use (call it before a
/// timed loop).
inline const ProblemData& host_pass_inputs() {
  static const ProblemData in = make_inputs(host_pass_problem());
  return in;
}

/// A fresh folder ROOT/attnbench-bench-NAME-PID, removed with everything in it.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir(const std::filesystem::path& root, const std::string& name)
      : path(root / ("attnbench-bench-" + name + "-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

/// Counter "GB/s": `tensors` tensors of host_pass_problem()'s size as float64 per
/// wall second of an iteration.
inline void logical_rate(benchmark::State& state, double tensors) {
  const double numel = 8.0 * 32 * 2048 * 96;
  state.counters["GB/s"] =
      benchmark::Counter(tensors * 8.0 * numel * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace attnbench::bench
