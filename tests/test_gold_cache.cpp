// One float64 gold per case (harness/run/gold_cache.hpp): the shared file's
// round trip (bit-exact, float32 where exact), refusal of stale, torn and
// corrupted files, CaseGold's computed / shared provenance, and at the CLI a
// sweep with isolated backends that computes one reference per case.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "harness/run/gold_cache.hpp"
#include "reference/reference.hpp"
#include "tests/cli_util.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;
namespace fs = std::filesystem;

namespace {

bool bits_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

/// Equal values, NaN matching NaN (NaN payloads are not kept by a float32 array).
bool same_values(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

Problem small_problem(uint64_t seed = 7) {
  Problem p = test::with_causal(test::make_problem(2, 4, 2, 24, 40, 16, DType::bf16, Layout::bshd, seed));
  p.score_mod.kind = ScoreMod::Kind::offset_bias;
  p.score_mod.size = 9;  // a learnable bias and an offset table travel too
  return p;
}

}  // namespace

TEST_CASE("a gold bundle reads back bit-exact in the narrowest exact type: bf16 / fp16 bits, float32, float64") {
  test::cli::TempDir dir;
  const fs::path file = dir.path / "b.gold";
  GoldBundle b;
  b.meta = {{"ms", 12.5}};
  HostTensor halfs({2, 3});
  for (size_t i = 0; i < halfs.data.size(); ++i) halfs.data[i] = 0.25 * static_cast<double>(i) - 1;
  halfs.data[4] = std::numeric_limits<double>::quiet_NaN();
  halfs.data[5] = -std::numeric_limits<double>::infinity();
  HostTensor doubles({3});
  doubles.data = {0.1, 1.0 / 3.0, -2e-300};
  HostTensor f32s({2});
  f32s.data = {1.0 + std::ldexp(1.0, -20), 2.0};  // a float32, neither bf16 nor fp16
  HostTensor fp16s({2});
  fp16s.data = {1.0 + std::ldexp(1.0, -9), -3.0};  // an fp16, not a bf16
  b.arrays["halfs"] = halfs;
  b.arrays["doubles"] = doubles;
  b.arrays["empty"] = HostTensor({0});
  b.arrays["f32s"] = f32s;
  b.arrays["fp16s"] = fp16s;
  const nlohmann::json key = {{"kind", "test"}, {"n", 1}};
  write_gold_bundle(file, key, b);
  // By name: doubles float64 (3 * 8 bytes at 0), empty (at 24), f32s float32 (2 * 4 at
  // 24), fp16s fp16 bits (2 * 2 at 32), halfs bf16 bits (6 * 2 at 36); the trailer follows.
  std::string why;
  auto back = read_gold_bundle(file, key, &why);
  REQUIRE_MESSAGE(back, why);
  CHECK(back->meta["ms"] == 12.5);
  CHECK(back->arrays.at("halfs").shape == std::vector<int64_t>{2, 3});
  CHECK(same_values(back->arrays.at("halfs").data, halfs.data));
  CHECK(bits_equal(back->arrays.at("doubles").data, doubles.data));
  CHECK(back->arrays.at("empty").data.empty());
  CHECK(bits_equal(back->arrays.at("f32s").data, f32s.data));
  CHECK(bits_equal(back->arrays.at("fp16s").data, fp16s.data));
  const std::string bytes = test::cli::slurp(file);
  const nlohmann::json trailer = nlohmann::json::parse(bytes.substr(36 + 12, bytes.size() - 16 - 36 - 12));
  std::map<std::string, std::pair<std::string, uint64_t>> stored;  // name -> (dtype, offset)
  for (const auto& a : trailer["arrays"]) stored[a["name"]] = {a["dtype"], a["offset"]};
  CHECK(stored["doubles"] == std::pair<std::string, uint64_t>{"f8", 0});
  CHECK(stored["f32s"] == std::pair<std::string, uint64_t>{"f4", 24});
  CHECK(stored["fp16s"] == std::pair<std::string, uint64_t>{"fp16", 32});
  CHECK(stored["halfs"] == std::pair<std::string, uint64_t>{"bf16", 36});
  CHECK(bytes.substr(bytes.size() - 8) == "ABGOLD01");
}

TEST_CASE("stale, torn, corrupted or missing files are never used") {
  test::cli::TempDir dir;
  const fs::path file = dir.path / "b.gold";
  GoldBundle b;
  HostTensor t({4});
  t.data = {1, 2, 3, 4};
  b.arrays["t"] = t;
  const nlohmann::json key = {{"problem", {{"seed", 1}}}};
  write_gold_bundle(file, key, b);
  std::string why;
  CHECK_FALSE(read_gold_bundle(file, {{"problem", {{"seed", 2}}}}, &why));
  CHECK(why.find("stale") != std::string::npos);
  CHECK_FALSE(read_gold_bundle(dir.path / "none.gold", key, &why));
  CHECK(why == "no file");

  std::string bytes = test::cli::slurp(file);
  {  // one flipped payload byte: the CRC-32 says so
    std::string bad = bytes;
    bad[3] ^= 0x40;
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bad;
    CHECK_FALSE(read_gold_bundle(file, key, &why));
    CHECK(why.find("CRC-32") != std::string::npos);
  }
  {  // cut short (a writer killed mid-file never renames, but a foreign file may be torn)
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 5);
    CHECK_FALSE(read_gold_bundle(file, key, &why));
    CHECK(why.find("trailer") != std::string::npos);
  }
  {  // the original reads again
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
    CHECK(read_gold_bundle(file, key, &why));
  }
}

