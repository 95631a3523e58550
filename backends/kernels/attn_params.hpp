// The one parameter struct of attnbench's fused attention kernel family (the
// `flash` and `varlen` backends, and later `flex`), in FlashAttention's terms.
//
// Addressing. Every tensor X of Q, K, V, O, dO, dQ, dK, dV (and the float32 dQ
// accumulator, which has Q's strides) is addressed per sequence b, head h and
// position t inside the sequence as
//     X + b * X_batch_stride + (tok0(b) + t) * X_row_stride + h * X_head_stride
// (elements), where tok0(b) = cu_seqlens_q[b] (cu_seqlens_k[b] for K, V) in the
// packed THD layout and 0 otherwise. So BSHD is {batch: S*H*D, row: H*D, head: D},
// BHSD is {batch: H*S*D, row: D, head: S*D} and THD is {batch: 0, row: H*D,
// head: D} with cu_seqlens. LSE and Dsum (float32) use the same scheme with their
// own strides (lse_*).
//
// Lengths. Sequence b has valid lengths lq(b) / lk(b): seqlens_q/k[b] if given,
// else cu_seqlens differences (THD), else seq_q / seq_k. Positions past the valid
// length are padding: never loaded (zero-filled in shared memory), fully masked as
// queries (O = 0, LSE = -inf, dQ = 0) and never attended as keys (dK = dV = 0).
// Outputs are written for positions t < store_q(b) (store_k(b) for dK / dV):
// seq_q / seq_k in the padded layouts, the valid lengths in THD (padding tokens
// are not stored there).
//
// Mask (docs/semantics.md "Masks"): per query row i the allowed keys are the
// closed interval [lo(i), hi(i)] of mask_row_bounds() (harness/model/mask_desc.hpp,
// beside mask_allowed(), the definition the reference evaluates; the two agree on
// every pair of interval masks, tests/test_attn_plan.cpp): causal in both
// alignments, sliding window, padding, prefix_lm. Score mods: none, softcap, alibi.
//
// The `flex` path (template argument kFlex of the kernels) walks a BlockMask
// instead (BlockMaskView below: the tiles listed for a query or key block,
// partial ones first, then full ones) and evaluates mask_allowed() itself, the
// one definition of every mask kind, on partial tiles (mask.doc_ids and the
// padding lengths then point to device arrays). It adds the learnable-bias score
// mods rel_bias and offset_bias and their gradient dBias.
#pragma once

#include <cstdint>

#include "harness/model/mask_desc.hpp"

