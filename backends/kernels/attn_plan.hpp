// Host-side launch planning of the fused attention kernels: the work lists
// (query tiles for the forward and the deterministic dQ kernel, key tiles for
// dK/dV), ordered longest work first so that the last wave holds the shortest
// tiles (FlashAttention-3's varlen scheduler sorts the same way), and the
// executed pairs the tiles cover. Pure C++: tested on the CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/kernels/attn_params.hpp"
#include "harness/mask_desc.hpp"

namespace attnbench::kernels {

/// The sequences a launch covers: valid lengths and output lengths per sequence
/// (see AttnParams, "Lengths").
struct SeqLengths {
  std::vector<int32_t> lq, lk;            ///< valid lengths
  std::vector<int32_t> store_q, store_k;  ///< positions whose outputs are written
};

/// Work lists and counts of one problem.
struct TilePlan {
  int pack = 1;        ///< query heads per CTA (GQA packing)
  int tile_rows = 0;   ///< query positions per forward tile (kFwdBlockM / pack)
  std::vector<WorkItem> q_items;  ///< forward and deterministic-dQ tiles, longest first
  std::vector<WorkItem> k_items;  ///< dK/dV tiles, longest first
  int64_t fwd_tiles = 0;          ///< (query tile, key tile) steps per query head
  int64_t executed_pairs = 0;     ///< tile rows x keys of every visited tile, summed over Hq
};

/// Plan `s` under mask `m` (its diagonal / prefix bounds; lengths come from `s`)
/// for heads_q query heads with `pack` heads per forward CTA (1, 2 or 4;
/// must divide kFwdBlockM / 16 and the GQA group). Query tiles cover
/// [0, store_q) in steps of kFwdBlockM / pack; key tiles cover [0, store_k) in
/// steps of kBwdBlockN. Ties keep (sequence, start) order, so the plan is
/// deterministic. Throws std::invalid_argument on a bad pack.
TilePlan plan_tiles(const MaskDesc& m, const SeqLengths& s, int heads_q, int group, int pack);

/// The largest pack in {4, 2, 1} that divides the GQA group (GQA packing for
/// short sequences), or 1 when the mean sequence length is at least kFwdBlockM
/// (long sequences fill whole tiles without it).
int choose_pack(int group, double mean_seq_len);

/// One line describing the plan, for the report row: e.g.
/// "q tiles 64x64 (pack 1): 512 CTAs; k tiles 64: 512 CTAs".
std::string describe(const TilePlan& t, int heads_q, int heads_kv);

}  // namespace attnbench::kernels
