// GPU tests of the `flex` backend (attnbench's fused kernels walking the
// problem's BlockMask) against the float64 reference under the correctness rule,
// forward and every gradient including dBias of the learnable biases: every mask
// kind and combination of scenarios/masks.json crossed with every score mod,
// ragged lengths (not multiples of the block size), Sq != Sk, GQA 7:1, head dims
// 64 and 128, both dtypes, block sizes 64 and 128, and both dBias modes
// (deterministic: bitwise repeatable; atomic: passes the rule twice).
#include <doctest/doctest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "harness/backend/backend.hpp"
#include "harness/model/errors.hpp"
#include "harness/workloads/scenario.hpp"
#include "tests/gpu/gpu_check.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;
using namespace attnbench::test;

namespace {

/// The registered backend's variant with options block, dbias, the kernel paths
/// fwd_path / bwd_path (auto | sm80 | sm90) and the tile schedule (auto |
/// block_mask | documents).
std::unique_ptr<Backend> flex(int block, const char* dbias, const std::string& fwd = "auto",
                              const std::string& bwd = "auto", const std::string& schedule = "auto") {
  std::unique_ptr<Backend> be = BackendRegistry::create_variant("flex[block=" + std::to_string(block) + ",dbias=" +
                                                                dbias + ",fwd_path=" + fwd + ",bwd_path=" + bwd +
                                                                ",schedule=" + schedule + "]");
  REQUIRE(be);
  return be;
}

/// Whether the Hopper kernels run here (an sm_90a build on compute capability
/// 9.0): the default forward path of a small instance says so.
bool hopper() {
  static const bool yes = [] {
    const Problem p = make_problem(1, 1, 1, 64, 64, 64, DType::bf16);
    return flex(128, "deterministic")->prepare(p, make_inputs(p))->extra()["fwd_path"] == "sm90";
  }();
  return yes;
}

/// Deterministic dBias at `block`, bitwise checked, with the default paths (on an
/// sm_90a build on an H100 the Hopper forward and, at block 128, the deterministic
/// Hopper backward); then with the portable forward and backward (fwd_path =
/// bwd_path = sm80): atomic dBias when asked, else deterministic again; then,
/// where the Hopper kernels run and at block 128, with the atomic Hopper backward
/// (bwd_path=sm90: dQ by atomics, not bitwise; atomic dBias when asked).
void run_case(const Problem& p, int block = 128, bool atomic_too = false) {
  check_gpu_case(*flex(block, "deterministic"), p, true);
  // auto may have taken the documents or the intervals schedule: the BlockMask walk too
  check_gpu_case(*flex(block, "deterministic", "auto", "auto", "block_mask"), p, true);
  if (atomic_too)
    check_gpu_case(*flex(block, "atomic", "sm80", "sm80", "block_mask"), p, false);
  else
    check_gpu_case(*flex(block, "deterministic", "sm80", "sm80", "block_mask"), p, true);
  if (block == 128 && hopper())
    check_gpu_case(*flex(block, atomic_too ? "atomic" : "deterministic", "auto", "sm90", "block_mask"), p, false);
}

}  // namespace

TEST_CASE("flex: registry, availability, determinism follows the dBias mode") {
  std::unique_ptr<Backend> be = flex(128, "deterministic");
  CHECK(be->name() == "flex");
  CHECK(be->device() == Device::cuda);
  std::string why;
  CHECK_MESSAGE(be->available(&why), why);
  CHECK(be->deterministic());
  CHECK_FALSE(flex(128, "atomic")->deterministic());
  CHECK_THROWS_WITH(BackendRegistry::create_variant("flex[block=96]"), doctest::Contains("option block=\"96\""));
  CHECK_THROWS_WITH(BackendRegistry::create_variant("flex[dbias=sometimes]"),
                    doctest::Contains("option dbias=\"sometimes\""));
  CHECK(flex(64, "atomic", "auto", "sm80")->variant() == "flex[block=64,bwd_path=sm80,dbias=atomic]");
}

