// One GPU backend case against the float64 reference under the correctness rule
// (docs/semantics.md "Correctness rule"), shared by the GPU suites of the fused
// backends: poison -> forward -> backward -> check O, LSE, dQ, dK, dV (and dBias),
// no NaN anywhere, fully masked rows exactly 0 with LSE = -inf, a loose relative
// bound independent of the rule, and a second run compared bitwise.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "harness/backend/backend.hpp"
#include "harness/check/check.hpp"
#include "harness/model/mask.hpp"
#include "harness/model/problem.hpp"
#include "harness/model/tensors.hpp"
#include "reference/reference.hpp"

namespace attnbench::test {

inline std::string case_label(const Problem& p) {
  std::ostringstream os;
  os << to_string(p.dtype) << " " << to_string(p.layout) << " B" << p.batch << " Hq" << p.heads_q << " Hkv"
     << p.heads_kv << " Sq" << p.seq_q << " Sk" << p.seq_k << " D" << p.head_dim << "/" << p.head_dim_v
     << " mask=" << describe_mask(p) << " mod=" << describe_score_mod(p.score_mod) << " seed=" << p.seed;
  return os.str();
}

inline bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

/// O and LSE of `a` and `b` bitwise equal; with `grads` also dQ, dK, dV and dBias
/// (empty tensors, e.g. no learnable bias, compare equal).
inline void check_same_bits(const AttentionOutputs& a, const AttentionOutputs& b, bool grads) {
  CHECK(same_bits(a.o.data, b.o.data));
  CHECK(same_bits(a.lse.data, b.lse.data));
  if (!grads) return;
  CHECK(same_bits(a.dq.data, b.dq.data));
  CHECK(same_bits(a.dk.data, b.dk.data));
  CHECK(same_bits(a.dv.data, b.dv.data));
  CHECK(same_bits(a.dbias, b.dbias));
}

inline int64_t count_nonfinite(const std::vector<double>& v, bool nan_only) {
  int64_t n = 0;
  for (double x : v) n += (nan_only ? std::isnan(x) : !std::isfinite(x)) ? 1 : 0;
  return n;
}

/// ||x - g|| <= bound * ||g|| + 4 * ||lp - g|| + floor * sqrt(n) over entries where
/// gold is finite; floor is one ulp of the dtype at 2^-6 (the rule's ulp floor), for
/// tensors whose gold is exactly 0 (e.g. dQ, dK of rows that see a single key).
inline bool loosely_close(const std::vector<double>& x, const std::vector<double>& g, const std::vector<double>& lp,
                          DType t) {
  const double bound = t == DType::bf16 ? 0.05 : (t == DType::fp16 ? 0.01 : 1e-4);
  const double floor = t == DType::bf16 ? std::ldexp(1.0, -13) : (t == DType::fp16 ? std::ldexp(1.0, -16) : 0.0);
  double err = 0, norm = 0, lp_err = 0, n = 0;
  for (size_t i = 0; i < x.size() && i < g.size() && i < lp.size(); ++i) {
    if (!std::isfinite(g[i])) continue;
    n += 1;
    err += (x[i] - g[i]) * (x[i] - g[i]);
    norm += g[i] * g[i];
    lp_err += (lp[i] - g[i]) * (lp[i] - g[i]);
  }
  return std::sqrt(err) <= bound * std::sqrt(norm) + 4 * std::sqrt(lp_err) + floor * std::sqrt(n);
}

/// Rows that break the fully-masked-row convention (docs/semantics.md): a row the
/// mask leaves empty must have LSE = -inf and O = dQ = 0 exactly; any other row a
/// finite LSE. `masked_rows` receives the number of empty (b, h, i) rows.
inline int64_t bad_masked_rows(const Problem& p, const AttentionOutputs& got, int64_t* masked_rows) {
  MaskArrays arrays;
  const MaskDesc md = make_mask_desc(p, arrays);
  int64_t bad_rows = 0;
  *masked_rows = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.seq_q; ++i) {
      bool any = false;
      for (int64_t j = 0; j < p.seq_k && !any; ++j) any = mask_allowed(md, b, 0, i, j);
      for (int64_t h = 0; h < p.heads_q; ++h) {
        const double lse = got.lse.data[static_cast<size_t>((b * p.heads_q + h) * p.seq_q + i)];
        if (any) {
          bad_rows += std::isfinite(lse) ? 0 : 1;
          continue;
        }
        ++*masked_rows;
        bool ok = lse == -INFINITY;
        for (int64_t d = 0; d < p.head_dim_v; ++d) ok = ok && got.o.at4(b, h, i, d) == 0.0;
        for (int64_t d = 0; d < p.head_dim; ++d) ok = ok && got.dq.at4(b, h, i, d) == 0.0;
        bad_rows += ok ? 0 : 1;
      }
    }
  return bad_rows;
}

