// BlockMask (block_mask.hpp): hand-checked layouts and, on many seeded random
// problems and tile sizes, equality with a brute-force classification built from
// mask_allowed (mask_desc.hpp): kv and q lists, full / partial / empty, tail
// tiles, executed pairs and the B / H broadcast.
#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "harness/model/block_mask.hpp"
#include "harness/model/mask.hpp"
#include "harness/model/mask_desc.hpp"
#include "harness/model/problem.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;

namespace {

using test::Rng;

Problem base_problem(int64_t batch, int64_t sq, int64_t sk) {
  Problem p;
  p.batch = batch;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.seq_q = sq;
  p.seq_k = sk;
  return p;
}

int64_t random_bound(Rng& rng, int64_t span) {
  switch (rng.uniform(0, 3)) {
    case 0: return -1;
    case 1: return 0;
    case 2: return rng.uniform(0, 40);
    default: return rng.uniform(0, 2 * span + 10);
  }
}

/// Random valid problem over every mask kind and their combinations.
Problem random_problem(Rng& rng, int64_t max_seq) {
  const bool doc = rng.coin(0.35);
  const int64_t sq = rng.uniform(1, max_seq);
  const int64_t sk = doc || rng.coin(0.25) ? sq : rng.uniform(1, max_seq);
  Problem p = base_problem(rng.uniform(1, 3), sq, sk);
  if (rng.coin(0.5))
    p.mask.push_back(CausalTerm{rng.coin(0.5) ? CausalAlign::top_left : CausalAlign::bottom_right});
  if (rng.coin(0.35)) p.mask.push_back(SlidingWindowTerm{random_bound(rng, sq + sk), random_bound(rng, sq + sk)});
  if (doc) {
    DocumentTerm d;
    const int64_t mode = rng.uniform(0, 2);
    for (int64_t b = 0; b < p.batch; ++b) {
      std::vector<int32_t> row;
      if (mode == 0) {  // contiguous documents, zero lengths, -1 padding at the end
        std::vector<int64_t> lengths;
        int64_t left = sq - (rng.coin(0.5) ? rng.uniform(0, sq) : 0);
        while (left > 0) {
          lengths.push_back(rng.coin(0.1) ? 0 : std::min(left, rng.uniform(1, 150)));
          left -= lengths.back();
        }
        row = doc_ids_from_lengths(lengths, sq);
      } else if (mode == 1) {  // non-contiguous: random ids, -1 scattered
        for (int64_t i = 0; i < sq; ++i) row.push_back(static_cast<int32_t>(rng.uniform(-1, 3)));
      } else {  // runs, some ids reused later (non-contiguous), some -1 runs
        int32_t id = 0;
        for (int64_t i = 0; i < sq; ++i) {
          if (i > 0 && rng.coin(0.02)) id = static_cast<int32_t>(rng.uniform(-1, 6));
          row.push_back(id);
        }
      }
      d.doc_ids.push_back(row);
    }
    p.mask.push_back(d);
  } else if (rng.coin(0.35)) {
    PaddingTerm pad;
    for (int64_t b = 0; b < p.batch; ++b) {
      pad.seq_lens_q.push_back(rng.coin(0.2) ? (rng.coin(0.5) ? 0 : sq) : rng.uniform(0, sq));
      pad.seq_lens_k.push_back(rng.coin(0.2) ? (rng.coin(0.5) ? 0 : sk) : rng.uniform(0, sk));
    }
    p.mask.push_back(pad);
  }
  if (rng.coin(0.25)) p.mask.push_back(PrefixLmTerm{rng.uniform(0, sk + 3)});
  if (rng.coin(0.3)) {
    const double densities[] = {0.0, 0.3, 0.6, 1.0};
    p.mask.push_back(BlockSparseTerm{densities[rng.uniform(0, 3)], rng.next()});
  }
  validate(p);
  return p;
}

/// Brute-force tile kinds [B][nQ][nKV] of p (every real batch row).
std::vector<BlockKind> brute_kinds(const Problem& p, int64_t qbs, int64_t kbs) {
  MaskArrays a;
  const MaskDesc m = make_mask_desc(p, a);
  const int64_t nq = (p.seq_q + qbs - 1) / qbs, nkv = (p.seq_k + kbs - 1) / kbs;
  std::vector<BlockKind> out(static_cast<size_t>(p.batch * nq * nkv));
  std::vector<uint8_t> dense(static_cast<size_t>(p.seq_q * p.seq_k));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < p.seq_q; ++i)
      for (int64_t j = 0; j < p.seq_k; ++j) dense[static_cast<size_t>(i * p.seq_k + j)] = mask_allowed(m, b, 0, i, j);
    for (int64_t qb = 0; qb < nq; ++qb)
      for (int64_t kb = 0; kb < nkv; ++kb) {
        const bool tail = (qb + 1) * qbs > p.seq_q || (kb + 1) * kbs > p.seq_k;
        int64_t n = 0, total = 0;
        for (int64_t i = qb * qbs; i < std::min(p.seq_q, (qb + 1) * qbs); ++i)
          for (int64_t j = kb * kbs; j < std::min(p.seq_k, (kb + 1) * kbs); ++j) {
            n += dense[static_cast<size_t>(i * p.seq_k + j)];
            ++total;
          }
        out[static_cast<size_t>((b * nq + qb) * nkv + kb)] =
            n == 0 ? BlockKind::empty : (n == total && !tail ? BlockKind::full : BlockKind::partial);
      }
  }
  return out;
}

