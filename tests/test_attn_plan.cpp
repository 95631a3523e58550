// CPU tests of the host side of the fused attention kernels (backends/kernels/):
// the interval mask (mask_row_bounds) against mask_allowed pair by pair, the tile
// spans the kernels iterate over, cu_seqlens from document masks, token
// gather/scatter, the longest-first work lists and the GQA pack choice.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <climits>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <vector>

#include "backends/kernels/attn_plan.hpp"
#include "backends/kernels/attn_tiles.hpp"
#include "backends/kernels/tile_scheduler.cuh"
#include "harness/model/block_mask.hpp"
#include "harness/model/mask.hpp"
#include "harness/model/mask_desc.hpp"
#include "harness/model/thread_pool.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;
using namespace attnbench::kernels;
using namespace attnbench::test;

namespace {

/// A random interval-mask problem (causal in either alignment, window, padding, prefix_lm).
Problem random_interval_problem(Rng& rng, uint64_t seed) {
  const int64_t sq = rng.uniform(1, 200), sk = rng.coin(0.5) ? sq : rng.uniform(1, 200);
  Problem p = make_problem(2, 2, 1, sq, sk, 64, DType::bf16, Layout::bshd, seed);
  if (rng.coin(0.6)) p = with_causal(p, rng.coin(0.5) ? CausalAlign::top_left : CausalAlign::bottom_right);
  if (rng.coin(0.4)) p = with_window(p, rng.uniform(-1, 50), rng.uniform(-1, 30));
  if (rng.coin(0.3)) p = with_padding(p, {rng.uniform(0, sq), sq}, {rng.uniform(0, sk), rng.uniform(0, sk)});
  if (rng.coin(0.2) && sq == sk) p.mask.push_back(PrefixLmTerm{rng.uniform(0, sq)});
  return p;
}

}  // namespace

TEST_CASE("mask_row_bounds equals mask_allowed on every pair of random interval masks") {
  Rng rng{77};
  for (int n = 0; n < 60; ++n) {
    const Problem p = random_interval_problem(rng, static_cast<uint64_t>(n));
    MaskArrays arrays;
    const MaskDesc m = make_mask_desc(p, arrays);
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t i = 0; i < p.seq_q; ++i) {
        const RowBounds rb = RowBounds::of(m, static_cast<int>(i), static_cast<int>(p.valid_q(b)),
                                           static_cast<int>(p.valid_k(b)));
        for (int64_t j = 0; j < p.seq_k; ++j) {
          INFO("problem " << n << " b " << b << " i " << i << " j " << j << " mask " << describe_mask(p));
          REQUIRE(rb.allows(static_cast<int>(j)) == mask_allowed(m, b, 0, i, j));
        }
      }
  }
}

TEST_CASE("tile spans cover every allowed pair and full tiles hold only allowed pairs") {
  Rng rng{78};
  int n_full = 0, n_partial = 0;  // the forward's once-per-tile form of tile_full, on both outcomes
  for (int n = 0; n < 40; ++n) {
    const Problem p = random_interval_problem(rng, 100 + static_cast<uint64_t>(n));
    MaskArrays arrays;
    const MaskDesc m = make_mask_desc(p, arrays);
    const int bm = n % 2 ? 16 : 64, bn = 64;
    for (int64_t b = 0; b < p.batch; ++b) {
      const int lq = static_cast<int>(p.valid_q(b)), lk = static_cast<int>(p.valid_k(b));
      for (int m0 = 0; m0 < lq; m0 += bm) {
        int first;
        const int tiles = key_tiles(m, lq, lk, m0, bm, bn, &first);
        for (int i = m0; i < m0 + bm && i < lq; ++i)
          for (int j = 0; j < lk; ++j) {
            if (!mask_allowed(m, b, 0, i, j)) continue;
            INFO("problem " << n << " i " << i << " j " << j);
            CHECK(j >= first);
            CHECK(j < first + tiles * bn);
          }
        int full_lo, full_hi;
        tile_full_keys(m, lq, lk, m0, bm, &full_lo, &full_hi);
        for (int t = 0; t < tiles; ++t) {
          const int n0 = first + t * bn;
          const bool full = tile_full(m, lq, lk, m0, bm, n0, bn);
          CHECK(full == (n0 >= full_lo && n0 + bn - 1 <= full_hi));
          ++(full ? n_full : n_partial);
          if (!full) continue;
          for (int i = m0; i < m0 + bm && i < lq; ++i)
            for (int j = n0; j < n0 + bn; ++j) CHECK(mask_allowed(m, b, 0, i, j));
        }
      }
      // Backward: the query tiles of each key tile cover every allowed pair.
      for (int n0 = 0; n0 < lk; n0 += bn) {
        int qfirst;
        const int qt = query_tiles(m, lq, lk, n0, bn, 32, &qfirst);
        for (int j = n0; j < n0 + bn && j < lk; ++j)
          for (int i = 0; i < lq; ++i)
            if (mask_allowed(m, b, 0, i, j)) {
              CHECK(i >= qfirst);
              CHECK(i < qfirst + qt * 32);
            }
      }
    }
  }
  CHECK(n_full > 0);
  CHECK(n_partial > 0);
}

