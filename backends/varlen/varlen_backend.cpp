// The `varlen` backend: packed documents as cu_seqlens sequences on attnbench's
// fused kernels (backends/kernels/), with GQA packing for short documents.
// See README.md here.
#include <cstdlib>
#include <memory>
#include <string>
#include <string>

#include "backends/flash/fused_instance.hpp"
#include "harness/device/check.hpp"
#include "harness/device/device.hpp"
#include "harness/model/errors.hpp"

namespace attnbench::fused {
namespace {

class VarlenBackend : public Backend {
 public:
  VarlenBackend() : deterministic_(env_flag("ATTNBENCH_VARLEN_DETERMINISTIC", false)) {}
  std::string name() const override { return "varlen"; }
  std::string description() const override {
    return "packed THD sequences on attnbench's fused kernels: the documents of a document mask (cu_seqlens, "
           "padding tokens dropped) or each batch row's valid tokens (cu_seqlens_q / cu_seqlens_k from padding "
           "lengths or THD: Sq != Sk, empty rows, decode); causal (both alignments), sliding_window; GQA heads folded "
           "into the query tile for short sequences, tiles sorted longest first; float32 dQ atomics, a deterministic "
           "dQ kernel with ATTNBENCH_VARLEN_DETERMINISTIC=1";
  }
  Device device() const override { return Device::cuda; }
  bool available(std::string* why) const override { return sm80_available("varlen", why); }
  Support supports(const Problem& p) const override {
    const std::string why = unsupported_reason(p, Placement::documents);
    return why.empty() ? Support::yes() : Support::no(why);
  }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& in) override {
    const Support s = supports(p);
    if (!s) throw Unsupported(s.reason);
    ATTNBENCH_CHECK(cudaSetDevice(device::selected_device()));
    FusedOptions opt{Placement::documents, deterministic_, 0, "varlen"};
    if (const char* v = std::getenv("ATTNBENCH_VARLEN_PACK"); v && *v) {
      const std::string text(v);
      opt.pack = text == "1" ? 1 : text == "2" ? 2 : text == "4" ? 4 : 0;
      if (opt.pack == 0)
        throw InputError("environment variable ATTNBENCH_VARLEN_PACK", "", std::string("value '") + v +
                                                                            "' is not 1, 2 or 4");
      if (p.group_size() % opt.pack != 0)
        throw Unsupported("varlen: ATTNBENCH_VARLEN_PACK=" + std::string(v) + " does not divide the GQA group " +
                          std::to_string(p.group_size()));
    }
    return make_instance(p, in, opt);
  }
  bool deterministic() const override { return deterministic_; }

 private:
  bool deterministic_;
};

ATTNBENCH_REGISTER_BACKEND(VarlenBackend);

}  // namespace
}  // namespace attnbench::fused
