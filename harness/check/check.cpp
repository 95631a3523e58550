#include "harness/check/check.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <stdexcept>

#include "harness/model/errors.hpp"
#include "harness/model/mask_desc.hpp"
#include "harness/model/thread_pool.hpp"

namespace attnbench {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string fmt_g(double v, int digits = 3) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

/// JSON number, or "inf" / "-inf" / "nan" (JSON has no non-finite numbers).
nlohmann::json num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

/// 0 finite, 1 NaN, 2 +inf, 3 -inf.
int value_class(double v) {
  if (std::isnan(v)) return 1;
  if (std::isinf(v)) return v > 0 ? 2 : 3;
  return 0;
}

/// Running comparison of one tensor.
struct Accum {
  TensorCheck t;
  double sum_abs = 0, sum_sq_diff = 0, sum_sq_gold = 0, max_gold = 0;
  int64_t finite_pairs = 0;

  /// One element: backend x, gold g, lp l. `masked_row`: the element lies on a
  /// fully masked query row (gold LSE -inf); `zero_there`: the convention there is
  /// exactly 0 (O, dQ) rather than gold's value (LSE: -inf).
  void add(double x, double g, double l, bool masked_row, bool zero_there) {
    ++t.checked;
    const int cx = value_class(x), cg = value_class(g);
    if (cg == 0 && cx == 1) ++t.unwritten;
    else if (cx != cg) ++t.nan_mismatch;
    if (masked_row && zero_there && !(x == 0.0)) ++t.masked_nonzero;
    if (masked_row) {
      ++t.masked_checked;
      if (zero_there ? !(x == 0.0) : cx != cg) ++t.masked_rows_mismatch;
    } else {
      if (cg == 0 && cx == 1) ++rest_unwritten;
      else if (cx != cg) ++rest_nan_mismatch;
    }
    if (cg == 0) max_gold = std::max(max_gold, std::abs(g));
    if (cg == 0 && value_class(l) == 0) t.lp_max_abs_err = std::max(t.lp_max_abs_err, std::abs(l - g));
    if (cg == 0 && cx == 0) {
      const double d = std::abs(x - g);
      t.max_abs_err = std::max(t.max_abs_err, d);
      if (!masked_row) t.rest_max_abs_err = std::max(t.rest_max_abs_err, d);
      sum_abs += d;
      sum_sq_diff += d * d;
      sum_sq_gold += g * g;
      ++finite_pairs;
    }
  }
  int64_t rest_unwritten = 0, rest_nan_mismatch = 0;

