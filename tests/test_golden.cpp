// Golden vectors: the semantics that the PyTorch worker (backends/peers/attnbench_torch/)
// re-implements in Python, computed here from the project's one C++ definition and
// committed under tests/data/golden/:
//
//   masks.json      mask_allowed() (harness/model/mask_desc.hpp) on sample problems
//                   covering every mask kind of docs/semantics.md section 3, alone and
//                   combined; splitmix64 and block_sparse_keep values
//   generator.json  the seeded input generator (harness/model/tensors.hpp): the first
//                   counter_uniform / counter_normal values of a few (seed, stream)
//                   pairs, round_to() in every dtype, and the first elements of
//                   make_inputs() for two problems
//   stopping.json   traces of the stopping rule (sample_until_stable of
//                   harness/measure/measure.hpp) on fixed sample sequences, with a
//                   fake clock that advances by each sample's own duration, and
//                   next_hold_ms (the stream hold's length) on sample enqueue times
//
// This suite recomputes each file and requires it to equal the committed one, so a
// change of the semantics must regenerate the files deliberately:
//
//   ATTNBENCH_WRITE_GOLDEN=1 build/tests/test_golden     # rewrites tests/data/golden/*.json
//
// tests/test_golden.py (ctest `golden_python`) requires the Python package to compute
// the same values from the same inputs, so the two copies cannot drift apart.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/measure/measure.hpp"
#include "harness/model/mask.hpp"
#include "harness/model/mask_desc.hpp"
#include "harness/model/problem.hpp"
#include "harness/model/tensors.hpp"

using namespace attnbench;
using json = nlohmann::json;

