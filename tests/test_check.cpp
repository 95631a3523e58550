// The correctness rule of docs/semantics.md section 7: verdicts on constructed outputs
// (gold itself, lp, perturbations at and beyond the tolerance, NaN-poisoned and
// masked-row violations), the rule constants, slices, ulp, modes and plans.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "harness/check/check.hpp"
#include "harness/model/errors.hpp"
#include "reference/reference.hpp"

using namespace attnbench;
namespace ref = attnbench::reference;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// B=2, Hq=4, Hkv=2, Sq=40 > Sk=30 bottom-right causal: rows 0..9 fully masked.
Problem rule_problem() {
  Problem p;
  p.batch = 2, p.heads_q = 4, p.heads_kv = 2, p.seq_q = 40, p.seq_k = 30;
  p.head_dim = 16, p.head_dim_v = 8, p.dtype = DType::bf16, p.seed = 5;
  p.mask = {CausalTerm{CausalAlign::bottom_right}};
  p.score_mod.kind = ScoreMod::Kind::rel_bias;
  p.score_mod.max_distance = 6;
  return p;
}

struct Fixture {
  Problem p = rule_problem();
  ProblemData in = make_inputs(p);
  AttentionOutputs gold = ref::gold(p, in, true);
  AttentionOutputs lp = ref::lp(p, in, true);
  CheckResult check(const AttentionOutputs& got, const RuleConstants& rule = {},
                    const ref::SliceSet& s = ref::SliceSet::every()) const {
    return check_outputs(p, got, gold, lp, rule, s);
  }
};

const TensorCheck& find(const CheckResult& r, const std::string& name) {
  for (const auto& t : r.tensors)
    if (t.name == name) return t;
  FAIL("no tensor " << name);
  return r.tensors.front();
}

/// Flat index of O[b, h, i, 0].
size_t o_index(const Problem& p, int64_t b, int64_t h, int64_t i) {
  return static_cast<size_t>(((b * p.heads_q + h) * p.seq_q + i) * p.head_dim_v);
}

}  // namespace

TEST_CASE("gold passes against itself with zero errors; lp passes with ratio <= 1") {
  const Fixture f;
  const CheckResult self = f.check(f.gold);
  CHECK(self.pass);
  CHECK(self.mode == "full");
  CHECK(self.scope == "O, LSE, dQ, dK, dV, dBias on all 4 (b, kv-head) slices");
  REQUIRE(self.tensors.size() == 6);
  for (const auto& t : self.tensors) {
    CAPTURE(t.name);
    CHECK(t.pass);
    CHECK(t.max_abs_err == 0.0);
    CHECK(t.ratio == 0.0);
    CHECK(t.lp_max_abs_err > 0.0);  // bf16 rounding shows in every tensor
    CHECK(t.tolerance == doctest::Approx(t.r * t.lp_max_abs_err + t.ulp));
  }
  CHECK(find(self, "O").checked == 2 * 4 * 40 * 8);
  CHECK(find(self, "LSE").checked == 2 * 4 * 40);
  CHECK(find(self, "dK").checked == 2 * 2 * 30 * 16);
  CHECK(find(self, "dBias").checked == 4 * 13);
  CHECK(find(self, "O").r == 2.0);
  CHECK(find(self, "LSE").r == 2.0);
  CHECK(find(self, "dV").r == 3.0);
  CHECK(find(self, "dBias").r == 3.0);
  // ulp of the dtype at max |gold| (float32 for LSE and dBias).
  auto max_finite = [](const std::vector<double>& v) {
    double m = 0;
    for (double x : v)
      if (std::isfinite(x)) m = std::max(m, std::abs(x));
    return m;
  };
  CHECK(find(self, "O").ulp == ulp_of(DType::bf16, max_finite(f.gold.o.data)));
  CHECK(find(self, "dK").ulp == ulp_of(DType::bf16, max_finite(f.gold.dk.data)));
  CHECK(find(self, "LSE").ulp == ulp_of(DType::fp32, max_finite(f.gold.lse.data)));
  // The ulp term is taken at max(max |gold|, kUlpFloorMagnitude = 2^-6).
  CHECK(find(self, "dBias").ulp == ulp_of(DType::fp32, std::max(max_finite(f.gold.dbias), kUlpFloorMagnitude)));

  const CheckResult low = f.check(f.lp);
  CHECK(low.pass);
  for (const auto& t : low.tensors) {
    CAPTURE(t.name);
    CHECK(t.max_abs_err == t.lp_max_abs_err);
    CHECK(t.ratio <= 1.0);
    CHECK(t.ratio > 0.0);
  }
  CHECK(low.worst_ratio <= 1.0);
}

