// GPU tests of the `flash` backend (attnbench's fused kernels, padded layouts)
// against the float64 reference under the correctness rule: lengths around the
// 64-wide tiles, Sq != Sk in both causal alignments, GQA 7:1 and MQA, sliding
// windows, padding with fully masked rows, prefix_lm, softcap and alibi, head
// dims 64 and 128, both dtypes and layouts, seeded random problems, and both
// dQ modes (deterministic: bitwise repeatable; atomic: passes the rule twice, and
// matches the deterministic dQ over repeated backwards of a large dense problem).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/kernels/attn_launch.hpp"
#include "harness/backend/backend.hpp"
#include "harness/model/errors.hpp"
#include "tests/gpu/gpu_check.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;
using namespace attnbench::test;

namespace {

/// The registered backend's variant with the dQ mode `deterministic`, the
/// kernel paths `path` (auto | sm80 | sm90, both passes), the Hopper forward's
/// CTA rows `rows` (auto | 64 | 128), dq_direct and persistent (auto | on | off).
std::unique_ptr<Backend> flash(bool deterministic, const std::string& path = "auto",
                               const std::string& rows = "auto", const std::string& direct = "auto",
                               const std::string& persistent = "auto") {
  std::unique_ptr<Backend> be = BackendRegistry::create_variant(
      "flash[deterministic=" + std::string(deterministic ? "true" : "false") + ",fwd_path=" + path +
      ",bwd_path=" + path + ",fwd_rows=" + rows + ",dq_direct=" + direct + ",persistent=" + persistent + "]");
  REQUIRE(be);
  return be;
}

/// Both dQ modes and both kernel paths on one problem: the deterministic and the
/// atomic run with the default paths (on an sm_90a build on an H100 the Hopper
/// forward and backward: the deterministic one with the Hopper dQ kernel, bitwise
/// checked, with 64-row forward CTAs, fwd_rows=64; the atomic one with 128-row
/// CTAs, fwd_rows=128); both again with the portable forward and backward
/// (options fwd_path = bwd_path = sm80). Where the Hopper backward runs, the
/// atomic one twice more: every direct dQ row stored by the dK/dV kernel
/// (dq_direct=on) and none (off), whatever the automatic choice; the second with
/// one forward CTA per query tile (persistent=off; every other Hopper forward
/// here is the persistent one).
void run_case(const Problem& p) {
  check_gpu_case(*flash(true, "auto", "64"), p, true);  // both Hopper forward tiles, whatever fwd_cta_rows picks
  check_gpu_case(*flash(false, "auto", "128"), p, false);
  check_gpu_case(*flash(true, "sm80"), p, true);
  check_gpu_case(*flash(false, "sm80"), p, false);
  if (kernels::fwd_sm90_usable() && p.head_dim <= 128) {
    check_gpu_case(*flash(false, "auto", "auto", "on"), p, false);
    check_gpu_case(*flash(false, "auto", "auto", "off", "off"), p, false);
  }
}

/// Run the forward of two instances prepared on the same problem and inputs, and
/// check that their O and LSE are bitwise equal.
void check_forward_same_bits(BackendInstance& x, BackendInstance& y) {
  x.forward();
  y.forward();
  x.synchronize();
  y.synchronize();
  check_same_bits(x.read_outputs(false), y.read_outputs(false), false);
}

}  // namespace

TEST_CASE("flash: registry, availability, determinism flag") {
  std::unique_ptr<Backend> be = flash(true);
  CHECK(be->name() == "flash");
  CHECK(be->device() == Device::cuda);
  std::string why;
  CHECK_MESSAGE(be->available(&why), why);
  CHECK(be->deterministic());
  CHECK_FALSE(flash(false)->deterministic());
}