namespace {

const std::string kGoldenDir = std::string(ATTNBENCH_TEST_DATA_DIR) + "/golden";

/// The sample problems of masks.json: every mask kind of docs/semantics.md section 3,
/// both causal alignments with Sq < Sk and Sq > Sk, lengths that are not multiples of
/// the 128 block, and combinations. Problem-file objects (section 10).
std::vector<std::pair<std::string, json>> mask_problems() {
  auto prob = [](int64_t b, int64_t sq, int64_t sk, json mask) {
    return json{{"batch", b}, {"heads_q", 2}, {"heads_kv", 1}, {"seq_q", sq}, {"seq_k", sk},
                {"head_dim", 8}, {"dtype", "bf16"}, {"layout", "bshd"}, {"mask", std::move(mask)}};
  };
  const json ids = {{0, 0, 1, 1, 0, 0, 2, 2, 2, -1, -1, 3, 3, 3, 3, 3, 0, 0, 1, 1},
                    {5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7, -1, -1}};
  return {
      {"none", prob(1, 7, 9, json::array())},
      {"causal-br-sq<sk", prob(2, 20, 33, {{{"kind", "causal"}, {"align", "bottom_right"}}})},
      {"causal-br-sq>sk", prob(1, 33, 20, {{{"kind", "causal"}, {"align", "bottom_right"}}})},
      {"causal-tl-sq>sk", prob(2, 33, 20, {{{"kind", "causal"}, {"align", "top_left"}}})},
      {"causal-tl-sq<sk", prob(1, 20, 33, {{{"kind", "causal"}, {"align", "top_left"}}})},
      {"window-5-3", prob(1, 40, 50, {{{"kind", "sliding_window"}, {"left", 5}, {"right", 3}}})},
      {"window-left-only", prob(1, 30, 30, {{{"kind", "sliding_window"}, {"left", 4}, {"right", -1}}})},
      {"causal+window-7", prob(1, 40, 40, {{{"kind", "causal"}}, {{"kind", "sliding_window"}, {"left", 7}, {"right", -1}}})},
      {"causal-tl+window", prob(1, 24, 36, {{{"kind", "causal"}, {"align", "top_left"}},
                                            {{"kind", "sliding_window"}, {"left", 6}, {"right", 2}}})},
      {"document-ids+causal", prob(2, 20, 20, {{{"kind", "causal"}}, {{"kind", "document"}, {"doc_ids", ids}}})},
      {"document-ids", prob(2, 20, 20, {{{"kind", "document"}, {"doc_ids", ids}}})},
      {"document-lengths", prob(2, 30, 30, {{{"kind", "document"}, {"doc_lengths", {{10, 0, 12, 8}, {30}}}}})},
      {"prefix-lm", prob(1, 30, 30, {{{"kind", "prefix_lm"}, {"prefix_len", 9}}})},
      {"prefix-lm+window", prob(1, 30, 30, {{{"kind", "prefix_lm"}, {"prefix_len", 9}},
                                            {{"kind", "sliding_window"}, {"left", 3}, {"right", 0}}})},
      {"padding", prob(2, 30, 40, {{{"kind", "padding"}, {"seq_lens_q", {20, 30}}, {"seq_lens_k", {25, 40}}}})},
      {"padding+causal", prob(2, 30, 40, {{{"kind", "causal"}},
                                          {{"kind", "padding"}, {"seq_lens_q", {20, 30}}, {"seq_lens_k", {25, 40}}}})},
      {"padding+causal-tl+zero", prob(2, 16, 16, {{{"kind", "causal"}, {"align", "top_left"}},
                                                 {{"kind", "padding"}, {"seq_lens_q", {0, 9}}, {"seq_lens_k", {5, 16}}}})},
      {"block-sparse", prob(1, 300, 400, {{{"kind", "block_sparse"}, {"density", 0.4},
                                           {"seed", INT64_C(0x7000000000000005)}}})},
      {"block-sparse+causal+prefix", prob(1, 260, 260, {{{"kind", "causal"}},
                                                        {{"kind", "block_sparse"}, {"density", 0.7}, {"seed", 12345}},
                                                        {{"kind", "prefix_lm"}, {"prefix_len", 100}}})},
      {"document+block-sparse", prob(1, 256, 256, {{{"kind", "document"}, {"doc_lengths", {{100, 120, 36}}}},
                                                   {{"kind", "block_sparse"}, {"density", 0.5}, {"seed", 3}}})},
  };
}

/// masks.json: each sample problem with its mask as '0'/'1' rows (row b * Sq + i,
/// character j = mask_allowed(b, 0, i, j)), splitmix64 values and block_sparse_keep rows.
json masks_document() {
  json problems = json::array();
  for (const auto& [name, pj] : mask_problems()) {
    const Problem p = problem_from_json(pj, "test_golden.cpp", "/" + name);
    MaskArrays arrays;
    const MaskDesc m = make_mask_desc(p, arrays);
    json rows = json::array();
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t i = 0; i < p.seq_q; ++i) {
        std::string bits(static_cast<size_t>(p.seq_k), '0');
        for (int64_t j = 0; j < p.seq_k; ++j)
          if (mask_allowed(m, b, 0, i, j)) bits[static_cast<size_t>(j)] = '1';
        rows.push_back(bits);
      }
    problems.push_back({{"name", name}, {"problem", pj}, {"rows", rows}});
  }
  json mix = json::array();
  for (uint64_t x : {UINT64_C(0), UINT64_C(1), UINT64_C(12345678901234567), UINT64_C(0x8000000000000005),
                     ~UINT64_C(0)})
    mix.push_back({x, splitmix64(x)});
  json keep = json::array();
  for (const auto& [seed, density] : std::vector<std::pair<uint64_t, double>>{
           {7, 0.5}, {0, 0.1}, {UINT64_C(0xFFFFFFFFFFFFFFFF), 0.9}, {12345, 0.7}}) {
    for (int64_t qb : {0, 1, 5}) {
      std::string bits;
      for (int64_t kb = 0; kb < 32; ++kb) bits += block_sparse_keep(seed, qb, kb, density) ? '1' : '0';
      keep.push_back({{"seed", seed}, {"density", density}, {"qb", qb}, {"kb_bits", bits}});
    }
  }
  return {{"source", "tests/test_golden.cpp (ATTNBENCH_WRITE_GOLDEN=1 rewrites it)"},
          {"problems", problems},
          {"splitmix64", mix},
          {"block_sparse_keep", keep}};
}

