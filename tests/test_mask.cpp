// Mask services (mask.hpp): exact pair counts, per-row intervals and the
// interval predicate, against hand-computed values and against brute-force
// evaluation of mask_allowed (mask_desc.hpp, the single source of truth) on many
// seeded random problems.
#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

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
  p.heads_q = 2;
  p.heads_kv = 1;
  p.seq_q = sq;
  p.seq_k = sk;
  return p;
}

DocumentTerm docs_from_ids(std::vector<std::vector<int32_t>> ids) {
  DocumentTerm d;
  d.doc_ids = std::move(ids);
  return d;
}

/// A window bound: unbounded, zero, small, or wider than the sequences.
int64_t random_bound(Rng& rng, int64_t span) {
  switch (rng.uniform(0, 3)) {
    case 0: return -1;
    case 1: return 0;
    case 2: return rng.uniform(0, 8);
    default: return rng.uniform(0, 2 * span + 10);
  }
}

/// Random valid problem covering every mask kind and their combinations.
Problem random_problem(Rng& rng, int64_t max_seq) {
  const bool doc = rng.coin(0.35);
  const int64_t sq = rng.uniform(1, max_seq);
  const int64_t sk = doc || rng.coin(0.25) ? sq : rng.uniform(1, max_seq);
  Problem p = base_problem(rng.uniform(1, 3), sq, sk);
  if (rng.coin(0.5))
    p.mask.push_back(CausalTerm{rng.coin(0.5) ? CausalAlign::top_left : CausalAlign::bottom_right});
  if (rng.coin(0.35)) p.mask.push_back(SlidingWindowTerm{random_bound(rng, sq + sk), random_bound(rng, sq + sk)});
  if (doc) {
    const int64_t mode = rng.uniform(0, 3);
    if (mode == 0) {  // contiguous, from lengths (zero-length documents, -1 padding at the end)
      std::vector<std::vector<int64_t>> lengths(static_cast<size_t>(p.batch));
      for (auto& row : lengths) {
        int64_t left = sq - (rng.coin(0.5) ? rng.uniform(0, sq) : 0);
        while (left > 0) {
          const int64_t l = rng.coin(0.15) ? 0 : rng.uniform(1, std::max<int64_t>(1, left));
          row.push_back(std::min(l, left));
          left -= row.back();
        }
        if (rng.coin(0.3)) row.push_back(0);
      }
      p.mask.push_back(document_term_from_lengths(lengths, sq));
    } else {
      std::vector<std::vector<int32_t>> ids(static_cast<size_t>(p.batch));
      for (auto& row : ids) {
        if (mode == 1) {  // random ids from a small alphabet: non-contiguous, -1 scattered
          for (int64_t i = 0; i < sq; ++i) row.push_back(static_cast<int32_t>(rng.uniform(-1, 3)));
        } else {  // contiguous runs with large, unordered ids; mode 3 also scatters -1
          int32_t id = static_cast<int32_t>(rng.uniform(0, 1000000));
          for (int64_t i = 0; i < sq; ++i) {
            if (i > 0 && rng.coin(0.05)) id = static_cast<int32_t>(rng.uniform(0, 1000000));
            row.push_back(mode == 3 && rng.coin(0.05) ? -1 : id);
          }
        }
      }
      p.mask.push_back(docs_from_ids(std::move(ids)));
    }
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

/// Allowed j of row (b, i) by brute force.
std::vector<int64_t> brute_row(const MaskDesc& m, int64_t b, int64_t i) {
  std::vector<int64_t> js;
  for (int64_t j = 0; j < m.seq_k; ++j)
    if (mask_allowed(m, b, 0, i, j)) js.push_back(j);
  return js;
}

/// Checks count, row_interval and mask_is_interval of p against brute force.
void check_against_brute_force(const Problem& p) {
  CAPTURE(describe_mask(p));
  CAPTURE(p.batch);
  CAPTURE(p.seq_q);
  CAPTURE(p.seq_k);
  MaskArrays arrays;
  const MaskDesc m = make_mask_desc(p, arrays);
  const std::vector<int64_t> counts = count_allowed_pairs_per_batch(p);
  REQUIRE(static_cast<int64_t>(counts.size()) == p.batch);
  const bool interval = mask_is_interval(p);
  int64_t total = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t n = 0;
    for (int64_t i = 0; i < p.seq_q; ++i) {
      const std::vector<int64_t> js = brute_row(m, b, i);
      n += static_cast<int64_t>(js.size());
      const bool consecutive = js.empty() || js.back() - js.front() + 1 == static_cast<int64_t>(js.size());
      const auto iv = row_interval(p, m, b, i);
      // Exact: a value iff the row's allowed set is empty or one interval.
      CHECK(iv.has_value() == consecutive);
      if (interval) CHECK(iv.has_value());
      if (iv && js.empty()) CHECK(iv->first > iv->second);
      if (iv && !js.empty()) {
        CHECK(iv->first == js.front());
        CHECK(iv->second == js.back());
      }
    }
    CHECK(counts[static_cast<size_t>(b)] == n);
    total += n;
  }
  CHECK(count_allowed_pairs(p) == total);
  // RowIntervals (one segmenter, rebuilt when the batch row changes) answers as
  // row_interval, rows visited batch-interleaved so that it switches back and forth.
  RowIntervals rows(m);
  for (int64_t i = 0; i < p.seq_q; ++i)
    for (int64_t b = 0; b < p.batch; ++b) CHECK(rows.at(b, i) == row_interval(p, m, b, i));
}

/// Independent statement of mask_is_interval: no block_sparse and every row of
/// document ids made of contiguous runs.
bool expected_interval(const Problem& p) {
  if (p.find_mask<BlockSparseTerm>()) return false;
  if (const auto* d = p.find_mask<DocumentTerm>())
    for (const auto& row : d->doc_ids)
      for (size_t i = 0; i < row.size(); ++i)
        for (size_t j = i + 1; j < row.size(); ++j)
          if (row[i] >= 0 && row[i] == row[j])
            for (size_t k = i + 1; k < j; ++k)
              if (row[k] != row[i]) return false;
  return true;
}

int64_t count_of(const Problem& p) { return count_allowed_pairs(p); }

}  // namespace

