// The MMA and copy layer of the fused attention kernels (sm_80 and up): warp-level
// mma.sync m16n8k16 with float32 accumulation, ldmatrix fragment loads, cp.async
// 16-byte copies with zero fill, and a swizzled shared-memory tile.
//
// Fragment layouts are those of the PTX ISA, "Matrix Fragments for mma.m16n8k16
// with floating point type" (g = lane / 4, q = lane % 4):
//   A (16x16, row-major): a0 (g, 2q..2q+1), a1 (g+8, 2q..), a2 (g, 2q+8..), a3 (g+8, 2q+8..)
//   B (16x8, "col"):      b0 (k 2q..2q+1, n g), b1 (k 2q+8.., n g)
//   C (16x8, float32):    c0 c1 (g, 2q..2q+1), c2 c3 (g+8, 2q..2q+1)
// A C fragment pair of n-tiles (2t, 2t+1) becomes the A fragment of k-slice t
// without data movement (a0 = c[2t].c01, a1 = c[2t].c23, a2 = c[2t+1].c01, a3 = c[2t+1].c23):
// this is how P stays in registers for P V (FlashAttention-2, section 3.1).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace attnbench::kernels {

/// A 16x8 float32 accumulator fragment (per thread: 4 values).
struct Acc {
  float c[4];
};

/// One m16n8k16 MMA: d += a * b (float32 accumulate). `Bf16` picks the operand type.
template <bool Bf16>
__device__ __forceinline__ void mma16816(Acc& d, const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (Bf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d.c[0]), "+f"(d.c[1]), "+f"(d.c[2]), "+f"(d.c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d.c[0]), "+f"(d.c[1]), "+f"(d.c[2]), "+f"(d.c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

/// Shared-memory address (32-bit) of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// ldmatrix.x4: four 8x8 16-bit matrices; lane l supplies the row address of row
/// l % 8 of matrix l / 8; register j receives matrix j in fragment order.
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
/// ldmatrix.x4.trans: as ldsm_x4, each matrix transposed.
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

/// cp.async of 16 bytes global -> shared, cached in L2 only; when `pred` is false
/// nothing is read and the 16 destination bytes are zero-filled.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool pred) {
  const int n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/// Wait until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/// Two floats to one register of two 16-bit values (low = x), rounded to nearest.
template <bool Bf16>
__device__ __forceinline__ uint32_t pack2(float x, float y) {
  if constexpr (Bf16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(x, y);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}
/// The two 16-bit values of a register as floats.
template <bool Bf16>
__device__ __forceinline__ float2 unpack2(uint32_t r) {
  if constexpr (Bf16) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&r));
  } else {
    return __half22float2(*reinterpret_cast<__half2*>(&r));
  }
}

/// A [Rows x D] tile of 16-bit elements in shared memory, rows of D / 8 chunks of
/// 16 bytes. A row is cut into groups of 8 chunks (128 bytes) and, when D is an
/// odd multiple of 32, a last group of 4: chunk c of row r in a group of 8 is
/// stored at chunk c ^ (r % 8) of its group, in a group of 4 at c ^ ((r / 2) % 4).
/// The 8 row addresses an ldmatrix phase reads (8 consecutive rows, one chunk)
/// then fall in 8 distinct 16-byte bank groups for every D that is a multiple
/// of 32 (with 64-byte groups the row stride is 64 bytes mod 128, which flips
/// the bank-group bit the XOR leaves alone), so ldmatrix and cp.async are free
/// of bank conflicts. D = 32, 64, 96, 128, 256 ...
template <int D>
struct SwizzledTile {
  static_assert(D % 32 == 0, "rows of whole 64-byte groups");
  static constexpr int kFullGroups = D / 64;  ///< groups of 8 chunks per row
  /// Element offset of the first element of chunk c of row r.
  __device__ __forceinline__ static int offset(int r, int c) {
    if (c < 8 * kFullGroups) return r * D + ((c ^ (r & 7)) << 3);
    return r * D + ((c ^ ((r >> 1) & 3)) << 3);  // the last group of 4 (c ^ x stays in it: x < 4)
  }
};

