// Probe of the Hopper MMA layer (backends/kernels/wgmma_sm90.cuh) on its own:
// one warpgroup multiplies small-integer bf16 matrices (exact in float32) with
// the descriptors and fragment layouts the attention kernel uses, and the host
// compares every element. Exit 0 when all probes match, 1 when one does not, 77
// (skipped) without a compute capability 9.0 device. ctest runs it as
// gpu_probe_wgmma in sm_90a builds; by hand:
//   nvcc -std=c++20 -I. -gencode=arch=compute_90a,code=sm_90a tests/gpu/probe_wgmma.cu -o probe && ./probe
#include <cuda_bf16.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backends/kernels/wgmma_sm90.cuh"

using namespace attnbench::kernels;
using namespace attnbench::kernels::sm90;

// probe 0: D[64 x N] = A[64 x 64] * B^T, B stored [N][64] (K-major both), A rows a_row0.. of a 128-row tile
// probe 1: D[64 x N] = A[64 x 64] (registers) * V[64 x N] (V stored [64 keys][N], MN-major)
// probe 2: D[64 x 64] = A^T B with both MN-major, A stored [128 (K)][64 (M)], B stored [128 (K)][64 (N)]
//          (the backward's dQ = dS K: dS^T and K as stored), K = 128 (8 k-steps)
// probe 3: as probe 2 over K rows 64..127 only (k-steps 4..7: one warpgroup's keys)
template <int N>
__global__ void probe(const uint16_t* A, const uint16_t* B, float* D, int mode) {
  extern __shared__ uint8_t raw[];
  uint16_t* sA = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023});
  uint16_t* sB = sA + 128 * 64;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  using ATile = Sw128Tile<128, 64>;
  for (int i = tid; i < 128 * 8; i += 128) {
    const int r = i / 8, c = i % 8;
    for (int e = 0; e < 8; ++e) sA[ATile::offset(r, c) + e] = A[r * 64 + c * 8 + e];
  }
  if (mode >= 2) {
    for (int i = tid; i < 128 * 8; i += 128) {
      const int r = i / 8, c = i % 8;
      for (int e = 0; e < 8; ++e) sB[ATile::offset(r, c) + e] = B[r * 64 + c * 8 + e];
    }
  } else if (mode == 0) {
    using BTile = Sw128Tile<N, 64>;
    for (int i = tid; i < N * 8; i += 128) {
      const int r = i / 8, c = i % 8;
      for (int e = 0; e < 8; ++e) sB[BTile::offset(r, c) + e] = B[r * 64 + c * 8 + e];
    }
  } else {
    using VTile = Sw128Tile<64, N>;
    for (int i = tid; i < 64 * (N / 8); i += 128) {
      const int r = i / (N / 8), c = i % (N / 8);
      for (int e = 0; e < 8; ++e) sB[VTile::offset(r, c) + e] = B[r * N + c * 8 + e];
    }
  }
  fence_proxy_async();
  __syncthreads();
  Acc d[N / 8];
  for (int j = 0; j < N / 8; ++j) d[j] = Acc{{0.f, 0.f, 0.f, 0.f}};
  const uint32_t a_addr = smem_u32(sA), b_addr = smem_u32(sB);
  wgmma_fence();
  if (mode >= 2) {
    if constexpr (N == 64) {
      for (int ks = mode == 3 ? 4 : 0; ks < 8; ++ks) {
        const uint64_t da = desc_mn_major(a_addr, ATile::kChunkBytes, ks);
        const uint64_t db = desc_mn_major(b_addr, ATile::kChunkBytes, ks);
        wgmma_ss_n64<true, 1, 1>(d, da, db, ks > (mode == 3 ? 4 : 0));
      }
    }
  } else if (mode == 0) {
    for (int ks = 0; ks < 4; ++ks) {
      const uint64_t da = desc_k_major(a_addr, Sw128Tile<128, 64>::kChunkBytes, 64, ks);  // rows 64..127
      const uint64_t db = desc_k_major(b_addr, Sw128Tile<N, 64>::kChunkBytes, 0, ks);
      if constexpr (N == 64) wgmma_ss_n64<true, 0>(d, da, db, ks > 0);
      else wgmma_ss_n128<true, 0>(d, da, db, ks > 0);
    }
  } else {
    for (int ks = 0; ks < 4; ++ks) {
      uint32_t a[4];
      const int r0 = 64 + 16 * warp + g, c0 = 16 * ks + 2 * q;
      auto pk = [&](int r, int c) { return uint32_t(A[r * 64 + c]) | (uint32_t(A[r * 64 + c + 1]) << 16); };
      a[0] = pk(r0, c0);
      a[1] = pk(r0 + 8, c0);
      a[2] = pk(r0, c0 + 8);
      a[3] = pk(r0 + 8, c0 + 8);
      const uint64_t db = desc_mn_major(b_addr, Sw128Tile<64, N>::kChunkBytes, ks);
      if constexpr (N == 64) wgmma_rs_n64<true, 1>(d, a, db, 1);
      else wgmma_rs_n128<true, 1>(d, a, db, 1);
    }
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_acc(d);
  for (int j = 0; j < N / 8; ++j) {
    const int r = 16 * warp + g, c = 8 * j + 2 * q;
    D[r * N + c] = d[j].c[0];
    D[r * N + c + 1] = d[j].c[1];
    D[(r + 8) * N + c] = d[j].c[2];
    D[(r + 8) * N + c + 1] = d[j].c[3];
  }
}

