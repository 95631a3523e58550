// Tile operations shared by the forward and backward kernels of the fused
// family: zeroing accumulators, turning accumulator tiles into MMA A operands in
// registers, and loading the K / V tiles and the (GQA-packed) query-side rows.
#pragma once

#include "backends/kernels/attn_common.cuh"

namespace attnbench::kernels {

/// Zero N accumulator tiles.
template <int N>
__device__ __forceinline__ void zero_acc(Acc (&a)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) a[i] = Acc{{0.f, 0.f, 0.f, 0.f}};
}

/// The A operand (16 rows x 16 k) of an MMA from two float accumulator n-tiles
/// in registers (k columns 0-7 in `lo`, 8-15 in `hi`), rounded to the element
/// type: FlashAttention-2's reuse of P (and dS) as the next product's operand
/// without shared memory (the m16n8k16 C layout matches the A layout pairwise).
template <bool Bf16>
__device__ __forceinline__ void acc_to_a(const Acc& lo, const Acc& hi, uint32_t (&a)[4]) {
  a[0] = pack2<Bf16>(lo.c[0], lo.c[1]);
  a[1] = pack2<Bf16>(lo.c[2], lo.c[3]);
  a[2] = pack2<Bf16>(hi.c[0], hi.c[1]);
  a[3] = pack2<Bf16>(hi.c[2], hi.c[3]);
}

/// cp.async the K and V tiles of keys [n0, n0 + kBlockN) of one KV head
/// (k_base / v_base point at its position 0; rows past lk zero-filled), in the
/// tile layout `Layout` (load_tile_async).
template <int kBlockN, int D, int kThreads, class Layout = SwizzledTile<D>>
__device__ __forceinline__ void load_kv_tile(uint16_t* sK, uint16_t* sV, const uint16_t* k_base,
                                             const uint16_t* v_base, int64_t k_stride, int64_t v_stride, int n0,
                                             int lk, int tid) {
  load_tile_async<kBlockN, D, kThreads, Layout>(
      sK, [&](int r) -> const uint16_t* { return n0 + r < lk ? k_base + (n0 + r) * k_stride : nullptr; }, tid);
  load_tile_async<kBlockN, D, kThreads, Layout>(
      sV, [&](int r) -> const uint16_t* { return n0 + r < lk ? v_base + (n0 + r) * v_stride : nullptr; }, tid);
}

/// cp.async the query-side rows (Q or dO) of a CTA tile of kRows rows: row r is
/// position m0 + r % Mq of query head h0 + r / Mq (GQA packing: Mq = kRows / pack),
/// at X + off(t, h); positions past lq and columns past kCols (the head dim of a
/// wider tile) zero-filled; tile layout `Layout`.
template <int kRows, int D, int kThreads, class Layout = SwizzledTile<D>, int kCols = D, class Offset>
__device__ __forceinline__ void load_packed_rows(uint16_t* s, const uint16_t* X, int m0, int Mq, int lq, int h0,
                                                 Offset off, int tid) {
  load_tile_async<kRows, D, kThreads, Layout, kCols>(
      s,
      [&](int r) -> const uint16_t* {
        const int t = m0 + r % Mq;
        return t < lq ? X + off(t, h0 + r / Mq) : nullptr;
      },
      tid);
}

}  // namespace attnbench::kernels
