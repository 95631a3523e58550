// Speed of the host passes around a GPU backend's prepare and read_outputs (issue
// 29, "time to a checked result"), on one tensor of B8 S2048 H32 D96 bf16
// (50,331,648 elements, 400 MB as float64), on the pass pool (all cores, at most
// ThreadPool::kMaxPassThreads):
//   Inputs           make_inputs of that problem (q, k, v, dO: 4 tensors)
//   TwoStepEncode    to_physical (BSHD), then encode: the path before the fused pass
//   EncodePhysical   encode_physical (BSHD): one pass, no float64 copy
//   TwoStepDecode    decode, then from_physical
//   DecodePhysical   decode_physical
//   EncodeTokens     kernels::encode_tokens of documents of 100..1100 tokens
//   DecodeTokens     kernels::decode_tokens of the same
// Counters: GB/s of float64 logical data (400 MB per tensor) per wall second.
//
//   build/bench_host_passes --benchmark_min_time=1
//   (results: docs/results/2026-11-28-host-passes.md)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/kernels/attn_plan.hpp"
#include "harness/model/dtype_codec.hpp"
#include "harness/model/layout.hpp"
#include "bench/bench_problem.hpp"
#include "harness/model/tensors.hpp"

using namespace attnbench;

namespace {

Problem problem() { return bench::host_pass_problem(); }

/// Q of problem(), generated once.
const HostTensor& q_tensor() { return bench::host_pass_inputs().q; }

/// Documents of 100, 237, ... 1100 tokens packed along each row of 2048.
kernels::Sequences documents() {
  kernels::Sequences s;
  s.cu_q.push_back(0);
  int64_t len = 100;
  for (int32_t b = 0; b < 8; ++b)
    for (int64_t pos = 0; pos < 2048;) {
      const int64_t l = std::min<int64_t>(len, 2048 - pos);
      s.row.push_back(b);
      s.start_q.push_back(static_cast<int32_t>(pos));
      s.cu_q.push_back(s.cu_q.back() + static_cast<int32_t>(l));
      pos += l;
      len = len >= 1100 ? 100 : len + 137;
    }
  s.start_k = s.start_q;
  s.cu_k = s.cu_q;
  return s;
}

void rate(benchmark::State& state, double tensors) { bench::logical_rate(state, tensors); }

void Inputs(benchmark::State& state) {
  const Problem p = problem();
  for (auto _ : state) benchmark::DoNotOptimize(make_inputs(p).q.data.data());
  rate(state, 4);
}

void TwoStepEncode(benchmark::State& state) {
  const PhysicalLayout l = physical_layout(problem(), TensorRole::q);
  for (auto _ : state) benchmark::DoNotOptimize(encode(to_physical(q_tensor(), l), DType::bf16).data());
  rate(state, 1);
}

void EncodePhysical(benchmark::State& state) {
  const PhysicalLayout l = physical_layout(problem(), TensorRole::q);
  for (auto _ : state) benchmark::DoNotOptimize(encode_physical(q_tensor(), l, DType::bf16).data());
  rate(state, 1);
}

void TwoStepDecode(benchmark::State& state) {
  const PhysicalLayout l = physical_layout(problem(), TensorRole::q);
  const EncodedBuffer bits = encode_physical(q_tensor(), l, DType::bf16);
  for (auto _ : state) benchmark::DoNotOptimize(from_physical(decode(bits), l, 0.0).data.data());
  rate(state, 1);
}

void DecodePhysical(benchmark::State& state) {
  const PhysicalLayout l = physical_layout(problem(), TensorRole::q);
  const EncodedBuffer bits = encode_physical(q_tensor(), l, DType::bf16);
  for (auto _ : state) benchmark::DoNotOptimize(decode_physical(bits, l, 0.0).data.data());
  rate(state, 1);
}

void EncodeTokens(benchmark::State& state) {
  const kernels::Sequences s = documents();
  for (auto _ : state) benchmark::DoNotOptimize(kernels::encode_tokens(q_tensor(), s, false, DType::bf16).data());
  rate(state, 1);
}

void DecodeTokens(benchmark::State& state) {
  const kernels::Sequences s = documents();
  const EncodedBuffer bits = kernels::encode_tokens(q_tensor(), s, false, DType::bf16);
  for (auto _ : state)
    benchmark::DoNotOptimize(kernels::decode_tokens(bits, q_tensor().shape, s, false, 0.0).data.data());
  rate(state, 1);
}

}  // namespace

BENCHMARK(Inputs)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(TwoStepEncode)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(EncodePhysical)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(TwoStepDecode)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(DecodePhysical)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(EncodeTokens)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(DecodeTokens)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