TEST_CASE("an error beyond r * e_lp + ulp fails that tensor only") {
  const Fixture f;
  const TensorCheck base = find(f.check(f.gold), "O");
  AttentionOutputs got = f.gold;
  got.o.data[o_index(f.p, 1, 2, 30) + 3] += 1.01 * base.tolerance;
  const CheckResult r = f.check(got);
  CHECK_FALSE(r.pass);
  CHECK_FALSE(find(r, "O").pass);
  CHECK(find(r, "O").max_abs_err == doctest::Approx(1.01 * base.tolerance));
  CHECK(find(r, "O").ratio > 2.0);
  CHECK(r.worst_ratio == find(r, "O").ratio);
  for (const char* n : {"LSE", "dQ", "dK", "dV", "dBias"}) CHECK(find(r, n).pass);
  got.o.data[o_index(f.p, 1, 2, 30) + 3] = f.gold.o.data[o_index(f.p, 1, 2, 30) + 3] + 0.99 * base.tolerance;
  CHECK(f.check(got).pass);
}

TEST_CASE("r = 2 for forward tensors, r = 3 for gradients, overridable with a reason") {
  const Fixture f;
  const CheckResult base = f.check(f.gold);
  const TensorCheck o = find(base, "O"), dq = find(base, "dQ");
  // The same relative excess, 2.5 e_lp + ulp, on O and on dQ.
  AttentionOutputs got = f.gold;
  got.o.data[o_index(f.p, 0, 1, 20)] += 2.5 * o.lp_max_abs_err + o.ulp;
  got.dq.data[static_cast<size_t>(((0 * 4 + 1) * 40 + 20) * 16)] += 2.5 * dq.lp_max_abs_err + dq.ulp;
  const CheckResult r = f.check(got);
  CHECK_FALSE(find(r, "O").pass);  // 2.5 > r_fwd = 2
  CHECK(find(r, "dQ").pass);       // 2.5 <= r_bwd = 3
  CHECK(r.rule.find("r_fwd=2 (O, LSE) r_bwd=3 (gradients) (docs/semantics.md section 7 default)") != std::string::npos);

  RuleConstants swapped;
  swapped.r_fwd = 3;
  swapped.r_bwd = 2;
  swapped.reason = "test override";
  const CheckResult s = f.check(got, swapped);
  CHECK(find(s, "O").pass);
  CHECK_FALSE(find(s, "dQ").pass);
  CHECK(find(s, "O").r == 3.0);
  CHECK(s.rule.find("override: test override") != std::string::npos);
  RuleConstants silent;
  silent.r_fwd = 4;
  CHECK(f.check(f.gold, silent).rule.find("override without a stated reason") != std::string::npos);
}

TEST_CASE("identically zero gold: the ulp floor admits float32 reduction noise, not more") {
  // A diagonal-only window: every row attends exactly its own key, P = 1 and
  // dS' = P (dP - D) = 0, so gold (and lp) dQ and dK are exactly 0.
  Problem p = rule_problem();
  p.seq_q = p.seq_k = 24;
  p.mask = {SlidingWindowTerm{0, 0}};
  p.score_mod = ScoreMod{};
  const ProblemData in = make_inputs(p);
  const AttentionOutputs gold = ref::gold(p, in, true), lp = ref::lp(p, in, true);
  for (double v : gold.dq.data) REQUIRE(v == 0.0);
  AttentionOutputs got = gold;
  got.dq.data[40] = 1e-6;  // a float32 kernel's cancellation residue
  CheckResult r = check_outputs(p, got, gold, lp, {}, ref::SliceSet::every());
  CHECK(find(r, "dQ").ulp == ulp_of(DType::bf16, kUlpFloorMagnitude));
  CHECK(find(r, "dQ").pass);
  got.dq.data[40] = 1e-3;  // beyond ulp_bf16(2^-6) = 2^-13
  r = check_outputs(p, got, gold, lp, {}, ref::SliceSet::every());
  CHECK_FALSE(find(r, "dQ").pass);
}