TEST_CASE("dq_row_direct_block: the allowed keys are non-empty and lie in one key block, whose tile visits the row") {
  Rng rng{79};
  int n_direct = 0, n_other = 0;
  for (int n = 0; n < 60; ++n) {
    const Problem p = random_interval_problem(rng, 200 + static_cast<uint64_t>(n));
    MaskArrays arrays;
    const MaskDesc m = make_mask_desc(p, arrays);
    const int bn = n % 3 == 0 ? 16 : (n % 3 == 1 ? 64 : 128);
    for (int64_t b = 0; b < p.batch; ++b) {
      const int lq = static_cast<int>(p.valid_q(b)), lk = static_cast<int>(p.valid_k(b));
      for (int i = 0; i < static_cast<int>(p.seq_q); ++i) {
        std::set<int> blocks;  // the key blocks of width bn holding an allowed key of row i
        for (int j = 0; j < static_cast<int>(p.seq_k); ++j)
          if (i < lq && j < lk && mask_allowed(m, b, 0, i, j)) blocks.insert(j / bn);
        const int first = dq_row_direct_block(m, i, lq, lk, bn);
        const bool direct = first >= 0;
        INFO("problem " << n << " b " << b << " row " << i << " block " << bn << " mask " << describe_mask(p));
        REQUIRE(direct == (blocks.size() == 1));
        int key_first = 0;  // the same as "the one-row tile visits one key tile"
        CHECK(direct == (i < lq && key_tiles(m, lq, lk, i, 1, bn, &key_first) == 1));
        (direct ? n_direct : n_other) += 1;
        if (!direct) continue;
        CHECK(first == *blocks.begin() * bn);
        int d0 = 0, d1 = 0;  // the kernel's per-CTA form holds the row
        direct_rows(m, lq, lk, first, bn, &d0, &d1);
        CHECK(i >= d0);
        CHECK(i < d1);
        int qfirst = 0;  // the Hopper backward's 64-row query steps of that key tile include the row
        const int qt = query_tiles(m, lq, lk, first, bn, 64, &qfirst);
        CHECK(i >= qfirst);
        CHECK(i < qfirst + qt * 64);
      }
    }
  }
  CHECK(n_direct > 100);  // the draw holds both kinds of rows
  CHECK(n_other > 100);
}

TEST_CASE("direct_rows: the rows of a key block's [d0, d1) are direct with that block, or see no key") {
  Rng rng{80};
  int inside = 0;
  for (int n = 0; n < 60; ++n) {
    const Problem p = random_interval_problem(rng, 300 + static_cast<uint64_t>(n));
    MaskArrays arrays;
    const MaskDesc m = make_mask_desc(p, arrays);
    const int bn = n % 2 ? 64 : 128;
    for (int64_t b = 0; b < p.batch; ++b) {
      const int lq = static_cast<int>(p.valid_q(b)), lk = static_cast<int>(p.valid_k(b));
      for (int n0 = 0; n0 < lk; n0 += bn) {
        int d0 = 0, d1 = 0;
        direct_rows(m, lq, lk, n0, bn, &d0, &d1);
        for (int i = d0; i < d1 && i < lq; ++i) {
          const RowBounds rb = RowBounds::of(m, i, lq, lk);
          INFO("problem " << n << " b " << b << " n0 " << n0 << " row " << i << " mask " << describe_mask(p));
          CHECK((rb.lo > rb.hi || dq_direct_block(rb, bn) == n0));
          ++inside;
        }
      }
    }
  }
  CHECK(inside > 100);
}

TEST_CASE("cu_seqlens from document lengths and from document ids") {
  Problem p = with_documents(make_problem(2, 2, 1, 16, 16, 64, DType::bf16), {{3, 0, 5, 1}, {16}});
  const Sequences s = document_sequences(p);
  CHECK(s.cu_q == std::vector<int32_t>{0, 3, 3, 8, 9, 25});
  CHECK(s.cu_k == s.cu_q);
  CHECK(s.row == std::vector<int32_t>{0, 0, 0, 0, 1});
  CHECK(s.start_q == std::vector<int32_t>{0, 3, 3, 8, 0});

  Problem q = make_problem(1, 2, 1, 8, 8, 64, DType::bf16);
  q.mask.push_back(DocumentTerm{{{4, 4, -1, 7, 7, 7, -1, -1}}, {}});
  const Sequences t = document_sequences(q);
  CHECK(t.cu_q == std::vector<int32_t>{0, 2, 5});
  CHECK(t.start_q == std::vector<int32_t>{0, 3});

  Problem bad = make_problem(1, 2, 1, 4, 4, 64, DType::bf16);
  bad.mask.push_back(DocumentTerm{{{1, 2, 1, 2}}, {}});
  CHECK_THROWS_AS(document_sequences(bad), std::invalid_argument);
  CHECK_THROWS_AS(document_sequences(make_problem(1, 2, 1, 4, 4, 64, DType::bf16)), std::invalid_argument);

  const Sequences r = row_sequences(with_padding(make_problem(3, 2, 1, 10, 12, 64, DType::bf16), {4, 0, 10}, {12, 3, 1}));
  CHECK(r.cu_q == std::vector<int32_t>{0, 4, 4, 14});
  CHECK(r.cu_k == std::vector<int32_t>{0, 12, 15, 16});
}

