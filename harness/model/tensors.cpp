#include "harness/model/tensors.hpp"

#include <cmath>

#include <Eigen/Core>

#include "harness/model/mask_desc.hpp"
#include "harness/model/thread_pool.hpp"

namespace attnbench {

HostTensor::HostTensor(std::vector<int64_t> s, double fill) : shape(std::move(s)) {
  data.assign(static_cast<size_t>(numel()), fill);
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return shape.empty() ? 0 : n;
}

double round_to(DType t, double x) {
  switch (t) {
    case DType::fp32: return static_cast<double>(static_cast<float>(x));
    case DType::fp16: return static_cast<double>(static_cast<float>(Eigen::half(static_cast<float>(x))));
    case DType::bf16: return static_cast<double>(static_cast<float>(Eigen::bfloat16(static_cast<float>(x))));
  }
  return x;
}

void round_all(DType t, std::vector<double>& v) {
  parallel_chunks(v.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) v[i] = round_to(t, v[i]);
  });
}

double counter_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t h = splitmix64(splitmix64(seed ^ (stream * UINT64_C(0xD1B54A32D192ED03))) + index);
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

double counter_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  // Box-Muller on two uniforms from the counter (2 * index, 2 * index + 1).
  double u1 = counter_uniform(seed, stream, 2 * index);
  double u2 = counter_uniform(seed, stream, 2 * index + 1);
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

namespace {
HostTensor random_tensor(std::vector<int64_t> shape, DType t, uint64_t seed, uint64_t stream) {
  HostTensor out(std::move(shape));
  // Counter-based: element i depends on (seed, stream, i) only, so the chunks
  // give the same tensor on any number of threads.
  parallel_chunks(out.data.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) out.data[i] = round_to(t, counter_normal(seed, stream, i));
  });
  return out;
}
}  // namespace

ProblemData make_inputs(const Problem& p) {
  ProblemData d;
  d.q = random_tensor({p.batch, p.heads_q, p.seq_q, p.head_dim}, p.dtype, p.seed, 1);
  d.k = random_tensor({p.batch, p.heads_kv, p.seq_k, p.head_dim}, p.dtype, p.seed, 2);
  d.v = random_tensor({p.batch, p.heads_kv, p.seq_k, p.head_dim_v}, p.dtype, p.seed, 3);
  d.d_o = random_tensor({p.batch, p.heads_q, p.seq_q, p.head_dim_v}, p.dtype, p.seed, 4);
  d.bias.resize(static_cast<size_t>(p.bias_numel()));
  parallel_chunks(d.bias.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) d.bias[i] = round_to(DType::fp32, counter_normal(p.seed, 5, i));
  });
  d.offset.resize(static_cast<size_t>(p.offset_numel()));
  for (size_t i = 0; i < d.offset.size(); ++i)
    d.offset[i] = static_cast<int32_t>(counter_uniform(p.seed, 6, i) * static_cast<double>(p.score_mod.size));
  return d;
}

}  // namespace attnbench
