// Problem model: parsing, validation, error paths, serialisation round trip.
#include <doctest/doctest.h>

#include "harness/model/errors.hpp"
#include "harness/model/problem.hpp"

using namespace attnbench;
using nlohmann::json;

namespace {
json design_example() {
  return json::parse(R"({"batch": 2, "heads_q": 8, "heads_kv": 2, "seq_q": 300, "seq_k": 300,
 "head_dim": 64, "head_dim_v": 64, "dtype": "bf16", "scale": null, "layout": "bshd",
 "mask": [{"kind": "causal", "align": "bottom_right"},
          {"kind": "sliding_window", "left": 64, "right": 0}],
 "score_mod": {"kind": "none"}, "seed": 7})");
}
std::string error_of(const json& j) {
  try {
    problem_from_json(j, "p.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("the docs/semantics.md problem example parses") {
  Problem p = problem_from_json(design_example(), "p.json");
  CHECK(p.batch == 2);
  CHECK(p.heads_q == 8);
  CHECK(p.heads_kv == 2);
  CHECK(p.group_size() == 4);
  CHECK(p.seq_q == 300);
  CHECK(p.dtype == DType::bf16);
  CHECK(p.layout == Layout::bshd);
  CHECK(p.softmax_scale() == doctest::Approx(0.125));
  REQUIRE(p.mask.size() == 2);
  CHECK(p.find_mask<CausalTerm>()->align == CausalAlign::bottom_right);
  CHECK(p.find_mask<SlidingWindowTerm>()->left == 64);
  CHECK(p.find_mask<SlidingWindowTerm>()->right == 0);
  CHECK(p.seed == 7);
  CHECK(describe_mask(p) == "causal(br)+window(64,0)");
}

TEST_CASE("serialisation round-trips") {
  Problem p = problem_from_json(design_example(), "p.json");
  Problem q = problem_from_json(to_json(p), "rt.json");
  CHECK(to_json(q) == to_json(p));
}

TEST_CASE("doc_lengths become doc ids and must fill the row") {
  json j = design_example();
  j["batch"] = 1;
  j["seq_q"] = j["seq_k"] = 10;
  j["mask"] = json::array({{{"kind", "document"}, {"doc_lengths", {{3, 0, 7}}}}});
  Problem p = problem_from_json(j, "p.json");
  const auto* d = p.find_mask<DocumentTerm>();
  REQUIRE(d != nullptr);
  CHECK(d->doc_ids[0] == std::vector<int32_t>{0, 0, 0, 2, 2, 2, 2, 2, 2, 2});
  j["mask"][0]["doc_lengths"] = {{3, 6}};
  std::string e = error_of(j);
  CHECK(e.find("p.json: /mask/0/doc_lengths/0") != std::string::npos);
  CHECK(e.find("sum to 9") != std::string::npos);
}

TEST_CASE("bad inputs name file, path and value") {
  json j = design_example();
  j["heads_kv"] = 3;
  CHECK(error_of(j).find("/heads_kv") != std::string::npos);
  j = design_example();
  j["mask"][1]["left"] = -2;
  CHECK(error_of(j).find("p.json: /mask/1/left") != std::string::npos);
  j = design_example();
  j["mask"][0]["kind"] = "casual";
  std::string e = error_of(j);
  CHECK(e.find("/mask/0/kind") != std::string::npos);
  CHECK(e.find("\"casual\"") != std::string::npos);
  j = design_example();
  j["seq_q"] = "long";
  CHECK(error_of(j).find("/seq_q: expected an integer, got \"long\"") != std::string::npos);
  j = design_example();
  j["dtype"] = "fp8";
  CHECK(error_of(j).find("/dtype: unknown dtype \"fp8\"") != std::string::npos);
  j = design_example();
  j["bogus"] = 1;
  CHECK(error_of(j).find("/bogus: unknown field") != std::string::npos);
  j = design_example();
  j["mask"] = json::array({{{"kind", "document"}, {"doc_ids", {{0, 0}}}}});
  CHECK(error_of(j).find("/mask/0") != std::string::npos);  // Sq mismatch / batch rows
  j = design_example();
  j["seq_k"] = 200;
  j["mask"] = json::array({{{"kind", "document"}, {"doc_lengths", {{300}, {300}}}}});
  CHECK(error_of(j).find("self-attention only") != std::string::npos);
  j = design_example();
  j["mask"] = json::array({{{"kind", "causal"}}, {{"kind", "causal"}, {"align", "top_left"}}});
  CHECK(error_of(j).find("more than once") != std::string::npos);
  j = design_example();
  j["score_mod"] = {{"kind", "softcap"}, {"cap", 0}};
  CHECK(error_of(j).find("/score_mod/cap") != std::string::npos);
  j = design_example();
  j["mask"] = json::array({{{"kind", "padding"}, {"seq_lens_q", {300, 301}}, {"seq_lens_k", {1, 2}}}});
  CHECK(error_of(j).find("/mask/0/seq_lens_q/1") != std::string::npos);
}

TEST_CASE("learnable bias sizes") {
  json j = design_example();
  j["score_mod"] = {{"kind", "rel_bias"}, {"max_distance", 16}};
  Problem p = problem_from_json(j, "p.json");
  CHECK(p.bias_numel() == 8 * 33);
  CHECK(p.offset_numel() == 0);
  j["score_mod"] = {{"kind", "offset_bias"}, {"size", 50}};
  p = problem_from_json(j, "p.json");
  CHECK(p.bias_numel() == 50);
  CHECK(p.offset_numel() == 300);
  CHECK(p.has_learnable_bias());
}