TEST_CASE("gather and scatter of packed tokens round-trip; unstored positions read the fill") {
  const Problem p = with_documents(make_problem(2, 3, 1, 6, 6, 64, DType::bf16), {{2, 3}, {4}});
  const Sequences s = document_sequences(p);
  HostTensor t({2, 3, 6, 2});
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<double>(i + 1);
  const std::vector<double> packed = gather_tokens(t, s, false);
  REQUIRE(packed.size() == static_cast<size_t>(9 * 3 * 2));
  // Token 5 (row 1, position 0), head 2, element 1 == t(1, 2, 0, 1).
  CHECK(packed[(5 * 3 + 2) * 2 + 1] == t.at4(1, 2, 0, 1));
  const HostTensor back = scatter_tokens(packed, t.shape, s, false, -7.0);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t pos = 0; pos < 6; ++pos) {
        const bool stored = b == 0 ? pos < 5 : pos < 4;
        CHECK(back.at4(b, h, pos, 0) == (stored ? t.at4(b, h, pos, 0) : -7.0));
      }
}

TEST_CASE("encode_tokens / decode_tokens equal gather-then-encode and decode-then-scatter, on one thread or many") {
  // Documents of odd lengths (zero-length ones included) over rows of 37, odd head dim, every
  // dtype; and rows of 600 whose documents (zero-length ones too) start and end at and
  // around the 256-token blocks of the walk.
  struct Case { int64_t B, S; std::vector<std::vector<int64_t>> docs; };
  for (const Case& c : {Case{3, 37, {{5, 0, 11, 21}, {37}, {1, 2, 3, 30}}}, Case{2, 600, {{256, 0, 100, 244}, {1, 255, 0, 344}}}})
  for (DType dt : {DType::fp32, DType::fp16, DType::bf16})
    for (bool k_side : {false, true}) {
      const Problem p = with_documents(make_problem(c.B, 5, 1, c.S, c.S, 64, DType::bf16), c.docs);
      const Sequences s = document_sequences(p);
      HostTensor t({c.B, 5, c.S, 13});
      for (size_t i = 0; i < t.data.size(); ++i)
        t.data[i] = i % 97 == 0 ? (i % 2 ? INFINITY : NAN) : counter_normal(11, 3, i) * (i % 3 ? 1.0 : 7e4);
      CAPTURE(static_cast<int>(dt));
      CAPTURE(c.S);
      const EncodedBuffer fused = encode_tokens(t, s, k_side, dt);
      const EncodedBuffer two_step = encode(gather_tokens(t, s, k_side), dt);
      // The packing written out token by token, independent of the walk.
      std::vector<double> naive(static_cast<size_t>(s.cu_q.back() * 5 * 13));
      for (int64_t q = 0; q < s.size(); ++q)
        for (int32_t tok = s.cu_q[q]; tok < s.cu_q[q + 1]; ++tok)
          for (int64_t h = 0; h < 5; ++h)
            for (int64_t d = 0; d < 13; ++d)
              naive[static_cast<size_t>((tok * 5 + h) * 13 + d)] = t.at4(s.row[q], h, s.start_q[q] + tok - s.cu_q[q], d);
      const EncodedBuffer naive_bits = encode(naive, dt);
      CHECK(std::memcmp(fused.data(), naive_bits.data(), fused.size_bytes()) == 0);
      REQUIRE(fused.count == two_step.count);
      CHECK(fused.count == static_cast<size_t>(s.cu_q.back() * 5 * 13));
      CHECK(std::memcmp(fused.data(), two_step.data(), fused.size_bytes()) == 0);
      EncodedBuffer serial;
      ThreadPool one(1);
      one.parallel_for(1, 1, [&](int64_t, int) { serial = encode_tokens(t, s, k_side, dt); });
      CHECK(std::memcmp(fused.data(), serial.data(), fused.size_bytes()) == 0);
      const HostTensor back = decode_tokens(fused, t.shape, s, k_side, -2.0);
      const HostTensor want = scatter_tokens(decode(fused), t.shape, s, k_side, -2.0);
      CHECK(std::memcmp(back.data.data(), want.data.data(), want.data.size() * sizeof(double)) == 0);
      // Row 0, position 5 is a stored token; its head 4, element 12 reads back rounded.
      CHECK(back.at4(0, 4, 5, 12) == decode(encode(std::vector<double>{t.at4(0, 4, 5, 12)}, dt))[0]);
      // The token after the first 256-token block (row 0, position 256: the third document of the second case).
      if (c.S == 600) CHECK(back.at4(0, 1, 256, 0) == decode(encode(std::vector<double>{t.at4(0, 1, 256, 0)}, dt))[0]);
      CHECK_THROWS_AS(decode_tokens(EncodedBuffer(3, DType::bf16), t.shape, s, false, 0.0), std::invalid_argument);
    }
}

