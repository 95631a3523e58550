// The `flash` backend: attnbench's own FlashAttention-style fused kernels
// (backends/kernels/) on the problem's padded layout. See README.md here.
#include <memory>
#include <string>

#include "backends/fused/fused_instance.hpp"
#include "backends/kernels/can_implement.hpp"
#include "harness/device/check.hpp"
#include "harness/device/device.hpp"
#include "harness/model/errors.hpp"

namespace attnbench::fused {
namespace {

class FlashBackend : public Backend {
 public:
  std::string name() const override { return "flash"; }
  std::string description() const override {
    return "attnbench's fused FlashAttention-style kernels (Hopper: TMA + wgmma warp-specialised forward and "
           "backward; portable: mma.sync, cp.async; online softmax, dK/dV per key tile with the GQA group inside, "
           "dQ by float32 atomics or, with deterministic=true, a deterministic kernel); bf16/fp16, "
           "D " + kernels::instantiated_head_dims() + "; causal, window, padding, prefix_lm, softcap, alibi";
  }
  Device device() const override { return Device::cuda; }
  bool available(std::string* why) const override { return sm80_available("flash", why); }
  Support supports(const Problem& p) const override {
    std::string why = unsupported_reason(p, Placement::padded);
    if (why.empty()) why = asked_path_reason(p, Placement::padded, paths_);
    return why.empty() ? Support::yes() : Support::no(why);
  }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& in) override {
    const Support s = supports(p);
    if (!s) throw Unsupported(s.reason);
    ATTNBENCH_CHECK(cudaSetDevice(device::selected_device()));
    FusedOptions opt{Placement::padded, deterministic_, 0, "flash"};
    opt.fwd_path = paths_.fwd;
    opt.bwd_path = paths_.bwd;
    opt.fwd_rows = fwd_rows_;
    opt.dq_direct = dq_direct_;
    opt.persistent = persistent_;
    opt.pingpong = pingpong_;
    opt.next_tile_early = next_tile_early_;
    opt.tile_order = tile_order_;
    return make_instance(p, in, opt);
  }
  bool deterministic() const override { return deterministic_; }
  /// fwd_path, bwd_path, fwd_rows, deterministic, dq_direct, persistent, pingpong, tile_order, next_tile
  /// (fused_options.hpp).
  OptionSpecs option_specs() const override { return flash_option_specs(); }

 protected:
  void apply_options(const OptionValues& v) override {
    paths_ = kernel_paths(v);
    persistent_ = parse_auto_on_off(v.text("persistent"));
    pingpong_ = v.text("pingpong") == "on";
    next_tile_early_ = v.text("next_tile") == "early";
    tile_order_ = parse_tile_order(v.text("tile_order"));
    deterministic_ = v.flag("deterministic");
    fwd_rows_ = parse_fwd_rows(v.text("fwd_rows"));
    dq_direct_ = parse_auto_on_off(v.text("dq_direct"));
  }

 private:
  bool deterministic_ = false;
  int fwd_rows_ = 0;  ///< 0 = kernels::fwd_cta_rows' choice
  std::optional<bool> dq_direct_;  ///< nullopt = auto (FusedOptions::dq_direct)
  KernelPaths paths_;
  std::optional<bool> persistent_;  ///< nullopt = auto (FusedOptions::persistent)
  bool pingpong_ = false;           ///< FusedOptions::pingpong
  bool next_tile_early_ = false;    ///< FusedOptions::next_tile_early
  TileOrder tile_order_ = TileOrder::l2_groups;  ///< FusedOptions::tile_order
};

ATTNBENCH_REGISTER_BACKEND(FlashBackend);

}  // namespace
}  // namespace attnbench::fused
