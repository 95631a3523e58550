// Host-side launch planning of the fused attention kernels: the work lists
// (query tiles for the forward and the deterministic dQ kernel, key tiles for
// dK/dV), ordered longest work first so that the last wave holds the shortest
// tiles (FlashAttention-3's varlen scheduler sorts the same way), and the
// executed pairs the tiles cover. Pure C++: tested on the CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <utility>

#include "backends/kernels/attn_params.hpp"
#include "harness/model/block_mask.hpp"
#include "harness/model/dtype_codec.hpp"
#include "harness/model/mask.hpp"
#include "harness/model/mask_desc.hpp"
#include "harness/model/problem.hpp"
#include "harness/model/tensors.hpp"

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
  int tile_rows = 0;   ///< query positions per forward tile (fwd_block_m(pack) / pack)
  int tile_keys = 0;   ///< keys per forward mainloop step (fwd_block_n)
  int dq_tile_rows = 0;  ///< query positions per deterministic-dQ tile (kDqBlockM / pack)
  int bwd_tile_keys = kBwdBlockN;  ///< keys per dK/dV tile (bwd_block_n of the backward path)
  /// Forward, deterministic-dQ and dK/dV tiles, longest first (a Hopper kernel's
  /// list is then regrouped sequence by sequence by its instance, group_by_sequence).
  std::vector<WorkItem> q_items;
  std::vector<WorkItem> dq_items;
  std::vector<WorkItem> k_items;
  int64_t fwd_tiles = 0;          ///< forward (query tile, key tile) steps of one head chunk
  int64_t executed_pairs = 0;     ///< forward: tile rows x keys of every visited tile, summed over Hq
  /// Hopper backward (bwd sm90): valid query rows whose keys lie in one key
  /// block of dq_direct_block_n(head_dim) (dq_row_direct_block), and all valid
  /// query rows; per head. The launch stores the direct rows' dQ in the dK/dV
  /// kernel when they are kDqDirectRowsPercent of the rows (dq_direct_rows_pay).
  int64_t dq_direct_rows = 0;
  int64_t query_rows = 0;
};

/// The Hopper backward with atomic dQ stores the direct rows' dQ itself
/// (LaunchShape::dq_direct) when at least this percentage of the query rows are
/// direct (TilePlan::dq_direct_rows). Measured on an H200
/// (docs/results/2026-11-28-h200-session17.md), backward ms with dq_direct off ->
/// on, the direct rows found once per CTA: packed CodeAlpaca Llama-3-8B (71% of
/// the rows direct) 1.683 -> 1.485; Llama-3.2-1B at head_dim 64 (37%) 1.299 ->
/// 1.291; dense rows where few rows are direct pay a little: causal S2048 D64
/// 0.977 -> 0.981, causal S4096 D128 1.898 -> 1.918, full S8192 D128 5.989 ->
/// 6.018.
constexpr int kDqDirectRowsPercent = 25;

/// Whether plan `t` stores the direct rows' dQ in the Hopper dK/dV kernel
/// (LaunchShape::dq_direct): at least kDqDirectRowsPercent of its query rows are
/// direct.
inline bool dq_direct_rows_pay(const TilePlan& t) {
  return t.query_rows > 0 && t.dq_direct_rows * 100 >= t.query_rows * kDqDirectRowsPercent;
}

/// Plan `s` under mask `m` (its diagonal / prefix bounds; lengths come from `s`)
/// for heads_q query heads of head_dim (which, with the forward kernel `path`,
/// picks the forward key-tile width, fwd_block_n) with `pack` heads per forward CTA (1, 2 or 4;
/// must divide kFwdWarps and the GQA group). Query tiles cover [0, store_q) in
/// steps of fwd_block_m(pack) / pack (kDqBlockM / pack for the dQ kernel); key
/// tiles cover [0, store_k) in steps of bwd_block_n(bwd) (64, or 128 on the
/// Hopper backward), ordered by their query steps of bwd_block_m(head_dim) rows
/// (64 on the Hopper backward; the group multiplies every cost alike). Ties keep
/// (sequence, start) order, so the plan is deterministic. Throws
/// std::invalid_argument on a bad pack.
/// fwd_rows: query rows per forward CTA (fwd_cta_rows; 0 = its automatic choice).
TilePlan plan_tiles(const MaskDesc& m, const SeqLengths& s, int heads_q, int group, int pack, int head_dim,
                    FwdPath path = FwdPath::sm80, BwdPath bwd = BwdPath::sm80, int fwd_rows = 0);

