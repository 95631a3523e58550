// Speed of the float64 reference (gold) and of the low-precision emulation (lp) next
// to Eigen's own float64 GEMM rate on the same number of threads (issue 18 item 7:
// both at >= 50% of that rate).
//
// Cases (each forward + backward, all on one KV-head slice of Llama-3-8B: Hq = 4
// query heads sharing Hkv = 1 kv head, D = 128, bf16, the unit the sampled check
// computes 4 of per 32k row):
//   DenseCausal  S = 4096, causal
//   LongDocs     S = 32768, row 0 of scenarios/packed_long_docs.json ("causal"
//                part: lognormal documents, mean ~2500 tokens, packed greedily),
//                document-causal; one iteration is one slice of that row's check
//   EigenGemm    C = A B, N = 1024, one product per thread, all threads at once
//
// Counters:
//   GFLOP/s      useful FLOPs per wall-clock second: forward 2 * pairs * (Dqk + Dv) * Hq
//                and backward 2.5x that (docs/semantics.md section 8), pairs = allowed (i, j)
//                pairs; for the GEMM 2 N^3 per product and thread.
//   GFLOP/cpu_s  the same FLOPs per second of process CPU time (all threads): the
//                per-core rate, meaningful also on a loaded machine where wall time is not.
//   of_gemm      GFLOP/s / the EigenGemm rate on the same thread count (wall clock),
//                measured once in this process before the first reference case (the
//                target: >= 0.5 on an idle machine).
//   of_gemm_cpu  the same ratio of CPU-time rates (GFLOP/cpu_s over the GEMM's): the
//                figure to read on a shared, loaded machine, where wall time is not
//                the program's own (it does not see idle threads, so compare both).
//   wall_s       seconds per iteration (wall).
//   exec/useful  pairs inside computed tiles / allowed pairs (tile efficiency).
// Argument: threads (0 = all cores).
//
//   build-cpu/bench_reference --benchmark_min_time=1s
//   build-cpu/bench_reference --benchmark_filter=DenseCausal    # the quick cases only
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <stdexcept>
#include <thread>
#include <vector>

#include <Eigen/Core>

#include "harness/model/mask.hpp"
#include "harness/model/problem.hpp"
#include "harness/model/tensors.hpp"
#include "harness/model/thread_pool.hpp"
#include "harness/workloads/scenario.hpp"
#include "reference/reference.hpp"

using namespace attnbench;
namespace ref = attnbench::reference;

namespace {

int threads_arg(const benchmark::State& state) { return resolve_threads(static_cast<int>(state.range(0))); }

/// Sets GFLOP/s (wall) and GFLOP/cpu_s (process CPU time, all threads) for `flops`
/// per iteration; `cpu0` is std::clock() before the timed loop.
void set_rates(benchmark::State& state, double flops, std::clock_t cpu0) {
  const double cpu_s = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/cpu_s"] = flops * 1e-9 * static_cast<double>(state.iterations()) / cpu_s;
}

/// One round of the GEMM comparison: C_t = A_t B_t (N x N float64) on `threads`
/// std::threads at once (each its own product, as the reference's workers each run
/// their own tiles). Returns the wall seconds.
double gemm_round(std::vector<Eigen::MatrixXd>& a, std::vector<Eigen::MatrixXd>& b, std::vector<Eigen::MatrixXd>& c) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (size_t t = 1; t < a.size(); ++t) pool.emplace_back([&, t] { c[t].noalias() = a[t] * b[t]; });
  c[0].noalias() = a[0] * b[0];
  for (auto& th : pool) th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct GemmOperands {
  std::vector<Eigen::MatrixXd> a, b, c;
  GemmOperands(int threads, Eigen::Index n) {
    for (int t = 0; t < threads; ++t) {
      a.push_back(Eigen::MatrixXd::Random(n, n));
      b.push_back(Eigen::MatrixXd::Random(n, n));
      c.push_back(Eigen::MatrixXd::Zero(n, n));
    }
  }
};

constexpr Eigen::Index kGemmN = 1024;

/// Eigen float64 GEMM C = A B (N x N), one product per thread, threads in parallel.
void BM_EigenGemm(benchmark::State& state) {
  const int threads = threads_arg(state);
  const Eigen::Index n = state.range(1);
  GemmOperands g(threads, n);
  const std::clock_t cpu0 = std::clock();
  for (auto _ : state) {
    gemm_round(g.a, g.b, g.c);
    benchmark::DoNotOptimize(g.c[0].data());
  }
  set_rates(state, 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) * threads, cpu0);
  state.counters["threads"] = threads;
}