/// The first n entries of v at base, as a vector.
std::vector<int32_t> list_at(const std::vector<int32_t>& v, int64_t base, int32_t n) {
  return {v.begin() + base, v.begin() + base + n};
}

/// Checks every field of build_block_mask(p, qbs, kbs) against brute force.
void check_block_mask(const Problem& p, int64_t qbs, int64_t kbs) {
  CAPTURE(describe_mask(p));
  CAPTURE(p.batch);
  CAPTURE(p.seq_q);
  CAPTURE(p.seq_k);
  CAPTURE(qbs);
  CAPTURE(kbs);
  const BlockMask bm = build_block_mask(p, qbs, kbs);
  const int64_t nq = (p.seq_q + qbs - 1) / qbs, nkv = (p.seq_k + kbs - 1) / kbs;
  REQUIRE(bm.num_q_blocks == nq);
  REQUIRE(bm.num_kv_blocks == nkv);
  CHECK(bm.q_block == qbs);
  CHECK(bm.kv_block == kbs);
  CHECK(bm.seq_q == p.seq_q);
  CHECK(bm.seq_k == p.seq_k);
  const bool per_batch = p.find_mask<DocumentTerm>() || p.find_mask<PaddingTerm>();
  REQUIRE(bm.B == (per_batch ? p.batch : 1));
  REQUIRE(bm.H == 1);
  REQUIRE(bm.kv_num_blocks.size() == static_cast<size_t>(bm.B * nq));
  REQUIRE(bm.full_kv_num_blocks.size() == static_cast<size_t>(bm.B * nq));
  REQUIRE(bm.kv_indices.size() == static_cast<size_t>(bm.B * nq * nkv));
  REQUIRE(bm.full_kv_indices.size() == static_cast<size_t>(bm.B * nq * nkv));
  REQUIRE(bm.q_num_blocks.size() == static_cast<size_t>(bm.B * nkv));
  REQUIRE(bm.full_q_num_blocks.size() == static_cast<size_t>(bm.B * nkv));
  REQUIRE(bm.q_indices.size() == static_cast<size_t>(bm.B * nkv * nq));
  REQUIRE(bm.full_q_indices.size() == static_cast<size_t>(bm.B * nkv * nq));

  const std::vector<BlockKind> want = brute_kinds(p, qbs, kbs);
  auto want_at = [&](int64_t b, int64_t qb, int64_t kb) { return want[static_cast<size_t>((b * nq + qb) * nkv + kb)]; };

  // kind() for every real (b, h): the broadcast must reproduce each batch row and head.
  bool kinds_ok = true;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t qb = 0; qb < nq; ++qb)
        for (int64_t kb = 0; kb < nkv; ++kb)
          if (bm.kind(b, h, qb, kb) != want_at(b, qb, kb)) kinds_ok = false;
  CHECK(kinds_ok);

  // The stored lists themselves (ascending, exact sets) and the tile counts.
  int64_t partial = 0, full = 0, executed = 0;
  for (int64_t b = 0; b < bm.B; ++b) {
    for (int64_t qb = 0; qb < nq; ++qb) {
      std::vector<int32_t> wp, wf;
      for (int64_t kb = 0; kb < nkv; ++kb) {
        const BlockKind k = want_at(b, qb, kb);
        if (k == BlockKind::partial) wp.push_back(static_cast<int32_t>(kb));
        if (k == BlockKind::full) wf.push_back(static_cast<int32_t>(kb));
        if (k != BlockKind::empty)
          executed += (std::min(p.seq_q, (qb + 1) * qbs) - qb * qbs) * (std::min(p.seq_k, (kb + 1) * kbs) - kb * kbs);
      }
      partial += static_cast<int64_t>(wp.size());
      full += static_cast<int64_t>(wf.size());
      const int64_t r = bm.row(b, 0, qb);
      CHECK(list_at(bm.kv_indices, r * nkv, bm.kv_num_blocks[static_cast<size_t>(r)]) == wp);
      CHECK(list_at(bm.full_kv_indices, r * nkv, bm.full_kv_num_blocks[static_cast<size_t>(r)]) == wf);
    }
    for (int64_t kb = 0; kb < nkv; ++kb) {
      std::vector<int32_t> wp, wf;
      for (int64_t qb = 0; qb < nq; ++qb) {
        const BlockKind k = want_at(b, qb, kb);
        if (k == BlockKind::partial) wp.push_back(static_cast<int32_t>(qb));
        if (k == BlockKind::full) wf.push_back(static_cast<int32_t>(qb));
      }
      const int64_t c = bm.col(b, 0, kb);
      CHECK(list_at(bm.q_indices, c * nq, bm.q_num_blocks[static_cast<size_t>(c)]) == wp);
      CHECK(list_at(bm.full_q_indices, c * nq, bm.full_q_num_blocks[static_cast<size_t>(c)]) == wf);
    }
  }
  CHECK(bm.num_partial() == partial);
  CHECK(bm.num_full() == full);
  const int64_t expanded = per_batch ? executed : executed * p.batch;
  CHECK(bm.executed_pairs_per_head(p.batch) == expanded);
  CHECK(bm.executed_pairs_per_head(p.batch) >= count_allowed_pairs(p));
}

}  // namespace