/// The Hopper forward without GQA packing runs 64-row CTAs of 64-key steps (one
/// consumer warpgroup, 112 KB of shared memory at head_dim 128: two CTAs per SM)
/// instead of 128-row CTAs of 128-key steps (one per SM) when their tiles execute
/// at most this percentage of the wide tiles' pairs. Measured on the H100
/// (docs/results/2026-11-27-h100-session12.md, flash forward, 128 -> 64 rows):
/// causal sliding window 256 at S8192 (83% of the pairs) 0.532 -> 0.415 ms; dense
/// rows at equal pairs 0-8% slower (full S1024 D128 0.335 -> 0.360 ms) and causal
/// S1024 D128 (95% of the pairs) 0.312 -> 0.440 ms: the narrow tile pays only
/// where it cuts work.
constexpr int64_t kNarrowFwdPairsPercent = 85;

/// Query rows per forward CTA (pack heads x tile rows) of plan_tiles at head_dim:
/// `fwd_rows` when it is not 0 (64, or 128 as fwd_rows_reason allows);
/// otherwise fwd_block_m(pack, head_dim), except on the Hopper forward without
/// GQA packing, where it is 64 if the 64-row tiles (64-key steps) under `m` and
/// `s` execute at most kNarrowFwdPairsPercent of the pairs of the 128-row tiles
/// (128-key steps), else 128. Throws std::invalid_argument for a fwd_rows
/// fwd_rows_reason refuses.
int fwd_cta_rows(const MaskDesc& m, const SeqLengths& s, int pack, FwdPath path, int fwd_rows, int head_dim);

/// Work lists of the flex path for a BlockMask `bm` (block sizes 64 or 128) of a
/// padded batch of `batch` rows with heads_q query heads: forward items are
/// `fwd_rows`-row tiles of the query blocks (64 with q_block 128: two CTAs per block
/// walking its lists; 0 = flex_fwd_rows(bm, sm80, head_dim): one CTA per block up to
/// head_dim 128), dQ items the kDqBlockM-row
/// tiles, dK/dV items the bwd_block_n(bwd)-key tiles (the Hopper backward's
/// 128 need kv_block 128), each ordered by the blocks its lists hold (longest
/// first; ties in (row, start) order). Every tile is listed, also those with no
/// block (they write O = 0, LSE = -inf, zero gradients). executed_pairs =
/// bm.executed_pairs_per_head(batch) * heads_q. Throws std::invalid_argument for
/// other block sizes, a batch that does not match bm, or a dK/dV tile that is
/// not inside one KV block.
TilePlan plan_block_tiles(const BlockMask& bm, int64_t batch, int heads_q, BwdPath bwd = BwdPath::sm80,
                          int fwd_rows = 0, int head_dim = 128);

/// Regroup a longest-first work list sequence by sequence (stable): the
/// sequences in the order of their first (longest) item, each one's items in
/// list order. With L2 head groups (TileScheduler::decode) the CTAs running at
/// once then work on the heads of one or a few sequences, whose K / V (dK/dV:
/// Q / dO) stay in L2; a list that ends with short items still does (the last
/// sequence's).
void group_by_sequence(std::vector<WorkItem>& items);

/// The share of the device's L2 that the tiles running at once should stream:
/// 1 / kL2GroupDivisor (the budget of l2_head_group). A quarter measured slower
/// than no head groups at S8192 (H200, dense D128 causal forward +5%, backward
/// +4%, docs/results/2026-11-29-h200-session25.md): the whole L2.
constexpr int kL2GroupDivisor = 1;

/// Head chunks per L2 group (AttnParams::q_head_group / kv_head_group): whole
/// KV heads, at most as many as `budget_bytes` holds at `kv_head_bytes` each
/// (at least one), in as few groups as that allows and of even sizes (16 heads
/// of which 15 fit: two groups of 8, not 15 and 1), times `chunks_per_kv_head`
/// (the chunks that read one KV head's operands: group / pack for forward and
/// dQ tiles, 1 for dK/dV tiles); 0 (one group) when every head fits. Throws std::invalid_argument for
/// a non-positive kv_head_bytes, chunks_per_kv_head or head_chunks.
int l2_head_group(int64_t budget_bytes, int64_t kv_head_bytes, int chunks_per_kv_head, int head_chunks);

/// Key steps (of kFwdBlockN keys) per query block above which the Hopper flex
/// forward keeps one 128-row CTA per block: below, each block's two 64-row halves
/// run as CTAs of their own (two per SM, as varlen's packed tiles), since a short
/// walk leaves a lone 128-row CTA per SM waiting on its Q load and O store. H100,
/// packed CodeAlpaca Llama-3-8B (about 6 steps per block): docs/results/2026-11-27-h100-session11.md.
constexpr int kFlexShortWalkSteps = 16;

/// Query rows per forward CTA of the flex path: 64 for 128-row blocks above head
/// dim max_wide_fwd_head_dim(path) and on the Hopper forward (`path` FwdPath::sm90) for
/// 128-row blocks whose mean key steps per query block are at most
/// kFlexShortWalkSteps, else bm.q_block.
int flex_fwd_rows(const BlockMask& bm, FwdPath path, int head_dim);

