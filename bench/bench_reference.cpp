// Speed of the float64 reference next to Eigen's own float64 GEMM rate, measured the
// same way (the same number of std::threads, each with its own work).
//
// Counters:
//   GFLOP/s      useful FLOPs per wall-clock second: forward 2 * pairs * (Dqk + Dv) * Hq
//                and backward 2.5x that (docs/semantics.md section 8), pairs = allowed (i, j)
//                pairs; for the GEMM benchmarks 2 N^3 per product and thread.
//   GFLOP/cpu_s  the same FLOPs per second of process CPU time (all threads): the
//                per-core rate, meaningful also on a loaded machine where wall time is not.
//   exec/useful  pairs inside computed tiles / allowed pairs (tile efficiency).
// Arguments: threads (0 = all cores), and for the reference the tile size (q_block =
// kv_block).
// Target: gold forward+backward at >= half the GEMM rate on dense work, and a
// document-masked pack costing in proportion to its allowed pairs (its rate close
// to the dense causal case's).
//
//   ./bench_reference --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <ctime>
#include <thread>
#include <vector>

#include <Eigen/Core>

#include "harness/model/mask.hpp"
#include "harness/model/problem.hpp"
#include "harness/model/tensors.hpp"
#include "reference/reference.hpp"

using namespace attnbench;
namespace ref = attnbench::reference;

namespace {

int all_cores() {
  const unsigned h = std::thread::hardware_concurrency();
  return h ? static_cast<int>(h) : 1;
}

int threads_arg(const benchmark::State& state) {
  return state.range(0) == 0 ? all_cores() : static_cast<int>(state.range(0));
}

/// Sets GFLOP/s (wall) and GFLOP/cpu_s (process CPU time, all threads) for `flops`
/// per iteration; `cpu0` is std::clock() before the timed loop.
void set_rates(benchmark::State& state, double flops, std::clock_t cpu0) {
  const double cpu_s = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/cpu_s"] = flops * 1e-9 * static_cast<double>(state.iterations()) / cpu_s;
}

/// Eigen float64 GEMM C = A B (N x N), one product per thread, threads in parallel.
void BM_EigenGemm(benchmark::State& state) {
  const int threads = threads_arg(state);
  const Eigen::Index n = state.range(1);
  std::vector<Eigen::MatrixXd> a(static_cast<size_t>(threads)), b(a.size()), c(a.size());
  for (size_t t = 0; t < a.size(); ++t) {
    a[t] = Eigen::MatrixXd::Random(n, n);
    b[t] = Eigen::MatrixXd::Random(n, n);
    c[t] = Eigen::MatrixXd::Zero(n, n);
  }
  const std::clock_t cpu0 = std::clock();
  for (auto _ : state) {
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t)
      pool.emplace_back([&, t] { c[static_cast<size_t>(t)].noalias() = a[static_cast<size_t>(t)] * b[static_cast<size_t>(t)]; });
    c[0].noalias() = a[0] * b[0];
    for (auto& th : pool) th.join();
    benchmark::DoNotOptimize(c[0].data());
  }
  set_rates(state, 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) * threads, cpu0);
  state.counters["threads"] = threads;
}

/// B=1, H=4 (MHA), S=2048, D=128; `documents` packs 7 documents (sum of squared
/// lengths ~ 21% of S^2) with block-causal masking, else dense causal.
Problem bench_problem(bool documents) {
  Problem p;
  p.batch = 1, p.heads_q = 4, p.heads_kv = 4, p.seq_q = p.seq_k = 2048;
  p.head_dim = p.head_dim_v = 128;
  p.dtype = DType::bf16;
  p.seed = 1;
  if (documents) {
    DocumentTerm d;
    d.doc_lengths = {{100, 300, 50, 700, 150, 400, 348}};
    d.doc_ids = {doc_ids_from_lengths(d.doc_lengths[0], p.seq_q)};
    p.mask.push_back(d);
  }
  p.mask.push_back(CausalTerm{CausalAlign::bottom_right});
  return p;
}

void run_reference(benchmark::State& state, bool documents, bool grads, bool low_precision) {
  const Problem p = bench_problem(documents);
  const ProblemData in = make_inputs(p);
  ref::Options opt;
  opt.threads = threads_arg(state);
  opt.q_block = opt.kv_block = state.range(1);
  ref::Stats st;
  const std::clock_t cpu0 = std::clock();
  for (auto _ : state) {
    AttentionOutputs o = low_precision ? ref::lp(p, in, grads, ref::SliceSet::every(), opt, &st)
                                       : ref::gold(p, in, grads, ref::SliceSet::every(), opt, &st);
    benchmark::DoNotOptimize(o.o.data.data());
  }
  set_rates(state, ref::estimated_flops(p, grads), cpu0);
  state.counters["exec/useful"] = static_cast<double>(st.executed_pairs) / static_cast<double>(st.useful_pairs);
  state.counters["threads"] = opt.threads;
}

void BM_GoldDenseCausal_FwdBwd(benchmark::State& s) { run_reference(s, false, true, false); }
void BM_GoldDocuments_FwdBwd(benchmark::State& s) { run_reference(s, true, true, false); }
void BM_GoldDenseCausal_Fwd(benchmark::State& s) { run_reference(s, false, false, false); }
void BM_LpDenseCausal_FwdBwd(benchmark::State& s) { run_reference(s, false, true, true); }

}  // namespace

// Args: {threads (0 = all cores), N} for the GEMM, {threads, tile} for the reference.
BENCHMARK(BM_EigenGemm)->Args({1, 1024})->Args({0, 1024})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GoldDenseCausal_FwdBwd)
    ->Args({1, 32})
    ->Args({0, 32})
    ->Args({1, 64})
    ->Args({1, 128})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GoldDocuments_FwdBwd)
    ->Args({1, 32})
    ->Args({0, 32})
    ->Args({1, 64})
    ->Args({1, 128})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GoldDenseCausal_Fwd)->Args({0, 32})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LpDenseCausal_FwdBwd)->Args({0, 32})->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