TEST_CASE("causal counts by hand, both alignments") {
  Problem p = base_problem(1, 4, 4);
  p.mask = {CausalTerm{CausalAlign::bottom_right}};
  CHECK(count_of(p) == 10);
  p.mask = {CausalTerm{CausalAlign::top_left}};
  CHECK(count_of(p) == 10);

  p = base_problem(1, 2, 5);  // bottom_right: j <= i + 3 -> rows of 4 and 5
  p.mask = {CausalTerm{CausalAlign::bottom_right}};
  CHECK(count_of(p) == 9);
  MaskArrays a;
  MaskDesc m = make_mask_desc(p, a);
  CHECK(row_interval(p, m, 0, 0) == std::optional<std::pair<int64_t, int64_t>>({0, 3}));
  CHECK(row_interval(p, m, 0, 1) == std::optional<std::pair<int64_t, int64_t>>({0, 4}));
  p.mask = {CausalTerm{CausalAlign::top_left}};  // j <= i -> 1 + 2
  CHECK(count_of(p) == 3);

  p = base_problem(1, 5, 2);  // top_left: 1 + 2 + 2 + 2 + 2
  p.mask = {CausalTerm{CausalAlign::top_left}};
  CHECK(count_of(p) == 9);
  p.mask = {CausalTerm{CausalAlign::bottom_right}};  // j <= i - 3: rows 0-2 empty, then 1 + 2
  CHECK(count_of(p) == 3);
  m = make_mask_desc(p, a);
  const auto r0 = row_interval(p, m, 0, 0);
  REQUIRE(r0.has_value());
  CHECK(r0->first > r0->second);
  CHECK(row_interval(p, m, 0, 4) == std::optional<std::pair<int64_t, int64_t>>({0, 1}));
}

TEST_CASE("sliding window counts by hand") {
  Problem p = base_problem(1, 6, 6);
  p.mask = {SlidingWindowTerm{0, 0}};  // the diagonal
  CHECK(count_of(p) == 6);
  MaskArrays a;
  MaskDesc m = make_mask_desc(p, a);
  for (int64_t i = 0; i < 6; ++i) CHECK(row_interval(p, m, 0, i) == std::optional<std::pair<int64_t, int64_t>>({i, i}));

  p = base_problem(1, 3, 5);  // (0, 0) with Sk > Sq: j = i + 2
  p.mask = {SlidingWindowTerm{0, 0}};
  CHECK(count_of(p) == 3);
  m = make_mask_desc(p, a);
  CHECK(row_interval(p, m, 0, 1) == std::optional<std::pair<int64_t, int64_t>>({3, 3}));

  p = base_problem(1, 5, 5);
  p.mask = {SlidingWindowTerm{2, 0}};  // 1 + 2 + 3 + 3 + 3
  CHECK(count_of(p) == 12);
  p.mask = {SlidingWindowTerm{-1, 1}};  // left unbounded: 2 + 3 + 4 + 5 + 5
  CHECK(count_of(p) == 19);
  p.mask = {SlidingWindowTerm{1, -1}};  // right unbounded: 5 + 5 + 4 + 3 + 2
  CHECK(count_of(p) == 19);
  p.mask = {SlidingWindowTerm{100, 100}};  // wider than Sk: everything
  CHECK(count_of(p) == 25);
  p.mask = {CausalTerm{CausalAlign::bottom_right}, SlidingWindowTerm{1, 3}};  // causal caps the right side
  CHECK(count_of(p) == 1 + 2 + 2 + 2 + 2);
}