/// Copy a [Rows x D] tile from global memory into a SwizzledTile with cp.async,
/// all `Threads` threads of the CTA taking 16-byte chunks in turn. Row r comes
/// from `row_ptr(r)` (a const 16-bit element pointer, or nullptr for a row to
/// zero-fill). `Layout::offset(r, c)` places 16-byte unit c of row r (default
/// SwizzledTile; the Hopper path passes its 128-byte swizzled tile). Only the
/// first kCols columns exist in memory (the head dim, when the tile is wider:
/// the Hopper tiles of head dim 96 are 128 wide); the others are zero-filled.
template <int Rows, int D, int Threads, class Layout = SwizzledTile<D>, int kCols = D, class RowPtr>
__device__ __forceinline__ void load_tile_async(uint16_t* smem, RowPtr row_ptr, int tid) {
  static_assert(kCols % 8 == 0 && kCols <= D, "whole 16-byte chunks of the tile");
  constexpr int kChunksPerRow = D / 8;
  constexpr int kChunks = Rows * kChunksPerRow;
  const uint32_t base = smem_u32(smem);
#pragma unroll
  for (int idx = tid; idx < kChunks; idx += Threads) {
    const int r = idx / kChunksPerRow, c = idx % kChunksPerRow;
    const uint16_t* src = row_ptr(r);
    if constexpr (kCols < D)
      if (c >= kCols / 8) src = nullptr;
    const uint32_t dst = base + 2u * static_cast<uint32_t>(Layout::offset(r, c));
    cp_async_16(dst, src ? src + c * 8 : nullptr, src != nullptr);
  }
}

/// A fragment (16 rows x 16 k) of a row-major [rows][k] SwizzledTile: rows
/// r0..r0+15, k-chunk pair (2 * ks, 2 * ks + 1).
template <int D>
__device__ __forceinline__ void load_a(const uint16_t* tile, int r0, int ks, int lane, uint32_t (&a)[4]) {
  const int r = r0 + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int c = 2 * ks + (lane >> 4);
  ldsm_x4(smem_u32(tile + SwizzledTile<D>::offset(r, c)), a[0], a[1], a[2], a[3]);
}

/// B fragments of two n-tiles (n0..n0+7, n0+8..n0+15) for k-slice ks from a tile
/// stored [n][k] (row n holds B's column n: K for S = Q K^T). b[0..1] = tile n0,
/// b[2..3] = tile n0 + 8.
template <int D>
__device__ __forceinline__ void load_b_nk(const uint16_t* tile, int n0, int ks, int lane, uint32_t (&b)[4]) {
  const int r = n0 + (lane & 7) + (lane >> 4) * 8;
  const int c = 2 * ks + ((lane >> 3) & 1);
  ldsm_x4(smem_u32(tile + SwizzledTile<D>::offset(r, c)), b[0], b[1], b[2], b[3]);
}

/// B fragments of two n-tiles (columns n0..n0+15 of the tile, i.e. 16-bit
/// elements 8 * (2 * nc) ..) for k rows k0..k0+15 from a tile stored [k][n]
/// (V for O = P V). b[0..1] = columns n0..n0+7, b[2..3] = n0+8..n0+15; `nc` is
/// the chunk index of n0 (n0 / 8).
template <int D>
__device__ __forceinline__ void load_b_kn(const uint16_t* tile, int k0, int nc, int lane, uint32_t (&b)[4]) {
  const int r = k0 + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int c = nc + (lane >> 4);
  ldsm_x4_t(smem_u32(tile + SwizzledTile<D>::offset(r, c)), b[0], b[1], b[2], b[3]);
}

/// A fragment (m rows m0..m0+15, k columns k0..k0+15) from a tile stored
/// transposed, [k][m] (dS^T for dQ = dS K); `mc` is the chunk index of m0.
template <int D>
__device__ __forceinline__ void load_a_t(const uint16_t* tile, int k0, int mc, int lane, uint32_t (&a)[4]) {
  const int mi = lane >> 3;
  const int r = k0 + (lane & 7) + (mi >> 1) * 8;
  const int c = mc + (mi & 1);
  ldsm_x4_t(smem_u32(tile + SwizzledTile<D>::offset(r, c)), a[0], a[1], a[2], a[3]);
}

/// 2^x with the special-function unit (ex2.approx.ftz: relative error ~2^-22,
/// denormal results flushed to 0, 2^-inf = 0), as FlashAttention's exp2 path.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// Max / sum over the 4 lanes of a quad (the lanes holding one accumulator row).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace attnbench::kernels