TEST_CASE("tile plan: longest work first, executed pairs, packing") {
  Problem p = with_causal(make_problem(1, 2, 2, 128, 128, 64, DType::bf16));
  MaskArrays arrays;
  const MaskDesc m = make_mask_desc(p, arrays);
  const SeqLengths lens{{128}, {128}, {128}, {128}};
  const TilePlan t = plan_tiles(m, lens, 2, 1, 1, 64);
  // Without packing the forward tile is 128 rows: one tile over two key tiles.
  REQUIRE(t.q_items.size() == 1);
  CHECK(t.tile_rows == kFwdBlockMWide);
  CHECK(t.fwd_tiles == 2);
  CHECK(t.executed_pairs == 2 * kFwdBlockN * 128 * 2);
  // The dQ kernel's 64-row tiles: two key tiles first, then one.
  REQUIRE(t.dq_items.size() == 2);
  CHECK(t.dq_items[0].start == 64);
  CHECK(t.dq_items[1].start == 0);
  REQUIRE(t.k_items.size() == 2);
  CHECK(t.k_items[0].start == 0);  // key tile 0 is seen by every query tile
  // Packing four heads: 16-position query tiles, causal waste shrinks.
  const TilePlan t4 = plan_tiles(m, lens, 8, 4, 4, 128);
  CHECK(t4.tile_rows == 16);
  CHECK(t4.tile_keys == kFwdBlockN);
  CHECK(plan_tiles(m, lens, 2, 1, 1, 128).tile_keys == kFwdBlockN);
  // The Hopper forward: 128-key steps on dense 128-row tiles, 64 on packed ones.
  CHECK(plan_tiles(m, lens, 2, 1, 1, 128, FwdPath::sm90, BwdPath::sm80, 128).tile_keys == 128);
  CHECK(plan_tiles(m, lens, 8, 4, 4, 128, FwdPath::sm90).tile_keys == 64);
  CHECK(t4.q_items.size() == 8);
  CHECK(t4.q_items.front().start >= t4.q_items.back().start);
  // The Hopper backward: 128-key dK/dV tiles (two warpgroups of 64 keys).
  CHECK(t.bwd_tile_keys == kBwdBlockN);
  const SeqLengths lens300{{300}, {300}, {300}, {300}};
  const TilePlan tb = plan_tiles(m, lens300, 2, 1, 1, 128, FwdPath::sm90, BwdPath::sm90);
  CHECK(tb.bwd_tile_keys == 128);
  REQUIRE(tb.k_items.size() == 3);  // keys 0, 128, 256 (the last tile partial)
  CHECK(tb.k_items[0].start == 0);  // causal: key tile 0 meets the most query tiles
  CHECK(tb.k_items[2].start == 256);
  CHECK(plan_tiles(m, lens300, 2, 1, 1, 128).k_items.size() == 5);  // 64-key tiles on the portable backward
  CHECK(describe(tb, 2, 2).find("k tiles 128: 6 CTAs") != std::string::npos);
  CHECK_THROWS_AS(plan_tiles(m, lens, 6, 3, 2, 64), std::invalid_argument);
}

