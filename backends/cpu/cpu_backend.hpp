// The `cpu` backend: a tiled float32 CPU implementation of FlashAttention-2
// (Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism and
// Work Partitioning", Algorithm 1 forward, Algorithm 2 backward) driven by a
// FlexAttention BlockMask (harness/model/block_mask.hpp).
//
// It is the executable specification of the GPU kernels of this project: the
// same tile walk (partial tiles evaluate the mask, full tiles skip it, empty
// tiles are never visited), the same online softmax, the same recomputation of
// P from the LSE in the backward pass. It also makes `attnbench run` useful on
// machines without a GPU.
//
// Registered as "cpu" (one line in cpu_backend.cpp). Tests construct it with
// CpuBackendOptions to obtain deliberately broken variants and prove that the
// correctness rule (harness/check/check.hpp) catches them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "harness/backend/backend.hpp"

namespace attnbench {

/// Query rows per tile (FlashAttention-2's B_r) of the cpu backend.
inline constexpr int64_t kCpuQBlock = 64;
/// Key columns per tile (FlashAttention-2's B_c) of the cpu backend.
inline constexpr int64_t kCpuKVBlock = 64;

/// Test-only switches that break the backend on purpose, so that a test can show
/// the correctness rule rejects each defect. The default value is the correct
/// backend; the registered "cpu" backend always uses the defaults.
struct CpuBackendOptions {
  /// Treat every partial tile as full: mask_allowed() is never evaluated (forward
  /// and backward), so masked pairs are attended.
  bool drop_mask = false;
  /// Multiply the softmax scale by this factor (1 = correct).
  double scale_factor = 1.0;
  /// Skip one computed tile: the first tile of the forward walk of (b = 0, h = 0,
  /// q-block 0), in the forward and the backward pass. A no-op when that q-block
  /// has no tile.
  bool skip_one_block = false;
  /// Worker threads of the passes (the declared option `threads`); 0 = every
  /// thread of the shared pool. Results do not depend on it (deterministic tasks).
  int threads = 0;
};

/// The `cpu` backend (Device::cpu). Supports every problem validate() accepts:
/// all mask kinds and score mods, GQA/MQA (head mapping h / (Hq/Hkv), K and V never
/// copied), Sq != Sk, Dqk != Dv, layouts bshd, bhsd and thd, dtypes fp32, fp16 and
/// bf16. Inputs are held as float32 in the physical layout; O, dQ, dK, dV are
/// rounded to the dtype on write, LSE and dBias are float32. Scores are float32,
/// sums float64 (the precision policy in cpu_attention.hpp says why). Uses the
/// default correctness rule. Deterministic: work is split into tasks whose results
/// do not depend on the thread that runs them or on the thread count, and every
/// reduction has a fixed order.
class CpuBackend : public Backend {
 public:
  /// The registered, correct backend.
  CpuBackend() = default;
  /// A backend with test-only defects (see CpuBackendOptions).
  explicit CpuBackend(CpuBackendOptions options) : options_(options) {}

  /// "cpu".
  std::string name() const override { return "cpu"; }
  /// One line for `attnbench list backends` (names the tile size).
  std::string description() const override;
  /// Device::cpu.
  Device device() const override { return Device::cpu; }
  /// Yes for every problem that passes validate(); the validation message otherwise.
  Support supports(const Problem& p) const override;
  /// Bytes beyond inputs and outputs: per-thread tile scratch and float64 dQ sums
  /// [Hq/Hkv, Sq, Dqk] (cpu_kernels::scratch_bytes), per-task float64 dBias partial
  /// sums, and the float64 O and LSE the forward saves for the backward (logical
  /// sizes, an upper bound for THD).
  size_t workspace_bytes(const Problem& p) const override;
  /// Converts `inputs` to float32 in the problem's physical layout and builds the
  /// BlockMask with build_block_mask(p, kCpuQBlock, kCpuKVBlock) (its build time is
  /// setup_ms(); executed_pairs() is its executed pairs per head times Hq).
  /// Throws std::invalid_argument when an input's shape, the bias length or an
  /// offset value does not match `p`. The instance's backward() throws
  /// std::logic_error unless forward() ran after the last poison_outputs().
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& inputs) override;
  /// True: two runs of a prepared case give bitwise identical outputs.
  bool deterministic() const override { return true; }
  /// `threads` (int 0..4096, default 0 = every hardware thread): worker threads of
  /// the forward and backward passes (capped at the shared pool's size).
  OptionSpecs option_specs() const override;

  /// The options this backend was built with.
  const CpuBackendOptions& options() const { return options_; }

 private:
  CpuBackendOptions options_;

 protected:
  /// Sets options_.threads from the resolved `threads`.
  void apply_options(const OptionValues& values) override;
};

}  // namespace attnbench
