// GPU tests of the `varlen` backend (documents, or each batch row's valid tokens,
// as packed THD sequences on attnbench's fused kernels) against the float64
// reference under the rule: cu_seqlens_q != cu_seqlens_k from padding lengths
// (Sq != Sk, rows without keys or queries, decode, both causal alignments), real
// CodeAlpaca packs built by the scenario packer, random document lengths with
// zero-length and one-token documents, a single document filling the row,
// padding at the end of each pack, windows, GQA 4:1 (packed into the tile) and
// 7:1, head dims 64 and 128, both dtypes, both dQ modes.
#include <doctest/doctest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "backends/kernels/attn_launch.hpp"
#include "harness/backend/backend.hpp"
#include "harness/workloads/scenario.hpp"
#include "tests/gpu/gpu_check.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;
using namespace attnbench::test;

namespace {

/// The registered backend's variant with the dQ mode `deterministic`, the kernel
/// paths `path` (auto | sm80 | sm90, both passes) and GQA `pack` (0 = the plan's).
std::unique_ptr<Backend> varlen(bool deterministic, const std::string& path = "auto", int pack = 0,
                                const std::string& direct = "auto", const std::string& persistent = "auto") {
  std::unique_ptr<Backend> be = BackendRegistry::create_variant(
      "varlen[deterministic=" + std::string(deterministic ? "true" : "false") + ",fwd_path=" + path +
      ",bwd_path=" + path + ",pack=" + std::to_string(pack) + ",dq_direct=" + direct + ",persistent=" + persistent +
      "]");
  REQUIRE(be);
  return be;
}

/// As flash's run_case: deterministic with the default forward, atomic with the
/// default (Hopper where it runs) forward and backward, atomic on the portable
/// kernels; where the Hopper backward runs, atomic with every direct dQ row
/// stored by the dK/dV kernel (dq_direct=on) and with none (off), the latter
/// with one forward CTA per query tile (persistent=off; the others' Hopper
/// forward is the persistent one), and deterministic with persistent=off (the
/// Hopper dQ kernel one CTA per tile; the first run's is persistent).
void run_case(const Problem& p) {
  check_gpu_case(*varlen(true), p, true);
  check_gpu_case(*varlen(false), p, false);
  check_gpu_case(*varlen(false, "sm80"), p, false);
  if (kernels::fwd_sm90_usable() && p.head_dim <= 128) {
    check_gpu_case(*varlen(false, "auto", 0, "on"), p, false);
    check_gpu_case(*varlen(false, "auto", 0, "off", "off"), p, false);
    check_gpu_case(*varlen(true, "auto", 0, "auto", "off"), p, true);  // the Hopper dQ kernel, one CTA per tile
  }
}

}  // namespace

TEST_CASE("varlen: registry and unsupported masks") {
  std::unique_ptr<Backend> be = varlen(false);
  CHECK(be->name() == "varlen");
  std::string why;
  CHECK_MESSAGE(be->available(&why), why);
  CHECK(be->supports(make_problem(1, 2, 1, 64, 64, 64, DType::bf16)).ok);  // one sequence per batch row
  const Problem both = with_padding(with_documents(make_problem(1, 2, 1, 64, 64, 64, DType::bf16), {{30, 34}}),
                                    {60}, {60});
  CHECK(be->supports(both).reason.find("document and padding") != std::string::npos);
  Problem p = with_documents(make_problem(1, 2, 1, 64, 64, 64, DType::bf16), {{30, 34}});
  p.mask.push_back(PrefixLmTerm{10});
  CHECK(be->supports(p).reason.find("prefix_lm") != std::string::npos);
  Problem q = make_problem(1, 2, 1, 6, 6, 64, DType::bf16);
  q.mask.push_back(DocumentTerm{{{0, 0, 1, 1, 0, 0}}, {}});
  CHECK(be->supports(q).reason.find("not contiguous") != std::string::npos);
}

