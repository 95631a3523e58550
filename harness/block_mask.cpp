// PLACEHOLDER: replaced by the BlockMask implementation.
#include "harness/block_mask.hpp"
#include <stdexcept>
namespace attnbench {
BlockKind BlockMask::kind(int64_t, int64_t, int64_t, int64_t) const { throw std::logic_error("BlockMask not implemented yet"); }
int64_t BlockMask::executed_pairs_per_head(int64_t) const { throw std::logic_error("BlockMask not implemented yet"); }
int64_t BlockMask::num_partial() const { throw std::logic_error("BlockMask not implemented yet"); }
int64_t BlockMask::num_full() const { throw std::logic_error("BlockMask not implemented yet"); }
BlockMask build_block_mask(const Problem&, int64_t, int64_t) { throw std::logic_error("BlockMask not implemented yet"); }
std::string render_block_mask(const BlockMask&, int64_t, int64_t) { throw std::logic_error("BlockMask not implemented yet"); }
}  // namespace attnbench
