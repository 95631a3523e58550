// GPU tests of the TileScheduler's persistent claims (backends/kernels/
// tile_scheduler.cuh): with CTAs of uneven speed claiming from the counters,
// every tile runs exactly once, the counters are zero again after each launch
// (so the next launch starts from tile 0), and a launch of one CTA per tile
// runs each CTA's own tile alone.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backends/kernels/tile_scheduler.cuh"
#include "harness/device/buffer.hpp"
#include "harness/device/check.hpp"

using attnbench::device::DeviceBuffer;
using attnbench::kernels::TileScheduler;

namespace {

/// Thread 0 of each CTA walks its tiles as the Hopper kernels' claiming thread
/// does: tile blockIdx.x, then claim() until past `tiles`, then retire().
/// runs[t] counts the runs of tile t; owner[t] is the CTA that ran it. CTA c
/// spins about (c % 7) * 2 us per tile, so that fast CTAs claim more tiles.
__global__ void claim_tiles(int64_t tiles, int* counters, int* runs, int* owner) {
  if (threadIdx.x != 0) return;
  for (int64_t t = blockIdx.x; t < tiles; t = TileScheduler::claim(counters)) {
    atomicAdd(&runs[t], 1);
    owner[t] = static_cast<int>(blockIdx.x);
    const long long t0 = clock64();
    while (clock64() - t0 < (blockIdx.x % 7) * 4000) {
    }
  }
  TileScheduler::retire(counters);
}

struct Launch {
  std::vector<int> runs, owner, counters;
};

Launch run_claims(int64_t tiles, int ctas, DeviceBuffer& counters) {
  DeviceBuffer runs(static_cast<size_t>(tiles), sizeof(int)), owner(static_cast<size_t>(tiles), sizeof(int));
  runs.memset(0, nullptr);
  owner.memset(0xff, nullptr);
  claim_tiles<<<ctas, 32>>>(tiles, counters.as<int>(), runs.as<int>(), owner.as<int>());
  ATTNBENCH_CHECK(cudaGetLastError());
  ATTNBENCH_CHECK(cudaDeviceSynchronize());
  Launch l{std::vector<int>(static_cast<size_t>(tiles)), std::vector<int>(static_cast<size_t>(tiles)),
           std::vector<int>(2)};
  ATTNBENCH_CHECK(cudaMemcpy(l.runs.data(), runs.data(), runs.bytes(), cudaMemcpyDeviceToHost));
  ATTNBENCH_CHECK(cudaMemcpy(l.owner.data(), owner.data(), owner.bytes(), cudaMemcpyDeviceToHost));
  ATTNBENCH_CHECK(cudaMemcpy(l.counters.data(), counters.data(), 2 * sizeof(int), cudaMemcpyDeviceToHost));
  return l;
}

}  // namespace

TEST_CASE("TileScheduler claims: every tile once per launch, counters zero after each, fast CTAs take more") {
  DeviceBuffer counters(2, sizeof(int));
  counters.memset(0, nullptr);
  for (int launch = 0; launch < 3; ++launch) {
    CAPTURE(launch);
    const Launch l = run_claims(5000, 132, counters);
    int once = 0;
    std::vector<int> per_cta(132, 0);
    for (size_t t = 0; t < l.runs.size(); ++t) {
      once += l.runs[t] == 1;
      if (l.owner[t] >= 0 && l.owner[t] < 132) ++per_cta[static_cast<size_t>(l.owner[t])];
    }
    CHECK(once == 5000);
    CHECK(l.counters == std::vector<int>{0, 0});
    for (int c = 0; c < 132; ++c) CHECK(l.owner[static_cast<size_t>(c)] == c);  // the first tile is the CTA's own
    // CTAs with no spin (c % 7 == 0) against the slowest (c % 7 == 6): dynamic claims give the fast ones more.
    CHECK(per_cta[0] > 2 * per_cta[6]);
    CHECK(per_cta[7] > 2 * per_cta[13]);
  }
}

TEST_CASE("TileScheduler claims: a launch of one CTA per tile runs each tile on its own CTA") {
  DeviceBuffer counters(2, sizeof(int));
  counters.memset(0, nullptr);
  for (int launch = 0; launch < 2; ++launch) {
    const Launch l = run_claims(300, 300, counters);
    for (size_t t = 0; t < 300; ++t) {
      CHECK(l.runs[t] == 1);
      CHECK(l.owner[t] == static_cast<int>(t));
    }
    CHECK(l.counters == std::vector<int>{0, 0});
  }
}