/// generator.json: counter_uniform / counter_normal streams, round_to in each dtype,
/// and the first elements of make_inputs() (q, k, v, d_o, bias, offset).
json generator_document() {
  json streams = json::array();
  for (const auto& [seed, stream] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0, 1}, {20240611, 1}, {20240611, 4}, {UINT64_C(0xFFFFFFFFFFFFFFFF), 6}, {5, 3}}) {
    json u = json::array(), n = json::array(), r = json::object();
    for (uint64_t i = 0; i < 16; ++i) {
      u.push_back(counter_uniform(seed, stream, i));
      n.push_back(counter_normal(seed, stream, i));
    }
    for (DType t : {DType::fp32, DType::fp16, DType::bf16}) {
      json v = json::array();
      for (uint64_t i = 0; i < 16; ++i) v.push_back(round_to(t, counter_normal(seed, stream, i)));
      r[to_string(t)] = v;
    }
    streams.push_back({{"seed", seed}, {"stream", stream}, {"uniform", u}, {"normal", n}, {"rounded", r}});
  }
  // round_to on edge values: ties, subnormals of fp16, values beyond bf16's mantissa.
  const std::vector<double> edges = {1.0, -2.5, 1.0 + 1.0 / 1024 + 1.0 / 4096, 1.00390625, 1.005859375,
                                     65504.0, 6.1e-5, 3.0e-7, 1e-40, -0.1, 3.14159265358979, 1.0 / 3.0};
  json round_edges = json::array();
  for (double x : edges)
    round_edges.push_back({{"x", x}, {"fp32", round_to(DType::fp32, x)}, {"fp16", round_to(DType::fp16, x)},
                           {"bf16", round_to(DType::bf16, x)}});
  json inputs = json::array();
  const json pjs[] = {
      {{"batch", 1}, {"heads_q", 2}, {"heads_kv", 1}, {"seq_q", 5}, {"seq_k", 6}, {"head_dim", 4},
       {"dtype", "fp16"}, {"seed", 77}, {"score_mod", {{"kind", "offset_bias"}, {"size", 7}}}},
      {{"batch", 2}, {"heads_q", 2}, {"heads_kv", 2}, {"seq_q", 3}, {"seq_k", 3}, {"head_dim", 8},
       {"head_dim_v", 4}, {"dtype", "bf16"}, {"seed", 20240611},
       {"score_mod", {{"kind", "rel_bias"}, {"max_distance", 2}}}},
  };
  for (const json& pj : pjs) {
    const Problem p = problem_from_json(pj, "test_golden.cpp", "/generator");
    const ProblemData d = make_inputs(p);
    auto head = [](const std::vector<double>& v) {
      return std::vector<double>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(12, v.size())));
    };
    inputs.push_back({{"problem", pj},
                      {"q", head(d.q.data)},
                      {"k", head(d.k.data)},
                      {"v", head(d.v.data)},
                      {"do", head(d.d_o.data)},
                      {"bias", head(d.bias)},
                      {"offset", d.offset}});
  }
  return {{"source", "tests/test_golden.cpp (ATTNBENCH_WRITE_GOLDEN=1 rewrites it)"},
          {"streams", streams},
          {"round_to", round_edges},
          {"make_inputs", inputs}};
}

