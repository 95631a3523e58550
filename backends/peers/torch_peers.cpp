// The PyTorch peers' catalogue and registrations (torch_peers.hpp).
#include "backends/peers/torch_peers.hpp"

#include <string>
#include <utility>

#include "backends/peers/torch_peer_rules.hpp"

namespace attnbench::peers {

const char* torch_peer_name(TorchPeer k) {
  switch (k) {
    case TorchPeer::sdpa_flash: return "torch-sdpa-flash";
    case TorchPeer::sdpa_cudnn: return "torch-sdpa-cudnn";
    case TorchPeer::sdpa_efficient: return "torch-sdpa-efficient";
    case TorchPeer::flex: return "torch-flex";
    case TorchPeer::varlen: return "torch-varlen";
  }
  return "torch-unknown";
}

namespace {

std::string description_of(TorchPeer k) {
  switch (k) {
    case TorchPeer::sdpa_flash:
      return "PyTorch F.scaled_dot_product_attention restricted to FLASH_ATTENTION (out-of-process peer)";
    case TorchPeer::sdpa_cudnn:
      return "PyTorch F.scaled_dot_product_attention restricted to CUDNN_ATTENTION (out-of-process peer)";
    case TorchPeer::sdpa_efficient:
      return "PyTorch F.scaled_dot_product_attention restricted to EFFICIENT_ATTENTION (out-of-process peer)";
    case TorchPeer::flex:
      return "PyTorch flex_attention under torch.compile with a BlockMask (out-of-process peer)";
    case TorchPeer::varlen:
      return "PyTorch torch.nn.attention.varlen.varlen_attn on packed sequences (out-of-process peer)";
  }
  return "PyTorch peer";
}

}  // namespace

OptionSpecs torch_peer_option_specs(TorchPeer k) {
  if (k != TorchPeer::flex) return {};
  return {OptionSpec::choice("compile_mode", "default", {"default", "max-autotune-no-cudagraphs", "max-autotune"},
                             "torch.compile mode of flex_attention (max-autotune: Triton autotuning of the kernel)")};
}

TorchPeerBackend::TorchPeerBackend(TorchPeer kind, LaunchConfig cfg)
    : PeerBackend(torch_peer_name(kind), torch_peer_name(kind), description_of(kind), std::move(cfg)), kind_(kind) {}

Support TorchPeerBackend::static_support(const Problem& p) const { return torch_peer_supports(kind_, p); }

int64_t TorchPeerBackend::estimate_executed_pairs(const Problem& p) const {
  return torch_peer_executed_pairs(kind_, p);
}

// One line each (harness/backend/backend.hpp).
ATTNBENCH_REGISTER_BACKEND(TorchSdpaFlash);
ATTNBENCH_REGISTER_BACKEND(TorchSdpaCudnn);
ATTNBENCH_REGISTER_BACKEND(TorchSdpaEfficient);
ATTNBENCH_REGISTER_BACKEND(TorchFlex);
ATTNBENCH_REGISTER_BACKEND(TorchVarlen);

}  // namespace attnbench::peers
