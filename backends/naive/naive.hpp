// The naive GPU backend: the plain materialised algorithm.
//
//   forward : S = scale * Q K^T (cuBLAS, float32 out)  -> softmax kernel -> P, LSE
//             O = P V (cuBLAS, problem dtype out)
//   backward: dP = dO V^T (float32) -> softmax-backward kernel -> dS
//             dQ = scale * dS K, dK = scale * dS^T Q, dV = P^T dO (float32 sums
//             over the GQA group, then one rounding to the dtype), dBias.
//
// Every GEMM accumulates in float32 (CUBLAS_COMPUTE_32F, reduced-precision
// reductions disallowed; fp32 problems use true fp32, no TF32). Score buffers
// are [B, Hq, Sq, Sk]: S float32, P in the problem dtype (rounded once, like the
// lp emulation), dP float32, dS in the problem dtype (float32 for fp32).
// Executed pairs = B * Hq * Sq * Sk: everything is computed, masks included.
//
// GQA never copies K/V: batched GEMMs take per-(b, h) pointer arrays where query
// head h points at kv head h / (Hq / Hkv). dK and dV sum over the group in float32
// workspaces: in BHSD the group's query rows are contiguous, so one GEMM per
// (b, kv head) covers the whole group (k = G * Sq); in BSHD they are not, so G
// GEMMs accumulate with beta = 1 (float32, exact order, deterministic).
//
// Memory budget: supports() refuses a problem whose buffers (plan_memory())
// exceed the budget: by default 80% of the free memory of the selected device
// when supports() is asked, or an explicit byte count (set_memory_budget).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "harness/backend/backend.hpp"

namespace attnbench::naive {

/// Device memory the naive backend allocates for a problem (guard bands included).
struct MemoryPlan {
  int64_t pairs = 0;             ///< B * Hq * Sq * Sk
  size_t score_bytes = 0;        ///< S, P, dP, dS buffers
  size_t io_bytes = 0;           ///< Q, K, V, dO, O, LSE, dQ, dK, dV, bias, masks
  size_t workspace_bytes = 0;    ///< float32 dK/dV sums, pointer arrays, bias scratch, cuBLAS workspace
  size_t total_bytes = 0;        ///< sum of the above
  bool separate_dp = false;      ///< dP needs its own buffer (softcap keeps S for its derivative)
  bool separate_ds = false;      ///< dS in the dtype needs its own buffer (fp16 / bf16)
  /// One line, e.g. "scores 2.1 GiB (8 bytes/pair x 268435456 pairs), io 0.1 GiB, workspace 0.03 GiB".
  std::string describe() const;
};
/// The allocation plan of `p` (pure arithmetic; no device needed).
MemoryPlan plan_memory(const Problem& p);

/// cuBLAS workspace each instance owns (bytes).
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
/// Default budget: this fraction of the device's free memory.
constexpr double kDefaultBudgetFraction = 0.8;

/// Instance methods beyond BackendInstance, for tests.
class NaiveInstanceApi : public BackendInstance {
 public:
  /// True when no device buffer of the instance has been written out of bounds.
  /// Synchronises the device.
  virtual bool guards_intact() const = 0;
};

/// The backend registered as "naive".
class NaiveBackend : public Backend {
 public:
  std::string name() const override { return "naive"; }
  std::string description() const override;
  Device device() const override { return Device::cuda; }
  /// False without a CUDA device or on compute capability < 8.0 (bf16 GEMMs;
  /// kernels are built for sm_80 and sm_90a).
  bool available(std::string* why) const override;
  /// Unsupported: THD layout; sizes beyond cuBLAS's int dimensions; a memory
  /// plan over the budget (the reason names both byte counts).
  Support supports(const Problem& p) const override;
  size_t workspace_bytes(const Problem& p) const override;
  /// Uploads inputs (rounded to p.dtype, physical layout), allocates every buffer.
  /// Throws attnbench::Unsupported when supports() says no, DeviceOutOfMemory /
  /// DeviceError on device failures, std::invalid_argument on inputs whose shapes
  /// do not match `p`.
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& inputs) override;
  /// cuBLAS on one stream with a fixed workspace and fixed-order reductions.
  bool deterministic() const override { return true; }
  /// Override of the forward constant (docs/semantics.md section 7 allows documented
  /// per-backend constants): cuBLAS chooses its own k-reduction order (split-K,
  /// tensor-core fragments) for S = QK^T and O = PV, and in fp32 the lp error is only
  /// a few ulp, so reduction-order noise alone reached 2.76x the lp error on O on the
  /// H100 (fp32, softcap, Sq=130, Sk=170). Gradients keep r = 3.
  RuleConstants rule() const override {
    return {3.0, 3.0, "r_fwd = 3: cuBLAS reduction order differs from sequential float32; measured 2.76x on fp32 O"};
  }

  /// Budget in bytes for plan_memory(p).total_bytes; 0 restores the default
  /// (kDefaultBudgetFraction of free device memory).
  void set_memory_budget(size_t bytes) { budget_bytes_ = bytes; }

 private:
  size_t budget_bytes_ = 0;
};

}  // namespace attnbench::naive