  TensorCheck finish(DType ulp_type, double r) {
    t.mean_abs_err = finite_pairs ? sum_abs / static_cast<double>(finite_pairs) : 0.0;
    t.rel_l2_err = sum_sq_gold > 0 ? std::sqrt(sum_sq_diff / sum_sq_gold) : std::sqrt(sum_sq_diff);
    // ulp at max |gold|, never below kUlpFloorMagnitude (check.hpp says why).
    t.ulp = ulp_of(ulp_type, std::max(max_gold, kUlpFloorMagnitude));
    t.r = r;
    t.tolerance = r * t.lp_max_abs_err + t.ulp;
    t.ratio = t.max_abs_err / std::max(t.lp_max_abs_err, t.ulp);
    t.pass = t.max_abs_err <= t.tolerance && t.nan_mismatch == 0 && t.unwritten == 0 && t.masked_nonzero == 0;
    t.rest_pass = t.rest_max_abs_err <= t.tolerance && rest_nan_mismatch == 0 && rest_unwritten == 0;
    return t;
  }
};

std::string show_shape(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

/// Heads of a [B, H, ...] output tensor: Hq for O, LSE, dQ, Hkv for dK, dV.
int64_t heads_of(const Problem& p, bool query_heads) { return query_heads ? p.heads_q : p.heads_kv; }

/// Where gold and lp hold the (b, h) block of a [B, H, ...] tensor: at the
/// backend's offset (logical shapes), or in sliced tensors (slice_outputs) at the
/// block of its slice's rank among the selected ones.
struct GoldIndex {
  bool sliced = false;
  int64_t per_slice = 1;      ///< heads per slice: H / Hkv
  std::vector<int64_t> rank;  ///< per (b, g): its rank among the selected slices, -1 if not selected
  GoldIndex(bool s, const Problem& p, const reference::SliceSet& slices, bool query_heads) : sliced(s) {
    if (!sliced) return;
    per_slice = heads_of(p, query_heads) / p.heads_kv;
    rank.assign(static_cast<size_t>(p.batch * p.heads_kv), -1);
    int64_t n = 0;
    for (int64_t i = 0; i < p.batch * p.heads_kv; ++i)
      if (slices.contains(i / p.heads_kv, i % p.heads_kv, p.heads_kv)) rank[static_cast<size_t>(i)] = n++;
  }
  /// The offset in gold / lp of head h (of kv head g) in batch row b, `inner` elements a head.
  int64_t base(int64_t b, int64_t g, int64_t h, int64_t H, int64_t inner, const Problem& p) const {
    if (!sliced) return (b * H + h) * inner;
    return (rank[static_cast<size_t>(b * p.heads_kv + g)] * per_slice + (h - g * per_slice)) * inner;
  }
};

/// Shapes of one tensor: got, gold and lp equal (logical gold), or got [B, H, ...]
/// and gold, lp its sliced_shape (sliced gold). Throws std::invalid_argument.
void require_shape(const HostTensor& got, const HostTensor& gold, const HostTensor& lp, const char* name,
                   bool sliced, const Problem& p, const reference::SliceSet& slices, bool query_heads) {
  const bool full_ok = !sliced && got.shape == gold.shape;
  const bool sliced_ok = sliced && got.shape.size() >= 2 && got.shape[0] == p.batch &&
                         got.shape[1] == heads_of(p, query_heads) && gold.shape == sliced_shape(got.shape, p, slices);
  if ((!full_ok && !sliced_ok) || lp.shape != gold.shape || got.data.size() != static_cast<size_t>(got.numel()) ||
      gold.data.size() != static_cast<size_t>(gold.numel()) || lp.data.size() != gold.data.size())
    throw std::invalid_argument(std::string("check_outputs: ") + name + " shape " + show_shape(got.shape) +
                                " (lp " + show_shape(lp.shape) + ") differs from gold " + show_shape(gold.shape) +
                                (sliced ? " (gold sliced to the checked slices)" : ""));
}

/// Compare a [B, H, ...] tensor over the selected slices. `query_heads` maps
/// h to its kv head (H = Hq) for slice selection; with `row_lse` (gold LSE, in
/// gold's form), rows whose LSE is -inf are fully masked (`row_len` elements per
/// row): there the convention is exactly 0 when `zero_there` (O, dQ), else gold's
/// class (LSE -inf). `sliced`: gold and lp hold the selected slices only.
TensorCheck compare_heads(const char* name, const HostTensor& got, const HostTensor& gold, const HostTensor& lp,
                          const Problem& p, const reference::SliceSet& slices, bool sliced, bool query_heads,
                          const HostTensor* row_lse, int64_t row_len, DType ulp_type, double r,
                          bool zero_there = true) {
  require_shape(got, gold, lp, name, sliced, p, slices, query_heads);
  const GoldIndex at(sliced, p, slices, query_heads);
  Accum acc;
  acc.t.name = name;
  const int64_t B = got.shape.at(0), H = got.shape.at(1);
  const int64_t inner = got.numel() / (B * H);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = query_heads ? h / p.group_size() : h;
      if (!slices.contains(b, g, p.heads_kv)) continue;
      const size_t base = static_cast<size_t>((b * H + h) * inner);
      const size_t gbase = static_cast<size_t>(at.base(b, g, h, H, inner, p));
      for (int64_t e = 0; e < inner; ++e) {
        const size_t idx = base + static_cast<size_t>(e), gidx = gbase + static_cast<size_t>(e);
        const bool masked = row_lse && row_lse->data[gidx / static_cast<size_t>(row_len)] == -kInf;
        acc.add(got.data[idx], gold.data[gidx], lp.data[gidx], masked, zero_there);
      }
    }
  }
  return acc.finish(ulp_type, r);
}