TEST_CASE("Hopper forward CTA rows: 64-row CTAs where they cut the executed pairs, 128 otherwise") {
  Problem p = with_causal(make_problem(1, 2, 2, 128, 128, 64, DType::bf16));
  MaskArrays arrays;
  const MaskDesc m = make_mask_desc(p, arrays);
  auto lens_of = [](int32_t n) { return SeqLengths{{n}, {n}, {n}, {n}}; };
  // Causal over 128 keys: one 128 x 128 tile (16384 pairs) against 64 x 64 tiles of
  // 1 and 2 steps (12288 pairs, 75%) -> 64 rows.
  CHECK(fwd_cta_rows(m, lens_of(128), 1, FwdPath::sm90, 0, 128) == 64);
  // Causal over 1920 keys: 120 wide steps (1966080 pairs) against 465 narrow ones
  // (1904640, 97%) -> 128 rows.
  CHECK(fwd_cta_rows(m, lens_of(1920), 1, FwdPath::sm90, 0, 128) == 128);
  CHECK(fwd_cta_rows(m, lens_of(4096), 1, FwdPath::sm90, 0, 128) == 128);
  // A causal window of 256 keys: 3 wide steps per 128 rows (49152 pairs) against
  // 2 x 5 narrow ones (40960, 83%) -> 64 rows; a window of 4096 keys: 98% -> 128.
  Problem w = with_window(p, 256, 0);
  const MaskDesc mw = make_mask_desc(w, arrays);
  CHECK(fwd_cta_rows(mw, lens_of(8192), 1, FwdPath::sm90, 0, 128) == 64);
  Problem w4 = with_window(p, 4096, 0);
  const MaskDesc mw4 = make_mask_desc(w4, arrays);
  CHECK(fwd_cta_rows(mw4, lens_of(16384), 1, FwdPath::sm90, 0, 128) == 128);
  // Full attention: equal pairs -> 128 rows.
  Problem f = make_problem(1, 2, 2, 512, 512, 64, DType::bf16);
  const MaskDesc mf = make_mask_desc(f, arrays);
  CHECK(fwd_cta_rows(mf, lens_of(512), 1, FwdPath::sm90, 0, 128) == 128);
  // Forced, the portable path and GQA packing keep their own tile.
  CHECK(fwd_cta_rows(m, lens_of(4096), 1, FwdPath::sm90, 64, 128) == 64);
  CHECK(fwd_cta_rows(m, lens_of(128), 1, FwdPath::sm80, 0, 128) == 128);
  CHECK(fwd_cta_rows(m, lens_of(128), 4, FwdPath::sm90, 0, 128) == 64);
  CHECK(fwd_cta_rows(m, lens_of(128), 1, FwdPath::sm80, 64, 128) == 64);  // asked for: either path
  CHECK_THROWS_AS(fwd_cta_rows(m, lens_of(128), 1, FwdPath::sm90, 96, 128), std::invalid_argument);
  CHECK_THROWS_AS(fwd_cta_rows(m, lens_of(128), 2, FwdPath::sm90, 128, 128), std::invalid_argument);
  // Above head_dim 128: 64 rows (no wide portable tile), 128 refused.
  CHECK(fwd_cta_rows(m, lens_of(4096), 1, FwdPath::sm80, 0, 256) == 64);
  CHECK(fwd_cta_rows(m, lens_of(4096), 1, FwdPath::sm80, 0, 96) == 128);
  CHECK_THROWS_AS(fwd_cta_rows(m, lens_of(128), 1, FwdPath::sm80, 128, 256), std::invalid_argument);
  // The Hopper forward at 256: 128 rows of 64-key steps, 64 rows where they cut the pairs as at 128.
  CHECK(fwd_cta_rows(m, lens_of(4096), 1, FwdPath::sm90, 128, 256) == 128);
  CHECK(fwd_cta_rows(m, lens_of(4096), 1, FwdPath::sm90, 0, 256) == 128);
  CHECK(fwd_cta_rows(mw, lens_of(8192), 1, FwdPath::sm90, 0, 256) == 64);
  const TilePlan t256 = plan_tiles(m, lens_of(256), 2, 1, 1, 256, FwdPath::sm90, BwdPath::sm80, 128);
  CHECK(t256.tile_keys == 64);
  // The plan follows: 64-row tiles of 64-key steps, with the executed pairs of that tile.
  const TilePlan t = plan_tiles(m, lens_of(256), 2, 1, 1, 128, FwdPath::sm90, BwdPath::sm80, 64);
  CHECK(t.tile_rows == 64);
  CHECK(t.tile_keys == 64);
  REQUIRE(t.q_items.size() == 4);
  CHECK(t.fwd_tiles == 1 + 2 + 3 + 4);
  CHECK(t.executed_pairs == 10 * 64 * 64 * 2);
  const TilePlan wide = plan_tiles(m, lens_of(256), 2, 1, 1, 128, FwdPath::sm90, BwdPath::sm80, 128);
  CHECK(wide.tile_rows == 128);
  CHECK(wide.executed_pairs == 3 * 128 * 128 * 2);
  // An empty problem keeps the wide tile (no tile to average).
  CHECK(fwd_cta_rows(m, SeqLengths{}, 1, FwdPath::sm90, 0, 128) == 128);
}

TEST_CASE("GQA pack choice by group and mean document length") {
  CHECK(choose_pack(4, 175.0) == 4);
  CHECK(choose_pack(8, 175.0) == 4);
  CHECK(choose_pack(2, 100.0) == 2);
  CHECK(choose_pack(7, 100.0) == 1);
  CHECK(choose_pack(4, 4096.0) == 1);
  CHECK(choose_pack(1, 50.0) == 1);
}