TEST_CASE("flash: backward path choice (option bwd_path)") {
  const Problem p = make_problem(1, 2, 1, 128, 128, 128, DType::bf16);
  const ProblemData in = make_inputs(p);
  const nlohmann::json atomic = flash(false)->prepare(p, in)->extra();
  const bool hopper = atomic["fwd_path"] == "sm90";  // auto takes the Hopper kernels where they run
  CHECK(atomic["bwd_path"] == (hopper ? "sm90" : "sm80"));
  // 128 causal-free rows in one 128-key block: every row is direct, so auto stores them all on the Hopper path.
  CHECK(atomic["dq_mode"] == (hopper ? "float32 TMA reduce-adds, except the 100% of rows whose keys lie in one key "
                                       "block: stored directly by the dK/dV kernel"
                                     : "float32 atomics (added by the dK/dV kernel)"));
  CHECK(flash(false, "auto", "auto", "off")->prepare(p, in)->extra()["dq_mode"] ==
        (hopper ? "float32 TMA reduce-adds (added by the dK/dV kernel)" : "float32 atomics (added by the dK/dV kernel)"));
  if (!hopper) CHECK_THROWS_AS(flash(false, "auto", "auto", "on")->prepare(p, in), std::invalid_argument);
  // The deterministic mode runs on the Hopper kernels too (the Hopper dQ kernel), and sm80 keeps it portable.
  const nlohmann::json det = flash(true)->prepare(p, in)->extra();
  CHECK(det["bwd_path"] == (hopper ? "sm90" : "sm80"));
  CHECK(det["dq_mode"] == (hopper ? "deterministic (Hopper dQ kernel, no atomics)"
                                  : "deterministic (dQ kernel, no atomics)"));
  // Where the Hopper dQ kernel runs, the report says how its CTAs take their tiles (option persistent).
  CHECK(det.contains("dq_schedule") == hopper);
  if (hopper) {
    CHECK(det["dq_schedule"] ==
          "persistent: one CTA per resident slot claiming the query tiles in the TileScheduler's order in turn");
    CHECK(BackendRegistry::create_variant("flash[deterministic=true,persistent=off]")
              ->prepare(p, in)
              ->extra()["dq_schedule"] == "one CTA per query tile, in the TileScheduler's order");
  }
  CHECK_FALSE(atomic.contains("dq_schedule"));
  CHECK(BackendRegistry::create_variant("flash[deterministic=true,bwd_path=sm80]")->prepare(p, in)->extra()["bwd_path"] ==
        "sm80");
  CHECK_THROWS_AS(BackendRegistry::create_variant("flash[bwd_path=sm9]"), InputError);
}

TEST_CASE("flash: unsupported combinations name what is missing") {
  std::unique_ptr<Backend> be = flash(false);
  Problem p = make_problem(1, 2, 1, 64, 64, 160, DType::bf16);  // no instance (ATTNBENCH_HEAD_DIMS)
  CHECK(be->supports(p).reason.find("head_dim 160 not supported") != std::string::npos);
  p = make_problem(1, 2, 1, 64, 64, 64, DType::fp32);
  CHECK(be->supports(p).reason.find("fp32") != std::string::npos);
  p = with_documents(make_problem(1, 2, 1, 64, 64, 64, DType::bf16), {{30, 34}});
  CHECK(be->supports(p).reason.find("varlen") != std::string::npos);
  p = make_problem(1, 2, 1, 64, 64, 64, DType::bf16);
  p.score_mod.kind = ScoreMod::Kind::rel_bias;
  p.score_mod.max_distance = 4;
  CHECK(be->supports(p).reason.find("flex") != std::string::npos);
}

TEST_CASE("flash: sequence lengths 1, 17, 127, 128, 129, 1000, 1013") {
  for (int64_t L : {1, 17, 127, 128, 129, 1000, 1013})
    for (DType t : {DType::fp16, DType::bf16}) {
      const int64_t B = L >= 1000 ? 1 : 2;
      run_case(make_problem(B, 2, 1, L, L, 64, t, Layout::bshd, 10 + static_cast<uint64_t>(L)));
      run_case(with_causal(make_problem(B, 2, 2, L, L, 128, t, Layout::bhsd, 20 + static_cast<uint64_t>(L))));
    }
}

