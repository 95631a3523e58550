// The PyTorch peers: the five attention paths of PyTorch that attnbench runs out
// of process through the worker package attnbench_torch/ (backends/peers/README.md),
// their names, descriptions and options, and their registration as backends.
#pragma once

#include <cstdint>

#include "backends/peers/peer_backend.hpp"

namespace attnbench::peers {

/// PyTorch's attention paths (the worker package backends/peers/attnbench_torch/).
enum class TorchPeer { sdpa_flash, sdpa_cudnn, sdpa_efficient, flex, varlen };
/// Backend and request name: "torch-sdpa-flash", "torch-sdpa-cudnn",
/// "torch-sdpa-efficient", "torch-flex", "torch-varlen".
const char* torch_peer_name(TorchPeer k);
/// The options of a PyTorch peer: torch-flex declares compile_mode
/// (default | max-autotune-no-cudagraphs | max-autotune: torch.compile's mode for
/// flex_attention); the SDPA paths are backends of their own (torch-sdpa-flash,
/// -cudnn, -efficient) and varlen_attn has no variant knob: none.
OptionSpecs torch_peer_option_specs(TorchPeer k);

/// One PyTorch peer backend.
class TorchPeerBackend : public PeerBackend {
 public:
  explicit TorchPeerBackend(TorchPeer kind, LaunchConfig cfg = {});
  TorchPeer kind() const { return kind_; }

 protected:
  /// torch_peer_supports(kind(), p) (torch_peer_rules.hpp).
  Support static_support(const Problem& p) const override;
  /// torch_peer_executed_pairs(kind(), p) (torch_peer_rules.hpp).
  int64_t estimate_executed_pairs(const Problem& p) const override;

 public:
  /// torch_peer_option_specs(kind()).
  OptionSpecs option_specs() const override { return torch_peer_option_specs(kind_); }

 private:
  TorchPeer kind_;
};

/// Default-constructible registration types, one per PyTorch path.
template <TorchPeer K>
class TorchPeerT final : public TorchPeerBackend {
 public:
  TorchPeerT() : TorchPeerBackend(K) {}
};
using TorchSdpaFlash = TorchPeerT<TorchPeer::sdpa_flash>;
using TorchSdpaCudnn = TorchPeerT<TorchPeer::sdpa_cudnn>;
using TorchSdpaEfficient = TorchPeerT<TorchPeer::sdpa_efficient>;
using TorchFlex = TorchPeerT<TorchPeer::flex>;
using TorchVarlen = TorchPeerT<TorchPeer::varlen>;

}  // namespace attnbench::peers