TEST_CASE("flex plan: every block tile listed once, longest first, executed pairs from the BlockMask") {
  for (int block : {64, 128}) {
    Problem p = with_causal(with_documents(make_problem(2, 4, 2, 300, 300, 64, DType::bf16), {{100, 200}, {300}}));
    const BlockMask bm = build_block_mask(p, block, block);
    const TilePlan t = plan_block_tiles(bm, p.batch, 4);
    CHECK(t.tile_rows == block);
    CHECK(t.q_items.size() == static_cast<size_t>(2 * bm.num_q_blocks));
    CHECK(t.dq_items.size() == static_cast<size_t>(2 * ((300 + 63) / 64)));
    CHECK(t.k_items.size() == static_cast<size_t>(2 * ((300 + 63) / 64)));
    CHECK(t.executed_pairs == bm.executed_pairs_per_head(2) * 4);
    std::set<std::pair<int, int>> seen;
    int64_t prev = INT64_MAX, steps = 0;
    for (const WorkItem& w : t.q_items) {
      CHECK(w.start % block == 0);
      CHECK(seen.insert({w.seq, w.start}).second);
      const int64_t r = bm.row(w.seq, 0, w.start / block);
      const int64_t blocks = bm.kv_num_blocks[static_cast<size_t>(r)] + bm.full_kv_num_blocks[static_cast<size_t>(r)];
      CHECK(blocks <= prev);
      prev = blocks;
      steps += blocks * (block / 64);
    }
    CHECK(t.fwd_tiles == steps);
    // Causal documents: the first query block of row 1 sees one kv block, the last several.
    const int64_t first = bm.kv_num_blocks[static_cast<size_t>(bm.row(1, 0, 0))] +
                          bm.full_kv_num_blocks[static_cast<size_t>(bm.row(1, 0, 0))];
    CHECK(first == 1);
    // The Hopper backward: 128-key dK/dV tiles, one per KV block of 128; KV blocks of 64 are refused.
    if (block == 128) {
      const TilePlan h = plan_block_tiles(bm, p.batch, 4, BwdPath::sm90);
      CHECK(h.bwd_tile_keys == 128);
      REQUIRE(h.k_items.size() == static_cast<size_t>(2 * ((300 + 127) / 128)));
      for (const WorkItem& w : h.k_items) CHECK(w.start % 128 == 0);
    } else {
      CHECK_THROWS_AS(plan_block_tiles(bm, p.batch, 4, BwdPath::sm90), std::invalid_argument);
    }
  }
  // 64-row halves of 128-row blocks (the Hopper forward of short walks): two items per block, same lists.
  {
    const Problem p = with_causal(with_documents(make_problem(2, 4, 2, 300, 300, 64, DType::bf16), {{100, 200}, {300}}));
    const BlockMask bm = build_block_mask(p, 128, 128);
    const TilePlan whole = plan_block_tiles(bm, p.batch, 4), halves = plan_block_tiles(bm, p.batch, 4, BwdPath::sm80, 64);
    CHECK(halves.tile_rows == 64);
    CHECK(halves.q_items.size() == 2 * whole.q_items.size());
    CHECK(halves.fwd_tiles == 2 * whole.fwd_tiles);
    std::set<std::pair<int, int>> starts;
    for (const WorkItem& w : halves.q_items) CHECK(starts.insert({w.seq, w.start}).second);
    for (const WorkItem& w : whole.q_items) {
      CHECK(starts.count({w.seq, w.start}) == 1);
      CHECK(starts.count({w.seq, w.start + 64}) == 1);
    }
    CHECK_THROWS_AS(plan_block_tiles(bm, p.batch, 4, BwdPath::sm80, 32), std::invalid_argument);
    // The choice: short walks (at most kFlexShortWalkSteps key steps per block on average) on the Hopper forward.
    CHECK(flex_fwd_rows(bm, FwdPath::sm90, 128) == 64);
    CHECK(flex_fwd_rows(bm, FwdPath::sm80, 128) == 128);
    CHECK(flex_fwd_rows(bm, FwdPath::sm80, 256) == 64);  // no 128-row portable tile above head_dim 128
    const BlockMask dense = build_block_mask(with_causal(make_problem(1, 1, 1, 8192, 8192, 64, DType::bf16)), 128, 128);
    CHECK(flex_fwd_rows(dense, FwdPath::sm90, 128) == 128);  // 64.5 blocks of 2 steps per query block on average
    CHECK(flex_fwd_rows(build_block_mask(p, 64, 64), FwdPath::sm90, 128) == 64);  // blocks of 64 stay whole
  }
  const BlockMask odd = build_block_mask(make_problem(1, 1, 1, 100, 100, 64, DType::bf16), 32, 32);
  CHECK_THROWS_AS(plan_block_tiles(odd, 1, 1), std::invalid_argument);
  const BlockMask per_row = build_block_mask(with_padding(make_problem(2, 1, 1, 100, 100, 64, DType::bf16),
                                                          {100, 50}, {100, 50}), 64, 64);
  CHECK_THROWS_AS(plan_block_tiles(per_row, 3, 1), std::invalid_argument);
}

TEST_CASE("offset_bias dBias CSR: keys grouped by offset entry, ascending") {
  std::vector<int32_t> ptr, keys;
  offset_keys_csr({2, 0, 2, 1, 0}, 4, &ptr, &keys);
  CHECK(ptr == std::vector<int32_t>{0, 2, 3, 5, 5});
  CHECK(keys == std::vector<int32_t>{1, 4, 3, 0, 2});
  CHECK_THROWS_AS(offset_keys_csr({0, 4}, 4, &ptr, &keys), std::invalid_argument);
  CHECK_THROWS_AS(offset_keys_csr({-1}, 4, &ptr, &keys), std::invalid_argument);
}