TEST_CASE("flash: the persistent forward walks several tiles per CTA (more tiles than resident CTAs)") {
  // 2 x 12 heads x 1024 positions: 192 tiles of 128 rows, 384 of 64, against 132 or 264 resident CTAs on an
  // H100 / H200; causal, GQA 3:1, ragged padding lengths (tiles of different lengths), a window at head_dim 64.
  // Persistent (the default) and one CTA per tile, both atomic.
  if (!kernels::fwd_sm90_usable()) {
    MESSAGE("skipped: the persistent forward is the Hopper one, which does not run here");
    return;
  }
  const Problem causal = with_causal(make_problem(2, 12, 4, 1024, 1024, 128, DType::bf16, Layout::bshd, 70));
  for (const Problem& p : {causal, with_padding(causal, {1024, 517}, {1024, 517}),
                           with_window(make_problem(2, 12, 4, 1024, 1024, 64, DType::fp16, Layout::bhsd, 71), 200, 0)})
    for (const char* persistent : {"on", "off"})
      check_gpu_case(*flash(false, "auto", "auto", "auto", persistent), p, false);
}

TEST_CASE("flash: sanitizer-sized persistent forward with more tiles than resident CTAs") {
  // 2 x 40 heads x 256 positions: 160 tiles of 128 rows and 320 of 64, against 132 / 264 resident CTAs of
  // the Hopper forward on an H100 / H200, so that CTAs run a second tile (Q, K / V stages and spans reused):
  // small enough for compute-sanitizer (ci/fused_gpu.sh sanitize).
  if (!kernels::fwd_sm90_usable()) {
    MESSAGE("skipped: the persistent forward is the Hopper one, which does not run here");
    return;
  }
  const Problem p = with_causal(make_problem(2, 40, 8, 256, 256, 64, DType::bf16, Layout::bshd, 72));
  for (const char* rows : {"64", "128"}) check_gpu_case(*flash(false, "auto", rows, "auto", "on"), p, false);
}

TEST_CASE("flash: ping-pong only reorders the GEMMs' issue: O and LSE bitwise equal with it and without") {
  // The two consumer warpgroups of a 128-row Hopper CTA issue their GEMMs in turn (pingpong=on) or freely
  // (off, the default): the same products and sums in the same order per row, so the same bits. Causal
  // GQA rows of ragged lengths (warpgroups skipping partial steps: their turns must stay paired, or the CTA
  // hangs), more tiles than resident CTAs (turns across tiles), and a dense full problem; both also against
  // the reference. 64-row CTAs (one warpgroup) have nothing to take turns with: pingpong=on is refused.
  if (!kernels::fwd_sm90_usable()) {
    MESSAGE("skipped: ping-pong is the Hopper forward's, which does not run here");
    return;
  }
  auto variant = [](const std::string& opts) {
    std::unique_ptr<Backend> be = BackendRegistry::create_variant("flash[" + opts + "]");
    REQUIRE(be);
    return be;
  };
  const Problem causal = with_causal(make_problem(2, 12, 4, 1024, 1024, 128, DType::bf16, Layout::bshd, 74));
  for (const Problem& p : {with_padding(causal, {1024, 517}, {1024, 389}),
                           make_problem(2, 8, 8, 2048, 2048, 64, DType::fp16, Layout::bhsd, 75)}) {
    CAPTURE(case_label(p));
    const ProblemData in = make_inputs(p);
    std::unique_ptr<BackendInstance> on = variant("pingpong=on")->prepare(p, in);
    std::unique_ptr<BackendInstance> off = variant("pingpong=off")->prepare(p, in);
    CHECK(on->extra()["fwd_schedule"].get<std::string>().find("ping-pong") != std::string::npos);
    CHECK(off->extra()["fwd_schedule"].get<std::string>().find("ping-pong") == std::string::npos);
    check_forward_same_bits(*on, *off);
    check_gpu_case(*variant("pingpong=on,deterministic=false"), p, false);
  }
  const Problem p = make_problem(1, 2, 2, 256, 256, 128, DType::bf16, Layout::bshd, 76);
  std::string e;
  try {
    variant("pingpong=on,fwd_rows=64")->prepare(p, make_inputs(p));
  } catch (const std::exception& x) {
    e = x.what();
  }
  CHECK(e.find("pingpong=on: ping-pong needs the Hopper forward") != std::string::npos);
}