TEST_CASE("GoldStore: inputs and reference round-trip exactly; keys tell problems, seeds and check modes apart") {
  test::cli::TempDir dir;
  const GoldStore store(dir.path / ".gold");
  const Problem p = small_problem();
  const ProblemData in = make_inputs(p);
  REQUIRE(in.offset.size() > 0);
  CHECK_FALSE(store.load_inputs(p));
  REQUIRE(store.save_inputs(p, in));
  auto back = store.load_inputs(p);
  REQUIRE(back);
  CHECK(bits_equal(back->q.data, in.q.data));
  CHECK(bits_equal(back->k.data, in.k.data));
  CHECK(bits_equal(back->v.data, in.v.data));
  CHECK(bits_equal(back->d_o.data, in.d_o.data));
  CHECK(back->q.shape == in.q.shape);
  CHECK(bits_equal(back->bias, in.bias));
  CHECK(back->offset == in.offset);
  // bf16 inputs are stored as their bits: 2 bytes an element (plus the bias, the
  // offsets and a small trailer)
  const auto numel = in.q.data.size() + in.k.data.size() + in.v.data.size() + in.d_o.data.size();
  CHECK(fs::file_size(store.file_for(GoldStore::inputs_key(p))) < 2 * numel + 8 * 64 + 4096);

  Problem other_seed = p;
  other_seed.seed = 8;
  CHECK_FALSE(store.load_inputs(other_seed));
  CHECK(store.file_for(GoldStore::inputs_key(other_seed)) != store.file_for(GoldStore::inputs_key(p)));

  GoldCache g;  // as CaseGold holds it: sliced to the plan's slices
  g.plan = plan_check(p, CheckMode::sample, true, 2);
  g.gold = slice_outputs(reference::gold(p, in, true, g.plan.slices), p, g.plan.slices);
  g.lp = slice_outputs(reference::lp(p, in, true, g.plan.slices), p, g.plan.slices);
  g.ms = 3.25;
  g.ready = true;
  REQUIRE(store.save_gold(p, CheckMode::sample, true, g));
  REQUIRE_FALSE(g.plan.slices.all);  // 2 of the 4 (b, kv-head) slices
  CHECK(g.gold.o.shape == std::vector<int64_t>{2, 2, 24, 16});  // [slices, Hq / Hkv, Sq, Dv]
  {  // only the checked slices are stored: about half of the same arrays stored whole
    GoldCache whole;
    whole.plan = plan_check(p, CheckMode::full, true);
    whole.gold = slice_outputs(reference::gold(p, in, true), p, whole.plan.slices);
    whole.lp = slice_outputs(reference::lp(p, in, true), p, whole.plan.slices);
    REQUIRE(store.save_gold(p, CheckMode::full, true, whole));
    const auto sampled_bytes = fs::file_size(store.file_for(GoldStore::gold_key(p, CheckMode::sample, true)));
    const auto whole_bytes = fs::file_size(store.file_for(GoldStore::gold_key(p, CheckMode::full, true)));
    CHECK(sampled_bytes < whole_bytes * 6 / 10);
    fs::remove(store.file_for(GoldStore::gold_key(p, CheckMode::full, true)));
  }
  GoldCache got;
  CHECK_FALSE(store.load_gold(p, CheckMode::full, true, got));   // another check mode
  CHECK_FALSE(store.load_gold(p, CheckMode::sample, false, got)); // forward only
  REQUIRE(store.load_gold(p, CheckMode::sample, true, got));
  CHECK(got.ready);
  CHECK(got.ms == 3.25);
  CHECK(got.plan.description == g.plan.description);
  CHECK(got.plan.slices.all == g.plan.slices.all);
  CHECK(got.plan.slices.selected == g.plan.slices.selected);
  CHECK(bits_equal(got.gold.o.data, g.gold.o.data));  // the selected slices only, as held
  CHECK(bits_equal(got.gold.dk.data, g.gold.dk.data));
  CHECK(bits_equal(got.lp.lse.data, g.lp.lse.data));
  CHECK(bits_equal(got.lp.dq.data, g.lp.dq.data));
  CHECK(got.gold.dq.shape == g.gold.dq.shape);
  CHECK(got.gold.dk.shape == g.gold.dk.shape);
  CHECK(same_values(got.gold.dbias, g.gold.dbias));
  {  // a bundle whose outputs are not sliced to its plan (another layout) is not used
    GoldCache logical = g;
    logical.gold = reference::gold(p, in, true, g.plan.slices);
    REQUIRE(store.save_gold(p, CheckMode::sample, true, logical));
    GoldCache refused;
    CHECK_FALSE(store.load_gold(p, CheckMode::sample, true, refused));
    REQUIRE(store.save_gold(p, CheckMode::sample, true, g));
  }

  store.clear();
  CHECK_FALSE(fs::exists(store.dir()));
  CHECK_FALSE(store.load_inputs(p));
}