/// The GEMM rates on `threads` threads at N = 1024, measured once per thread count
/// and process: FLOP per wall second (best of 5 rounds) and FLOP per second of
/// process CPU time (all threads; over the same 5 rounds).
struct GemmRate {
  double wall = 0, cpu = 0;
};
GemmRate gemm_rate(int threads) {
  static std::map<int, GemmRate> cache;
  auto it = cache.find(threads);
  if (it != cache.end()) return it->second;
  GemmOperands g(threads, kGemmN);
  gemm_round(g.a, g.b, g.c);  // warm-up
  double best = 1e300;
  const std::clock_t cpu0 = std::clock();
  for (int r = 0; r < 5; ++r) best = std::min(best, gemm_round(g.a, g.b, g.c));
  const double cpu_s = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  const double n = static_cast<double>(kGemmN), flops = 2.0 * n * n * n * threads;
  return cache[threads] = GemmRate{flops / best, 5 * flops / cpu_s};
}

/// One KV-head slice of Llama-3-8B (Hq = 4, Hkv = 1, D = 128), bf16, seed 1.
Problem slice_problem(int64_t seq) {
  Problem p;
  p.batch = 1, p.heads_q = 4, p.heads_kv = 1, p.seq_q = p.seq_k = seq;
  p.head_dim = p.head_dim_v = 128;
  p.dtype = DType::bf16;
  p.seed = 1;
  return p;
}

Problem dense_causal() {
  Problem p = slice_problem(4096);
  p.mask.push_back(CausalTerm{});
  return p;
}

/// Row 0 of scenarios/packed_long_docs.json's first "causal" case as a one-slice
/// problem (its document ids and lengths, document-causal). Throws
/// std::runtime_error when the scenario no longer has such a case.
Problem long_docs() {
  const Scenario sc = load_scenario(std::string(ATTNBENCH_SOURCE_DIR) + "/scenarios/packed_long_docs.json");
  for (const Case& c : sc.cases) {
    if (c.part != "causal" || !c.invalid.empty()) continue;
    Problem p = slice_problem(c.problem.seq_q);
    for (const MaskTerm& t : c.problem.mask) {
      if (const auto* d = std::get_if<DocumentTerm>(&t)) {
        DocumentTerm row0;
        row0.doc_ids = {d->doc_ids.at(0)};
        if (!d->doc_lengths.empty()) row0.doc_lengths = {d->doc_lengths.at(0)};
        p.mask.push_back(row0);
      } else if (std::holds_alternative<CausalTerm>(t)) {
        p.mask.push_back(t);
      } else {
        throw std::runtime_error("bench_reference: unexpected mask term in packed_long_docs.json");
      }
    }
    return p;
  }
  throw std::runtime_error("bench_reference: packed_long_docs.json has no valid 'causal' case");
}

void run_reference(benchmark::State& state, const Problem& p, bool low_precision) {
  const ProblemData in = make_inputs(p);
  ref::Options opt;
  opt.threads = threads_arg(state);
  const GemmRate gemm = gemm_rate(opt.threads);
  ref::Stats st;
  const std::clock_t cpu0 = std::clock();
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    AttentionOutputs o = low_precision ? ref::lp(p, in, true, ref::SliceSet::every(), opt, &st)
                                       : ref::gold(p, in, true, ref::SliceSet::every(), opt, &st);
    benchmark::DoNotOptimize(o.o.data.data());
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double flops = ref::estimated_flops(p, true);
  const double cpu_s = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  const double total = flops * static_cast<double>(state.iterations());
  set_rates(state, flops, cpu0);
  state.counters["of_gemm"] = total / wall / gemm.wall;
  state.counters["of_gemm_cpu"] = total / cpu_s / gemm.cpu;
  state.counters["gemm_GFLOP/s"] = gemm.wall * 1e-9;
  state.counters["wall_s"] = wall / static_cast<double>(state.iterations());
  state.counters["exec/useful"] = static_cast<double>(st.executed_pairs) / static_cast<double>(st.useful_pairs);
  state.counters["threads"] = opt.threads;
}

void BM_GoldDenseCausal(benchmark::State& s) { run_reference(s, dense_causal(), false); }
void BM_LpDenseCausal(benchmark::State& s) { run_reference(s, dense_causal(), true); }
void BM_GoldLongDocs(benchmark::State& s) { run_reference(s, long_docs(), false); }
void BM_LpLongDocs(benchmark::State& s) { run_reference(s, long_docs(), true); }

}  // namespace

// Args: {threads (0 = all cores), N} for the GEMM, {threads} for the reference.
BENCHMARK(BM_EigenGemm)->Args({1, kGemmN})->Args({0, kGemmN})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GoldDenseCausal)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LpDenseCausal)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GoldLongDocs)->Arg(0)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LpLongDocs)->Arg(0)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