namespace attnbench::kernels {

/// Element type of Q, K, V, O and the gradients. The kernels are instantiated
/// for fp16 and bf16; fp32 exists so that can_implement() can name it in its
/// refusal.
enum class ElemType : int32_t { fp16 = 0, bf16 = 1, fp32 = 2 };
/// Score mods the fused kernels implement: ScoreModKind of mask_desc.hpp itself (the
/// learnable biases rel_bias and offset_bias run on the flex path only).
using ModKind = ScoreModKind;
/// Whether score mod m has a learnable bias (rel_bias, offset_bias): the kinds
/// with a dBias, whose terms the flex Hopper kernels stage in shared memory.
constexpr bool learnable_bias(ModKind m) { return m == ModKind::rel_bias || m == ModKind::offset_bias; }

/// How the flex backward produces dBias: not at all, with float32 atomics (one
/// per bias element per key tile and head, after a shared-memory reduction), or
/// deterministically (per-tile partial sums in a scratch buffer, then an ordered
/// reduction kernel).
enum class DbiasMode : int32_t { none = 0, atomic = 1, deterministic = 2 };

/// A BlockMask on the device (harness/model/block_mask.hpp; int32 arrays, the
/// head dimension broadcast: no mask kind depends on the head). Row (b, qb) of
/// the kv lists is at (b % batch) * num_q_blocks + qb; column (b, kb) of the q
/// lists at (b % batch) * num_kv_blocks + kb.
struct BlockMaskView {
  const int32_t* kv_num_blocks = nullptr;       ///< [batch, nQ]
  const int32_t* kv_indices = nullptr;          ///< [batch, nQ, nKV]
  const int32_t* full_kv_num_blocks = nullptr;  ///< [batch, nQ]
  const int32_t* full_kv_indices = nullptr;     ///< [batch, nQ, nKV]
  const int32_t* q_num_blocks = nullptr;        ///< [batch, nKV]
  const int32_t* q_indices = nullptr;           ///< [batch, nKV, nQ]
  const int32_t* full_q_num_blocks = nullptr;   ///< [batch, nKV]
  const int32_t* full_q_indices = nullptr;      ///< [batch, nKV, nQ]
  int32_t q_block = 128;   ///< Q_BLOCK (64 or 128)
  int32_t kv_block = 128;  ///< KV_BLOCK (64 or 128)
  int32_t batch = 1;       ///< B of the arrays (1 = broadcast over the batch)
  int32_t num_q_blocks = 0, num_kv_blocks = 0;
};

/// Pointers, strides (elements), lengths, mask and score-mod constants of one
/// problem. Plain old data, passed by value to every kernel of the family.
struct AttnParams {
  // ---- tensors (element type `dtype`; lse / dsum / dq_accum are float32)
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;   ///< natural log; -inf for fully masked rows
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  float* dq_accum = nullptr;  ///< float32, Q's strides (atomic dQ mode)
  float* dsum = nullptr;      ///< rowsum(dO * O), float32, LSE's strides

  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;  ///< Q, dQ, dQ accumulator
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;  ///< K, dK
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;  ///< V, dV
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;  ///< O, dO
  int64_t lse_batch_stride = 0, lse_row_stride = 0, lse_head_stride = 0;  ///< LSE, Dsum

  // ---- sequences
  int32_t num_seqs = 0;   ///< B (padded layouts) or the number of packed sequences
  int32_t seq_q = 0;      ///< padded Sq (max_seqlen_q in THD)
  int32_t seq_k = 0;      ///< padded Sk (max_seqlen_k in THD)
  const int32_t* cu_seqlens_q = nullptr;  ///< THD: [num_seqs + 1] token offsets
  const int32_t* cu_seqlens_k = nullptr;
  const int32_t* seqlens_q = nullptr;     ///< padding mask: [num_seqs] valid lengths
  const int32_t* seqlens_k = nullptr;

  // ---- heads
  int32_t heads_q = 1, heads_kv = 1;
  int32_t group = 1;      ///< heads_q / heads_kv
  int32_t head_dim = 0;   ///< Dqk
  int32_t head_dim_v = 0; ///< Dv (the kernels run Dv = Dqk only: can_implement)
  /// The TileScheduler's L2 head groups (TileScheduler::decode) of the Hopper
  /// kernels: query-head chunks per group of the forward and dQ tiles, KV heads
  /// per group of the dK/dV tiles; 0 = every head in one group (tile t = item
  /// t / chunks, chunk t % chunks), as the portable kernels always run.
  int32_t q_head_group = 0, kv_head_group = 0;

  // ---- softmax, mask, score mod
  float scale = 1.f;        ///< softmax scale
  float scale_log2 = 1.f;   ///< scale * log2(e)
  MaskDesc mask;           ///< diagonal bounds and prefix_len (no arrays: lengths come from above)
  ModKind mod = ModKind::none;
  float softcap = 0.f;      ///< softcap cap (> 0 when mod == softcap)
  ElemType dtype = ElemType::bf16;

