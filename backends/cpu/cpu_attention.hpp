// Kernels of the `cpu` backend: FlashAttention-2 forward (Algorithm 1) and
// backward (Algorithm 2) of Dao 2023, tiled over a FlexAttention BlockMask, on
// float32 host buffers stored in a physical layout (harness/model/layout.hpp).
//
// One parameter struct with explicit layouts (FlashAttention's Flash_fwd_params
// style); the kernels never allocate tensors, only per-thread tile scratch.
//
// Precision policy. Inputs, outputs and the per-pair scores a GPU kernel keeps
// in registers are float32: s = float(scale * q.k), score_mod(s) and the running
// row max m. Exponentials and every sum are float64 (products of float32 values
// are exact in float64): the dot products q.k and dO.v, P, the row sum l, P V,
// P^T dO, dS K, dS^T Q, D and dBias. The forward keeps two float64 tensors for the
// backward (like autograd's saved tensors): the LSE, whose rounding is the float32
// LSE output, and O before rounding to the dtype. Why, measured with the
// correctness rule of docs/semantics.md section 7 (check_outputs against reference::gold
// and reference::lp) on seeded random problems of every mask, mod, layout and dtype:
//   - FA-2 as written in float32 (float32 sums, float32 LSE, D from the written O)
//     fails in fp32, where lp is itself plain float32: O up to 3x, dQ, dK, dV 4-6x
//     lp on rows of 1-5 queries (P = exp(s - LSE) loses |LSE| * 2^-24 on a row's
//     dominant key, which lp's exp(s - max) / l does not), and dK, dV 3.6-3.9x lp
//     at S = 2048 with GQA 4:1 (a float32 running sum over Sq * Hq/Hkv terms);
//   - D from O rounded to bf16/fp16 leaves each row's rounding error in
//     sum_j dS_ij = D_exact - D, so a bias entry shared by whole rows (offset_bias
//     of size 1 or 2, rel_bias clamped at m) failed at 3-7x lp; D from a float32 O
//     still failed at 11x in fp32.
// With the policy, 2000 random problems all pass, the worst ratio
// e / max(e_lp, ulp) being about 1.4 in fp32 and 0.5 (the output rounding alone)
// in fp16 and bf16.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/model/block_mask.hpp"
#include "harness/model/layout.hpp"
#include "harness/model/mask_desc.hpp"
#include "harness/model/problem.hpp"

namespace attnbench::cpu_kernels {

/// Everything a forward or backward pass reads and writes.
///
/// Tensors are float32 buffers in the physical layouts `lq` (Q, dQ), `lk`
/// (K, dK), `lv` (V, dV) and `lo` (O, dO). Values of q, k, v, d_o are exactly
/// representable in `dtype`; o, dq, dk, dv are rounded to `dtype` when written.
/// `lse` is float32 in the logical layout [B, Hq, Sq] (natural log; -inf on fully
/// masked rows). `dbias` is float32 [bias_numel] (rel_bias [Hq, 2m+1] or
/// offset_bias [size]); null when the score mod has no learnable bias.
struct AttentionArgs {
  int64_t B = 0, Hq = 0, Hkv = 0, Sq = 0, Sk = 0, Dqk = 0, Dv = 0;
  double scale = 1.0;  ///< softmax scale (already multiplied by any test factor)
  DType dtype = DType::fp32;
  /// Worker threads of the passes (worker_count(threads)); 0 = every thread of the pool.
  int threads = 0;

  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* d_o = nullptr;
  float* o = nullptr;
  /// O before rounding to the dtype, float64 in layout `lo`: written by forward(),
  /// read by backward() for D (precision policy above).
  double* o_f64 = nullptr;
  float* lse = nullptr;
  /// The same LSE in float64 [B, Hq, Sq], written by forward() and read by
  /// backward() (see the precision policy of backward()).
  double* lse_f64 = nullptr;
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
  float* dbias = nullptr;
  int64_t bias_numel = 0;

  PhysicalLayout lq, lk, lv, lo;
  /// Rows actually stored per batch row: Sq / Sk, or the valid lengths for THD.
  std::vector<int64_t> stored_q, stored_k;

  MaskDesc mask;       ///< borrowed arrays must outlive the pass
  ScoreModDesc mod;    ///< bias / offset borrowed
  const BlockMask* bm = nullptr;  ///< tiles kCpuQBlock x kCpuKVBlock

  /// Test-only defects (CpuBackendOptions): evaluate the mask in partial tiles
  /// (true = correct) and one tile (0, 0, 0, skip_kb) to skip (-1 = none).
  bool apply_mask = true;
  int64_t skip_kb = -1;
};

/// Number of worker threads the passes use: `requested` when > 0, capped at
/// hardware_threads() (thread_pool.hpp: the threads of the shared pool that runs
/// them); every one of them when `requested` is 0.
int worker_count(int requested = 0);

/// Bytes of scratch forward() plus backward() allocate for problem `p` with
/// worker_count(threads) workers: per-worker tile buffers, the per-worker float64 dQ sums
/// [Hq/Hkv, Sq, Dqk] and D [Hq/Hkv, Sq], and the per-task float64 dBias partial
/// sums [B * Hkv, bias_numel]. The saved o_f64 / lse_f64 are not included.
size_t scratch_bytes(const Problem& p, int threads = 0);

/// Forward pass (FlashAttention-2 Algorithm 1). For each (b, h, q-block) it walks
/// its kv-blocks with for_each_tile (block_mask.hpp: partial tiles, then full ones),
/// computes S = scale * Q K^T for the tile, applies score_mod_apply to every
/// pair, masks (-inf) pairs with !mask_allowed in partial tiles only, and updates
/// the running max m, sum l and unnormalised output acc with the online softmax:
///   m_new = max(m, rowmax(S)), P = exp(S - m_new),
///   l = exp(m - m_new) l + rowsum(P), acc = exp(m - m_new) acc + P V.
/// Finally O = round_to(dtype, acc / l) and LSE = m + log l; rows with l = 0 get
/// O = 0 and LSE = -inf. Also writes o_f64 and lse_f64 (precision policy above).
/// Tasks (b, h, q-block) run in parallel; each writes disjoint rows, so the result
/// does not depend on scheduling or the thread count.
void forward(const AttentionArgs& a);

/// Backward pass (FlashAttention-2 Algorithm 2), using o_f64 and lse_f64 of the
/// last forward. Tasks (b, kv head g) run in parallel. Per task, D_i =
/// rowsum(dO_i * O_i) for the group's query heads; then for each kv-block and each
/// query head h of the group, it walks the transposed lists (partial and full
/// q-blocks touching that kv-block: for_each_tile_of_col, partial then full) and recomputes for the tile
///   s = scale * q.k, s_mod = score_mod(s), P = exp(s_mod - LSE) (0 if masked or
///   the row is fully masked),
///   dV += P^T dO, dP = dO V^T, dS_mod = P * (dP - D),
///   dBias[index(h, i, j)] += dS_mod, dS = dS_mod * score_mod_grad(s),
///   dQ += dS K, dK += dS^T Q,
/// then writes dK = scale * dK and dV (summed over the group) per kv-block and
/// dQ = scale * dQ per task, rounded to dtype. The dQ of FA-2 (atomic adds in
/// HBM) is a per-task float64 buffer here: a task owns all query heads of its kv
/// head, so nothing races. dBias partial sums are float64 per task, added in task
/// order and stored as float32. Every stored element of dQ, dK, dV (and all of
/// dBias) is written; fully masked rows and never-attended keys get exact zeros.
void backward(const AttentionArgs& a);

}  // namespace attnbench::cpu_kernels