namespace {

/// A random problem over every mask kind the flex path runs: documents (contiguous
/// runs with -1 padding, or ids split into several runs), padding, causal in both
/// alignments, windows, prefix_lm, block_sparse; lengths around the block sizes.
Problem random_flex_problem(Rng& rng, uint64_t seed) {
  const int64_t lens[] = {1, 17, 63, 64, 65, 127, 128, 129, 200, 300};
  const int64_t sq = lens[rng.uniform(0, 9)];
  const bool docs = rng.coin(0.5);
  const int64_t sk = docs || rng.coin(0.5) ? sq : lens[rng.uniform(0, 9)];
  Problem p = make_problem(2, 2, 1, sq, sk, 64, DType::bf16, Layout::bshd, seed);
  if (docs) {
    DocumentTerm d;
    for (int b = 0; b < 2; ++b) {
      std::vector<int32_t> row;
      int32_t id = 0;
      for (int64_t i = 0; i < sq; ++i) {
        if (i > 0 && rng.coin(0.03)) id = rng.coin(0.15) ? -1 : id + 1;
        row.push_back(id);
      }
      if (rng.coin(0.25) && sq > 2) row[static_cast<size_t>(sq - 1)] = row[0] >= 0 ? row[0] : 0;  // a second run
      d.doc_ids.push_back(row);
    }
    p.mask.push_back(d);
  } else if (rng.coin(0.3)) {
    p = with_padding(p, {rng.uniform(0, sq), sq}, {rng.uniform(0, sk), rng.uniform(0, sk)});
  }
  if (rng.coin(0.5)) p = with_causal(p, rng.coin(0.5) ? CausalAlign::top_left : CausalAlign::bottom_right);
  if (rng.coin(0.3)) p = with_window(p, rng.uniform(-1, 90), rng.uniform(-1, 40));
  if (rng.coin(0.15) && sq == sk) p.mask.push_back(PrefixLmTerm{rng.uniform(0, sq)});
  if (rng.coin(0.3)) p.mask.push_back(BlockSparseTerm{rng.coin(0.5) ? 0.5 : (rng.coin(0.5) ? 0.0 : 1.0), seed});
  validate(p);
  return p;
}

}  // namespace

TEST_CASE("rel_bias dBias scratch: a row for every 64-key tile of every 128-key dK/dV CTA, both warpgroups") {
  for (int64_t sk = 1; sk <= 1100; ++sk) {
    const int64_t tiles = rel_bias_scratch_tiles(sk);
    const int64_t ctas = (sk + kBwdSm90BlockN - 1) / kBwdSm90BlockN;  // the Hopper kernel's key tiles
    CHECK(tiles >= (sk + kBwdBlockN - 1) / kBwdBlockN);               // the portable kernel's
    CHECK(tiles * kBwdBlockN >= ctas * kBwdSm90BlockN);               // warpgroup 1 of the last CTA too
  }
  CHECK(rel_bias_scratch_tiles(64) == 2);
  CHECK(rel_bias_scratch_tiles(129) == 4);
}

TEST_CASE("flex mask form: BlockMask lists + row intervals + remaining pair terms equal mask_allowed on every pair") {
  Rng rng(777);
  int spans = 0, pairs_left = 0, sparse_dropped = 0;
  for (int trial = 0; trial < 160; ++trial) {
    const Problem p = random_flex_problem(rng, 1000 + static_cast<uint64_t>(trial));
    const int64_t block = rng.coin(0.5) ? 64 : 128;
    const BlockMask bm = build_block_mask(p, block, block);
    MaskArrays arrays, gold_arrays;
    const FlexMaskForm form = flex_mask_form(p, arrays, bm);
    const MaskDesc gold = make_mask_desc(p, gold_arrays);
    spans += !form.doc_first.empty();
    pairs_left += mask_needs_pairs(form.mask);
    sparse_dropped += gold.block_density >= 0.0 && form.mask.block_density < 0.0;
    if (!form.doc_first.empty()) CHECK(form.mask.doc_ids == nullptr);
    CAPTURE(trial);
    CAPTURE(describe_mask(p));
    CAPTURE(block);
    for (int64_t b = 0; b < p.batch; ++b) {
      const int lq = static_cast<int>(p.valid_q(b)), lk = static_cast<int>(p.valid_k(b));
      for (int64_t i = 0; i < p.seq_q; ++i) {
        const RowBounds rb = flex_row_bounds(form.mask, form.doc_first.empty() ? nullptr : form.doc_first.data(),
                                             form.doc_last.empty() ? nullptr : form.doc_last.data(),
                                             static_cast<int>(b), static_cast<int>(i), lq, lk);
        for (int64_t j = 0; j < p.seq_k; ++j) {
          const BlockKind kind = bm.kind(b, 0, i / block, j / block);
          bool ok = kind == BlockKind::full;
          if (kind == BlockKind::partial)
            ok = rb.allows(static_cast<int>(j)) &&
                 (!mask_needs_pairs(form.mask) || (i < lq && j < lk && mask_allowed(form.mask, b, 0, i, j)));
          if (ok != mask_allowed(gold, b, 0, i, j)) {
            CAPTURE(b);
            CAPTURE(i);
            CAPTURE(j);
            FAIL("the flex kernels' mask decision differs from mask_allowed");
          }
        }
      }
    }
  }
  CHECK(spans > 20);  // every branch ran
  CHECK(pairs_left > 5);
  CHECK(sparse_dropped > 10);
}

