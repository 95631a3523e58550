// What each PyTorch peer can run and how it runs it, known without starting the
// worker: the static support rules (the same as attnbench_torch/support.py; a test
// compares them), the mask form the worker uses, and the executed-pair estimate.
#pragma once

#include <cstdint>
#include <string>

#include "backends/peers/torch_peers.hpp"

namespace attnbench::peers {

/// The static rules of the worker's static_support() (attnbench_torch/support.py) (kept identical; a test
/// compares them): layouts, dtypes, score mods, head dims and masks per path.
Support torch_peer_supports(TorchPeer k, const Problem& p);
/// How the torch worker expresses the mask: "none", "is_causal", "dense" (a
/// boolean attn_mask), "block_mask" (flex) or "sequences" (varlen).
std::string torch_peer_mask_plan(TorchPeer k, const Problem& p);
/// Executed pairs (docs/semantics.md section 8) per path: flex, and SDPA with is_causal or
/// no mask, the 128x128 BlockMask of the problem; SDPA with a dense mask, every
/// pair; varlen, the 128x128 tiles of each sequence (document or row) under its
/// causal / window bounds. Estimates of the kernels' own tiling, except for flex.
int64_t torch_peer_executed_pairs(TorchPeer k, const Problem& p);

}  // namespace attnbench::peers
