// Host tensors in the logical layout of docs/semantics.md section 1, seeded input
// generation and rounding to the kernel dtype.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/model/problem.hpp"

namespace attnbench {

/// A dense row-major float64 host tensor in a logical layout.
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<double> data;

  HostTensor() = default;
  explicit HostTensor(std::vector<int64_t> s, double fill = 0.0);
  int64_t numel() const;
  double& at4(int64_t a, int64_t b, int64_t c, int64_t d) {
    return data[static_cast<size_t>(((a * shape[1] + b) * shape[2] + c) * shape[3] + d)];
  }
  double at4(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return data[static_cast<size_t>(((a * shape[1] + b) * shape[2] + c) * shape[3] + d)];
  }
};

/// Inputs of one case, logical layout, values already rounded to the problem's
/// dtype (q, k, v, d_o) or to float32 (bias). Shapes: q [B,Hq,Sq,Dqk],
/// k [B,Hkv,Sk,Dqk], v [B,Hkv,Sk,Dv], d_o [B,Hq,Sq,Dv]; bias [bias_numel()]
/// (rel_bias laid out [Hq, 2m+1]); offset [Sk] in [0, size).
struct ProblemData {
  HostTensor q, k, v, d_o;
  std::vector<double> bias;
  std::vector<int32_t> offset;
};

/// Forward and backward results in the logical layout, float64 on the host.
/// o [B,Hq,Sq,Dv], lse [B,Hq,Sq] (natural log, -inf for fully masked rows),
/// dq/dk/dv like q/k/v, dbias like bias. Gradient tensors are empty when only
/// the forward pass ran.
struct AttentionOutputs {
  HostTensor o, lse, dq, dk, dv;
  std::vector<double> dbias;
  bool has_grads() const { return !dq.data.empty(); }
};

/// Round a double to the nearest value representable in `t` (round to nearest
/// even; fp16 and bf16 via Eigen::half / Eigen::bfloat16, fp32 via float).
double round_to(DType t, double x);
/// Round every element in place.
void round_all(DType t, std::vector<double>& v);

/// Standard normal sample number `index` of stream `stream` under `seed`:
/// counter-based (splitmix64 + Box-Muller), so any element can be regenerated
/// independently and results do not depend on the standard library.
double counter_normal(uint64_t seed, uint64_t stream, uint64_t index);
/// Uniform double in [0, 1) from the same counter-based generator.
double counter_uniform(uint64_t seed, uint64_t stream, uint64_t index);

/// Seeded inputs for `p` (seed = p.seed): q, k, v, d_o ~ N(0, 1) rounded to
/// p.dtype; bias ~ N(0, 1) rounded to float32; offset uniform in [0, size).
/// Deterministic: same problem and seed give bit-identical data.
ProblemData make_inputs(const Problem& p);

}  // namespace attnbench