/// stopping.json: sample_until_stable on fixed sample sequences (repeated cyclically
/// when the rule asks for more), the clock advancing by each sample's duration;
/// next_hold_ms as [hold_ms, host_ms, result] triples.
json stopping_document() {
  struct Case {
    std::string name;
    TimingPolicy policy;
    std::vector<double> samples;
  };
  auto pol = [](int min_s, int max_s, double target, double max_seconds) {
    TimingPolicy p;
    p.min_samples = min_s;
    p.max_samples = max_s;
    p.target_rel_stddev = target;
    p.max_seconds = max_seconds;
    return p;
  };
  auto nvb = [&](int min_s, int max_s, double target, double max_seconds, double min_time_s) {
    TimingPolicy p = pol(min_s, max_s, target, max_seconds);
    p.stopping = Stopping::nvbench;
    p.min_time_s = min_time_s;
    return p;
  };
  const std::vector<Case> cases = {
      {"constant converges at min_samples", pol(5, 1000, 0.02, 2.0), {1.0}},
      {"noisy start then stable", pol(3, 1000, 0.02, 2.0), {1.0, 3.0, 1.0, 1.01, 0.99, 1.0, 1.0, 1.0}},
      {"alternating never converges: max_samples", pol(2, 40, 0.02, 100.0), {1.0, 2.0}},
      {"long samples: time cap", pol(5, 1000, 0.0, 0.05), {12.5, 13.0, 12.0}},
      {"one sample over the cap", pol(1, 10, 0.0, 0.001), {5.0}},
      {"zero target needs identical samples", pol(4, 50, 0.0, 10.0), {0.5, 0.5, 0.5, 0.5, 0.5, 0.6}},
      {"all zero samples converge (mean 0)", pol(3, 10, 0.01, 1.0), {0.0}},
      {"min_samples dominates", pol(12, 30, 0.5, 10.0), {1.0, 1.1, 0.9}},
      {"slow drift", pol(5, 200, 0.01, 10.0), {1.0, 1.2, 1.1, 1.05, 1.02, 1.01, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
                                               1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0}},
      {"nvbench: the minimum time binds", nvb(10, 1000, 0.005, 10.0, 0.02), {1.0}},
      {"nvbench: min_samples binds", nvb(10, 1000, 0.005, 10.0, 0.001), {1.0}},
      {"nvbench: noisy, the time met, max_samples", nvb(4, 30, 0.005, 10.0, 0.001), {1.0, 1.05}},
  };
  json out = json::array();
  for (const Case& c : cases) {
    double clock = 0;
    size_t next = 0;
    const TimingStats st = sample_until_stable(
        c.policy,
        [&] {
          const double x = c.samples[next++ % c.samples.size()];
          clock += x * 1e-3;
          return x;
        },
        [&] { return clock; });
    json policy = {{"min_samples", c.policy.min_samples}, {"max_samples", c.policy.max_samples},
                   {"target_rel_stddev", c.policy.target_rel_stddev}, {"max_seconds", c.policy.max_seconds}};
    if (c.policy.stopping != Stopping::rel_stddev) {
      policy["stopping"] = to_string(c.policy.stopping);
      policy["min_time_s"] = c.policy.min_time_s;
    }
    out.push_back({{"name", c.name},
                   {"policy", policy},
                   {"samples", c.samples},
                   {"n", st.samples_ms.size()},
                   {"stop_reason", st.stop_reason},
                   {"wall_seconds", st.wall_seconds}});
  }
  json hold = json::array();  // next_hold_ms: the stream hold's length after an enqueue of host_ms
  for (const auto& [h, host] : std::vector<std::pair<double, double>>{
           {0.2, 0.0}, {0.2, 0.05}, {0.2, 0.3}, {1.0, 0.3}, {1.0, 0.7}, {30.0, 49.0}, {30.0, 51.0}, {100.0, 80.0}})
    hold.push_back({h, host, next_hold_ms(h, host)});
  return {{"source", "tests/test_golden.cpp (ATTNBENCH_WRITE_GOLDEN=1 rewrites it)"},
          {"clock", "fake: starts at 0 s and advances by each sample's own duration (ms / 1000)"},
          {"cases", out},
          {"next_hold_ms", hold}};
}

json load_golden(const std::string& name) {
  std::ifstream f(kGoldenDir + "/" + name);
  REQUIRE_MESSAGE(f.good(), "cannot read " << kGoldenDir << "/" << name
                                           << " (ATTNBENCH_WRITE_GOLDEN=1 test_golden writes it)");
  return json::parse(f);
}

/// Differences between a committed golden file and the recomputed document, one
/// line each ("key[n]: file <value> != computed <value>", or a missing / extra key
/// or a length change); top-level arrays are compared element by element so a line
/// names the entry. Empty when equal.
std::vector<std::string> golden_differences(const json& file, const json& doc) {
  std::vector<std::string> out;
  auto short_text = [](const json& v) {
    std::string t = v.dump();
    return t.size() > 160 ? t.substr(0, 160) + "..." : t;
  };
  if (!file.is_object()) return {"the file is not a JSON object"};
  for (const auto& [key, value] : doc.items()) {
    if (!file.contains(key)) {
      out.push_back(key + ": missing in the file");
    } else if (!value.is_array() || !file[key].is_array()) {
      if (file[key] != value) out.push_back(key + ": file " + short_text(file[key]) + " != computed " + short_text(value));
    } else if (file[key].size() != value.size()) {
      out.push_back(key + ": " + std::to_string(file[key].size()) + " entries in the file, " +
                    std::to_string(value.size()) + " computed");
    } else {
      for (size_t n = 0; n < value.size(); ++n)
        if (file[key][n] != value[n])
          out.push_back(key + "[" + std::to_string(n) + "]: file " + short_text(file[key][n]) + " != computed " +
                        short_text(value[n]));
    }
  }
  for (const auto& [key, value] : file.items())
    if (!doc.contains(key)) out.push_back(key + ": in the file, not computed");
  return out;
}