TEST_CASE("NaN-poisoned (unwritten) elements fail") {
  const Fixture f;
  AttentionOutputs got = f.gold;
  got.dk.data[17] = std::numeric_limits<double>::quiet_NaN();
  got.lse.data[3 * 40 + 35] = std::numeric_limits<double>::quiet_NaN();
  const CheckResult r = f.check(got);
  CHECK_FALSE(r.pass);
  CHECK(find(r, "dK").unwritten == 1);
  CHECK(find(r, "dK").max_abs_err == 0.0);  // the error itself is fine
  CHECK_FALSE(find(r, "dK").pass);
  CHECK(find(r, "LSE").unwritten == 1);
  CHECK(find(r, "dV").pass);
  // A NaN where gold has -inf (LSE of a fully masked row) is a pattern mismatch.
  got = f.gold;
  got.lse.data[0] = std::numeric_limits<double>::quiet_NaN();
  CHECK(find(f.check(got), "LSE").nan_mismatch == 1);
}

TEST_CASE("the NaN/Inf pattern must equal gold's: -inf LSE on fully masked rows") {
  const Fixture f;
  REQUIRE(f.gold.lse.data[5] == -kInf);  // (b=0, h=0, i=5) is fully masked
  AttentionOutputs got = f.gold;
  got.lse.data[5] = -1e30;  // finite instead of -inf
  CheckResult r = f.check(got);
  CHECK_FALSE(find(r, "LSE").pass);
  CHECK(find(r, "LSE").nan_mismatch == 1);
  got = f.gold;
  got.lse.data[20] = kInf;  // +inf on a normal row
  r = f.check(got);
  CHECK(find(r, "LSE").nan_mismatch == 1);
  CHECK_FALSE(r.pass);
}

TEST_CASE("fully masked rows must be exactly zero in O and dQ") {
  const Fixture f;
  AttentionOutputs got = f.gold;
  got.o.data[o_index(f.p, 1, 3, 9) + 7] = 1e-30;  // row 9 is masked; far below any tolerance
  CheckResult r = f.check(got);
  CHECK_FALSE(find(r, "O").pass);
  CHECK(find(r, "O").masked_nonzero == 1);
  CHECK(find(r, "O").max_abs_err <= find(r, "O").tolerance);
  got = f.gold;
  got.dq.data[static_cast<size_t>(((0 * 4 + 2) * 40 + 4) * 16 + 1)] = -1e-30;
  r = f.check(got);
  CHECK(find(r, "dQ").masked_nonzero == 1);
  CHECK_FALSE(r.pass);
  // -0.0 is zero.
  got = f.gold;
  got.o.data[o_index(f.p, 1, 3, 9)] = -0.0;
  CHECK(f.check(got).pass);
}

TEST_CASE("missing dBias fails; forward-only outputs check O and LSE only") {
  const Fixture f;
  AttentionOutputs got = f.gold;
  got.dbias.clear();
  CheckResult r = f.check(got);
  CHECK_FALSE(find(r, "dBias").pass);
  CHECK(find(r, "dBias").unwritten == 4 * 13);
  AttentionOutputs fwd;
  fwd.o = f.gold.o;
  fwd.lse = f.gold.lse;
  r = f.check(fwd);
  CHECK(r.pass);
  CHECK(r.tensors.size() == 2);
  CHECK(r.scope == "O, LSE on all 4 (b, kv-head) slices");
  AttentionOutputs wrong = f.gold;
  wrong.dk.shape[2] = 31;
  CHECK_THROWS_AS(f.check(wrong), std::invalid_argument);
}