  // ---- flex path: BlockMask, document runs, learnable bias and its gradient
  BlockMaskView bm;
  /// Document runs as key intervals (document_spans(), harness/model/mask.hpp):
  /// [seq_q of `mask` x batch] first / last position of each query position's
  /// document; set instead of mask.doc_ids when every document is one contiguous run,
  /// so that partial tiles compare j against two bounds per row instead of
  /// loading two ids per pair. Null otherwise.
  const int32_t* doc_first = nullptr;
  const int32_t* doc_last = nullptr;
  const float* bias = nullptr;          ///< rel_bias [Hq, 2m+1] or offset_bias [bias_size], float32
  const int32_t* bias_offset = nullptr; ///< offset_bias: [seq_k] indices into bias
  int32_t max_distance = 0;             ///< rel_bias m
  int32_t bias_size = 0;                ///< elements of bias
  DbiasMode dbias_mode = DbiasMode::none;
  float* dbias = nullptr;               ///< float32, like bias
  /// Deterministic dBias partial sums (float32): rel_bias [num_seqs, dbias_tiles,
  /// Hq, 2m+1] (one slot per key tile and head), offset_bias [num_seqs, Hkv, seq_k].
  float* dbias_scratch = nullptr;
  int32_t dbias_tiles = 0;              ///< 64-key tiles per sequence: rel_bias_scratch_tiles(seq_k)
  const int32_t* offset_keys_ptr = nullptr;  ///< offset_bias: [bias_size + 1] CSR row starts into offset_keys
  const int32_t* offset_keys = nullptr;      ///< offset_bias: keys j grouped by offset[j], ascending
};

/// Most sequences one launch takes (the Dsum kernel's grid.z).
constexpr int kMaxSequences = 65535;

/// Largest rel_bias max_distance the flex backward reduces in shared memory
/// (2m + 1 floats per CTA).
constexpr int kMaxRelBiasDistance = 8191;

/// Scratch rows of the deterministic rel_bias dBias per (sequence, query head):
/// one per 64-key tile, rounded up to an even count, 2 ceil(seq_k / 128), since
/// the Hopper dK/dV kernel's second warpgroup writes its (zero) row also where
/// its 64 keys lie past seq_k. The reduction adds every row.
constexpr int64_t rel_bias_scratch_tiles(int64_t seq_k) {
  return 2 * ((seq_k + 127) / 128);
}

/// Tile shapes of the instantiated kernels (rows x keys per CTA, 16 rows per warp).
constexpr int kFwdWarps = 4;     ///< forward: warps per CTA
constexpr int kFwdBlockM = 64;   ///< forward: query rows per CTA with GQA packing (1 m-tile of 16 rows per warp)
constexpr int kFwdBlockMWide = 128;  ///< forward: query rows per CTA without packing (32 rows per warp)
/// Which forward kernel runs: the portable mma.sync kernel (attn_fwd.cuh, sm_80
/// and up) or the Hopper wgmma kernel (attn_fwd_sm90.cuh, sm_90a builds on
/// compute capability 9.0).
enum class FwdPath : int32_t { sm80 = 0, sm90 = 1 };
/// The largest head dim with a wide (128-row) forward tile on a path: portable
/// 128 (two m-tiles per warp: above it O and S outgrow the registers); Hopper 256
/// (two consumer warpgroups of 64 rows, 64-key steps above head dim 128).
constexpr int max_wide_fwd_head_dim(FwdPath path) { return path == FwdPath::sm90 ? 256 : 128; }
/// Forward query rows per CTA for a GQA pack at a head dim on a path (pack 1: the
/// wide tile up to max_wide_fwd_head_dim(path); 64 rows otherwise).
constexpr int fwd_block_m(int pack, int head_dim, FwdPath path = FwdPath::sm80) {
  return pack == 1 && head_dim <= max_wide_fwd_head_dim(path) ? kFwdBlockMWide : kFwdBlockM;
}
/// Forward query rows per CTA of a flex query block of q_block rows by default:
/// the whole block, or its 64-row halves where the path has no 128-row tile at
/// head_dim (max_wide_fwd_head_dim).
constexpr int flex_block_rows(int q_block, int head_dim, FwdPath path) {
  return q_block == kFwdBlockMWide && head_dim > max_wide_fwd_head_dim(path) ? kFwdBlockM : q_block;
}
/// Which dK/dV kernel runs: the portable one (attn_bwd.cuh, both dQ modes) or the
/// Hopper one (attn_bwd_sm90.cuh: wgmma, TMA; atomic dQ, non-flex).
enum class BwdPath : int32_t { sm80 = 0, sm90 = 1 };
constexpr int kFwdBlockN = 64;   ///< forward: keys per mainloop step
/// Forward keys per mainloop step. The wide (pack 1) tile at head_dim 128 holds
/// 2 x 16 rows of O and S per warp and spills 68 bytes per thread (to L1) with 64
/// keys; 32 keys spill nothing but measured slower on the H100 (causal S4096 B4
/// H16 D128 forward: 236 TFLOP/s with 64 keys, 208 with 32), so 64 it is.
/// The one definition of the forward tile shape, by query rows per CTA
/// (`cta_rows`: kFwdBlockMWide or kFwdBlockM): the launcher instantiates the
/// kernel with it and plan_tiles() plans with it.
constexpr int fwd_block_n(int cta_rows, FwdPath path = FwdPath::sm80, int head_dim = 128) {
  // Hopper, 128-row tiles up to head_dim 128: 128 keys per step (m64n128 wgmmas,
  // FlashAttention-3's tile for head_dim 128); above (shared memory: Q 64 KB and two
  // stages of 64 KB of K and V at 256) and for 64-row tiles (GQA-packed, or narrow:
  // fwd_cta_rows), 64.
  return path == FwdPath::sm90 && cta_rows == kFwdBlockMWide && head_dim <= 128 ? 128 : kFwdBlockN;
}
constexpr int kBwdBlockN = 64;   ///< dK/dV: keys per CTA (4 warps)
constexpr int kBwdSm90BlockN = 128;  ///< dK/dV keys per CTA of the Hopper kernel (two warpgroups of 64)
/// dK/dV keys per CTA of a backward path.
constexpr int bwd_block_n(BwdPath path) { return path == BwdPath::sm90 ? kBwdSm90BlockN : kBwdBlockN; }
/// dK/dV: query rows per inner step (portable: 32 from head_dim 96 up, where 64
/// spills registers; Hopper: 64, the wgmma m64 of dQ).
constexpr int bwd_block_m(int head_dim, BwdPath path = BwdPath::sm80) {
  return path == BwdPath::sm90 || head_dim < 96 ? 64 : 32;
}
/// Width of the key blocks whose single-block rows get their dQ stored directly
/// by the Hopper dK/dV kernel (dq_direct_block, attn_tiles.hpp): its CTA's 128
/// keys when each consumer warpgroup's dQ columns sum over all of them (tiles 128
/// wide: head_dim 96, 128), one warpgroup's 64 keys at head_dim 64.
constexpr int dq_direct_block_n(int head_dim) { return head_dim <= 64 ? kBwdSm90BlockN / 2 : kBwdSm90BlockN; }
/// Whether the Hopper kernels written as tile loops (the forward, the
/// deterministic dQ kernel; LaunchShape::persistent) loop at `head_dim`: up to
/// 128. At 256 the forward's consumers hold O (128 floats per thread) and have no
/// register left for the loop's state (ptxas spilled 84-192 bytes per thread),
/// so there each CTA runs its first tile alone. Read by can_implement
/// (persistent_reason) and by the kernels.
constexpr bool persistent_head_dim(int head_dim) { return head_dim <= 128; }
constexpr int kDqBlockM = 64;    ///< deterministic dQ: query rows per CTA
constexpr int kDqBlockN = 64;    ///< deterministic dQ: keys per step

/// One tile of work: sequence `seq` and the first position `start` of its query
/// tile (forward, dQ) or key tile (dK/dV). The kernels read a list of these,
/// ordered longest work first by the host plan (attn_plan.hpp; for the Hopper
/// kernels then sequence by sequence), and TileScheduler::decode maps a tile
/// index (blockIdx.x of the one-tile-per-CTA launches) to (item, head chunk).
struct WorkItem {
  int32_t seq = 0;
  int32_t start = 0;
};
static_assert(sizeof(WorkItem) == 8, "uploaded as two int32 per item");

}  // namespace attnbench::kernels