TEST_CASE("TileScheduler::decode: L2 head groups are a bijection, group-major, items in list order inside a group") {
  for (int64_t n_items : {1, 5, 37})
    for (int64_t chunks : {1, 3, 8, 32})
      for (int64_t group : {0, 1, 3, 4, 8, 32, 40}) {
        CAPTURE(n_items);
        CAPTURE(chunks);
        CAPTURE(group);
        std::set<std::pair<int64_t, int64_t>> seen;
        int64_t prev_chunk_group = -1;
        for (int64_t t = 0; t < n_items * chunks; ++t) {
          int64_t item = -1, chunk = -1;
          TileScheduler::decode<int64_t>(t, n_items, chunks, group, &item, &chunk);
          REQUIRE(item >= 0);
          REQUIRE(item < n_items);
          REQUIRE(chunk >= 0);
          REQUIRE(chunk < chunks);
          seen.insert({item, chunk});
          if (group <= 0 || group >= chunks) {  // no grouping: the plain item-major order
            CHECK(item == t / chunks);
            CHECK(chunk == t % chunks);
          } else {
            CHECK(chunk / group >= prev_chunk_group);  // groups never come back
            prev_chunk_group = chunk / group;
          }
        }
        CHECK(static_cast<int64_t>(seen.size()) == n_items * chunks);
        // unsigned 32-bit arithmetic (own_tile) agrees with 64-bit (at)
        for (int64_t t = 0; t < n_items * chunks; ++t) {
          int64_t i64, c64;
          unsigned i32, c32;
          TileScheduler::decode<int64_t>(t, n_items, chunks, group, &i64, &c64);
          TileScheduler::decode<unsigned>(static_cast<unsigned>(t), static_cast<unsigned>(n_items),
                                          static_cast<unsigned>(chunks), static_cast<unsigned>(group), &i32, &c32);
          CHECK(i64 == i32);
          CHECK(c64 == c32);
        }
      }
  // 3 items x 8 chunks in groups of 3: chunks 0-2 of every item, then 3-5, then the partial group 6-7.
  std::vector<std::pair<int64_t, int64_t>> order;
  for (int64_t t = 0; t < 24; ++t) {
    int64_t item, chunk;
    TileScheduler::decode<int64_t>(t, 3, 8, 3, &item, &chunk);
    order.push_back({item, chunk});
  }
  const std::vector<std::pair<int64_t, int64_t>> want = {
      {0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}, {2, 0}, {2, 1}, {2, 2}, {0, 3}, {0, 4}, {0, 5},
      {1, 3}, {1, 4}, {1, 5}, {2, 3}, {2, 4}, {2, 5}, {0, 6}, {0, 7}, {1, 6}, {1, 7}, {2, 6}, {2, 7}};
  CHECK(order == want);
}

TEST_CASE("group_by_sequence: sequences in the order of their longest item, each one's items in list order") {
  std::vector<WorkItem> items = {{2, 0}, {0, 128}, {2, 128}, {1, 0}, {0, 0}, {2, 256}, {1, 128}};
  group_by_sequence(items);
  const std::vector<std::pair<int, int>> want = {{2, 0}, {2, 128}, {2, 256}, {0, 128}, {0, 0}, {1, 0}, {1, 128}};
  REQUIRE(items.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK(items[i].seq == want[i].first);
    CHECK(items[i].start == want[i].second);
  }
  // A causal padded batch's longest-first list (every sequence's longest tiles first) becomes sequence-major.
  Problem p = with_causal(make_problem(2, 4, 4, 512, 512, 128, DType::bf16));
  MaskArrays arrays;
  const MaskDesc m = make_mask_desc(p, arrays);
  const TilePlan t =
      plan_tiles(m, SeqLengths{{512, 512}, {512, 512}, {512, 512}, {512, 512}}, 4, 1, 1, 128, FwdPath::sm90,
                 BwdPath::sm90, 0);
  std::vector<WorkItem> q = t.q_items;
  REQUIRE(q[0].seq != q[1].seq);  // longest first interleaves the sequences
  group_by_sequence(q);
  for (size_t i = 1; i < q.size(); ++i) {
    CHECK(q[i].seq >= q[i - 1].seq);
    if (q[i].seq == q[i - 1].seq) CHECK(q[i].start < q[i - 1].start);  // causal: later tiles are longer
  }
}

TEST_CASE("l2_head_group: whole KV heads that fit the budget in even groups, 0 when all heads fit") {
  const int64_t mib = int64_t{1} << 20;
  // K / V of one KV head at S8192, D128, bf16: 4 MiB. A 12.5 MiB budget holds 3 heads.
  CHECK(l2_head_group(50 * mib / 4, 4 * mib, 1, 16) == 3);
  CHECK(l2_head_group(50 * mib / 4, 4 * mib, 4, 32) == 12);  // GQA 4:1: four query-head chunks per KV head
  CHECK(l2_head_group(50 * mib / 4, 4 * mib, 1, 3) == 0);    // every head fits: one group
  CHECK(l2_head_group(mib, 4 * mib, 2, 16) == 2);            // at least one KV head
  CHECK(l2_head_group(60 * mib, 4 * mib, 1, 16) == 8);       // 15 fit: two even groups of 8
  CHECK(l2_head_group(60 * mib, 4 * mib, 1, 15) == 0);
  CHECK(l2_head_group(10 * mib, 4 * mib, 2, 14) == 4);       // 7 KV heads, 2 fit: 4 groups of 2 (or fewer)
  CHECK_THROWS_AS(l2_head_group(mib, 0, 1, 16), std::invalid_argument);
  CHECK_THROWS_AS(l2_head_group(mib, mib, 1, 0), std::invalid_argument);
}