static uint16_t bf(float x) {
  __nv_bfloat16 b = __float2bfloat16(x);
  return *reinterpret_cast<uint16_t*>(&b);
}

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s: %s\n", #x, cudaGetErrorString(e)); exit(2); } } while (0)

template <int N>
int run(int mode) {
  std::vector<float> a(128 * 64), b(64 * 128);
  std::vector<uint16_t> ha(a.size()), hb(b.size());
  unsigned s = 12345 + N + mode;
  for (size_t i = 0; i < a.size(); ++i) { s = s * 1103515245 + 12345; a[i] = float(int((s >> 16) % 5) - 2); ha[i] = bf(a[i]); }
  for (size_t i = 0; i < b.size(); ++i) { s = s * 1103515245 + 12345; b[i] = float(int((s >> 16) % 5) - 2); hb[i] = bf(b[i]); }
  uint16_t *dA, *dB; float* dD;
  CK(cudaMalloc(&dA, ha.size() * 2)); CK(cudaMalloc(&dB, hb.size() * 2)); CK(cudaMalloc(&dD, 64 * N * 4));
  CK(cudaMemcpy(dA, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(dD, 0xff, 64 * N * 4));
  const int smem = 1024 + 2 * (128 * 64 + 128 * 128);
  CK(cudaFuncSetAttribute(probe<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  probe<N><<<1, 128, smem>>>(dA, dB, dD, mode);
  CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  std::vector<float> d(64 * N);
  CK(cudaMemcpy(d.data(), dD, d.size() * 4, cudaMemcpyDeviceToHost));
  int bad = 0;
  char map[64][17] = {};
  for (int r = 0; r < 64; ++r) {
    for (int cb = 0; cb < N / 8; ++cb) map[r][cb] = '.';
    for (int c = 0; c < N; ++c) {
      double ref = 0;
      if (mode >= 2)
        for (int k = mode == 3 ? 64 : 0; k < 128; ++k) ref += double(a[k * 64 + r]) * double(b[k * 64 + c]);
      else
        for (int k = 0; k < 64; ++k)
          ref += double(a[(64 + r) * 64 + k]) * (mode == 0 ? double(b[c * 64 + k]) : double(b[k * N + c]));
      if (d[r * N + c] != float(ref)) { ++bad; map[r][c / 8] = 'X'; }
    }
  }
  const char* names[4] = {"SS (Q K^T, K-major)", "RS (P V, V MN-major)", "SS (dS K, both MN-major)",
                          "SS (dS K, both MN-major, k-steps 4..7)"};
  printf("probe %s N=%d: %d of %d wrong\n", names[mode], N, bad, 64 * N);
  if (bad) for (int r = 0; r < 16; ++r) printf("  row %2d: %s\n", r, map[r]);
  return bad != 0;
}

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9 || prop.minor != 0) {
    printf("SKIPPED: wgmma needs compute capability 9.0; the device has %d.%d\n", prop.major, prop.minor);
    return 77;
  }
  int fails = run<64>(0) + run<128>(0) + run<64>(1) + run<128>(1) + run<64>(2) + run<64>(3);
  printf("%s\n", fails ? "PROBE FAILED" : "PROBE OK");
  return fails ? 1 : 0;
}