TEST_CASE("sample mode compares the selected slices only") {
  Fixture f;
  const ref::SliceSet s = sample_slices(f.p, 2, 9);
  REQUIRE_FALSE(s.all);
  CHECK(s.contains(0, 0, 2));
  CHECK(s.contains(1, 1, 2));
  CHECK_FALSE(s.contains(0, 1, 2));
  const AttentionOutputs g = ref::gold(f.p, f.in, true, s), l = ref::lp(f.p, f.in, true, s);
  AttentionOutputs got = g;
  // Garbage outside the slices is not looked at; inside it is.
  got.o.data[o_index(f.p, 0, 2, 30)] = 1e9;  // h = 2 -> kv head 1, slice (0, 1) unselected
  CheckResult r = check_outputs(f.p, got, g, l, {}, s);
  CHECK(r.pass);
  CHECK(r.mode == "sample");
  CHECK(r.scope == "O, LSE, dQ, dK, dV on 2 of 4 (b, kv-head) slices (0,0) (1,1); dBias not checked (needs every slice)");
  CHECK(r.tensors.size() == 5);
  CHECK(find(r, "O").checked == 2 * 2 * 40 * 8);
  got.o.data[o_index(f.p, 1, 2, 30)] = 1e9;  // slice (1, 1)
  CHECK_FALSE(check_outputs(f.p, got, g, l, {}, s).pass);
}

TEST_CASE("slice_outputs keeps exactly the checked slices, and a check against them is bit-identical") {
  Fixture f;  // GQA (4 query heads on 2 kv heads), 10 fully masked rows, a learnable bias
  const ref::SliceSet s = sample_slices(f.p, 2, 9);  // (0, 0) and (1, 1) of 4
  REQUIRE_FALSE(s.all);
  const AttentionOutputs g = ref::gold(f.p, f.in, true, s), l = ref::lp(f.p, f.in, true, s);
  const AttentionOutputs gs = slice_outputs(g, f.p, s), ls = slice_outputs(l, f.p, s);
  CHECK(gs.o.shape == std::vector<int64_t>{2, 2, 40, 8});  // [slices, Hq / Hkv, Sq, Dv]
  CHECK(gs.lse.shape == std::vector<int64_t>{2, 2, 40});
  CHECK(gs.dq.shape == std::vector<int64_t>{2, 2, 40, 16});
  CHECK(gs.dk.shape == std::vector<int64_t>{2, 1, 30, 16});  // [slices, 1, Sk, D]
  CHECK(gs.dk.shape == sliced_shape(g.dk.shape, f.p, s));
  // slice (1, 1) is query heads 2, 3 of batch row 1: O[1, 3, 12, :] is entry [1, 1, 12, :]
  CHECK(gs.o.data[((1 * 2 + 1) * 40 + 12) * 8 + 5] == g.o.data[o_index(f.p, 1, 3, 12) + 5]);
  CHECK(gs.dk.data[(1 * 30 + 7) * 16 + 3] == g.dk.data[((1 * 2 + 1) * 30 + 7) * 16 + 3]);  // dK[1, 1, 7, 3]
  for (double x : gs.o.data) CHECK_FALSE(std::isnan(x));  // nothing of the unselected (NaN) slices
  {  // the reference computes the sliced form itself, bit for bit (gold and lp)
    ref::Options sliced;
    sliced.sliced = true;
    const AttentionOutputs gr = ref::gold(f.p, f.in, true, s, sliced), lr = ref::lp(f.p, f.in, true, s, sliced);
    for (const auto& [a, b] : {std::pair{&gr, &gs}, std::pair{&lr, &ls}}) {
      for (const auto& [x, y] : {std::pair{&a->o, &b->o}, std::pair{&a->lse, &b->lse}, std::pair{&a->dq, &b->dq},
                                 std::pair{&a->dk, &b->dk}, std::pair{&a->dv, &b->dv}}) {
        CHECK(x->shape == y->shape);
        CHECK((x->data.size() == y->data.size() &&
               std::memcmp(x->data.data(), y->data.data(), x->data.size() * sizeof(double)) == 0));
      }
    }
    const AttentionOutputs ga = ref::gold(f.p, f.in, true, ref::SliceSet::every(), sliced);
    CHECK(ga.o.shape == std::vector<int64_t>{4, 2, 40, 8});
    CHECK(ga.o.data == f.gold.o.data);
    CHECK(ga.dk.data == f.gold.dk.data);
    CHECK(ga.dbias == f.gold.dbias);
  }

  // Verdicts and every figure equal, passing and failing, on the selected slices:
  // lp itself, a perturbation inside a slice, a fully masked row written, a NaN.
  AttentionOutputs near = l, bad = l, masked = l, unwritten = l;
  near.dq.data[static_cast<size_t>(((0 * 4 + 1) * 40 + 20) * 16 + 2)] += 1e-3;
  bad.o.data[o_index(f.p, 1, 2, 30) + 1] += 0.5;
  masked.o.data[o_index(f.p, 0, 0, 3)] = 0.25;  // row 3 is fully masked
  unwritten.dv.data[static_cast<size_t>(((1 * 2 + 1) * 30 + 29) * 8 + 7)] = std::nan("");
  const std::initializer_list<const AttentionOutputs*> cases = {&l, &near, &bad, &masked, &unwritten};
  for (const AttentionOutputs* got : cases) {
    const CheckResult full = check_outputs(f.p, *got, g, l, {}, s);
    const CheckResult part = check_outputs(f.p, *got, gs, ls, {}, s);
    CHECK(part.to_json() == full.to_json());
  }
  CHECK(check_outputs(f.p, l, gs, ls, {}, s).pass);
  CHECK_FALSE(check_outputs(f.p, bad, gs, ls, {}, s).pass);
  CHECK(check_outputs(f.p, masked, gs, ls, {}, s).failure_class == "fully_masked_rows");

  // Every slice: the same arrays, shapes [B * Hkv, Hq / Hkv, ...]; dBias checked too.
  const ref::SliceSet all = ref::SliceSet::every();
  const AttentionOutputs ga = slice_outputs(f.gold, f.p, all), la = slice_outputs(f.lp, f.p, all);
  CHECK(ga.o.shape == std::vector<int64_t>{4, 2, 40, 8});
  CHECK(ga.o.data == f.gold.o.data);
  CHECK(ga.dbias == f.gold.dbias);
  CHECK(check_outputs(f.p, bad, ga, la, {}, all).to_json() == f.check(bad).to_json());
  CHECK(find(check_outputs(f.p, f.lp, ga, la, {}, all), "dBias").checked == 4 * 13);

  // Forms are not mixed, and a backend's wrong shape is still refused.
  AttentionOutputs mixed = gs;
  mixed.lse = g.lse;
  CHECK_THROWS_AS(check_outputs(f.p, l, mixed, ls, {}, s), std::invalid_argument);
  AttentionOutputs wrong = l;
  wrong.dk.shape[2] = 31;
  CHECK_THROWS_AS(check_outputs(f.p, wrong, gs, ls, {}, s), std::invalid_argument);
  AttentionOutputs not_logical = g;
  not_logical.o.shape = {1, 2};
  CHECK_THROWS_AS(slice_outputs(not_logical, f.p, s), std::invalid_argument);
}

