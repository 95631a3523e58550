// The `varlen` backend: packed documents as cu_seqlens sequences on attnbench's
// fused kernels (backends/kernels/), with GQA packing for short documents.
// See README.md here.
#include <memory>
#include <string>

#include "backends/fused/fused_instance.hpp"
#include "harness/device/check.hpp"
#include "harness/device/device.hpp"
#include "harness/model/errors.hpp"

namespace attnbench::fused {
namespace {

class VarlenBackend : public Backend {
 public:
  std::string name() const override { return "varlen"; }
  std::string description() const override {
    return "packed THD sequences on attnbench's fused kernels: the documents of a document mask (cu_seqlens, "
           "padding tokens dropped) or each batch row's valid tokens (cu_seqlens_q / cu_seqlens_k from padding "
           "lengths or THD: Sq != Sk, empty rows, decode); causal (both alignments), sliding_window; GQA heads folded "
           "into the query tile for short sequences, tiles sorted longest first; float32 dQ atomics, a deterministic "
           "dQ kernel with deterministic=true";
  }
  Device device() const override { return Device::cuda; }
  bool available(std::string* why) const override { return sm80_available("varlen", why); }
  Support supports(const Problem& p) const override {
    std::string why = unsupported_reason(p, Placement::documents);
    if (why.empty()) why = asked_path_reason(p, Placement::documents, paths_);
    if (!why.empty()) return Support::no(why);
    if (pack_ > 0 && p.group_size() % pack_ != 0)
      return Support::no("varlen: pack=" + std::to_string(pack_) + " does not divide the GQA group " +
                         std::to_string(p.group_size()));
    return Support::yes();
  }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& in) override {
    const Support s = supports(p);
    if (!s) throw Unsupported(s.reason);
    ATTNBENCH_CHECK(cudaSetDevice(device::selected_device()));
    FusedOptions opt{Placement::documents, deterministic_, pack_, "varlen"};
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
  /// fwd_path, bwd_path, fwd_rows, deterministic, dq_direct, persistent, pingpong, tile_order, next_tile, pack
  /// (fused_options.hpp).
  OptionSpecs option_specs() const override { return varlen_option_specs(); }

 protected:
  void apply_options(const OptionValues& v) override {
    paths_ = kernel_paths(v);
    persistent_ = parse_auto_on_off(v.text("persistent"));
    pingpong_ = v.text("pingpong") == "on";
    next_tile_early_ = v.text("next_tile") == "early";
    tile_order_ = parse_tile_order(v.text("tile_order"));
    deterministic_ = v.flag("deterministic");
    pack_ = static_cast<int>(v.integer("pack"));
    fwd_rows_ = parse_fwd_rows(v.text("fwd_rows"));
    dq_direct_ = parse_auto_on_off(v.text("dq_direct"));
  }

 private:
  bool deterministic_ = false;
  int pack_ = 0;  ///< 0 = the plan's choice
  int fwd_rows_ = 0;  ///< 0 = kernels::fwd_cta_rows' choice
  std::optional<bool> dq_direct_;  ///< nullopt = auto (FusedOptions::dq_direct)
  KernelPaths paths_;
  std::optional<bool> persistent_;  ///< nullopt = auto (FusedOptions::persistent)
  bool pingpong_ = false;           ///< FusedOptions::pingpong
  bool next_tile_early_ = false;    ///< FusedOptions::next_tile_early
  TileOrder tile_order_ = TileOrder::l2_groups;  ///< FusedOptions::tile_order
};

ATTNBENCH_REGISTER_BACKEND(VarlenBackend);

}  // namespace
}  // namespace attnbench::fused