TEST_CASE("flash / varlen: next_tile=early only moves when a CTA learns its next tile: O and LSE bitwise equal") {
  // The persistent Hopper forward's K / V thread publishes a CTA's next tile after this tile's first K / V
  // loads (early) instead of after its last (late, the default): the same tiles, steps and products per row,
  // so the same bits. Many more tiles than resident CTAs (every CTA walks several: the queue and the two Q
  // buffers turn over), tiles of one key step (publishing between a tile's only loads and none), 128-row
  // dense CTAs and 64-row GQA-packed varlen ones; both against the reference. One CTA per tile is refused.
  if (!kernels::fwd_sm90_usable()) {
    MESSAGE("skipped: next_tile is the persistent Hopper forward's, which does not run here");
    return;
  }
  auto variant = [](const std::string& name) {
    std::unique_ptr<Backend> be = BackendRegistry::create_variant(name);
    REQUIRE(be);
    return be;
  };
  const Problem causal = with_causal(make_problem(4, 16, 4, 2048, 2048, 128, DType::bf16, Layout::bshd, 77));
  const Problem ragged = with_padding(causal, {2048, 1000, 129, 64}, {2048, 1000, 129, 64});
  const Problem docs = with_causal(with_documents(make_problem(2, 16, 4, 2048, 2048, 128, DType::bf16, Layout::bshd,
                                                               79),
                                                  {{300, 200, 548, 1000}, {100, 900, 1048}}));
  const std::pair<const char*, const Problem*> cases[] = {
      {"flash", &causal}, {"flash", &ragged}, {"varlen", &ragged}, {"varlen", &docs}};
  for (const auto& [be, pp] : cases) {
    const Problem& p = *pp;
    CAPTURE(be);
    CAPTURE(case_label(p));
    const ProblemData in = make_inputs(p);
    std::unique_ptr<BackendInstance> early = variant(std::string(be) + "[next_tile=early]")->prepare(p, in);
    std::unique_ptr<BackendInstance> late = variant(std::string(be) + "[next_tile=late]")->prepare(p, in);
    CHECK(early->extra()["fwd_schedule"].get<std::string>().find("next tile published") != std::string::npos);
    CHECK(late->extra()["fwd_schedule"].get<std::string>().find("next tile published") == std::string::npos);
    check_forward_same_bits(*early, *late);
    check_gpu_case(*variant(std::string(be) + "[next_tile=early,deterministic=false]"), p, false);
  }
  const Problem p = make_problem(1, 2, 2, 256, 256, 128, DType::bf16, Layout::bshd, 78);
  std::string e;
  try {
    variant("flash[next_tile=early,persistent=off]")->prepare(p, make_inputs(p));
  } catch (const std::exception& x) {
    e = x.what();
  }
  CHECK(e.find("next_tile=early: publishing the next tile early needs the persistent Hopper forward") !=
        std::string::npos);
}

TEST_CASE("flash: the tile orders only reorder the tiles: deterministic outputs bitwise equal in each") {
  // 2 sequences x 64 heads of 8192 causal positions at head_dim 64: 2 MiB of K / V per head and sequence,
  // so any L2 under 128 MiB holds fewer than the 64 heads and tile_order=l2_groups takes the forward, dQ and
  // dK/dV tiles in head groups (TileScheduler::decode); sequences lists the items sequence by sequence,
  // longest_first interleaves the two sequences' longest tiles. Every tile computes the same values in any
  // order, and with deterministic dQ (no atomics) every output is the same bits. Then each order against
  // the reference on a ragged GQA problem.
  if (!kernels::fwd_sm90_usable()) {
    MESSAGE("skipped: the tile orders are the Hopper kernels', which do not run here");
    return;
  }
  auto variant = [](const std::string& order, bool deterministic) {
    std::unique_ptr<Backend> be = BackendRegistry::create_variant(
        "flash[tile_order=" + order + ",deterministic=" + (deterministic ? "true" : "false") + "]");
    REQUIRE(be);
    return be;
  };
  const Problem p = with_causal(make_problem(2, 64, 64, 8192, 8192, 64, DType::bf16, Layout::bshd, 77));
  const ProblemData in = make_inputs(p);
  std::unique_ptr<BackendInstance> grouped = variant("l2_groups", true)->prepare(p, in);
  const std::string order = grouped->extra()["tile_order"].get<std::string>();
  CAPTURE(order);
  CHECK(order.find("query-head chunks per group") != std::string::npos);
  CHECK(order.find("KV heads per group") != std::string::npos);
  grouped->forward();
  grouped->backward();
  grouped->synchronize();
  const AttentionOutputs want = grouped->read_outputs(true);
  grouped.reset();
  for (const char* other : {"sequences", "longest_first"}) {
    CAPTURE(other);
    std::unique_ptr<BackendInstance> i = variant(other, true)->prepare(p, in);
    CHECK(i->extra()["tile_order"].get<std::string>().find(std::string("tile_order=") + other) != std::string::npos);
    i->forward();
    i->backward();
    i->synchronize();
    check_same_bits(i->read_outputs(true), want, true);
  }
  const Problem ragged = with_padding(with_causal(make_problem(3, 8, 2, 700, 700, 128, DType::bf16, Layout::bshd, 78)),
                                      {700, 129, 431}, {700, 129, 431});
  for (const char* o : {"l2_groups", "sequences", "longest_first"}) check_gpu_case(*variant(o, false), ragged, false);
}