TEST_CASE("flex: the Hopper backward (bwd_path=sm90) and what it refuses") {
  if (!hopper()) {
    MESSAGE("SKIPPED: the Hopper kernels do not run here (sm_90a build on compute capability 9.0)");
    return;
  }
  const Problem p = with_causal(make_problem(1, 2, 1, 256, 256, 64, DType::bf16));
  const ProblemData in = make_inputs(p);
  // The BlockMask walk's backward paths (auto would take the intervals schedule here: the flash tiles).
  const nlohmann::json x = flex(128, "deterministic", "auto", "sm90", "block_mask")->prepare(p, in)->extra();
  CHECK(x["bwd_path"] == "sm90");
  CHECK(x["dq_mode"] == "float32 TMA reduce-adds (added by the dK/dV kernel)");
  CHECK_FALSE(flex(128, "deterministic", "auto", "sm90")->deterministic());  // dQ by reduce-adds
  // 128-key tiles are one KV block
  CHECK_THROWS_AS(flex(64, "deterministic", "auto", "sm90")->prepare(p, in), Unsupported);
  CHECK(flex(64, "deterministic", "auto", "sm90")->supports(p).reason.find("block=128") != std::string::npos);
  const Problem rel = with_score_mod(p, ScoreMod::Kind::rel_bias, 8);  // rel_bias dBias runs there too
  CHECK(flex(128, "deterministic", "auto", "sm90")->supports(rel).ok);
  CHECK(flex(128, "atomic", "auto", "sm90", "block_mask")->prepare(rel, make_inputs(rel))->extra()["bwd_path"] == "sm90");
  CHECK(flex(128, "deterministic")->deterministic());
  // auto: the deterministic Hopper backward where it can run, else the portable one with the reason.
  const nlohmann::json def = flex(128, "deterministic", "auto", "auto", "block_mask")->prepare(p, in)->extra();
  CHECK(def["bwd_path"] == "sm90");
  CHECK(def["dq_mode"] == "deterministic (Hopper dQ kernel, no atomics)");
  CHECK(def["dq_schedule"] ==
        "persistent: one CTA per resident slot claiming the query tiles in the TileScheduler's order in turn");
  const nlohmann::json b64 = flex(64, "deterministic", "auto", "auto", "block_mask")->prepare(p, in)->extra();
  CHECK(b64["bwd_path"] == "sm80");
  CHECK(b64["bwd_path_reason"].get<std::string>().find("128") != std::string::npos);
  CHECK_FALSE(b64.contains("dq_schedule"));  // the portable backward has no dQ kernel schedule
  const nlohmann::json relx = flex(128, "deterministic")->prepare(rel, make_inputs(rel))->extra();
  CHECK(relx["bwd_path"] == "sm90");
  CHECK(relx["dq_mode"] == "deterministic (Hopper dQ kernel, no atomics)");
}

TEST_CASE("flex: partial tiles of contiguous documents and aligned block_sparse use row intervals, not pairs") {
  const Problem docs = with_causal(with_documents(make_problem(2, 2, 1, 300, 300, 64, DType::bf16), {{100, 77, 123},
                                                                                                       {300}}));
  CHECK(flex(128, "deterministic", "auto", "auto", "block_mask")->prepare(docs, make_inputs(docs))->extra()["path"].get<std::string>().find(
            "document run") != std::string::npos);
  Problem sparse = make_problem(1, 2, 1, 300, 300, 64, DType::bf16);
  sparse.mask.push_back(BlockSparseTerm{0.5, 3});
  for (int block : {64, 128})
    CHECK(flex(block, "deterministic")->prepare(sparse, make_inputs(sparse))->extra()["path"].get<std::string>().find(
              "per pair") == std::string::npos);
  // Ids split into two runs keep the per-pair path.
  Problem split = make_problem(1, 2, 1, 64, 64, 64, DType::bf16);
  DocumentTerm d;
  d.doc_ids = {std::vector<int32_t>(64, 0)};
  for (int i = 20; i < 40; ++i) d.doc_ids[0][static_cast<size_t>(i)] = 1;
  split.mask.push_back(d);
  CHECK(flex(128, "deterministic", "auto", "auto", "block_mask")->prepare(split, make_inputs(split))->extra()["path"].get<std::string>().find(
            "per pair") != std::string::npos);
  run_case(docs);
  run_case(split);
}