/// Run `p` on `be` and check everything above. `expect_bitwise`: the second run
/// must equal the first bit for bit (deterministic backends); otherwise it must
/// pass the rule again.
inline void check_gpu_case(Backend& be, const Problem& p, bool expect_bitwise) {
  INFO(case_label(p));
  REQUIRE_NOTHROW(validate(p));
  const Support sup = be.supports(p);
  REQUIRE_MESSAGE(sup.ok, sup.reason);
  const ProblemData in = make_inputs(p);
  std::unique_ptr<BackendInstance> inst = be.prepare(p, in);
  REQUIRE(inst);
  CHECK(inst->stream() != nullptr);
  CHECK(inst->executed_pairs() > 0);

  inst->poison_outputs();
  inst->forward();
  inst->backward();
  inst->synchronize();
  const AttentionOutputs got = inst->read_outputs(true);
  REQUIRE(got.o.shape == std::vector<int64_t>{p.batch, p.heads_q, p.seq_q, p.head_dim_v});
  REQUIRE(got.lse.shape == std::vector<int64_t>{p.batch, p.heads_q, p.seq_q});
  REQUIRE(got.dq.shape == std::vector<int64_t>{p.batch, p.heads_q, p.seq_q, p.head_dim});
  REQUIRE(got.dk.shape == std::vector<int64_t>{p.batch, p.heads_kv, p.seq_k, p.head_dim});
  REQUIRE(got.dv.shape == std::vector<int64_t>{p.batch, p.heads_kv, p.seq_k, p.head_dim_v});
  CHECK(count_nonfinite(got.o.data, false) == 0);
  CHECK(count_nonfinite(got.lse.data, true) == 0);
  CHECK(count_nonfinite(got.dq.data, false) == 0);
  CHECK(count_nonfinite(got.dk.data, false) == 0);
  CHECK(count_nonfinite(got.dv.data, false) == 0);
  if (p.has_learnable_bias()) {
    REQUIRE(got.dbias.size() == static_cast<size_t>(p.bias_numel()));
    CHECK(count_nonfinite(got.dbias, false) == 0);
  }

  // Fully masked rows (from the mask itself): LSE = -inf, O and dQ exactly 0.
  MaskArrays arrays;
  const MaskDesc md = make_mask_desc(p, arrays);
  int64_t masked_rows = 0;
  const int64_t bad_rows = bad_masked_rows(p, got, &masked_rows);
  CAPTURE(masked_rows);
  CHECK(bad_rows == 0);
  // Keys no query row attends (in any head of their group): dK = dV = 0 exactly.
  int64_t lonely_keys = 0, bad_keys = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t j = 0; j < p.seq_k; ++j) {
      bool seen = false;
      for (int64_t i = 0; i < p.seq_q && !seen; ++i) seen = mask_allowed(md, b, 0, i, j);
      if (seen) continue;
      ++lonely_keys;
      for (int64_t g = 0; g < p.heads_kv; ++g)
        for (int64_t d = 0; d < p.head_dim; ++d)
          bad_keys += (got.dk.at4(b, g, j, d) != 0.0 || got.dv.at4(b, g, j, d) != 0.0) ? 1 : 0;
    }
  CAPTURE(lonely_keys);
  CHECK(bad_keys == 0);

  const AttentionOutputs gold = reference::gold(p, in, true);
  const AttentionOutputs lp = reference::lp(p, in, true);
  const CheckResult r = check_outputs(p, got, gold, lp, be.rule(), reference::SliceSet::every());
  INFO("check: " << r.to_json().dump());
  CHECK(r.pass);
  CHECK(loosely_close(got.o.data, gold.o.data, lp.o.data, p.dtype));
  CHECK(loosely_close(got.dq.data, gold.dq.data, lp.dq.data, p.dtype));
  CHECK(loosely_close(got.dk.data, gold.dk.data, lp.dk.data, p.dtype));
  CHECK(loosely_close(got.dv.data, gold.dv.data, lp.dv.data, p.dtype));
  if (p.has_learnable_bias()) CHECK(loosely_close(got.dbias, gold.dbias, lp.dbias, p.dtype));

  // Second run (backward twice: nothing may accumulate across calls).
  inst->poison_outputs();
  inst->forward();
  inst->backward();
  inst->backward();
  const AttentionOutputs again = inst->read_outputs(true);
  check_same_bits(got, again, expect_bitwise);
  if (!expect_bitwise) {
    const CheckResult r2 = check_outputs(p, again, gold, lp, be.rule(), reference::SliceSet::every());
    INFO("second run: " << r2.to_json().dump());
    CHECK(r2.pass);
  }
}

}  // namespace attnbench::test