TEST_CASE("causal 256 x 256 at 128 x 128: diagonal partial, below full") {
  Problem p = base_problem(3, 256, 256);
  p.mask = {CausalTerm{}};
  const BlockMask bm = build_block_mask(p);
  CHECK(bm.B == 1);
  CHECK(bm.H == 1);
  CHECK(render_block_mask(bm) == "+.\n#+\n");
  CHECK(bm.kv_num_blocks == std::vector<int32_t>{1, 1});
  CHECK(bm.kv_indices == std::vector<int32_t>{0, 0, 1, 0});  // row 0: {0}; row 1: {1}; unused entries 0
  CHECK(bm.full_kv_num_blocks == std::vector<int32_t>{0, 1});
  CHECK(bm.full_kv_indices[2] == 0);
  CHECK(bm.q_num_blocks == std::vector<int32_t>{1, 1});
  CHECK(bm.q_indices[0] == 0);
  CHECK(bm.q_indices[2] == 1);
  CHECK(bm.full_q_num_blocks == std::vector<int32_t>{1, 0});
  CHECK(bm.full_q_indices[0] == 1);
  CHECK(bm.num_partial() == 2);
  CHECK(bm.num_full() == 1);
  CHECK(bm.executed_pairs_per_head(3) == 3 * 3 * 128 * 128);
  CHECK(bm.kind(2, 3, 1, 0) == BlockKind::full);  // broadcast over b and h
  CHECK(bm.kind(2, 3, 0, 1) == BlockKind::empty);
}

TEST_CASE("tail tiles are partial even when every pair is allowed") {
  Problem p = base_problem(1, 200, 200);
  const BlockMask bm = build_block_mask(p);
  CHECK(render_block_mask(bm) == "#+\n++\n");
  CHECK(bm.executed_pairs_per_head(1) == 200 * 200);
  const BlockMask bm64 = build_block_mask(p, 64, 100);  // kv divides, q does not
  CHECK(render_block_mask(bm64) == "##\n##\n##\n++\n");
}