TEST_CASE("large checks compare the tensors at once: every figure in its tensor's place, errors still thrown") {
  // O of 2^20 elements takes the parallel path (one thread per tensor); synthetic
  // gold (the rule does not care where it came from), lp off by 1e-3 everywhere,
  // the backend off by a known amount at one element of each tensor.
  Problem p;
  p.batch = 1, p.heads_q = 2, p.heads_kv = 1, p.seq_q = 4096, p.seq_k = 4096, p.head_dim = 128, p.head_dim_v = 128;
  p.dtype = DType::fp16, p.seed = 3;
  auto tensor = [](std::vector<int64_t> shape, double phase) {
    HostTensor t(std::move(shape));
    for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = std::sin(0.001 * static_cast<double>(i) + phase);
    return t;
  };
  AttentionOutputs gold;
  gold.o = tensor({1, 2, 4096, 128}, 0.1);
  gold.lse = tensor({1, 2, 4096}, 0.2);
  gold.dq = tensor({1, 2, 4096, 128}, 0.3);
  gold.dk = tensor({1, 1, 4096, 128}, 0.4);
  gold.dv = tensor({1, 1, 4096, 128}, 0.5);
  REQUIRE(gold.o.data.size() >= (size_t{1} << 20));
  AttentionOutputs lp = gold, got = gold;
  for (HostTensor* t : {&lp.o, &lp.lse, &lp.dq, &lp.dk, &lp.dv})
    for (double& x : t->data) x += 1e-3;
  const std::vector<std::pair<HostTensor*, double>> offsets = {
      {&got.o, 1e-4}, {&got.lse, 2e-2}, {&got.dq, 3e-4}, {&got.dk, 4e-2}, {&got.dv, 5e-4}};
  for (const auto& [t, d] : offsets) t->data.at(1234) += d;
  const CheckResult r = check_outputs(p, got, gold, lp, {}, ref::SliceSet::every());
  REQUIRE(r.tensors.size() == 5);
  const char* names[] = {"O", "LSE", "dQ", "dK", "dV"};
  for (size_t i = 0; i < 5; ++i) {
    CHECK(r.tensors[i].name == names[i]);
    CHECK(r.tensors[i].max_abs_err == doctest::Approx(offsets[i].second).epsilon(1e-6));
    CHECK(r.tensors[i].pass == (offsets[i].second < 1e-2));  // tolerance ~2-3 x 1e-3
    CHECK(r.tensors[i].checked == static_cast<int64_t>(offsets[i].first->data.size()));
  }
  CHECK_FALSE(r.pass);
  CHECK(check_outputs(p, got, gold, lp, {}, ref::SliceSet::every()).to_json() == r.to_json());  // run to run
  AttentionOutputs wrong = got;
  wrong.dv.shape[2] = 4095;  // thrown from a comparison on another thread
  CHECK_THROWS_AS(check_outputs(p, wrong, gold, lp, {}, ref::SliceSet::every()), std::invalid_argument);
}

