// Head-dimension dispatch of the fused attention kernels.
#include <stdexcept>
#include <string>

#include "backends/kernels/attn_launch.hpp"

namespace attnbench::kernels {

void launch_forward(const AttnParams& p, const WorkItem* q_items, int n_q_items, int pack, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: return launch_forward_hdim<64>(p, q_items, n_q_items, pack, stream);
    case 128: return launch_forward_hdim<128>(p, q_items, n_q_items, pack, stream);
    default: throw std::invalid_argument("fused attention: no kernel for head_dim " + std::to_string(p.head_dim));
  }
}

void launch_backward(const AttnParams& p, const WorkItem* q_items, int n_q_items, const WorkItem* k_items,
                     int n_k_items, int pack, bool deterministic, int64_t q_numel, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64:
      return launch_backward_hdim<64>(p, q_items, n_q_items, k_items, n_k_items, pack, deterministic, q_numel, stream);
    case 128:
      return launch_backward_hdim<128>(p, q_items, n_q_items, k_items, n_k_items, pack, deterministic, q_numel,
                                       stream);
    default: throw std::invalid_argument("fused attention: no kernel for head_dim " + std::to_string(p.head_dim));
  }
}

}  // namespace attnbench::kernels