TEST_CASE("documents and padding depend on the batch row") {
  Problem p = base_problem(2, 256, 256);
  p.mask = {document_term_from_lengths({{128, 128}, {256}}, 256)};
  BlockMask bm = build_block_mask(p);
  CHECK(bm.B == 2);
  CHECK(render_block_mask(bm, 0) == "#.\n.#\n");
  CHECK(render_block_mask(bm, 1, 3) == "##\n##\n");
  CHECK(bm.executed_pairs_per_head(2) == 2 * 128 * 128 + 256 * 256);
  CHECK_THROWS_AS(bm.executed_pairs_per_head(3), std::invalid_argument);

  p.mask = {document_term_from_lengths({{100, 0, 28}, {256}}, 256), CausalTerm{}};  // 128..255 padding in row 0
  bm = build_block_mask(p);
  CHECK(render_block_mask(bm, 0) == "+.\n..\n");
  CHECK(render_block_mask(bm, 1) == "+.\n#+\n");

  p.mask = {PaddingTerm{{256, 100}, {256, 200}}};
  bm = build_block_mask(p);
  CHECK(render_block_mask(bm, 0) == "##\n##\n");
  CHECK(render_block_mask(bm, 1) == "++\n..\n");
}

TEST_CASE("block_sparse, window and tile-size edge cases") {
  Problem p = base_problem(1, 256, 256);
  p.mask = {BlockSparseTerm{1.0, 9}};
  BlockMask bm = build_block_mask(p, 64, 64);
  CHECK(bm.num_full() == 16);
  CHECK(bm.num_partial() == 0);
  p.mask = {BlockSparseTerm{0.0, 9}};
  bm = build_block_mask(p, 64, 64);
  CHECK(bm.num_full() + bm.num_partial() == 0);
  CHECK(bm.executed_pairs_per_head(1) == 0);
  CHECK(render_block_mask(bm) == "....\n....\n....\n....\n");
  p.mask = {SlidingWindowTerm{0, 0}};
  bm = build_block_mask(p, 64, 64);
  CHECK(render_block_mask(bm) == "+...\n.+..\n..+.\n...+\n");
  // 1 x 1 tiles: every tile is full or empty.
  p = base_problem(1, 5, 7);
  p.mask = {CausalTerm{}};
  bm = build_block_mask(p, 1, 1);
  CHECK(bm.num_partial() == 0);
  CHECK(bm.num_full() == count_allowed_pairs(p));
  CHECK(bm.executed_pairs_per_head(1) == 3 + 4 + 5 + 6 + 7);
  CHECK_THROWS_AS(build_block_mask(p, 0, 64), std::invalid_argument);
  CHECK_THROWS_AS(build_block_mask(p, 64, -1), std::invalid_argument);
  CHECK_THROWS_AS(bm.kind(0, 0, 5, 0), std::out_of_range);
  CHECK_THROWS_AS(bm.kind(0, 0, 0, -1), std::out_of_range);
}

TEST_CASE("large masks have their closed-form tile counts") {
  // Dense causal S = 16384 at 128 x 128: 128 diagonal partial tiles, 128 * 127 / 2 full.
  Problem p = base_problem(1, 16384, 16384);
  p.mask = {CausalTerm{}};
  BlockMask bm = build_block_mask(p);
  CHECK(bm.num_partial() == 128);
  CHECK(bm.num_full() == 128 * 127 / 2);
  CHECK(bm.executed_pairs_per_head(1) == (128 + 128 * 127 / 2) * 128 * 128);
  // Document-causal B = 4, S = 8192, documents of 128 n tokens: a document of n
  // blocks gives n partial (diagonal) and n (n - 1) / 2 full tiles.
  Rng rng{99};
  std::vector<std::vector<int64_t>> lengths(4);
  int64_t want_partial = 0, want_full = 0;
  for (auto& row : lengths) {
    int64_t left = 64;
    while (left > 0) {
      const int64_t n = std::min(left, rng.uniform(1, 20));
      row.push_back(128 * n);
      left -= n;
      want_partial += n;
      want_full += n * (n - 1) / 2;
    }
  }
  p = base_problem(4, 8192, 8192);
  p.mask = {document_term_from_lengths(lengths, 8192), CausalTerm{}};
  validate(p);
  bm = build_block_mask(p);
  CHECK(bm.B == 4);
  CHECK(bm.num_partial() == want_partial);
  CHECK(bm.num_full() == want_full);
}