TEST_CASE("flash: Sq != Sk in both directions, both causal alignments") {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{100, 300}, {300, 100}, {1, 129}, {129, 1}, {17, 1000}};
  for (auto [sq, sk] : shapes)
    for (CausalAlign a : {CausalAlign::top_left, CausalAlign::bottom_right})
      for (DType t : {DType::fp16, DType::bf16}) run_case(with_causal(make_problem(2, 2, 1, sq, sk, 64, t, Layout::bshd, 30), a));
  run_case(make_problem(1, 2, 2, 130, 300, 128, DType::bf16, Layout::bhsd, 31));
}

TEST_CASE("flash: GQA 7:1, 4:1 and MQA, head dims 64 and 128") {
  const std::vector<std::pair<int64_t, int64_t>> heads = {{14, 2}, {8, 2}, {7, 1}};
  for (auto [hq, hkv] : heads)
    for (int64_t d : {64, 128}) {
      run_case(with_causal(make_problem(2, hq, hkv, 150, 150, d, DType::bf16, Layout::bshd, 40)));
      run_case(make_problem(1, hq, hkv, 90, 200, d, DType::fp16, Layout::bhsd, 41));
    }
}

TEST_CASE("flash: sliding windows (0,0), (5,2), (-1,0), (64,0) with causal, Sq != Sk") {
  for (DType t : {DType::fp16, DType::bf16}) {
    run_case(with_window(make_problem(1, 2, 1, 300, 300, 64, t, Layout::bshd, 60), 0, 0));
    run_case(with_window(make_problem(1, 2, 1, 300, 300, 128, t, Layout::bhsd, 61), 5, 2));
    run_case(with_window(make_problem(1, 2, 1, 300, 300, 64, t, Layout::bshd, 62), -1, 0));
    run_case(with_causal(with_window(make_problem(1, 2, 1, 257, 257, 64, t, Layout::bshd, 63), 64, -1)));
    run_case(with_window(make_problem(2, 2, 1, 300, 100, 64, t, Layout::bhsd, 64), 32, 0));  // fully masked rows
  }
}

TEST_CASE("flash: padding with fully masked rows, THD layout, prefix_lm") {
  for (DType t : {DType::fp16, DType::bf16})
    for (Layout l : {Layout::bshd, Layout::bhsd, Layout::thd}) {
      Problem p = make_problem(4, 2, 1, 128, 160, 64, t, l, 70);
      p.mask.push_back(PaddingTerm{{120, 37, 128, 0}, {90, 160, 1, 50}});
      run_case(p);
      run_case(with_causal(p));
      run_case(with_causal(p, CausalAlign::top_left));
    }
  for (DType t : {DType::fp16, DType::bf16}) {
    Problem p = make_problem(1, 2, 1, 200, 200, 128, t, Layout::bshd, 75);
    p.mask.push_back(PrefixLmTerm{70});
    run_case(p);
  }
}