TEST_CASE("prefix_lm counts by hand") {
  Problem p = base_problem(1, 5, 5);
  p.mask = {PrefixLmTerm{3}};  // j <= max(2, i): 3 + 3 + 3 + 4 + 5
  CHECK(count_of(p) == 18);
  MaskArrays a;
  MaskDesc m = make_mask_desc(p, a);
  CHECK(row_interval(p, m, 0, 0) == std::optional<std::pair<int64_t, int64_t>>({0, 2}));
  CHECK(row_interval(p, m, 0, 4) == std::optional<std::pair<int64_t, int64_t>>({0, 4}));
  p.mask = {PrefixLmTerm{0}};  // plain top-left causal
  CHECK(count_of(p) == 15);
  p.mask = {PrefixLmTerm{9}};  // prefix longer than Sk: everything
  CHECK(count_of(p) == 25);
  p.mask = {PrefixLmTerm{3}, CausalTerm{CausalAlign::top_left}};  // causal dominates
  CHECK(count_of(p) == 15);
}

TEST_CASE("padding uses each row's valid lengths, zero lengths included") {
  Problem p = base_problem(4, 4, 6);
  p.mask = {PaddingTerm{{0, 2, 4, 2}, {3, 0, 6, 3}}};
  CHECK(count_allowed_pairs_per_batch(p) == std::vector<int64_t>{0, 0, 24, 6});
  CHECK(count_of(p) == 30);
  // bottom_right causal aligned on the valid lengths: off = Lk - Lq.
  p.mask.push_back(CausalTerm{CausalAlign::bottom_right});
  CHECK(count_allowed_pairs_per_batch(p) == std::vector<int64_t>{0, 0, 3 + 4 + 5 + 6, 2 + 3});
  MaskArrays a;
  MaskDesc m = make_mask_desc(p, a);
  CHECK(row_interval(p, m, 3, 0) == std::optional<std::pair<int64_t, int64_t>>({0, 1}));
  const auto past = row_interval(p, m, 3, 2);  // i >= Lq: empty row
  REQUIRE(past.has_value());
  CHECK(past->first > past->second);
  // Window (0, 0) follows the valid-length diagonal too.
  p.mask = {PaddingTerm{{0, 2, 4, 2}, {3, 0, 6, 3}}, SlidingWindowTerm{0, 0}};
  CHECK(count_allowed_pairs_per_batch(p) == std::vector<int64_t>{0, 0, 4, 2});
}

TEST_CASE("documents: zero-length documents, -1 padding, non-contiguous ids") {
  Problem p = base_problem(2, 8, 8);
  DocumentTerm d = document_term_from_lengths({{2, 0, 3}, {8}}, 8);
  REQUIRE(d.doc_ids[0] == std::vector<int32_t>{0, 0, 2, 2, 2, -1, -1, -1});
  p.mask = {d};
  CHECK(count_allowed_pairs_per_batch(p) == std::vector<int64_t>{4 + 9, 64});
  CHECK(mask_is_interval(p));
  p.mask.push_back(CausalTerm{});
  CHECK(count_allowed_pairs_per_batch(p) == std::vector<int64_t>{3 + 6, 36});
  MaskArrays a;
  MaskDesc m = make_mask_desc(p, a);
  CHECK(row_interval(p, m, 0, 3) == std::optional<std::pair<int64_t, int64_t>>({2, 3}));
  const auto pad_row = row_interval(p, m, 0, 6);
  REQUIRE(pad_row.has_value());
  CHECK(pad_row->first > pad_row->second);

  // Id 0 at {0, 2, 7}, id 1 at {1, 3}, id 2 at {5, 6}, padding at 4.
  p = base_problem(1, 8, 8);
  p.mask = {docs_from_ids({{0, 1, 0, 1, -1, 2, 2, 0}})};
  CHECK_FALSE(mask_is_interval(p));
  CHECK(count_of(p) == 9 + 4 + 4);
  m = make_mask_desc(p, a);
  CHECK_FALSE(row_interval(p, m, 0, 7).has_value());                                          // {0, 2, 7}
  CHECK(row_interval(p, m, 0, 5) == std::optional<std::pair<int64_t, int64_t>>({5, 6}));  // contiguous id
  p.mask.push_back(CausalTerm{});  // rows: 1 + 1 + 2 + 2 + 0 + 1 + 2 + 3
  CHECK(count_of(p) == 12);
  m = make_mask_desc(p, a);
  CHECK(row_interval(p, m, 0, 0) == std::optional<std::pair<int64_t, int64_t>>({0, 0}));  // {0}: one interval
  CHECK_FALSE(row_interval(p, m, 0, 2).has_value());                                          // {0, 2}
}