TEST_CASE("document-causal 2048 equals brute force at several tile sizes") {
  Rng rng{5};
  std::vector<std::vector<int64_t>> lengths(2);
  for (auto& row : lengths) {
    int64_t left = 2048 - 77;
    while (left > 0) {
      row.push_back(std::min(left, rng.uniform(1, 700)));
      left -= row.back();
    }
  }
  Problem p = base_problem(2, 2048, 2048);
  p.mask = {document_term_from_lengths(lengths, 2048), CausalTerm{}};
  validate(p);
  check_block_mask(p, 128, 128);
  check_block_mask(p, 64, 32);
  check_block_mask(p, 96, 80);
}

TEST_CASE("property: BlockMask equals brute force on random problems and tile sizes") {
  const int64_t tiles[][2] = {{16, 32}, {64, 64}, {128, 128}, {128, 64}, {32, 16}, {7, 5}, {48, 80}, {1, 1}};
  Rng rng{314159};
  for (int iter = 0; iter < 300; ++iter) {
    CAPTURE(iter);
    const Problem p = random_problem(rng, iter % 4 == 0 ? 600 : 260);
    const auto& t = tiles[iter % 8];
    check_block_mask(p, t[0], t[1]);
  }
}

TEST_CASE("for_each_tile: partial tiles first, then full ones, as the lists hold them") {
  Problem p = base_problem(1, 512, 512);
  p.mask = {CausalTerm{}};
  const BlockMask bm = build_block_mask(p, 128, 128);  // row 3: full 0, 1, 2; partial 3
  std::vector<std::pair<int64_t, bool>> seen;
  for_each_tile(bm, 0, 0, 3, [&](int64_t kb, bool full) { seen.emplace_back(kb, full); });
  CHECK(seen == std::vector<std::pair<int64_t, bool>>{{3, false}, {0, true}, {1, true}, {2, true}});
  seen.clear();
  for_each_tile_of_col(bm, 0, 0, 1, [&](int64_t qb, bool full) { seen.emplace_back(qb, full); });
  CHECK(seen == std::vector<std::pair<int64_t, bool>>{{1, false}, {2, true}, {3, true}});
  seen.clear();
  for_each_tile(bm, 5, 7, 0, [&](int64_t kb, bool full) { seen.emplace_back(kb, full); });  // broadcast b, h
  CHECK(seen == std::vector<std::pair<int64_t, bool>>{{0, false}});
}

TEST_CASE("property: for_each_tile visits exactly the partial and full tiles of kind()") {
  Rng rng{11};
  for (int trial = 0; trial < 40; ++trial) {
    Problem p = base_problem(2, 40 + static_cast<int64_t>(rng.next() % 300), 40 + static_cast<int64_t>(rng.next() % 300));
    p.mask = {CausalTerm{trial % 2 ? CausalAlign::bottom_right : CausalAlign::top_left},
              SlidingWindowTerm{static_cast<int64_t>(rng.next() % 100), 0}};
    const int64_t qbk = 16 << (rng.next() % 3), kbk = 16 << (rng.next() % 3);
    const BlockMask bm = build_block_mask(p, qbk, kbk);
    for (int64_t qb = 0; qb < bm.num_q_blocks; ++qb) {
      std::vector<int> visits(static_cast<size_t>(bm.num_kv_blocks), 0);
      for_each_tile(bm, 1, 0, qb, [&](int64_t kb, bool full) {
        ++visits[static_cast<size_t>(kb)];
        CHECK(bm.kind(1, 0, qb, kb) == (full ? BlockKind::full : BlockKind::partial));
      });
      for (int64_t kb = 0; kb < bm.num_kv_blocks; ++kb) {
        CHECK(visits[static_cast<size_t>(kb)] == (bm.kind(1, 0, qb, kb) == BlockKind::empty ? 0 : 1));
        int col_visits = 0;
        for_each_tile_of_col(bm, 1, 0, kb, [&](int64_t q, bool full) {
          if (q != qb) return;
          ++col_visits;
          CHECK(bm.kind(1, 0, qb, kb) == (full ? BlockKind::full : BlockKind::partial));
        });
        CHECK(col_visits == visits[static_cast<size_t>(kb)]);
      }
    }
  }
}
