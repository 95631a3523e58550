// Head-dimension dispatch of the fused attention kernels.
#include <stdexcept>
#include <string>

#include "backends/kernels/attn_launch.hpp"

namespace attnbench::kernels {

namespace {

/// The kernels map a CTA's rows to (head, position) assuming these; anything
/// else would compute silently wrong rows, so it is refused here.
void check_launch(const AttnParams& p, int pack) {
  if (pack != 1 && pack != 2 && pack != 4)
    throw std::invalid_argument("fused attention: pack " + std::to_string(pack) + " is not 1, 2 or 4");
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0 || p.group != p.heads_q / p.heads_kv || p.group % pack != 0)
    throw std::invalid_argument("fused attention: pack " + std::to_string(pack) + " must divide the GQA group (" +
                                std::to_string(p.heads_q) + " / " + std::to_string(p.heads_kv) + ")");
  if (p.num_seqs > kMaxSequences)
    throw std::invalid_argument("fused attention: " + std::to_string(p.num_seqs) + " sequences exceed " +
                                std::to_string(kMaxSequences) + " (the Dsum launch grid)");
}

}  // namespace

void launch_forward(const AttnParams& p, const WorkItem* q_items, int n_q_items, int pack, cudaStream_t stream) {
  check_launch(p, pack);
  switch (p.head_dim) {
    case 64: return launch_forward_hdim<64>(p, q_items, n_q_items, pack, stream);
    case 128: return launch_forward_hdim<128>(p, q_items, n_q_items, pack, stream);
    default: throw std::invalid_argument("fused attention: no kernel for head_dim " + std::to_string(p.head_dim));
  }
}

void launch_backward(const AttnParams& p, const WorkItem* q_items, int n_q_items, const WorkItem* k_items,
                     int n_k_items, int pack, bool deterministic, int64_t q_numel, cudaStream_t stream) {
  check_launch(p, pack);
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