/// Run every comparison and return their results in order; with more than one
/// and at least kParallelCompareElements elements in O, the first runs on this
/// thread and the others each on a std::async thread. The first exception in order
/// is rethrown once every comparison has ended.
constexpr int64_t kParallelCompareElements = int64_t{1} << 20;
std::vector<TensorCheck> compare_all(const std::vector<std::function<TensorCheck()>>& compares, int64_t o_elements) {
  std::vector<TensorCheck> out;
  if (compares.size() < 2 || o_elements < kParallelCompareElements || hardware_threads() < 2) {
    for (const auto& c : compares) out.push_back(c());
    return out;
  }
  std::vector<std::future<TensorCheck>> rest;
  for (size_t i = 1; i < compares.size(); ++i) rest.push_back(std::async(std::launch::async, compares[i]));
  std::exception_ptr first_error;
  try {
    out.push_back(compares[0]());
  } catch (...) {
    first_error = std::current_exception();
  }
  for (auto& f : rest) {
    try {
      TensorCheck t = f.get();
      if (!first_error) out.push_back(std::move(t));
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
  return out;
}

std::string rule_text(const RuleConstants& rule) {
  const RuleConstants def;
  std::string s = "pass iff max|X - gold| <= r * max|X_lp - gold| + ulp(max(max|gold|, 2^-6)); r_fwd=" + fmt_g(rule.r_fwd) +
                  " (O, LSE) r_bwd=" + fmt_g(rule.r_bwd) + " (gradients)";
  if (!rule.reason.empty()) return s + " (override: " + rule.reason + ")";
  if (rule.r_fwd != def.r_fwd || rule.r_bwd != def.r_bwd) return s + " (override without a stated reason)";
  return s + " (docs/semantics.md section 7 default)";
}

}  // namespace

CheckMode parse_check_mode(const std::string& s) {
  if (s == "auto" || s == "automatic") return CheckMode::automatic;
  if (s == "full") return CheckMode::full;
  if (s == "sample") return CheckMode::sample;
  if (s == "off") return CheckMode::off;
  throw InputError("", "--check", "unknown check mode \"" + s + "\" (expected auto, full, sample or off)");
}

const char* to_string(CheckMode m) {
  switch (m) {
    case CheckMode::automatic: return "auto";
    case CheckMode::full: return "full";
    case CheckMode::sample: return "sample";
    case CheckMode::off: return "off";
  }
  return "?";
}

nlohmann::json CheckResult::to_json() const {
  nlohmann::json j;
  j["pass"] = pass;
  j["mode"] = mode;
  j["scope"] = scope;
  j["rule"] = rule;
  j["worst_ratio"] = num(worst_ratio);
  j["tensors"] = nlohmann::json::array();
  for (const auto& t : tensors) {
    j["tensors"].push_back({{"name", t.name},
                            {"pass", t.pass},
                            {"max_abs_err", num(t.max_abs_err)},
                            {"mean_abs_err", num(t.mean_abs_err)},
                            {"rel_l2_err", num(t.rel_l2_err)},
                            {"lp_max_abs_err", num(t.lp_max_abs_err)},
                            {"ulp", num(t.ulp)},
                            {"r", num(t.r)},
                            {"tolerance", num(t.tolerance)},
                            {"ratio", num(t.ratio)},
                            {"checked", t.checked},
                            {"nan_mismatch", t.nan_mismatch},
                            {"unwritten", t.unwritten},
                            {"masked_nonzero", t.masked_nonzero},
                            {"masked_checked", t.masked_checked},
                            {"masked_rows_mismatch", t.masked_rows_mismatch},
                            {"rest_max_abs_err", num(t.rest_max_abs_err)},
                            {"rest_pass", t.rest_pass}});
  }
  j["fully_masked_rows"] = fully_masked_rows;
  if (!failure_class.empty()) {
    j["failure_class"] = failure_class;
    j["failure_detail"] = failure_detail;
  }
  return j;
}

reference::SliceSet sample_slices(const Problem& p, int64_t max_slices, uint64_t seed) {
  const int64_t n = p.batch * p.heads_kv;
  const int64_t k = std::max<int64_t>(2, max_slices);
  if (k >= n) return reference::SliceSet::every();
  std::vector<std::pair<uint64_t, int64_t>> ranked;
  for (int64_t idx = 1; idx + 1 < n; ++idx)
    ranked.push_back({splitmix64(seed ^ splitmix64(static_cast<uint64_t>(idx))), idx});
  std::sort(ranked.begin(), ranked.end());
  reference::SliceSet s;
  s.all = false;
  s.selected.assign(static_cast<size_t>(n), 0);
  s.selected.front() = s.selected.back() = 1;
  for (int64_t r = 0; r < k - 2; ++r) s.selected[static_cast<size_t>(ranked[static_cast<size_t>(r)].second)] = 1;
  return s;
}

std::string describe_scope(const Problem& p, const reference::SliceSet& slices, bool grads) {
  const int64_t n = p.batch * p.heads_kv;
  const bool bias = grads && p.has_learnable_bias();
  std::string s = grads ? "O, LSE, dQ, dK, dV" : "O, LSE";
  if (bias && slices.all) s += ", dBias";
  if (slices.all) {
    s += " on all " + std::to_string(n) + " (b, kv-head) slices";
  } else {
    s += " on " + std::to_string(slices.count(p.batch, p.heads_kv)) + " of " + std::to_string(n) +
         " (b, kv-head) slices";
    int listed = 0;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t g = 0; g < p.heads_kv; ++g)
        if (slices.contains(b, g, p.heads_kv)) {
          if (listed++ == 16) s += " ...";
          if (listed <= 16) s += " (" + std::to_string(b) + "," + std::to_string(g) + ")";
        }
    if (bias) s += "; dBias not checked (needs every slice)";
  }
  return s;
}

