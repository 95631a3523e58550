// The `flash` backend: attnbench's own FlashAttention-style fused kernels
// (backends/kernels/) on the problem's padded layout. See README.md here.
#include <memory>
#include <string>

#include "backends/flash/fused_instance.hpp"
#include "harness/device/check.hpp"
#include "harness/device/device.hpp"
#include "harness/model/errors.hpp"

namespace attnbench::fused {
namespace {

class FlashBackend : public Backend {
 public:
  FlashBackend() : deterministic_(env_flag("ATTNBENCH_FLASH_DETERMINISTIC", false)) {}
  std::string name() const override { return "flash"; }
  std::string description() const override {
    return "attnbench's fused FlashAttention-style kernels (Hopper: TMA + wgmma warp-specialised forward and "
           "backward; portable: mma.sync, cp.async; online softmax, dK/dV per key tile with the GQA group inside, "
           "dQ by float32 atomics or, with ATTNBENCH_FLASH_DETERMINISTIC=1, a deterministic kernel); bf16/fp16, "
           "D 64/128; causal, window, padding, prefix_lm, softcap, alibi";
  }
  Device device() const override { return Device::cuda; }
  bool available(std::string* why) const override { return sm80_available("flash", why); }
  Support supports(const Problem& p) const override {
    const std::string why = unsupported_reason(p, Placement::padded);
    return why.empty() ? Support::yes() : Support::no(why);
  }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& in) override {
    const Support s = supports(p);
    if (!s) throw Unsupported(s.reason);
    ATTNBENCH_CHECK(cudaSetDevice(device::selected_device()));
    return make_instance(p, in, {Placement::padded, deterministic_, 0, "flash"});
  }
  bool deterministic() const override { return deterministic_; }

 private:
  bool deterministic_;
};

ATTNBENCH_REGISTER_BACKEND(FlashBackend);

}  // namespace
}  // namespace attnbench::fused