/// CSR of the inverse of an offset_bias table: for each bias entry e in [0, size),
/// the keys j with offset[j] = e in ascending order, as keys[ptr[e] .. ptr[e+1]).
/// Throws std::invalid_argument for an offset outside [0, size).
void offset_keys_csr(const std::vector<int32_t>& offset, int64_t size, std::vector<int32_t>* ptr,
                     std::vector<int32_t>* keys);

/// The largest pack in {4, 2, 1} that divides the GQA group (GQA packing for
/// short sequences), or 1 when the mean sequence length is at least
/// 4 * kFwdBlockM (long sequences fill whole tiles without it). Measured on the
/// H100 (docs/results/2026-11-24-h100-session6.md): CodeAlpaca packs (mean 175
/// tokens) forward 0.866 -> 0.757 ms with pack 4, tile efficiency 0.57 -> 0.70.
int choose_pack(int group, double mean_seq_len);

/// The packed sequences of a problem: sequence s is batch row row[s], positions
/// [start_q[s], start_q[s] + len) of it (start_k for keys), stored as tokens
/// [cu_q[s], cu_q[s + 1]) of the packed [T, H, D] buffers (cu_k for K, V).
struct Sequences {
  std::vector<int32_t> row, start_q, start_k, cu_q, cu_k;
  int64_t size() const { return static_cast<int64_t>(row.size()); }
};

/// Document runs (start, length) of batch row b in order: doc_lengths when given
/// (zero-length documents kept, as cu_seqlens entries of length 0), else the
/// maximal runs of equal id >= 0 of doc_ids (padding, id -1, is no document).
/// Returns false when an id forms two runs (not expressible as one sequence).
bool document_runs(const DocumentTerm& d, size_t b, int64_t seq, std::vector<std::pair<int64_t, int64_t>>* out);

/// cu_seqlens of a document mask: every document of every row, in order, one
/// sequence (cu_q = cu_k, as PyTorch's varlen_attn tutorial builds them from
/// EOS positions; padding tokens are not stored). Throws std::invalid_argument
/// when p has no document mask or ids are not contiguous.
Sequences document_sequences(const Problem& p);
/// One sequence per batch row with its valid lengths (the THD layout).
Sequences row_sequences(const Problem& p);

/// Gather logical [B, H, S, D] into packed [T, H, D] (the q side: cu_q / start_q;
/// the k side for K and V: cu_k / start_k).
std::vector<double> gather_tokens(const HostTensor& t, const Sequences& s, bool k_side);
/// Scatter packed [T, H, D] back to logical `shape` [B, H, S, D]; positions not
/// stored read `fill`.
HostTensor scatter_tokens(const std::vector<double>& packed, std::vector<int64_t> shape, const Sequences& s,
                          bool k_side, double fill);
/// gather_tokens and the dtype-`dt` encoding in one pass on the pass pool: bit for
/// bit encode(gather_tokens(t, s, k_side), dt) (harness/model/dtype_codec.hpp).
EncodedBuffer encode_tokens(const HostTensor& t, const Sequences& s, bool k_side, DType dt);
/// Decoding and scatter_tokens in one pass: bit for bit
/// scatter_tokens(decode(packed), shape, s, k_side, fill). Throws
/// std::invalid_argument when packed.count is not the tokens' T * H * D.
HostTensor decode_tokens(const EncodedBuffer& packed, std::vector<int64_t> shape, const Sequences& s, bool k_side,
                         double fill);

/// One line describing the plan, for the report row: e.g.
/// "q tiles 128x64 (pack 1): 512 CTAs; k tiles 64: 512 CTAs".
std::string describe(const TilePlan& t, int heads_q, int heads_kv);

/// The mask the flex kernels evaluate on partial tiles of BlockMask `bm` for
/// problem p (mask terms at the granularity they vary; docs/semantics.md
/// section 3 defines them all through mask_allowed()):
/// - `mask`: make_mask_desc(p, arrays) with the document ids dropped when every
///   document is a contiguous run (then `doc_first` / `doc_last`, document_spans(),
///   give each row's run as a key interval) and block_sparse dropped when both block
///   sizes divide kBlockSparseBlock (the BlockMask then lists exactly the kept
///   blocks, so no listed pair is rejected by it);
/// - the kernels' decision for a pair (b, i, j): not listed -> masked; listed full ->
///   allowed; listed partial -> flex_row_bounds() allows j and, where
///   mask_needs_pairs(mask), mask_allowed(mask, ...). tests/test_attn_plan.cpp checks
///   that this equals mask_allowed() of the problem on every pair.
/// `arrays` must outlive the form (the padding lengths and any remaining document
/// ids point into it).
struct FlexMaskForm {
  MaskDesc mask;
  std::vector<int32_t> doc_first, doc_last;  ///< [batch x seq_q], empty without contiguous documents
};
FlexMaskForm flex_mask_form(const Problem& p, MaskArrays& arrays, const BlockMask& bm);

}  // namespace attnbench::kernels