CheckPlan plan_check(const Problem& p, CheckMode requested, bool grads, int64_t max_slices) {
  CheckPlan plan;
  if (requested == CheckMode::off) {
    plan.mode = CheckMode::off;
    plan.description = "off: outputs not checked";
    return plan;
  }
  plan.estimated_flops = reference::estimated_flops(p, grads);
  CheckMode mode = requested;
  std::string why;
  if (requested == CheckMode::automatic) {
    const bool small = plan.estimated_flops < kAutoFullMaxFlops;
    mode = small ? CheckMode::full : CheckMode::sample;
    why = "auto: estimated reference cost " + fmt_g(plan.estimated_flops / 1e9) + " GFLOP " +
          (small ? "< " : ">= ") + fmt_g(kAutoFullMaxFlops / 1e9) + " GFLOP";
  }
  if (mode == CheckMode::sample) {
    plan.slices = sample_slices(p, max_slices, p.seed);
    if (plan.slices.all) {
      mode = CheckMode::full;
      why += std::string(why.empty() ? "" : "; ") + "the sample covers every slice";
    }
  }
  plan.mode = mode;
  plan.description = std::string(to_string(mode)) + (why.empty() ? "" : " (" + why + ")") + ": " +
                     describe_scope(p, plan.slices, grads);
  return plan;
}