TEST_CASE("sample_slices: deterministic, first and last always, every() when it covers all") {
  Problem p = rule_problem();
  p.batch = 8;
  p.heads_q = 16;
  p.heads_kv = 8;
  const ref::SliceSet a = sample_slices(p, 5, 1), b = sample_slices(p, 5, 1);
  CHECK(a.selected == b.selected);
  CHECK(a.count(8, 8) == 5);
  CHECK(a.contains(0, 0, 8));
  CHECK(a.contains(7, 7, 8));
  int differ = 0;
  for (uint64_t seed = 2; seed < 6; ++seed) differ += sample_slices(p, 5, seed).selected != a.selected;
  CHECK(differ >= 3);
  CHECK(sample_slices(p, 1, 1).count(8, 8) == 2);  // at least first and last
  CHECK(sample_slices(p, 64, 1).all);
  CHECK(sample_slices(p, 100, 1).all);
}

TEST_CASE("ulp_of: one unit in the last place of the dtype") {
  CHECK(ulp_of(DType::bf16, 1.0) == std::ldexp(1.0, -7));
  CHECK(ulp_of(DType::bf16, 1.999) == std::ldexp(1.0, -7));
  CHECK(ulp_of(DType::bf16, 3.0) == std::ldexp(1.0, -6));
  CHECK(ulp_of(DType::bf16, -0.3) == std::ldexp(1.0, -9));
  CHECK(ulp_of(DType::fp16, 1.0) == std::ldexp(1.0, -10));
  CHECK(ulp_of(DType::fp16, 1000.0) == 0.5);
  CHECK(ulp_of(DType::fp16, 1e-6) == std::ldexp(1.0, -24));  // subnormal spacing
  CHECK(ulp_of(DType::fp16, 0.0) == std::ldexp(1.0, -24));
  CHECK(ulp_of(DType::fp32, 1.0) == std::ldexp(1.0, -23));
  CHECK(ulp_of(DType::fp32, 0.0) == std::ldexp(1.0, -149));
  CHECK(ulp_of(DType::bf16, 0.0) == std::ldexp(1.0, -133));
  CHECK(ulp_of(DType::fp32, kInf) == kInf);
  // Consistent with round_to: x + ulp/2 rounds back to x (ties to even at 1.0).
  CHECK(round_to(DType::bf16, 1.0 + ulp_of(DType::bf16, 1.0) / 2) == 1.0);
  CHECK(round_to(DType::bf16, 1.0 + ulp_of(DType::bf16, 1.0)) > 1.0);
}