TEST_CASE("block_sparse extremes and the interval predicate") {
  Problem p = base_problem(2, 300, 260);
  p.mask = {BlockSparseTerm{1.0, 5}};
  CHECK(count_of(p) == 2 * 300 * 260);
  CHECK_FALSE(mask_is_interval(p));
  p.mask = {BlockSparseTerm{0.0, 5}};
  CHECK(count_of(p) == 0);
  p.mask = {BlockSparseTerm{1.0, 5}, CausalTerm{CausalAlign::top_left}};
  CHECK(count_of(p) == 2 * (260 * 261 / 2 + 40 * 260));
  p.mask = {CausalTerm{}, SlidingWindowTerm{3, 0}, PrefixLmTerm{2}};
  CHECK(mask_is_interval(p));
  // A row whose kept blocks are not adjacent is not one interval.
  p = base_problem(1, 128, 128 * 40);
  p.mask = {BlockSparseTerm{0.5, 11}};
  MaskArrays a;
  MaskDesc m = make_mask_desc(p, a);
  CHECK_FALSE(row_interval(p, m, 0, 0).has_value());
}

TEST_CASE("large counts match closed forms") {
  // Dense causal, S = 65536: S (S + 1) / 2 per batch row.
  Problem p = base_problem(2, 65536, 65536);
  p.mask = {CausalTerm{}};
  CHECK(count_of(p) == 2 * (INT64_C(65536) * 65537 / 2));
  // Document-causal, B = 4, S = 8192: sum of L (L + 1) / 2 over documents.
  Rng rng{42};
  std::vector<std::vector<int64_t>> lengths(4);
  int64_t expect = 0;
  for (auto& row : lengths) {
    int64_t left = 8192 - rng.uniform(0, 300);
    while (left > 0) {
      row.push_back(std::min(left, rng.uniform(1, 1500)));
      left -= row.back();
      expect += row.back() * (row.back() + 1) / 2;
    }
  }
  p = base_problem(4, 8192, 8192);
  p.mask = {document_term_from_lengths(lengths, 8192), CausalTerm{}};
  validate(p);
  CHECK(count_of(p) == expect);
  // Non-contiguous ids at scale: ids i % 3 give three interleaved documents;
  // with causal, row i sees the i / 3 + 1 earlier tokens of its document.
  p = base_problem(1, 3000, 3000);
  std::vector<int32_t> ids(3000);
  for (int64_t i = 0; i < 3000; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i % 3);
  p.mask = {docs_from_ids({ids}), CausalTerm{}};
  CHECK(count_of(p) == 3 * (1000 * 1001 / 2));
}

TEST_CASE("property: counts and row intervals equal brute force on random problems") {
  Rng rng{20240601};
  int interval_problems = 0, other_problems = 0;
  for (int iter = 0; iter < 500; ++iter) {
    CAPTURE(iter);
    const Problem p = random_problem(rng, iter % 5 == 0 ? 700 : 200);
    CHECK(mask_is_interval(p) == expected_interval(p));
    (mask_is_interval(p) ? interval_problems : other_problems) += 1;
    check_against_brute_force(p);
  }
  // The generator must exercise both families.
  CHECK(interval_problems > 100);
  CHECK(other_problems > 100);
}