TEST_CASE("CaseGold: computed once, then shared in memory; a second process's CaseGold loads it from the store") {
  test::cli::TempDir dir;
  const Problem p = small_problem(11);
  CaseGold first;
  first.store = GoldStore(dir.path / ".gold");
  GoldProvenance how;
  first.get_inputs(p, &how);
  CHECK(how.source == "computed");
  const GoldCache& g1 = first.get_gold(p, CheckMode::full, true, &how);
  CHECK(how.source == "computed");
  CHECK(how.ms == g1.ms);
  first.get_gold(p, CheckMode::full, true, &how);
  CHECK(how.source == "shared");
  CHECK(how.ms == 0);

  CaseGold second;  // as an isolated child sees it
  second.store = first.store;
  const ProblemData& in2 = second.get_inputs(p, &how);
  CHECK(how.source == "shared");
  CHECK(bits_equal(in2.q.data, first.inputs->q.data));
  const GoldCache& g2 = second.get_gold(p, CheckMode::full, true, &how);
  CHECK(how.source == "shared");
  CHECK(g2.ms == g1.ms);  // what computing it cost, where it was computed
  CHECK(bits_equal(g2.gold.o.data, g1.gold.o.data));
  CHECK(bits_equal(g2.gold.dv.data, g1.gold.dv.data));

  CaseGold unshared;  // no store: every process computes its own
  unshared.get_inputs(p, &how);
  CHECK(how.source == "computed");
  CHECK_FALSE(unshared.release_inputs(p, CheckMode::full, true));  // nowhere to load them from again
  CHECK(unshared.inputs);
}