TEST_CASE("check modes parse, print and plan") {
  CHECK(parse_check_mode("auto") == CheckMode::automatic);
  CHECK(parse_check_mode("automatic") == CheckMode::automatic);
  for (CheckMode m : {CheckMode::automatic, CheckMode::full, CheckMode::sample, CheckMode::off})
    CHECK(parse_check_mode(to_string(m)) == m);
  try {
    parse_check_mode("fast");
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("--check: unknown check mode \"fast\"") != std::string::npos);
  }

  const Problem small = rule_problem();
  CheckPlan plan = plan_check(small, CheckMode::automatic, true);
  CHECK(plan.mode == CheckMode::full);
  CHECK(plan.slices.all);
  CHECK(plan.estimated_flops == ref::estimated_flops(small, true));
  CHECK(plan.description.find("full (auto: estimated reference cost") == 0);
  CHECK(plan.description.find("< 2 GFLOP): O, LSE, dQ, dK, dV, dBias on all 4 (b, kv-head) slices") !=
        std::string::npos);

  Problem big;
  big.batch = 4, big.heads_q = 32, big.heads_kv = 8, big.seq_q = big.seq_k = 4096, big.head_dim = 128;
  big.head_dim_v = 128;
  plan = plan_check(big, CheckMode::automatic, true);
  CHECK(plan.mode == CheckMode::sample);
  CHECK(plan.estimated_flops > kAutoFullMaxFlops);
  CHECK(plan.slices.count(4, 8) == kSampleSlices);
  CHECK(plan.description.find("sample (auto: estimated reference cost") == 0);
  CHECK(plan.description.find(">= 2 GFLOP): O, LSE, dQ, dK, dV on 4 of 32 (b, kv-head) slices (0,0)") !=
        std::string::npos);
  CHECK(plan.description.find("(3,7)") != std::string::npos);

  plan = plan_check(big, CheckMode::full, false);
  CHECK(plan.mode == CheckMode::full);
  CHECK(plan.description == "full: O, LSE on all 32 (b, kv-head) slices");
  plan = plan_check(small, CheckMode::sample, true, 8);
  CHECK(plan.mode == CheckMode::full);
  CHECK(plan.description.find("full (the sample covers every slice)") == 0);
  plan = plan_check(big, CheckMode::off, true);
  CHECK(plan.mode == CheckMode::off);
  CHECK(plan.description == "off: outputs not checked");
}

TEST_CASE("CheckResult::to_json carries every field; non-finite numbers become strings") {
  const Fixture f;
  AttentionOutputs got = f.gold;
  got.o.data[o_index(f.p, 1, 1, 25)] = kInf;
  const CheckResult r = f.check(got);
  const nlohmann::json j = r.to_json();
  CHECK(j["pass"] == false);
  CHECK(j["mode"] == "full");
  CHECK(j["scope"] == r.scope);
  CHECK(j["rule"] == r.rule);
  REQUIRE(j["tensors"].size() == 6);
  const auto& o = j["tensors"][0];
  CHECK(o["name"] == "O");
  CHECK(o["pass"] == false);
  CHECK(o["nan_mismatch"] == 1);
  for (const char* k : {"max_abs_err", "mean_abs_err", "rel_l2_err", "lp_max_abs_err", "ulp", "r", "tolerance",
                        "ratio", "checked", "unwritten", "masked_nonzero"})
    CHECK(o.contains(k));
  CHECK(j["tensors"][5]["name"] == "dBias");
  CheckResult inf_ratio;
  inf_ratio.worst_ratio = kInf;
  CHECK(inf_ratio.to_json()["worst_ratio"] == "inf");
}

TEST_CASE("bitwise_equal compares every tensor's bytes") {
  const Fixture f;
  AttentionOutputs a = f.gold;
  CHECK(bitwise_equal(a, f.gold));
  a.dv.data[11] = std::nextafter(a.dv.data[11], kInf);
  CHECK_FALSE(bitwise_equal(a, f.gold));
  a = f.gold;
  a.dbias[0] = -a.dbias[0];
  CHECK_FALSE(bitwise_equal(a, f.gold));
  a = f.gold;
  a.o.data[0] = a.o.data[1] = std::numeric_limits<double>::quiet_NaN();
  AttentionOutputs b = a;
  CHECK(bitwise_equal(a, b));  // same NaN bits
  b.dq = HostTensor{};
  CHECK_FALSE(bitwise_equal(a, b));
}

