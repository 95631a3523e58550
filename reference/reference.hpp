// The float64 Eigen reference (gold) and the low-precision emulation (lp) of
// docs/semantics.md section 7, with exactly the semantics of its sections 1-5.
//
// Both run the same tiled algorithm over the problem's BlockMask
// (harness/model/block_mask.hpp), walked with for_each_tile / for_each_tile_of_col:
// empty tiles are never computed, partial tiles evaluate mask_allowed() (FlexAttention's
// mask_mod) per element, full tiles skip the mask; score mods go through
// score_mod_apply() / score_mod_grad() (score_mod) of harness/model/mask_desc.hpp, the
// one definition the cpu backend and the GPU kernels use too. The work is shaped as
// GEMMs (Eigen matrix products) on panels: a forward / dQ unit stacks the query heads
// of one kv head (GQA) over consecutive q-blocks up to 128 rows, a dK / dV unit takes
// 128 consecutive keys, and runs of consecutive computed tiles (up to 256 keys or
// queries) are multiplied at once. A panel computes the union of its lines' tiles (a
// tile is mask-free only when full on every line), so the cost is proportional to
// the pairs inside computed tiles plus these panel edges, and memory is
// O(threads * 128 * 256) on top of the inputs and outputs; Sq x Sk is never
// materialised. Units run on the shared pool (harness/model/thread_pool.hpp).
//
// Passes (FlashAttention-2, Dao 2023, "FlashAttention-2: Faster Attention with
// Better Parallelism and Work Partitioning", algorithms 1 and 2):
//   forward, one unit per (b, h, q-block):
//     S = score_mod(scale * Q K^T), masked to -inf; P = exp(S - LSE); O = P V;
//     LSE = log sum_j exp(S_ij)   (gold: online softmax, float64)
//   backward dQ, one unit per (b, h, q-block), and dK/dV, one per (b, kv-head, kv-block):
//     D_i = sum_d dO_id O_id (gold) | sum_j P_ij dP_ij (lp: the autograd form);
//     dP = dO V^T; dS' = P o (dP - D) (gradient of the modified score);
//     dS = dS' o score_mod'(scale Q K^T); dV = P^T dO; dQ = scale dS K;
//     dK = scale dS^T Q; dBias[idx(h, i, j)] += dS'_ij.
//   dK and dV of a kv head sum over its query-head group (GQA).
// Splitting the backward into a dQ pass and a dK/dV pass (instead of FA-2's
// atomic dQ accumulation) recomputes S and dP once more but keeps every output
// written by exactly one unit: results are bitwise deterministic and independent
// of the thread count (dBias is summed in a fixed number of lanes, see gold()).
#pragma once

#include <cstdint>
#include <vector>

#include "harness/model/problem.hpp"
#include "harness/model/tensors.hpp"