TEST_CASE("property: every kind alone and in pairs, Sq != Sk both ways") {
  Rng rng{7};
  const int64_t shapes[][2] = {{1, 1}, {1, 9}, {9, 1}, {37, 150}, {150, 37}, {129, 129}, {260, 131}, {131, 260}};
  for (const auto& s : shapes) {
    const int64_t sq = s[0], sk = s[1];
    std::vector<MaskTerm> terms = {
        CausalTerm{CausalAlign::top_left}, CausalTerm{CausalAlign::bottom_right},
        SlidingWindowTerm{0, 0},           SlidingWindowTerm{5, -1},
        SlidingWindowTerm{-1, 2},          SlidingWindowTerm{sk + sq, sk + sq},
        PrefixLmTerm{std::min<int64_t>(sk, 4)},
        PaddingTerm{{rng.uniform(0, sq), sq}, {rng.uniform(0, sk), 0}},
        BlockSparseTerm{0.5, 3}};
    for (size_t a = 0; a < terms.size(); ++a)
      for (size_t b = a; b < terms.size(); ++b) {
        if (a != b && terms[a].index() == terms[b].index()) continue;
        Problem p = base_problem(2, sq, sk);
        p.mask = {terms[a]};
        if (b != a) p.mask.push_back(terms[b]);
        validate(p);
        check_against_brute_force(p);
      }
  }
}

TEST_CASE("document_spans: the document clause's interval form equals mask_allowed on every pair") {
  // By hand: ids {0 0 2 2 2 -1 -1 -1}: runs [0, 1], [2, 4], padding empty.
  std::vector<int32_t> first, last;
  REQUIRE(document_spans({0, 0, 2, 2, 2, -1, -1, -1}, 1, 8, &first, &last));
  CHECK(first == std::vector<int32_t>{0, 0, 2, 2, 2, 0, 0, 0});
  CHECK(last == std::vector<int32_t>{1, 1, 4, 4, 4, -1, -1, -1});
  // Id 0 in two runs of one row: no interval form; the same id in two rows is fine.
  CHECK_FALSE(document_spans({0, 1, 0, 1}, 1, 4, &first, &last));
  CHECK(document_spans({7, 7, 3, 3, 7, 7}, 2, 3, &first, &last));
  CHECK(first == std::vector<int32_t>{0, 0, 2, 0, 1, 1});
  CHECK(last == std::vector<int32_t>{1, 1, 2, 0, 2, 2});
  CHECK_THROWS_AS(document_spans({0, 0, 0}, 2, 2, &first, &last), std::invalid_argument);

  // Random contiguous and non-contiguous ids: where spans exist, they decide every
  // (b, i, j) exactly as mask_allowed's document clause does (a document-only mask).
  Rng rng(20261127);
  int with_spans = 0, without = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t batch = rng.uniform(1, 3), seq = rng.uniform(1, 70);
    std::vector<int32_t> ids;
    const bool contiguous = rng.coin(0.7);
    for (int64_t b = 0; b < batch; ++b) {
      int32_t id = static_cast<int32_t>(rng.uniform(-1, 50));
      for (int64_t i = 0; i < seq; ++i) {
        if (!contiguous) id = static_cast<int32_t>(rng.uniform(-1, 3));
        else if (rng.coin(0.1)) id = rng.coin(0.2) ? -1 : static_cast<int32_t>(rng.uniform(51 + 100 * i, 150 + 100 * i));
        ids.push_back(id);
      }
    }
    std::vector<std::vector<int32_t>> rows;
    for (int64_t b = 0; b < batch; ++b) rows.emplace_back(ids.begin() + b * seq, ids.begin() + (b + 1) * seq);
    Problem p = base_problem(batch, seq, seq);
    p.mask = {docs_from_ids(rows)};
    validate(p);
    MaskArrays arrays;
    const MaskDesc m = make_mask_desc(p, arrays);
    const bool ok = document_spans(ids, batch, seq, &first, &last);
    CHECK(ok == mask_is_interval(p));
    if (!ok) {
      ++without;
      continue;
    }
    ++with_spans;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < seq; ++i)
        for (int64_t j = 0; j < seq; ++j) {
          const size_t at = static_cast<size_t>(b * seq + i);
          const bool span = first[at] <= j && j <= last[at];
          if (span != mask_allowed(m, b, 0, i, j)) {
            CAPTURE(trial);
            CAPTURE(b);
            CAPTURE(i);
            CAPTURE(j);
            FAIL("document_spans disagrees with mask_allowed");
          }
        }
  }
  CHECK(with_spans > 100);  // both branches ran
  CHECK(without > 20);
}