/// Writes `doc` when ATTNBENCH_WRITE_GOLDEN=1, then requires the committed file to
/// equal it (golden_differences empty; each difference is reported).
void check_golden(const std::string& name, const json& doc) {
  const char* w = std::getenv("ATTNBENCH_WRITE_GOLDEN");
  if (w && std::string(w) == "1") {
    std::ofstream f(kGoldenDir + "/" + name);
    f << doc.dump(1) << "\n";
    REQUIRE(f.good());
    MESSAGE("wrote " << kGoldenDir << "/" << name);
  }
  const std::vector<std::string> diffs = golden_differences(load_golden(name), doc);
  for (const auto& d : diffs) FAIL_CHECK(name << " " << d);
  CHECK(diffs.empty());
}

}  // namespace

TEST_CASE("golden masks.json equals mask_allowed() on the sample problems") {
  const json doc = masks_document();
  // The samples cover every mask kind of docs/semantics.md section 3.
  std::set<std::string> kinds;
  for (const auto& e : doc["problems"])
    for (const auto& t : e["problem"]["mask"]) kinds.insert(t["kind"].get<std::string>());
  CHECK(kinds == std::set<std::string>{"causal", "sliding_window", "document", "prefix_lm", "padding", "block_sparse"});
  check_golden("masks.json", doc);
}

TEST_CASE("golden generator.json equals the seeded input generator") {
  const json doc = generator_document();
  // Sanity of the sample itself: not all values equal, normals not all in [0, 1).
  CHECK(doc["streams"][0]["uniform"][0] != doc["streams"][0]["uniform"][1]);
  bool negative = false;
  for (const auto& x : doc["streams"][1]["normal"]) negative |= x.get<double>() < 0;
  CHECK(negative);
  check_golden("generator.json", doc);
}

TEST_CASE("golden stopping.json equals the traces of the stopping rule") {
  const json doc = stopping_document();
  std::set<std::string> reasons;
  for (const auto& c : doc["cases"]) reasons.insert(c["stop_reason"].get<std::string>());
  CHECK(reasons == std::set<std::string>{"converged", "max_samples", "time_cap"});
  check_golden("stopping.json", doc);
}

TEST_CASE("golden_differences notices a changed value, a missing entry and an extra key") {
  const json doc = stopping_document();
  CHECK(golden_differences(doc, doc).empty());
  json changed = doc;
  changed["cases"][2]["n"] = changed["cases"][2]["n"].get<int64_t>() + 1;
  const auto d1 = golden_differences(changed, doc);
  REQUIRE(d1.size() == 1);
  CHECK(d1[0].rfind("cases[2]: ", 0) == 0);
  json shorter = doc;
  shorter["next_hold_ms"].erase(shorter["next_hold_ms"].size() - 1);
  shorter["extra"] = 1;
  shorter["clock"] = "real";
  CHECK(golden_differences(shorter, doc).size() == 3);
  json bit = masks_document();
  std::string row = bit["problems"][3]["rows"][0];
  row[0] = row[0] == '1' ? '0' : '1';
  bit["problems"][3]["rows"][0] = row;
  CHECK(golden_differences(bit, masks_document()).size() == 1);
  CHECK(golden_differences(json::array(), doc).size() == 1);
}

TEST_CASE("make_inputs fills large tensors (many pool chunks) with the per-element counter values") {
  // Q here holds 4 x 2^18 + 3 elements: the pool splits it into chunks, and every
  // element must still be round_to(dtype, counter_normal(seed, stream 1, index)).
  Problem p;
  p.batch = 1;
  p.heads_q = 4;
  p.heads_kv = 1;
  p.seq_q = 4099;
  p.seq_k = 64;
  p.head_dim = p.head_dim_v = 256;
  p.dtype = DType::bf16;
  p.seed = 7;
  const ProblemData d = make_inputs(p);
  REQUIRE(d.q.data.size() == size_t{4} * 4099 * 256);
  size_t wrong = 0;
  for (size_t i = 0; i < d.q.data.size(); i += 997)
    wrong += d.q.data[i] != round_to(DType::bf16, counter_normal(7, 1, i));
  const size_t last = d.q.data.size() - 1;
  wrong += d.q.data[last] != round_to(DType::bf16, counter_normal(7, 1, last));
  CHECK(wrong == 0);
  CHECK(d.q.data[1] != d.q.data[2]);
}
