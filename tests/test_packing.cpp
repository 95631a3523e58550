// Document packing: Python-compatible shuffle, length sources, strategies,
// fill ratio, padding, truncation, token streams, and the CodeAlpaca workload of
// the peers file (docs/peers/torch-2.11-h100.json).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include <unistd.h>

#include "harness/model/errors.hpp"
#include "harness/model/mask.hpp"
#include "harness/workloads/packing.hpp"
#include "harness/workloads/scenario.hpp"

using namespace attnbench;
using nlohmann::json;

namespace {

const std::string kCodeAlpaca = std::string(ATTNBENCH_SOURCE_DIR) + "/scenarios/data/codealpaca.json";

PackingSpec spec_of(const json& j, int64_t msl = 0, int64_t packs = 0) {
  return packing_spec_from_json(j, std::string(ATTNBENCH_SOURCE_DIR) + "/scenarios/x.json", "/packing", msl, packs);
}

std::string error_of(const json& j) {
  try {
    spec_of(j, 512, 2);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

/// A temporary empirical length file, removed at scope exit.
struct TempLengths {
  std::string path;
  explicit TempLengths(const std::string& body) {
    path = (std::filesystem::temp_directory_path() / ("attnbench_lengths_" + std::to_string(::getpid()) + ".json")).string();
    std::ofstream(path) << body;
  }
  ~TempLengths() { std::remove(path.c_str()); }
};

}  // namespace

// Expected values generated once with CPython 3.11.7 on this machine:
//   python3 -c 'import random; random.seed(1); print([random.getrandbits(32) for _ in range(4)])'
//   (and likewise for every literal list below; the commands are quoted next to each).
TEST_CASE("PyRandom reproduces CPython's MT19937 seeding and getrandbits") {
  PyRandom r1(1);
  // random.seed(1); [random.getrandbits(32) for _ in range(4)]
  CHECK(r1.getrandbits(32) == 577090037u);
  CHECK(r1.getrandbits(32) == 2444712010u);
  CHECK(r1.getrandbits(32) == 3639700191u);
  CHECK(r1.getrandbits(32) == 3445702192u);
  // random.seed(0); [random.getrandbits(32) for _ in range(2)]
  PyRandom r0(0);
  CHECK(r0.getrandbits(32) == 3626764237u);
  CHECK(r0.getrandbits(32) == 1654615998u);
  // random.seed(2**40 + 5): a two-word key for init_by_array.
  PyRandom rb((uint64_t{1} << 40) + 5);
  CHECK(rb.genrand_uint32() == 2166296868u);
  CHECK(rb.genrand_uint32() == 2220160828u);
  // random.seed(1); [random.getrandbits(5) for _ in range(4)], random.getrandbits(64)
  PyRandom r5(1);
  CHECK(r5.getrandbits(5) == 4);
  CHECK(r5.getrandbits(5) == 18);
  CHECK(r5.getrandbits(5) == 27);
  CHECK(r5.getrandbits(5) == 25);
  CHECK(r5.getrandbits(64) == UINT64_C(1164115433906158532));
  CHECK_THROWS_AS(r5.getrandbits(0), std::invalid_argument);
  CHECK_THROWS_AS(r5.randbelow(0), std::invalid_argument);
}

TEST_CASE("PyRandom::shuffle equals random.shuffle") {
  // random.seed(1); l = list(range(20)); random.shuffle(l)
  std::vector<int> a(20);
  std::iota(a.begin(), a.end(), 0);
  PyRandom(1).shuffle(a);
  CHECK(a == std::vector<int>{11, 5, 17, 19, 9, 0, 16, 1, 15, 6, 10, 13, 14, 12, 7, 3, 8, 2, 18, 4});
  // random.seed(7); l = list(range(10)); random.shuffle(l)
  std::vector<int> b(10);
  std::iota(b.begin(), b.end(), 0);
  PyRandom(7).shuffle(b);
  CHECK(b == std::vector<int>{8, 3, 1, 4, 7, 0, 9, 6, 2, 5});
  // random.seed(12345678901); l = list(range(1000)); random.shuffle(l); l[:8]
  std::vector<int> c(1000);
  std::iota(c.begin(), c.end(), 0);
  PyRandom(12345678901ULL).shuffle(c);
  CHECK(std::vector<int>(c.begin(), c.begin() + 8) == std::vector<int>{723, 3, 307, 21, 119, 675, 556, 320});
  // The CodeAlpaca lengths: random.seed(1); random.shuffle(L); L[:10], L[-3:]
  LengthSource src = load_empirical_lengths(kCodeAlpaca);
  REQUIRE(src.lengths.size() == 4535);
  std::vector<int64_t> l = src.lengths;
  PyRandom(1).shuffle(l);
  CHECK(std::vector<int64_t>(l.begin(), l.begin() + 10) ==
        std::vector<int64_t>{208, 67, 125, 181, 172, 242, 128, 262, 177, 164});
  CHECK(std::vector<int64_t>(l.end() - 3, l.end()) == std::vector<int64_t>{278, 182, 172});
}

TEST_CASE("codealpaca: python shuffle seed 1 + greedy in order reproduces the peers workload") {
  // Peers: "docs shuffled (seed 1), packed greedily in order into B packs of S tokens,
  // tail padded"; B=4, S=8192: fill 0.9865, docs 187, useful_pairs_per_head 3135211.
  PackingSpec s = spec_of({{"source", {{"kind", "empirical"}, {"file", "data/codealpaca.json"}}},
                           {"shuffle", "python"}, {"seed", 1}, {"strategy", "greedy"},
                           {"max_seq_len", 8192}, {"num_packs", 4}});
  CHECK(s.source.name == "codealpaca");
  PackResult r = pack_documents(s, 999);  // the spec's seed wins over the case seed
  CHECK(r.stats.seed == 1);
  CHECK(r.stats.docs == 187);
  CHECK(r.stats.docs_per_pack == std::vector<int64_t>{46, 47, 46, 48});
  CHECK(r.stats.pack_tokens == std::vector<int64_t>{7991, 8161, 8017, 8156});
  CHECK(r.stats.real_tokens == 32325);
  CHECK(r.stats.padded_tokens == 4 * 8192);
  CHECK(r.stats.packing_ratio == doctest::Approx(0.9865).epsilon(5e-5));
  CHECK(r.stats.truncated_docs == 0);
  CHECK(r.seq_len == 8192);
  // First documents of pack 0 are the first shuffled lengths.
  CHECK(std::vector<int64_t>(r.doc_lengths[0].begin(), r.doc_lengths[0].begin() + 3) ==
        std::vector<int64_t>{208, 67, 125});
  // Useful pairs of the document-causal mask: sum over documents of L (L + 1) / 2.
  int64_t tri = 0;
  for (const auto& row : r.doc_lengths)
    for (int64_t len : row) tri += len * (len + 1) / 2;
  CHECK(tri == 3135211);
  Problem p;
  p.batch = 4;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.head_dim = p.head_dim_v = 128;
  p.seq_q = p.seq_k = r.seq_len;
  p.mask = {CausalTerm{}, r.document_term()};
  validate(p);
  CHECK(count_allowed_pairs(p) == 3135211);
  // The "padded-unpacked" peer rows: every document padded to the longest one.
  CHECK(r.stats.max_doc_len * r.stats.docs == 80597);
}

TEST_CASE("greedy packing of fixed lengths: counts, doc ids, padding") {
  PackingSpec s = spec_of({{"source", {{"kind", "fixed"}, {"length", 100}}}}, 350, 3);
  PackResult r = pack_documents(s, 0);
  CHECK(r.doc_lengths == std::vector<std::vector<int64_t>>(3, {100, 100, 100}));
  CHECK(r.seq_len == 350);
  CHECK(r.stats.real_tokens == 900);
  CHECK(r.stats.padded_tokens == 1050);
  CHECK(r.stats.packing_ratio == doctest::Approx(900.0 / 1050.0));
  CHECK(r.stats.docs_per_pack == std::vector<int64_t>{3, 3, 3});
  CHECK(r.stats.source == "fixed(100)");
  DocumentTerm d = r.document_term();
  REQUIRE(d.doc_ids.size() == 3);
  REQUIRE(d.doc_ids[0].size() == 350);
  CHECK(d.doc_ids[0][0] == 0);
  CHECK(d.doc_ids[0][99] == 0);
  CHECK(d.doc_ids[0][100] == 1);
  CHECK(d.doc_ids[0][299] == 2);
  CHECK(d.doc_ids[0][300] == -1);
  CHECK(d.doc_ids[2][349] == -1);
  CHECK(r.cu_seqlens() == std::vector<int32_t>{0, 100, 200, 300, 400, 500, 600, 700, 800, 900});
}

TEST_CASE("documents longer than a pack are truncated and counted") {
  PackResult r = pack_documents(spec_of({{"source", {{"kind", "fixed"}, {"length", 400}}}}, 300, 3), 0);
  CHECK(r.doc_lengths == std::vector<std::vector<int64_t>>(3, {300}));
  CHECK(r.stats.truncated_docs == 3);
  CHECK(r.stats.packing_ratio == doctest::Approx(1.0));
  // FFD truncates the same way.
  PackResult f = pack_documents(spec_of({{"source", {{"kind", "fixed"}, {"length", 400}}}, {"strategy", "ffd"}}, 300, 2), 0);
  CHECK(f.doc_lengths == std::vector<std::vector<int64_t>>(2, {300}));
  CHECK(f.stats.truncated_docs == 2);
}

TEST_CASE("fill ratio sets the capacity; pad_to longest shrinks the sequence") {
  json j = {{"source", {{"kind", "fixed"}, {"length", 100}}}, {"fill", 0.55}};
  PackingSpec s = spec_of(j, 1000, 2);
  CHECK(s.capacity() == 550);
  PackResult r = pack_documents(s, 0);
  CHECK(r.stats.docs_per_pack == std::vector<int64_t>{5, 5});
  CHECK(r.seq_len == 1000);
  CHECK(r.stats.packing_ratio == doctest::Approx(0.5));
  CHECK(r.stats.capacity == 550);
  j["pad_to"] = "longest";
  PackResult l = pack_documents(spec_of(j, 1000, 2), 0);
  CHECK(l.seq_len == 500);
  CHECK(l.stats.padded_tokens == 1000);
  CHECK(l.stats.packing_ratio == doctest::Approx(1.0));
  CHECK(l.stats.pad_to == "longest");
  // Tiny fills still hold one token.
  CHECK(spec_of({{"source", {{"kind", "fixed"}, {"length", 1}}}, {"fill", 0.001}}, 100, 1).capacity() == 1);
}

TEST_CASE("empirical source: greedy in order, cycling, first-fit-decreasing, dropped docs") {
  TempLengths f(R"({"name": "tiny", "count": 5, "lengths": [5, 3, 8, 2, 7], "source": "hand-written"})");
  json j = {{"source", {{"kind", "empirical"}, {"file", f.path}}}, {"shuffle", "none"}};
  PackResult g = pack_documents(spec_of(j, 10, 3), 0);
  CHECK(g.doc_lengths == std::vector<std::vector<int64_t>>{{5, 3}, {8, 2}, {7}});
  CHECK(g.stats.source == "empirical:tiny");
  // FFD pool: drawn (cycling) until it holds 3 * 10 tokens: 5 3 8 2 7 5.
  j["strategy"] = "ffd";
  PackResult d = pack_documents(spec_of(j, 10, 3), 0);
  CHECK(d.doc_lengths == std::vector<std::vector<int64_t>>{{8, 2}, {7, 3}, {5, 5}});
  CHECK(d.stats.dropped_docs == 0);
  CHECK(d.stats.packing_ratio == doctest::Approx(1.0));
  j["pool_docs"] = 4;  // 5 3 8 2 -> 8 5 3 2
  PackResult p4 = pack_documents(spec_of(j, 10, 3), 0);
  CHECK(p4.doc_lengths == std::vector<std::vector<int64_t>>{{8, 2}, {5, 3}, {}});
  CHECK(p4.stats.docs_per_pack == std::vector<int64_t>{2, 2, 0});
  TempLengths big(R"({"lengths": [9, 9, 9, 9]})");
  json jb = {{"source", {{"kind", "empirical"}, {"file", big.path}}}, {"strategy", "ffd"}, {"pool_docs", 4}};
  PackResult b = pack_documents(spec_of(jb, 10, 2), 0);
  CHECK(b.stats.dropped_docs == 2);
  CHECK(b.stats.docs == 2);
}

TEST_CASE("seeded shuffle is a reproducible permutation") {
  std::vector<int64_t> base(50);
  std::iota(base.begin(), base.end(), 0);
  auto a = base, b = base, c = base;
  shuffle_seeded(a, 1);
  shuffle_seeded(b, 1);
  shuffle_seeded(c, 2);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(a != base);
  std::sort(a.begin(), a.end());
  CHECK(a == base);
  // Default shuffle of an empirical source is the seeded one, and follows the case seed.
  json j = {{"source", {{"kind", "empirical"}, {"file", "data/codealpaca.json"}}}};
  PackResult r1 = pack_documents(spec_of(j, 4096, 2), 5), r2 = pack_documents(spec_of(j, 4096, 2), 5),
             r3 = pack_documents(spec_of(j, 4096, 2), 6);
  CHECK(r1.stats.shuffle == "seeded");
  CHECK(r1.doc_lengths == r2.doc_lengths);
  CHECK(r1.doc_lengths != r3.doc_lengths);
}

TEST_CASE("uniform and lognormal sources stay in range and are seeded") {
  PackingSpec u = spec_of({{"source", {{"kind", "uniform"}, {"min", 10}, {"max", 20}}}}, 1000, 4);
  PackResult a = pack_documents(u, 3), b = pack_documents(u, 3), c = pack_documents(u, 4);
  CHECK(a.doc_lengths == b.doc_lengths);
  CHECK(a.doc_lengths != c.doc_lengths);
  std::set<int64_t> seen;
  for (const auto& row : a.doc_lengths)
    for (int64_t l : row) {
      CHECK(l >= 10);
      CHECK(l <= 20);
      seen.insert(l);
    }
  CHECK(seen.size() == 11);  // ~280 draws cover every value of [10, 20]
  for (int64_t t : a.stats.pack_tokens) {
    CHECK(t <= 1000);
    CHECK(t > 1000 - 20);  // greedy closes a pack only when the next document does not fit
  }
  PackingSpec ln = spec_of({{"source", {{"kind", "lognormal"}, {"mu", 4.0}, {"sigma", 1.0}, {"min", 16}, {"max", 300}}}},
                           2048, 3);
  PackResult l1 = pack_documents(ln, 9), l2 = pack_documents(ln, 9);
  CHECK(l1.doc_lengths == l2.doc_lengths);
  int64_t at_min = 0, n = 0;
  for (const auto& row : l1.doc_lengths)
    for (int64_t l : row) {
      CHECK(l >= 16);
      CHECK(l <= 300);
      at_min += l == 16;
      ++n;
    }
  CHECK(n > 30);
  CHECK(at_min > 0);  // exp(4 + z) < 16 for z < -1.23: about 11% of draws are clamped
}

TEST_CASE("token streams: documents end at EOS, as PyTorch's varlen tutorial builds cu_seqlens") {
  CHECK(documents_from_tokens({5, 2, 7, 7, 2, 2, 9}, 2) == std::vector<int64_t>{2, 3, 1, 1});
  CHECK(documents_from_tokens({2}, 2) == std::vector<int64_t>{1});
  CHECK(documents_from_tokens({4, 4}, 2) == std::vector<int64_t>{2});
  // create_varlen_metadata: per row unique_consecutive([0, eos + 1, S]) + b * S, then B * S.
  VarlenMetadata m = varlen_metadata_from_tokens({{1, 2, 3, 2}, {4, 5, 6, 7}, {2, 9, 9, 9}}, 2);
  CHECK(m.cu_seqlens == std::vector<int32_t>{0, 2, 4, 8, 9, 12});
  CHECK(m.max_seqlen == 4);
  CHECK(m.doc_lengths == std::vector<std::vector<int64_t>>{{2, 2}, {4}, {1, 3}});
  CHECK_THROWS_AS(varlen_metadata_from_tokens({{1, 2}, {1}}, 2), std::invalid_argument);

  // Given rows are the packs themselves.
  PackingSpec s = spec_of({{"source", {{"kind", "tokens"}, {"eos_id", 2}, {"rows", {{1, 2, 3, 2}, {4, 5, 6, 7}}}}}});
  CHECK(s.strategy == PackingSpec::Strategy::given);
  CHECK(s.num_packs == 2);
  CHECK(s.max_seq_len == 4);
  PackResult r = pack_documents(s, 0);
  CHECK(r.doc_lengths == std::vector<std::vector<int64_t>>{{2, 2}, {4}});
  CHECK(r.seq_len == 4);
  CHECK(r.stats.packing_ratio == doctest::Approx(1.0));

  // A flat stream is split into documents, then packed.
  PackingSpec f = spec_of({{"source", {{"kind", "tokens"}, {"eos_id", 0}, {"tokens", {3, 0, 4, 4, 0, 5, 5, 5, 0}}}},
                           {"shuffle", "none"}},
                          5, 2);
  PackResult fr = pack_documents(f, 0);
  CHECK(fr.doc_lengths == std::vector<std::vector<int64_t>>{{2, 3}, {4}});

  // A generated stream: seeded, EOS-delimited, every token accounted for.
  json g = {{"kind", "tokens"}, {"eos_id", 2}, {"num_tokens", 5000}, {"vocab_size", 1000}, {"eos_prob", 0.01}};
  PackingSpec gs = spec_of({{"source", g}}, 2048, 2);
  std::vector<int64_t> t1 = generate_tokens(gs.source, 4), t2 = generate_tokens(gs.source, 4);
  CHECK(t1 == t2);
  CHECK(t1 != generate_tokens(gs.source, 5));
  auto eos = std::count(t1.begin(), t1.end(), int64_t{2});
  CHECK(eos > 20);
  CHECK(eos < 90);
  CHECK(*std::max_element(t1.begin(), t1.end()) < 1000);
  CHECK(*std::min_element(t1.begin(), t1.end()) >= 0);
  std::vector<int64_t> docs = documents_from_tokens(t1, 2);
  CHECK(sum(docs) == 5000);
  PackResult gr = pack_documents(gs, 4);
  CHECK(gr.stats.real_tokens > 0);
  CHECK(gr.stats.real_tokens <= 4096);
}

TEST_CASE("malformed packing specs name the JSON path and value") {
  auto has = [](const std::string& e, const std::string& s) {
    INFO(e);
    CHECK(e.find(s) != std::string::npos);
  };
  has(error_of({{"source", {{"kind", "zipf"}}}}), "/packing/source/kind");
  has(error_of({{"source", {{"kind", "zipf"}}}}), "\"zipf\"");
  has(error_of({{"source", {{"kind", "fixed"}, {"length", 0}}}}), "/packing/source/length");
  has(error_of({{"source", {{"kind", "uniform"}, {"min", 10}, {"max", 5}}}}), "/packing/source/max");
  has(error_of({{"source", {{"kind", "fixed"}, {"length", 5}}}, {"fill", 1.5}}), "/packing/fill");
  has(error_of({{"source", {{"kind", "fixed"}, {"length", 5}}}, {"fill", 1.5}}), "1.5");
  has(error_of({{"source", {{"kind", "fixed"}, {"length", 5}}}, {"strategy", "best"}}), "/packing/strategy");
  has(error_of({{"source", {{"kind", "fixed"}, {"length", 5}}}, {"pad_to", "pow2"}}), "\"pow2\"");
  has(error_of({{"source", {{"kind", "fixed"}, {"length", 5}}}, {"shuffle", "numpy"}}), "/packing/shuffle");
  has(error_of({{"source", {{"kind", "fixed"}, {"length", 5}}}, {"num_packs", "four"}}), "/packing/num_packs");
  has(error_of({{"source", {{"kind", "empirical"}, {"file", "data/nope.json"}}}}), "/packing/source/file");
  has(error_of({{"source", {{"kind", "fixed"}, {"length", 5}}}, {"bogus", 1}}), "/packing/bogus");
  has(error_of({{"source", {{"kind", "tokens"}, {"eos_id", 2}}}}), "exactly one of");
  has(error_of({{"source", {{"kind", "tokens"}, {"eos_id", 2}, {"rows", {{1, 2}, {1}}}}}}), "/packing/source/rows/1");
  // Inconsistent empirical files name the data file.
  TempLengths bad(R"({"name": "bad", "count": 3, "lengths": [5, 3]})");
  std::string e = error_of({{"source", {{"kind", "empirical"}, {"file", bad.path}}}});
  has(e, bad.path);
  has(e, "/count");
  TempLengths zero(R"({"lengths": [5, 0]})");
  has(error_of({{"source", {{"kind", "empirical"}, {"file", zero.path}}}}), "/lengths/1");
  // Missing sizes with no case defaults.
  CHECK_THROWS_AS(spec_of({{"source", {{"kind", "fixed"}, {"length", 5}}}}, 0, 2), InputError);
}
