#include "backends/kernels/attn_plan.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "backends/kernels/attn_tiles.hpp"

namespace attnbench::kernels {

namespace {

/// Stable order of items by descending cost.
std::vector<WorkItem> longest_first(std::vector<WorkItem> items, const std::vector<int64_t>& cost) {
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<WorkItem> out;
  out.reserve(items.size());
  for (size_t i : order) out.push_back(items[i]);
  return out;
}

}  // namespace

TilePlan plan_tiles(const MaskDesc& m, const SeqLengths& s, int heads_q, int group, int pack) {
  if (pack < 1 || (kFwdBlockM / 16) % pack != 0 || group % pack != 0)
    throw std::invalid_argument("plan_tiles: pack " + std::to_string(pack) + " must divide " +
                                std::to_string(kFwdBlockM / 16) + " and the GQA group " + std::to_string(group));
  TilePlan t;
  t.pack = pack;
  t.tile_rows = kFwdBlockM / pack;
  const size_t n = s.lq.size();
  std::vector<WorkItem> q, k;
  std::vector<int64_t> qc, kc;
  for (size_t b = 0; b < n; ++b) {
    const int lq = s.lq[b], lk = s.lk[b];
    for (int m0 = 0; m0 < s.store_q[b]; m0 += t.tile_rows) {
      int first;
      const int tiles = key_tiles(m, lq, lk, m0, t.tile_rows, kFwdBlockN, &first);
      q.push_back({static_cast<int32_t>(b), m0});
      qc.push_back(tiles);
      t.fwd_tiles += tiles;
      t.executed_pairs += static_cast<int64_t>(tiles) * kFwdBlockN * t.tile_rows * heads_q;
    }
    const int bm = kBwdBlockN;  // cost only: query tiles per key tile at the dK/dV step height
    for (int n0 = 0; n0 < s.store_k[b]; n0 += kBwdBlockN) {
      int first;
      k.push_back({static_cast<int32_t>(b), n0});
      kc.push_back(static_cast<int64_t>(query_tiles(m, lq, lk, n0, kBwdBlockN, bm, &first)));
    }
  }
  t.q_items = longest_first(std::move(q), qc);
  t.k_items = longest_first(std::move(k), kc);
  return t;
}

int choose_pack(int group, double mean_seq_len) {
  if (mean_seq_len >= kFwdBlockM) return 1;
  for (int p : {4, 2})
    if (group % p == 0 && (kFwdBlockM / 16) % p == 0) return p;
  return 1;
}

std::string describe(const TilePlan& t, int heads_q, int heads_kv) {
  return "q tiles " + std::to_string(t.tile_rows) + "x" + std::to_string(kFwdBlockN) + " (pack " +
         std::to_string(t.pack) + "): " + std::to_string(t.q_items.size() * static_cast<size_t>(heads_q / t.pack)) +
         " CTAs; k tiles " + std::to_string(kBwdBlockN) + ": " +
         std::to_string(t.k_items.size() * static_cast<size_t>(heads_kv)) + " CTAs";
}

}  // namespace attnbench::kernels
