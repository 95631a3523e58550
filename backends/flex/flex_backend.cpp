// The `flex` backend: FlexAttention's model (a BlockMask of partial and full
// tiles, mask_mod on partial tiles, score_mod on every score, learnable biases
// with gradients) on attnbench's fused kernels (backends/kernels/, the kFlex
// path). See README.md here.
#include <memory>
#include <string>

#include "backends/flex/flex_setup.hpp"
#include "backends/fused/fused_instance.hpp"
#include "backends/kernels/can_implement.hpp"
#include "harness/device/check.hpp"
#include "harness/device/device.hpp"
#include "harness/model/errors.hpp"

namespace attnbench::fused {
namespace {

/// Largest deterministic dBias scratch buffer the backend allocates (bytes).
constexpr int64_t kMaxScratchBytes = int64_t{4} << 30;

class FlexBackend : public Backend {
 public:
  std::string name() const override { return "flex"; }
  std::string description() const override {
    return "FlexAttention-style block-sparse attention on attnbench's fused kernels: the problem's BlockMask "
           "(Q_BLOCK = KV_BLOCK = " + std::to_string(block_) + ", option block) drives the tiles, partial "
           "tiles evaluate mask_mod (contiguous documents as row intervals), or, where their tiles execute fewer "
           "pairs, one packed sequence per document (document masks of contiguous runs) or the flash tiles (masks "
           "of interval terms) (option schedule); "
           "every mask kind and score mod incl. "
           "learnable rel_bias / offset_bias with dBias (" +
           (dbias_ == kernels::DbiasMode::atomic ? "float32 atomics" : "deterministic") +
           ", option dbias); backward on the Hopper kernels where they run (dQ " +
           (bwd_sm90_ ? "by atomics, bwd_path=sm90" : "deterministic") + "); bf16/fp16, D " +
           kernels::instantiated_head_dims() + ", BSHD/BHSD";
  }
  Device device() const override { return Device::cuda; }
  bool available(std::string* why) const override { return sm80_available("flex", why); }
  Support supports(const Problem& p) const override {
    std::string why = unsupported_reason(p, Placement::block_mask);
    if (why.empty()) why = asked_path_reason(p, Placement::block_mask, paths_);
    if (!why.empty()) return Support::no(why);
    if (dbias_ == kernels::DbiasMode::deterministic && flex::dbias_scratch_bytes(p) > kMaxScratchBytes)
      return Support::no("flex: the deterministic dBias scratch would take " +
                         std::to_string(flex::dbias_scratch_bytes(p) >> 20) +
                         " MiB (limit 4096 MiB); dbias=atomic needs none");
    if (bwd_sm90_)
      if (const std::string refusal = flex_bwd_sm90_refusal(p, block_, dbias_); !refusal.empty())
        return Support::no("flex: " + refusal);
    if (schedule_ == FlexSchedule::documents)
      if (const std::string refusal = flex_documents_refusal(p); !refusal.empty())
        return Support::no("flex: schedule=documents: " + refusal);
    if (schedule_ == FlexSchedule::intervals)
      if (const std::string refusal = flex_intervals_refusal(p); !refusal.empty())
        return Support::no("flex: schedule=intervals: " + refusal);
    return Support::yes();
  }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& in) override {
    const Support s = supports(p);
    if (!s) throw Unsupported(s.reason);
    ATTNBENCH_CHECK(cudaSetDevice(device::selected_device()));
    FusedOptions opt{Placement::block_mask, !bwd_sm90_, 1, "flex"};
    opt.block_size = block_;
    opt.dbias = dbias_;
    opt.fwd_path = paths_.fwd;
    opt.bwd_path = paths_.bwd;
    opt.schedule = schedule_;
    opt.persistent = persistent_;
    opt.pingpong = pingpong_;
    opt.next_tile_early = next_tile_early_;
    opt.tile_order = tile_order_;
    return make_instance(p, in, opt);
  }
  /// dQ, dK, dV come without atomics on both paths (unless bwd_path=sm90: dQ by
  /// atomics); dBias too unless dbias=atomic.
  bool deterministic() const override { return dbias_ != kernels::DbiasMode::atomic && !bwd_sm90_; }
  /// fwd_path, bwd_path, block, dbias, schedule, persistent, pingpong, tile_order, next_tile (fused_options.hpp).
  OptionSpecs option_specs() const override { return flex_option_specs(); }

 protected:
  /// bwd_path=sm90 runs the backward on the Hopper dK/dV kernel with dQ by float32
  /// atomics (faster, not bitwise reproducible); auto: the Hopper kernels in the
  /// deterministic mode (dK/dV, then the Hopper dQ kernel) where they can run, else
  /// the portable ones (choose_flex_bwd_path); sm80: the portable ones.
  void apply_options(const OptionValues& v) override {
    paths_ = kernel_paths(v);
    persistent_ = parse_auto_on_off(v.text("persistent"));
    pingpong_ = v.text("pingpong") == "on";
    next_tile_early_ = v.text("next_tile") == "early";
    tile_order_ = parse_tile_order(v.text("tile_order"));
    bwd_sm90_ = paths_.bwd == KernelPath::sm90;
    block_ = static_cast<int>(v.integer("block"));
    const std::string& d = v.text("dbias");
    dbias_ = d == "atomic" ? kernels::DbiasMode::atomic
             : d == "none" ? kernels::DbiasMode::none
                           : kernels::DbiasMode::deterministic;
    const std::string& sc = v.text("schedule");
    schedule_ = sc == "block_mask" ? FlexSchedule::block_mask
                : sc == "documents" ? FlexSchedule::documents
                : sc == "intervals" ? FlexSchedule::intervals
                                    : FlexSchedule::automatic;
  }

 private:
  int block_ = 128;
  kernels::DbiasMode dbias_ = kernels::DbiasMode::deterministic;
  bool bwd_sm90_ = false;
  KernelPaths paths_;
  FlexSchedule schedule_ = FlexSchedule::automatic;
  std::optional<bool> persistent_;  ///< nullopt = auto (FusedOptions::persistent)
  bool pingpong_ = false;           ///< FusedOptions::pingpong
  bool next_tile_early_ = false;    ///< FusedOptions::next_tile_early
  TileOrder tile_order_ = TileOrder::l2_groups;  ///< FusedOptions::tile_order
};

ATTNBENCH_REGISTER_BACKEND(FlexBackend);

}  // namespace
}  // namespace attnbench::fused