TEST_CASE("fully masked rows explained: a convention difference is told from wrong numbers") {
  const Fixture f;
  // 2 batches x 4 heads x rows 0..9 fully masked = 80 rows.
  const CheckResult ok = f.check(f.gold);
  CHECK(ok.pass);
  CHECK(ok.failure_class.empty());
  CHECK(ok.fully_masked_rows == 80);
  CHECK(find(ok, "LSE").masked_checked == 80);
  CHECK(find(ok, "O").masked_checked == 80 * f.p.head_dim_v);

  // Convention only: LSE +inf instead of -inf on every fully masked row, and O = 0.5
  // on one of them; every other row exact.
  AttentionOutputs conv = f.gold;
  int64_t flipped = 0;
  for (double& v : conv.lse.data)
    if (v == -kInf) v = kInf, ++flipped;
  REQUIRE(flipped == 80);
  for (int64_t d = 0; d < f.p.head_dim_v; ++d) conv.o.data[o_index(f.p, 1, 2, 3) + static_cast<size_t>(d)] = 0.5;
  CheckResult c = f.check(conv);
  CHECK_FALSE(c.pass);  // status stays fail
  CHECK(c.failure_class == "fully_masked_rows");
  CHECK(find(c, "LSE").masked_rows_mismatch == 80);
  CHECK(find(c, "O").masked_rows_mismatch == f.p.head_dim_v);
  CHECK(find(c, "O").rest_pass);
  CHECK(find(c, "LSE").rest_pass);
  CHECK(find(c, "O").rest_max_abs_err == 0.0);
  CHECK(c.failure_detail.find("numerics fine") != std::string::npos);
  CHECK(c.failure_detail.find("LSE not -inf on 80 of 80 rows") != std::string::npos);
  CHECK(c.failure_detail.find("O != 0 on 8 of 640 elements") != std::string::npos);
  const auto j = c.to_json();
  CHECK(j["failure_class"] == "fully_masked_rows");
  CHECK(j["fully_masked_rows"] == 80);

  // Wrong numbers on a row that attends keys: "numerics", also when masked rows differ too.
  AttentionOutputs wrong = conv;
  wrong.o.data[o_index(f.p, 0, 1, 30)] += 0.25;
  CheckResult w = f.check(wrong);
  CHECK(w.failure_class == "numerics");
  CHECK_FALSE(find(w, "O").rest_pass);
  CHECK(w.failure_detail.find("wrong numbers") != std::string::npos);
  CHECK(w.failure_detail.find("O (ratio") != std::string::npos);
  CHECK(w.failure_detail.find("fully masked rows also differ") != std::string::npos);
  // A NaN on a normal row is wrong numbers too, not a convention.
  AttentionOutputs nan = f.gold;
  nan.dq.data[static_cast<size_t>(((1 * 4 + 0) * 40 + 25) * 16 + 3)] = std::nan("");
  CHECK(f.check(nan).failure_class == "numerics");
}

TEST_CASE("count_nonfinite: NaN and +-inf per tensor, LSE -inf excepted") {
  const Fixture f;
  AttentionOutputs got = f.gold;
  nlohmann::json n = count_nonfinite(got);
  CHECK(n["O"] == 0);
  CHECK(n["LSE"] == 0);  // the 80 -inf rows are the convention
  CHECK(n["dQ"] == 0);
  got.lse.data[3] = kInf;
  got.o.data[0] = std::nan("");
  got.dk.data[1] = -kInf;
  n = count_nonfinite(got);
  CHECK(n["LSE"] == 1);
  CHECK(n["O"] == 1);
  CHECK(n["dK"] == 1);
  AttentionOutputs fwd;
  fwd.o = got.o;
  fwd.lse = got.lse;
  CHECK_FALSE(count_nonfinite(fwd).contains("dQ"));
}