TEST_CASE("flex: the documents schedule (one packed sequence per document) and the automatic choice") {
  // Many short documents with causal: the per-document tiles execute fewer pairs
  // than 128 x 128 blocks across document boundaries, so auto takes them.
  const Problem packed = with_causal(with_documents(make_problem(2, 4, 2, 700, 700, 64, DType::bf16, Layout::bshd, 90),
                                                    {{90, 1, 33, 200, 0, 150, 226}, {17, 300, 383}}));
  const nlohmann::json x = flex(128, "deterministic")->prepare(packed, make_inputs(packed))->extra();
  INFO(x.dump());
  CHECK(x["schedule"].get<std::string>().rfind("documents (automatic", 0) == 0);
  CHECK(x["placement"] == "documents as packed sequences (THD)");
  CHECK(x["dq_mode"].get<std::string>().find("deterministic") != std::string::npos);
  const nlohmann::json bx = flex(128, "deterministic", "auto", "auto", "block_mask")->prepare(packed, make_inputs(packed))->extra();
  CHECK(bx["schedule"].get<std::string>().rfind("block_mask (asked for)", 0) == 0);
  CHECK(bx.contains("block_mask"));
  run_case(packed);
  run_case(with_window(packed, 64, 0), 128);
  // What the documents schedule cannot run keeps the BlockMask walk, with the reason.
  const Problem rel = with_score_mod(packed, ScoreMod::Kind::rel_bias, 8);
  const nlohmann::json rx = flex(128, "deterministic")->prepare(rel, make_inputs(rel))->extra();
  CHECK(rx["schedule"].get<std::string>().find("cannot run") != std::string::npos);
  CHECK(flex(128, "deterministic", "auto", "auto", "documents")->supports(rel).reason.find("schedule=documents") !=
        std::string::npos);
  CHECK_THROWS_AS(flex(128, "deterministic", "auto", "auto", "documents")->prepare(rel, make_inputs(rel)), Unsupported);
  // Asked for, the documents schedule runs even where the BlockMask would execute fewer pairs.
  const Problem one = with_documents(make_problem(1, 2, 1, 256, 256, 64, DType::bf16), {{256}});
  CHECK(flex(128, "deterministic", "auto", "auto", "documents")->prepare(one, make_inputs(one))->extra()["schedule"]
            .get<std::string>()
            .rfind("documents (asked for)", 0) == 0);
  check_gpu_case(*flex(128, "deterministic", "auto", "auto", "documents"), one, true);
  CHECK_THROWS_WITH(BackendRegistry::create_variant("flex[schedule=sometimes]"),
                    doctest::Contains("option schedule=\"sometimes\""));
}

TEST_CASE("flex: the intervals schedule (the flash tiles) for masks of interval terms") {
  // Causal with a window of 100 at S 600: the flash tiles (per-row key intervals, 128-key
  // steps) execute fewer pairs than 128 x 128 blocks, so auto takes them.
  const Problem win = with_window(with_causal(make_problem(2, 4, 2, 600, 600, 64, DType::bf16)), 100, 0);
  const nlohmann::json x = flex(128, "deterministic")->prepare(win, make_inputs(win))->extra();
  INFO(x.dump());
  CHECK(x["schedule"].get<std::string>().rfind("intervals (automatic", 0) == 0);
  CHECK(x["placement"] == "bshd padded batch");
  CHECK(x["dq_mode"].get<std::string>().find("deterministic") != std::string::npos);
  run_case(win);
  // prefix_lm and padding with softcap, fp16 (the flash tiles' mask terms and mods).
  Problem pre = with_score_mod(make_problem(2, 2, 2, 300, 300, 128, DType::fp16), ScoreMod::Kind::softcap, 30);
  pre.mask.push_back(PrefixLmTerm{70});
  pre.mask.push_back(PaddingTerm{{300, 211}, {300, 187}});
  check_gpu_case(*flex(128, "deterministic", "auto", "auto", "intervals"), pre, true);
  // Asked for where it cannot run: documents and learnable biases are refused with the reason.
  const Problem docs = with_causal(with_documents(make_problem(1, 2, 2, 256, 256, 64, DType::bf16), {{100, 156}}));
  CHECK(flex(128, "deterministic", "auto", "auto", "intervals")->supports(docs).reason.find("schedule=intervals") !=
        std::string::npos);
  const nlohmann::json dx = flex(128, "deterministic")->prepare(docs, make_inputs(docs))->extra();
  CHECK(dx["schedule"].get<std::string>().find("intervals: ") != std::string::npos);  // listed as refused
}

TEST_CASE("flex: unsupported combinations name what is missing") {
  std::unique_ptr<Backend> be = flex(128, "deterministic");
  CHECK(be->supports(make_problem(1, 2, 1, 64, 64, 160, DType::bf16)).reason.find("head_dim 160 not supported") !=
        std::string::npos);
  CHECK(be->supports(make_problem(1, 2, 1, 64, 64, 64, DType::fp32)).reason.find("fp32") != std::string::npos);
  CHECK(be->supports(make_problem(1, 2, 1, 64, 64, 64, DType::bf16, Layout::thd)).reason.find("THD") !=
        std::string::npos);
  CHECK(be->supports(with_score_mod(make_problem(1, 2, 1, 64, 64, 64, DType::bf16), ScoreMod::Kind::rel_bias, 9000))
            .reason.find("max_distance 9000") != std::string::npos);
}