TEST_CASE("CaseGold::release_inputs frees the inputs only when the reference will be loaded, not computed") {
  test::cli::TempDir dir;
  const Problem p = small_problem(13);
  const GoldStore store(dir.path / ".gold");
  CaseGold first;  // the case's first unit: computes and publishes the inputs
  first.store = store;
  first.get_inputs(p);
  CHECK_FALSE(first.release_inputs(p, CheckMode::full, true));  // it will compute the reference from them
  REQUIRE(first.inputs);
  CHECK(first.release_inputs(p, CheckMode::off, true));  // no reference wanted at all
  CHECK_FALSE(first.inputs);
  GoldProvenance how;
  const ProblemData& again = first.get_inputs(p, &how);  // loaded back from the store when needed
  CHECK(how.source == "shared");
  CHECK(again.q.shape == std::vector<int64_t>{p.batch, p.heads_q, p.seq_q, p.head_dim});
  const GoldCache& g1 = first.get_gold(p, CheckMode::full, true, &how);
  CHECK(how.source == "computed");
  CHECK(first.release_inputs(p, CheckMode::full, true));  // the reference is held now

  CaseGold later;  // a later unit: the reference is published
  later.store = store;
  later.get_inputs(p);
  CHECK_FALSE(later.release_inputs(p, CheckMode::sample, true));  // not that check mode's
  CHECK(later.release_inputs(p, CheckMode::full, true));
  CHECK_FALSE(later.inputs);
  const GoldCache& g2 = later.get_gold(p, CheckMode::full, true, &how);
  CHECK(how.source == "shared");
  CHECK_FALSE(later.inputs);  // loading the reference needs no inputs
  CHECK(bits_equal(g2.gold.dq.data, g1.gold.dq.data));
}

TEST_CASE("CLI: a sweep with isolated backends computes one reference per case, and the rows say so") {
  using namespace attnbench::test::cli;
  TempDir dir;
  const std::string scenario = dir.write("tiny.json", R"({"name": "tiny",
      "base": {"batch": 1, "heads_q": 2, "heads_kv": 2, "head_dim": 16, "seq": 32, "dtype": "fp16"},
      "axes": {"mask": [[], [{"kind": "causal"}]], "seq": [32, 48]}})");
  const std::string out = (dir.path / "o").string();
  const Result r = run_in(dir.path,
                          "run '" + scenario + "' --backends cpu,test-slow,test-planted-window129 --isolate on "
                          "--no-timing --no-determinism --out '" + out + "'",
                          "ATTNBENCH_TEST_BACKENDS=1 ATTNBENCH_TEST_SLOW_MS=0");
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const auto report = nlohmann::json::parse(slurp(fs::path(out) / "report.json"));
  std::map<std::string, int> computed, shared;
  std::map<std::string, std::set<double>> reference_ms;
  for (const auto& row : report["results"]) {
    const std::string c = row["case_id"];
    REQUIRE(row["status"] == "pass");
    REQUIRE(row["extra"].contains("isolation"));  // each unit ran in its own child
    // where the child's time went: its start, its unit, writing its row and exiting
    const nlohmann::json& iso = row["extra"]["isolation"];
    for (const char* k : {"startup_ms", "unit_ms", "exit_ms"}) CHECK_MESSAGE(iso.value(k, -1.0) >= 0, k);
    CHECK(iso["startup_ms"].get<double>() + iso["unit_ms"].get<double>() + iso["exit_ms"].get<double>() ==
          doctest::Approx(iso["child_seconds"].get<double>() * 1000).epsilon(0.01));
    CHECK(row["extra"]["passes_ms"].get<double>() >= 0);
    CHECK(row["extra"]["read_outputs_ms"].get<double>() >= 0);
    // a unit that loads the published reference frees its inputs once prepared
    CHECK(row["extra"]["inputs"].value("released", false) == (row["check"]["gold_source"] == "shared"));
    const std::string src = row["check"]["gold_source"];
    (src == "computed" ? computed : shared)[c]++;
    CHECK(row["check"]["gold_ms"].get<double>() >= 0);
    reference_ms[c].insert(row["check"]["reference_ms"].get<double>());
    CHECK(row["extra"]["inputs"]["source"] == (src == "computed" ? "computed" : "shared"));
  }
  REQUIRE(computed.size() == 4);
  for (const auto& [c, n] : computed) {
    CHECK_MESSAGE(n == 1, c);
    CHECK_MESSAGE(shared[c] == 2, c);
    CHECK_MESSAGE(reference_ms[c].size() == 1, c);  // one computation, reported by all three
  }
  // the first backend of each case computed it
  CHECK(report["results"][0]["check"]["gold_source"] == "computed");
  CHECK(report["results"][1]["check"]["gold_source"] == "shared");
  CHECK_FALSE(fs::exists(fs::path(out) / ".gold"));  // removed as each case finished
}