CheckResult check_outputs(const Problem& p, const AttentionOutputs& got, const AttentionOutputs& gold,
                          const AttentionOutputs& lp, const RuleConstants& rule,
                          const reference::SliceSet& slices) {
  const bool grads = got.has_grads();
  if (grads && (!gold.has_grads() || !lp.has_grads()))
    throw std::invalid_argument("check_outputs: the backend has gradients but gold or lp was run forward-only");
  CheckResult res;
  res.mode = slices.all ? "full" : "sample";
  res.scope = describe_scope(p, slices, grads);
  res.rule = rule_text(rule);

  const int64_t dv = p.head_dim_v, dqk = p.head_dim;
  // Sliced gold (slice_outputs) when gold's O is not [B, Hq, ...]; every tensor must
  // then be sliced (LSE marks the fully masked rows of O and dQ by gold's index).
  // (With one kv head and every slice the two forms are the same array.)
  const bool sliced = !(gold.o.shape.size() >= 2 && gold.o.shape[0] == p.batch && gold.o.shape[1] == p.heads_q);
  // One comparison per tensor, each in its own order (so every figure is the
  // same however they are run), the tensors at once: the first on this thread,
  // the others on threads of their own (not a pool's: a check that overlaps the
  // next row must not hold the pass pool its prepare() uses).
  std::vector<std::function<TensorCheck()>> compares;
  auto add = [&](const char* name, const HostTensor AttentionOutputs::*t, bool query_heads, bool by_lse,
                 int64_t row_len, DType ulp_type, double r, bool zero_there = true) {
    compares.push_back([&, name, t, query_heads, by_lse, row_len, ulp_type, r, zero_there] {
      return compare_heads(name, got.*t, gold.*t, lp.*t, p, slices, sliced, query_heads, by_lse ? &gold.lse : nullptr,
                           row_len, ulp_type, r, zero_there);
    });
  };
  add("O", &AttentionOutputs::o, true, true, dv, p.dtype, rule.r_fwd);
  add("LSE", &AttentionOutputs::lse, true, true, 1, DType::fp32, rule.r_fwd, /*zero_there=*/false);
  if (grads) {
    add("dQ", &AttentionOutputs::dq, true, true, dqk, p.dtype, rule.r_bwd);
    add("dK", &AttentionOutputs::dk, false, false, 1, p.dtype, rule.r_bwd);
    add("dV", &AttentionOutputs::dv, false, false, 1, p.dtype, rule.r_bwd);
  }
  res.tensors = compare_all(compares, static_cast<int64_t>(got.o.data.size()));
  if (grads) {
    if (p.has_learnable_bias() && slices.all) {
      const size_t n = static_cast<size_t>(p.bias_numel());
      if (gold.dbias.size() != n || lp.dbias.size() != n)
        throw std::invalid_argument("check_outputs: gold or lp has no dBias of " + std::to_string(n) + " elements");
      Accum acc;
      acc.t.name = "dBias";
      if (got.dbias.empty()) {
        acc.t.checked = acc.t.unwritten = static_cast<int64_t>(n);
        for (size_t i = 0; i < n; ++i)
          if (std::isfinite(gold.dbias[i])) acc.max_gold = std::max(acc.max_gold, std::abs(gold.dbias[i]));
      } else if (got.dbias.size() != n) {
        throw std::invalid_argument("check_outputs: dBias has " + std::to_string(got.dbias.size()) +
                                    " elements, gold " + std::to_string(n));
      } else {
        for (size_t i = 0; i < n; ++i) acc.add(got.dbias[i], gold.dbias[i], lp.dbias[i], false, false);
      }
      res.tensors.push_back(acc.finish(DType::fp32, rule.r_bwd));
    }
  }
  res.pass = true;
  for (const auto& t : res.tensors) {
    res.pass = res.pass && t.pass;
    res.worst_ratio = std::max(res.worst_ratio, t.ratio);
  }
  classify_failure(res);
  return res;
}

void classify_failure(CheckResult& res) {
  res.failure_class.clear();
  res.failure_detail.clear();
  res.fully_masked_rows = 0;
  bool rest_ok = true;
  double rest_worst = 0;
  std::string masked, wrong;
  for (const auto& t : res.tensors) {
    if (t.name == "LSE") res.fully_masked_rows = t.masked_checked;
    rest_ok = rest_ok && t.rest_pass;
    const double rest_ratio = t.rest_max_abs_err / std::max(t.lp_max_abs_err, t.ulp);
    rest_worst = std::max(rest_worst, rest_ratio);
    if (t.masked_rows_mismatch > 0)
      masked += (masked.empty() ? "" : ", ") + t.name + (t.name == "LSE" ? " not -inf on " : " != 0 on ") +
                std::to_string(t.masked_rows_mismatch) + " of " + std::to_string(t.masked_checked) +
                (t.name == "LSE" ? " rows" : " elements");
    if (!t.rest_pass) wrong += (wrong.empty() ? "" : ", ") + t.name + " (ratio " + fmt_g(rest_ratio) + ")";
  }
  if (res.pass) return;
  if (rest_ok && !masked.empty()) {
    res.failure_class = "fully_masked_rows";
    res.failure_detail = "numerics fine, fully-masked-row convention differs: " + masked + " (of " +
                         std::to_string(res.fully_masked_rows) + " fully masked rows); the other rows pass (worst ratio " +
                         fmt_g(rest_worst) + ")";
  } else {
    res.failure_class = "numerics";
    res.failure_detail = "wrong numbers on rows that attend keys: " + (wrong.empty() ? std::string("-") : wrong);
    if (!masked.empty()) res.failure_detail += "; fully masked rows also differ: " + masked;
  }
}