TEST_CASE("flex: every mask and score mod of scenarios/masks.json (block 128, both dBias modes)") {
  const Scenario sc = load_scenario(std::string(ATTNBENCH_SOURCE_DIR) + "/scenarios/masks.json");
  REQUIRE(sc.cases.size() == 65);
  for (const Case& c : sc.cases) {
    INFO(c.id);
    const bool bias = c.problem.has_learnable_bias();
    run_case(c.problem, 128, bias);
  }
}

TEST_CASE("flex: block size 64 on documents, block_sparse and learnable biases") {
  const Scenario sc = load_scenario(std::string(ATTNBENCH_SOURCE_DIR) + "/scenarios/masks.json");
  for (const Case& c : sc.cases) {
    const Problem& p = c.problem;
    const bool pick = p.find_mask<DocumentTerm>() || p.find_mask<BlockSparseTerm>() || p.has_learnable_bias();
    if (!pick || (p.score_mod.kind != ScoreMod::Kind::none && p.score_mod.kind != ScoreMod::Kind::rel_bias &&
                  p.score_mod.kind != ScoreMod::Kind::offset_bias))
      continue;
    INFO(c.id);
    run_case(p, 64, p.has_learnable_bias());
  }
}

TEST_CASE("flex: ragged lengths, Sq != Sk, GQA 7:1, head_dim 128, fp16") {
  for (DType t : {DType::fp16, DType::bf16}) {
    run_case(with_causal(make_problem(1, 7, 1, 200, 333, 128, t, Layout::bshd, 500)));
    run_case(with_causal(make_problem(2, 4, 2, 333, 200, 64, t, Layout::bhsd, 501), CausalAlign::top_left), 64);
    run_case(with_score_mod(with_documents(make_problem(2, 7, 1, 300, 300, 128, t, Layout::bshd, 502),
                                     {{100, 1, 199}, {17, 283}}),
                      ScoreMod::Kind::rel_bias, 40),
             128, true);
    run_case(with_score_mod(with_window(make_problem(1, 4, 1, 257, 257, 128, t, Layout::bhsd, 503), 70, 5),
                      ScoreMod::Kind::offset_bias, 13),
             64, true);
    Problem pad = with_padding(make_problem(3, 2, 1, 190, 150, 64, t, Layout::bshd, 504), {190, 1, 0}, {150, 77, 3});
    run_case(with_score_mod(with_causal(pad), ScoreMod::Kind::rel_bias, 500), 128, true);
  }
}

TEST_CASE("flex: head_dim 128 on block 128 (the Hopper backward's forms): documents, padding, block_sparse") {
  for (DType t : {DType::bf16, DType::fp16}) {
    run_case(with_score_mod(with_documents(make_problem(2, 4, 1, 300, 300, 128, t, Layout::bshd, 505),
                                     {{100, 1, 199}, {17, 283}}),
                      ScoreMod::Kind::offset_bias, 13),
             128, true);
    Problem pad = with_padding(make_problem(3, 2, 1, 190, 150, 128, t, Layout::bhsd, 506), {190, 1, 0}, {150, 77, 3});
    run_case(with_score_mod(with_causal(pad), ScoreMod::Kind::softcap, 20));
    Problem sparse = make_problem(1, 4, 2, 600, 600, 128, t, Layout::bshd, 507);
    sparse.mask.push_back(BlockSparseTerm{0.5, 11});
    run_case(with_score_mod(sparse, ScoreMod::Kind::alibi));
  }
}

TEST_CASE("flex: block_sparse with causal at S 1000, rel_bias m 0 and m larger than the sequence") {
  Problem p = make_problem(1, 4, 2, 1000, 1000, 64, DType::bf16, Layout::bshd, 510);
  p.mask.push_back(BlockSparseTerm{0.4, 9});
  run_case(with_causal(p));
  run_case(with_score_mod(p, ScoreMod::Kind::rel_bias, 0), 128, true);
  run_case(with_score_mod(p, ScoreMod::Kind::rel_bias, 1500), 64, true);
}

TEST_CASE("flex: sanitizer-sized cases (documents, rel_bias and offset_bias dBias, blocks 64 and 128)") {
  const Problem base = with_documents(make_problem(1, 2, 1, 150, 150, 64, DType::bf16, Layout::bshd, 520), {{70, 80}});
  run_case(with_score_mod(with_causal(base), ScoreMod::Kind::rel_bias, 20), 64, true);
  run_case(with_score_mod(with_causal(base), ScoreMod::Kind::rel_bias, 20), 128, true);  // the Hopper rel tiles
  run_case(with_score_mod(base, ScoreMod::Kind::offset_bias, 9), 128, true);
}
