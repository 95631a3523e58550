// The "cudnn" backend: cuDNN's fused scaled-dot-product attention (flash
// attention forward and backward) driven through the cuDNN backend graph API.
//
//   supports(p)  plan_case() (host rules, version gates; cudnn_plan.hpp), then the
//                fwd and bwd graphs are built (or taken from the plan cache) so that
//                a graph cuDNN rejects is an `unsupported` row with cuDNN's reason,
//                never an error in prepare().
//   prepare()    uploads inputs into the storage of the plan (dense BSHD/BHSD, or
//                token-major rows with ragged offsets for THD and documents),
//                fetches the plans, binds variant packs. Untimed.
//   forward()    cudnnBackendExecute(fwd plan) on the instance's stream, then the
//                fix-ups: fully masked query rows get O = 0 and LSE = -inf, their
//                statistics are set to 0 (finite) for the backward, and LSE is
//                gathered from cuDNN's statistics when their layout differs.
//   backward()   cudnnBackendExecute(bwd plan), then dQ rows of fully masked
//                queries and dK/dV rows of keys no query attends are zeroed
//                (cuDNN does not write rows outside its sequences).
//
// Sharp edges
//  - cuDNN's backward accumulates dQ in float32 with atomics across key tiles: it
//    is not bitwise deterministic (deterministic() is false). The forward is.
//  - setup_ms() = host planning time of prepare() + the measured build time of the
//    fwd and bwd plans. A plan is built once per process per graph (usually in
//    supports()); extra() says whether this prepare() hit the cache.
//  - One process-wide cuDNN handle per device; the instance sets its stream on it
//    before each execute (instances are not thread safe, as the interface says).
#pragma once

#if defined(ATTNBENCH_HAVE_CUDNN)

#include <memory>
#include <string>

#include "backends/cudnn/cudnn_plan.hpp"
#include "harness/backend/backend.hpp"

namespace attnbench::cudnn_sdpa {

/// The Env of the selected device and the loaded cuDNN library (version, sm,
/// device), with the backend options' fields (split_*, seq_order, fullhead,
/// dq_direct, dp_workspace_limit, autotune, cuda_graph) taken from `knobs`.
/// Throws device::DeviceError when no CUDA device answers.
Env current_env(const Env& knobs = Env{});

/// The declared options of the cudnn backend (docs/backend-options.md), one per
/// knob field of Env.
OptionSpecs cudnn_option_specs();

/// The knob fields of an Env from resolved cudnn options. Throws InputError
/// naming the option for a split_bounds value parse_split_bounds() refuses.
Env knobs_from_options(const OptionValues& v);

/// Instance methods beyond BackendInstance, for tests.
class CudnnInstanceApi : public BackendInstance {
 public:
  /// The analysis the instance runs with.
  virtual const CasePlan& plan() const = 0;
  /// True when this prepare() found both plans in the cache.
  virtual bool plan_cache_hit() const = 0;
  /// Workspace bytes of the larger of the two plans (included in allocated_bytes()).
  virtual int64_t plan_workspace_bytes() const = 0;
  /// True when no device buffer was written out of bounds (synchronises).
  virtual bool guards_intact() const = 0;
};

/// The backend registered as "cudnn".
class CudnnBackend : public Backend {
 public:
  std::string name() const override { return "cudnn"; }
  std::string description() const override;
  Device device() const override { return Device::cuda; }
  /// False without a CUDA device or with a cuDNN runtime older than 9.0.
  bool available(std::string* why) const override;
  /// Host rules of plan_case(), then the cuDNN engine check (builds and caches
  /// both plans). Never throws: any failure is a reason.
  Support supports(const Problem& p) const override;
  /// float32 workspaces of the backward graph (dQ accumulator, softmax sums) plus
  /// the plans' workspace when they are built.
  size_t workspace_bytes(const Problem& p) const override;
  /// Throws Unsupported when plan_case() refuses `p`, GraphUnsupported /
  /// DeviceError from cuDNN, DeviceOutOfMemory, std::invalid_argument for inputs
  /// whose shapes do not match `p`. The instance is a CudnnInstanceApi.
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& inputs) override;
  /// The backward pass accumulates dQ with float32 atomics.
  bool deterministic() const override { return false; }
  /// cudnn_option_specs().
  OptionSpecs option_specs() const override { return cudnn_option_specs(); }

 protected:
  void apply_options(const OptionValues& v) override { knobs_ = knobs_from_options(v); }

 private:
  Env knobs_;  ///< the options' fields of Env (current_env(knobs_) adds the device's)
};

}  // namespace attnbench::cudnn_sdpa

#endif  // ATTNBENCH_HAVE_CUDNN