double ulp_of(DType t, double x) {
  if (!std::isfinite(x)) return kInf;
  const int mant = t == DType::fp32 ? 23 : (t == DType::fp16 ? 10 : 7);
  const int emin = t == DType::fp16 ? -14 : -126;
  int e = emin;
  const double a = std::abs(x);
  if (a > 0) {
    int ex = 0;
    std::frexp(a, &ex);  // a = m * 2^ex, m in [0.5, 1)
    e = std::max(ex - 1, emin);
  }
  return std::ldexp(1.0, e - mant);
}

nlohmann::json count_nonfinite(const AttentionOutputs& out) {
  nlohmann::json j = nlohmann::json::object();
  auto count = [&](const char* name, const std::vector<double>& v, bool lse) {
    if (v.empty()) return;
    std::atomic<int64_t> n{0};
    parallel_chunks(v.size(), [&](size_t begin, size_t end) {
      int64_t c = 0;
      for (size_t i = begin; i < end; ++i) c += !std::isfinite(v[i]) && !(lse && v[i] == -kInf);
      n.fetch_add(c, std::memory_order_relaxed);
    });
    j[name] = n.load();
  };
  count("O", out.o.data, false);
  count("LSE", out.lse.data, true);
  count("dQ", out.dq.data, false);
  count("dK", out.dk.data, false);
  count("dV", out.dv.data, false);
  count("dBias", out.dbias, false);
  return j;
}

std::vector<int64_t> sliced_shape(const std::vector<int64_t>& full, const Problem& p,
                                  const reference::SliceSet& slices) {
  if (full.empty()) return full;
  if (full.size() < 2 || full[1] % p.heads_kv != 0)
    throw std::invalid_argument("slice_outputs: shape " + show_shape(full) + " is not [B, H, ...] with H a multiple of " +
                                std::to_string(p.heads_kv) + " kv heads");
  std::vector<int64_t> out = full;
  out[0] = slices.count(p.batch, p.heads_kv);
  out[1] = full[1] / p.heads_kv;
  return out;
}

AttentionOutputs slice_outputs(AttentionOutputs full, const Problem& p, const reference::SliceSet& slices) {
  auto slice = [&](HostTensor& t, bool query_heads, const char* name) {
    if (t.shape.empty() && t.data.empty()) return;
    if (t.shape.size() < 2 || t.shape[0] != p.batch || t.shape[1] != heads_of(p, query_heads) ||
        t.data.size() != static_cast<size_t>(t.numel()))
      throw std::invalid_argument(std::string("slice_outputs: ") + name + " shape " + show_shape(t.shape) +
                                  " is not the logical [B, H, ...] of the problem");
    const std::vector<int64_t> shape = sliced_shape(t.shape, p, slices);
    if (!slices.all) {
      const size_t block = t.data.size() / static_cast<size_t>(p.batch * p.heads_kv);  // one (b, g) slice
      std::vector<double> kept;
      kept.reserve(block * static_cast<size_t>(shape[0]));
      for (int64_t i = 0; i < p.batch * p.heads_kv; ++i)
        if (slices.contains(i / p.heads_kv, i % p.heads_kv, p.heads_kv)) {
          const auto first = t.data.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(i) * block);
          kept.insert(kept.end(), first, first + static_cast<std::ptrdiff_t>(block));
        }
      t.data = std::move(kept);
    }
    t.shape = shape;
  };
  slice(full.o, true, "O");
  slice(full.lse, true, "LSE");
  slice(full.dq, true, "dQ");
  slice(full.dk, false, "dK");
  slice(full.dv, false, "dV");
  return full;
}

bool bitwise_equal(const AttentionOutputs& a, const AttentionOutputs& b) {
  auto same = [](const std::vector<double>& x, const std::vector<double>& y) {
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0);
  };
  auto same_t = [&](const HostTensor& x, const HostTensor& y) { return x.shape == y.shape && same(x.data, y.data); };
  return same_t(a.o, b.o) && same_t(a.lse, b.lse) && same_t(a.dq, b.dq) && same_t(a.dk, b.dk) &&
         same_t(a.dv, b.dv) && same(a.dbias, b.dbias);
}

}  // namespace attnbench
