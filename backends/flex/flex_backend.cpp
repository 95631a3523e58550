// The `flex` backend: FlexAttention's model (a BlockMask of partial and full
// tiles, mask_mod on partial tiles, score_mod on every score, learnable biases
// with gradients) on attnbench's fused kernels (backends/kernels/, the kFlex
// path). See README.md here.
#include <cstdlib>
#include <memory>
#include <string>

#include "backends/flash/fused_instance.hpp"
#include "harness/device/check.hpp"
#include "harness/device/device.hpp"
#include "harness/model/errors.hpp"

namespace attnbench::fused {
namespace {

/// Largest deterministic dBias scratch buffer the backend allocates (bytes).
constexpr int64_t kMaxScratchBytes = int64_t{4} << 30;

/// ATTNBENCH_FLEX_BLOCK: Q_BLOCK = KV_BLOCK of the BlockMask, 64 or 128 (default).
int env_block() {
  const char* v = std::getenv("ATTNBENCH_FLEX_BLOCK");
  if (!v || !*v) return 128;
  const std::string s(v);
  if (s == "64") return 64;
  if (s == "128") return 128;
  throw InputError("environment variable ATTNBENCH_FLEX_BLOCK", "", "value '" + s + "' is not 64 or 128");
}

/// ATTNBENCH_FLEX_DBIAS: deterministic (default), atomic, or none (skip dBias:
/// for measuring its cost; the check then fails dBias).
kernels::DbiasMode env_dbias() {
  const char* v = std::getenv("ATTNBENCH_FLEX_DBIAS");
  if (!v || !*v) return kernels::DbiasMode::deterministic;
  const std::string s(v);
  if (s == "deterministic") return kernels::DbiasMode::deterministic;
  if (s == "atomic") return kernels::DbiasMode::atomic;
  if (s == "none") return kernels::DbiasMode::none;
  throw InputError("environment variable ATTNBENCH_FLEX_DBIAS", "",
                   "value '" + s + "' is not deterministic, atomic or none");
}

/// ATTNBENCH_FLEX_SCHEDULE: the tile schedule (FlexSchedule, fused_instance.hpp):
/// auto (default), block_mask or documents.
FlexSchedule env_schedule() {
  const char* v = std::getenv("ATTNBENCH_FLEX_SCHEDULE");
  if (!v || !*v) return FlexSchedule::automatic;
  const std::string s(v);
  if (s == "auto") return FlexSchedule::automatic;
  if (s == "block_mask") return FlexSchedule::block_mask;
  if (s == "documents") return FlexSchedule::documents;
  throw InputError("environment variable ATTNBENCH_FLEX_SCHEDULE", "",
                   "value '" + s + "' is not auto, block_mask or documents");
}

/// ATTNBENCH_BWD_PATH=sm90 runs the flex backward on the Hopper dK/dV kernel with
/// dQ by float32 atomics (faster, not bitwise reproducible). Unset or auto: the
/// Hopper kernels in the deterministic mode (dK/dV, then the Hopper dQ kernel)
/// where they can run, else the portable ones; sm80: the portable ones. The
/// value itself is checked where the instance is made (choose_flex_bwd_path).
bool env_bwd_sm90() {
  const char* v = std::getenv("ATTNBENCH_BWD_PATH");
  return v && std::string(v) == "sm90";
}

class FlexBackend : public Backend {
 public:
  FlexBackend() : block_(env_block()), dbias_(env_dbias()), bwd_sm90_(env_bwd_sm90()), schedule_(env_schedule()) {}
  std::string name() const override { return "flex"; }
  std::string description() const override {
    return "FlexAttention-style block-sparse attention on attnbench's fused kernels: the problem's BlockMask "
           "(Q_BLOCK = KV_BLOCK = " + std::to_string(block_) + ", ATTNBENCH_FLEX_BLOCK) drives the tiles, partial "
           "tiles evaluate mask_mod (contiguous documents as row intervals), or, for document masks of contiguous "
           "runs where their tiles execute fewer pairs, one packed sequence per document (ATTNBENCH_FLEX_SCHEDULE); "
           "every mask kind and score mod incl. "
           "learnable rel_bias / offset_bias with dBias (" +
           (dbias_ == kernels::DbiasMode::atomic ? "float32 atomics" : "deterministic") +
           ", ATTNBENCH_FLEX_DBIAS); backward on the Hopper kernels where they run (dQ " +
           (bwd_sm90_ ? "by atomics, ATTNBENCH_BWD_PATH=sm90" : "deterministic") + "); bf16/fp16, D 64/128, BSHD/BHSD";
  }
  Device device() const override { return Device::cuda; }
  bool available(std::string* why) const override { return sm80_available("flex", why); }
  Support supports(const Problem& p) const override {
    const std::string why = unsupported_reason(p, Placement::block_mask);
    if (!why.empty()) return Support::no(why);
    if (dbias_ == kernels::DbiasMode::deterministic && dbias_scratch_bytes(p) > kMaxScratchBytes)
      return Support::no("flex: the deterministic dBias scratch would take " +
                         std::to_string(dbias_scratch_bytes(p) >> 20) +
                         " MiB (limit 4096 MiB); ATTNBENCH_FLEX_DBIAS=atomic needs none");
    if (bwd_sm90_)
      if (const std::string refusal = flex_bwd_sm90_refusal(p, block_, dbias_); !refusal.empty())
        return Support::no("flex: " + refusal);
    if (schedule_ == FlexSchedule::documents)
      if (const std::string refusal = flex_documents_refusal(p); !refusal.empty())
        return Support::no("flex: ATTNBENCH_FLEX_SCHEDULE=documents: " + refusal);
    return Support::yes();
  }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& in) override {
    const Support s = supports(p);
    if (!s) throw Unsupported(s.reason);
    ATTNBENCH_CHECK(cudaSetDevice(device::selected_device()));
    FusedOptions opt{Placement::block_mask, !bwd_sm90_, 1, "flex"};
    opt.block_size = block_;
    opt.dbias = dbias_;
    opt.schedule = schedule_;
    return make_instance(p, in, opt);
  }
  /// dQ, dK, dV come without atomics on both paths (unless ATTNBENCH_BWD_PATH=sm90:
  /// dQ by atomics); dBias too unless ATTNBENCH_FLEX_DBIAS=atomic.
  bool deterministic() const override { return dbias_ != kernels::DbiasMode::atomic && !bwd_sm90_; }

 private:
  int block_;
  kernels::DbiasMode dbias_;
  bool bwd_sm90_;
  FlexSchedule schedule_;
};

ATTNBENCH_REGISTER_BACKEND(FlexBackend);

}  // namespace
}  // namespace attnbench::fused