TEST_CASE("varlen: cu_seqlens_q != cu_seqlens_k from padding lengths and THD: Sq != Sk, empty rows, decode") {
  for (DType t : {DType::fp16, DType::bf16})
    for (int64_t d : {64, 128}) {
      // Row 1 has queries but no keys (fully masked rows), row 2 no queries, row 3 one query (decode).
      const Problem p = with_padding(make_problem(4, 4, 2, 130, 300, d, t, Layout::bshd, 500), {130, 77, 0, 1},
                                     {300, 0, 200, 257});
      const nlohmann::json x = varlen(false)->prepare(p, make_inputs(p))->extra();
      CHECK(x["placement"].get<std::string>().find("cu_seqlens_q / cu_seqlens_k") != std::string::npos);
      run_case(p);
      run_case(with_causal(p, CausalAlign::bottom_right));
      run_case(with_causal(p, CausalAlign::top_left));
      run_case(with_window(with_causal(p), 64, 0));
    }
  // Chunked prefill against a longer key range, GQA 7:1, alibi; THD with its own lengths; no mask at all.
  Problem chunk = with_causal(make_problem(2, 7, 1, 100, 1000, 64, DType::bf16, Layout::bhsd, 501));
  chunk.score_mod.kind = ScoreMod::Kind::alibi;
  run_case(chunk);
  run_case(with_padding(make_problem(3, 4, 1, 150, 150, 128, DType::bf16, Layout::thd, 502), {150, 3, 90},
                        {150, 3, 90}));
  Problem soft = make_problem(2, 2, 2, 1, 513, 128, DType::fp16, Layout::bshd, 503);
  soft.score_mod.kind = ScoreMod::Kind::softcap;
  soft.score_mod.cap = 30.0;
  run_case(soft);
}

TEST_CASE("varlen: document lengths 0, 1, one document filling the row, padding at the end") {
  for (DType t : {DType::fp16, DType::bf16})
    for (int64_t d : {64, 128}) {
      const Problem p = with_documents(make_problem(3, 4, 1, 200, 200, d, t, Layout::bshd, 200),
                                       {{1, 0, 57, 1, 64, 0, 65}, {200}, {0, 129, 1}});
      run_case(p);
      run_case(with_causal(p));
    }
}

TEST_CASE("varlen: random document lengths, windows, GQA 4:1 and 7:1") {
  Rng rng{424242};
  for (int n = 0; n < 8; ++n) {
    const int64_t S = 512;
    std::vector<std::vector<int64_t>> lens(2);
    for (auto& row : lens) {
      int64_t used = 0;
      while (used < S - 40) {
        const int64_t l = rng.coin(0.2) ? rng.uniform(0, 1) : rng.uniform(2, 300);
        if (used + l > S) break;
        row.push_back(l);
        used += l;
      }
    }
    const bool seven = n % 2 == 1;
    Problem p = with_documents(make_problem(2, seven ? 7 : 8, seven ? 1 : 2, S, S, n < 4 ? 64 : 128,
                                            n % 3 == 0 ? DType::fp16 : DType::bf16, Layout::bshd,
                                            300 + static_cast<uint64_t>(n)),
                               lens);
    p = with_causal(p);
    if (n % 4 == 2) p = with_window(p, rng.uniform(0, 100), 0);
    run_case(p);
  }
}

TEST_CASE("varlen: GQA 4:2 packs two heads per tile (pack 2), and forced packs 1, 2, 4") {
  const Problem p = with_causal(with_documents(make_problem(2, 4, 2, 300, 300, 64, DType::bf16, Layout::bshd, 400),
                                               {{60, 0, 130, 1, 90}, {17, 200, 40}}));
  run_case(p);  // mean document < 256, group 2: pack 2
  for (int pack : {1, 2, 4}) {
    Problem q = with_documents(make_problem(1, 8, 2, 256, 256, 128, DType::fp16, Layout::bhsd, 401), {{100, 50, 106}});
    check_gpu_case(*varlen(true, "auto", pack), with_causal(q), true);
  }
  // a pack that does not divide the GQA group is an unsupported row
  const Problem g3 = with_documents(make_problem(1, 6, 2, 128, 128, 64, DType::bf16), {{64, 64}});
  CHECK(varlen(false, "auto", 2)->supports(g3).reason.find("pack=2 does not divide") != std::string::npos);
}

TEST_CASE("varlen: real CodeAlpaca packs from the scenario packer") {
  const nlohmann::json j = {
      {"name", "gpu_codealpaca"},
      {"base",
       {{"batch", 2}, {"seq", 2048}, {"heads_q", 8}, {"heads_kv", 2}, {"head_dim", 128}, {"dtype", "bf16"},
        {"layout", "bshd"}, {"mask", {{{"kind", "causal"}}}}, {"seed", 1},
        {"packing",
         {{"source", {{"kind", "empirical"}, {"file", "data/codealpaca.json"}}}, {"shuffle", "python"}, {"seed", 1},
          {"strategy", "greedy"}, {"max_seq_len", 2048}, {"num_packs", 2}, {"fill", 1.0}, {"pad_to", "max_seq_len"}}}}}};
  const Scenario sc = scenario_from_json(j, std::string(ATTNBENCH_SOURCE_DIR) + "/scenarios/gpu_codealpaca.json");
  REQUIRE(sc.cases.size() == 1);
  run_case(sc.cases[0].problem);
  Problem d64 = sc.cases[0].problem;
  d64.head_dim = d64.head_dim_v = 64;
  d64.dtype = DType::fp16;
  run_case(d64);
}