TEST_CASE("flash: softcap and alibi") {
  for (DType t : {DType::fp16, DType::bf16}) {
    const Problem base = make_problem(2, 4, 2, 150, 150, 64, t, Layout::bshd, 90);
    run_case(with_score_mod(base, ScoreMod::Kind::softcap, 1.5));
    run_case(with_causal(with_score_mod(base, ScoreMod::Kind::softcap, 30.0)));
    run_case(with_score_mod(base, ScoreMod::Kind::alibi));
    run_case(with_causal(with_score_mod(make_problem(1, 4, 1, 200, 200, 128, t, Layout::bhsd, 91), ScoreMod::Kind::alibi)));
  }
}

TEST_CASE("flash: seeded random problems") {
  Rng rng{20241124};
  for (int n = 0; n < 12; ++n) {
    const int64_t hkv = rng.uniform(1, 2), g = rng.uniform(1, 4);
    const int64_t sq = rng.uniform(1, 400), sk = rng.coin(0.5) ? sq : rng.uniform(1, 400);
    const DType t = rng.coin(0.5) ? DType::bf16 : DType::fp16;
    const Layout l = rng.coin(0.5) ? Layout::bshd : Layout::bhsd;
    Problem p = make_problem(rng.uniform(1, 2), hkv * g, hkv, sq, sk, rng.coin(0.5) ? 64 : 128, t, l,
                             100 + static_cast<uint64_t>(n));
    if (rng.coin(0.6)) p = with_causal(p, rng.coin(0.5) ? CausalAlign::top_left : CausalAlign::bottom_right);
    if (rng.coin(0.3)) p = with_window(p, rng.uniform(-1, 80), rng.uniform(-1, 20));
    if (rng.coin(0.2)) p = with_score_mod(p, ScoreMod::Kind::softcap, 5.0);
    run_case(p);
  }
}

TEST_CASE("flash: atomic dQ matches the deterministic dQ across repeated backwards with many key tiles per row") {
  // 4 x 16 heads x 2048 positions, full attention at head_dim 128: every dQ row gets the adds of 16 key
  // tiles, 1024 dK/dV CTAs over 132 SMs, so the Hopper kernel's TMA reduce-adds from its per-warp dQ tiles
  // (bwd_reduce_dq) overlap step after step. A reduce that read a tile after the next step's stores began
  // would add another row's values: dQ must agree with the deterministic dQ kernel's (no atomics) within
  // the rounding of the sums' order, in each of five backwards. The float64 reference is not needed here.
  if (!kernels::fwd_sm90_usable()) {
    MESSAGE("skipped: the Hopper backward (dQ by TMA reduce-adds) does not run here");
    return;
  }
  const Problem p = make_problem(4, 16, 16, 2048, 2048, 128, DType::bf16, Layout::bshd, 73);
  const ProblemData in = make_inputs(p);
  std::unique_ptr<BackendInstance> det = flash(true)->prepare(p, in);
  std::unique_ptr<BackendInstance> atomic = flash(false, "auto", "auto", "off")->prepare(p, in);
  REQUIRE(det);
  REQUIRE(atomic);
  CHECK(atomic->extra()["dq_mode"] == "float32 TMA reduce-adds (added by the dK/dV kernel)");
  det->forward();
  det->backward();
  det->synchronize();
  const std::vector<double> want = det->read_outputs(true).dq.data;
  double max_abs = 0;
  for (double v : want) max_abs = std::max(max_abs, std::abs(v));
  REQUIRE(max_abs > 0);
  atomic->forward();
  for (int run = 0; run < 5; ++run) {
    atomic->backward();
    atomic->synchronize();
    const std::vector<double> got = atomic->read_outputs(true).dq.data;
    REQUIRE(got.size() == want.size());
    // Two bf16 ulps of the element (2^-7 relative each) and an absolute floor far below max |dQ|.
    int64_t off = 0;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double err = std::abs(got[i] - want[i]);
      worst = std::max(worst, err);
      off += err > std::ldexp(std::abs(want[i]), -6) + 1e-4 * max_abs ? 1 : 0;
    }
    CAPTURE(run);
    CAPTURE(worst);
    CAPTURE(max_abs);
    CHECK(off == 0);
  }
}