namespace attnbench::reference {

/// Which (batch, kv-head) slices to compute. A slice (b, g) covers kv head g and
/// all its query heads g * (Hq/Hkv) .. (g+1) * (Hq/Hkv) - 1, so dK and dV of the
/// slice are exact. Outputs of unselected slices are left NaN.
struct SliceSet {
  bool all = true;
  std::vector<uint8_t> selected;  ///< [B * Hkv] when !all
  bool contains(int64_t b, int64_t g, int64_t heads_kv) const {
    return all || selected[static_cast<size_t>(b * heads_kv + g)] != 0;
  }
  /// Every slice.
  static SliceSet every() { return {}; }
  /// Exactly the slices listed as (b, g) pairs, out of B * Hkv (`all` is set when
  /// the list covers every slice). Throws std::invalid_argument for an index out
  /// of range.
  static SliceSet of(int64_t batch, int64_t heads_kv,
                     const std::vector<std::pair<int64_t, int64_t>>& slices);
  /// Number of selected slices out of B * Hkv.
  int64_t count(int64_t batch, int64_t heads_kv) const;
};

/// Tuning knobs of gold() / lp(); the defaults suit every problem. Results do not
/// depend on `threads`; they depend on the tile sizes only through the summation
/// order (float64 rounding, ~1e-16 relative for gold).
/// Tile size: 32 x 32 keeps the masked part of partial tiles small (a pack of 7
/// short documents in 2048 tokens executes 1.16x its allowed pairs at 32, 1.33x at
/// 64, 1.79x at 128), so a document pack runs at the dense rate per allowed pair;
/// the GEMMs are made large by the panels and runs above, not by the tiles.
struct Options {
  int threads = 0;         ///< worker threads; 0 = std::thread::hardware_concurrency()
  int64_t q_block = 32;    ///< rows of a score tile (BlockMask Q_BLOCK)
  int64_t kv_block = 32;   ///< columns of a score tile (BlockMask KV_BLOCK)
  /// Outputs of the selected slices only ("sliced"), never the full tensors: o,
  /// lse, dq, dk, dv shaped [n, H / Hkv, S, ...] (n = slices.count(B, Hkv), H =
  /// Hq for o, lse, dq and Hkv for dk, dv), entry k holding the heads of the k-th
  /// selected (b, g) in (b, g) order: the same values, in the same order, as the
  /// logical outputs' selected blocks (check.hpp's slice_outputs of them). dbias as
  /// without it. A sampled check of a long row then allocates its slices, not B * Hkv.
  bool sliced = false;
};

/// What a call computed, counted on the BlockMask tiles of the forward pass (the
/// panels add the union of their lines' tiles, and the backward passes visit the
/// same tiles).
struct Stats {
  int64_t partial_tiles = 0;   ///< tiles with the mask evaluated, summed over computed (b, h)
  int64_t full_tiles = 0;      ///< tiles with the mask skipped, summed over computed (b, h)
  int64_t executed_pairs = 0;  ///< (i, j) pairs inside computed tiles, summed over computed (b, h)
  int64_t useful_pairs = 0;    ///< allowed (i, j) pairs, summed over computed (b, h)
};

/// Gold forward (and backward if `grads`), float64, inputs used as given (q, k, v,
/// d_o as stored in `in`; bias as float64 values; offset as stored).
/// Outputs: o [B,Hq,Sq,Dv], lse [B,Hq,Sq] (natural log), dq/dk/dv shaped like
/// q/k/v, dbias [bias_numel()] (rel_bias laid out [Hq, 2m+1]).
/// O = 0 and LSE = -inf on fully masked rows; gradients of those rows are 0; no NaN
/// for finite inputs. dBias is computed only when every slice is selected (it sums
/// over all b, h); otherwise it is left empty. It is accumulated in
/// min(#units, 64) fixed lanes and summed in lane order (memory 64 * bias_numel
/// doubles), so it is deterministic too.
/// Parallel over (b, h, q-block) and (b, kv-head, kv-block) units on all cores;
/// memory O(threads * q_block * kv_block) besides inputs, outputs and O(B Hq Sq)
/// row statistics. Work proportional to the pairs of computed tiles.
/// Throws std::invalid_argument when an input's size does not match `p`, an
/// offset is outside [0, size), or `slices` has the wrong size.
AttentionOutputs gold(const Problem& p, const ProblemData& in, bool grads,
                      const SliceSet& slices = SliceSet::every());
/// gold() with explicit options; `stats` (optional) receives the tile counts.
AttentionOutputs gold(const Problem& p, const ProblemData& in, bool grads, const SliceSet& slices,
                      const Options& opt, Stats* stats = nullptr);

/// The lp emulation: the same maths in the problem dtype "the plain way" (what
/// PyTorch autograd does for the unfused attention in that dtype, the baseline of
/// FlashAttention's test rule), with float32 accumulation (Eigen float GEMMs):
///   S = rnd(scale * QK^T); S = rnd(score_mod(S)) (when a mod is set); mask;
///   m, l = row max and sum of exp(S - m) in float32; LSE = m + log l (float32);
///   P = rnd(exp(S - m) / l); O = rnd(P V);
///   dP = rnd(dO V^T); D = sum_j P o dP (float32); dS' = rnd(P o (dP - D));
///   dS = rnd(dS' o score_mod'(S)) (softcap only); dQ = rnd(scale dS K);
///   dK = rnd(scale dS^T Q); dV = rnd(P^T dO); dBias = float32 sum of dS'.
/// rnd rounds to the dtype (round_to, tensors.hpp; a no-op for fp32). Sums over
/// tiles, query-head groups and rows stay in float32 and are rounded once.
/// Same slice semantics, output shapes and errors as gold().
AttentionOutputs lp(const Problem& p, const ProblemData& in, bool grads,
                    const SliceSet& slices = SliceSet::every());
/// lp() with explicit options; `stats` (optional) receives the tile counts.
AttentionOutputs lp(const Problem& p, const ProblemData& in, bool grads, const SliceSet& slices,
                    const Options& opt, Stats* stats = nullptr);

/// Useful floating-point operations of the problem (docs/semantics.md section 8):
/// fwd = 2 * pairs * (Dqk + Dv) * Hq with pairs the exact allowed-pair count of one
/// head summed over the batch (count_allowed_pairs), and fwd + 2.5 fwd when `grads`.
/// Used as the estimated reference cost to pick --check full/sample; the gold run
/// itself executes about 9/7 of the forward+backward estimate (the backward
/// recomputes S and dP once more) plus the masked parts of partial tiles.
double estimated_flops(const Problem& p, bool grads);

}  // namespace attnbench::reference
