#include "harness/model/budget.hpp"

#include <string>
#include <utility>
#include <vector>

#include "harness/model/json_util.hpp"
#include "harness/model/problem.hpp"

namespace attnbench {

std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> checked_product(std::initializer_list<int64_t> factors) {
  int64_t r = 1;
  for (int64_t f : factors) {
    auto m = checked_mul(r, f);
    if (!m) return std::nullopt;
    r = *m;
  }
  return r;
}

std::optional<int64_t> checked_sum(const std::vector<int64_t>& values) {
  int64_t r = 0;
  for (int64_t v : values) {
    auto s = checked_add(r, v);
    if (!s) return std::nullopt;
    r = *s;
  }
  return r;
}

const BudgetLimits& budget_limits() {
  static const BudgetLimits limits;
  return limits;
}

namespace {

/// Sum of optional terms, each scaled; nullopt if any term is nullopt or overflows.
std::optional<int64_t> weighted_sum(std::initializer_list<std::pair<int64_t, std::optional<int64_t>>> terms) {
  int64_t r = 0;
  for (const auto& [w, v] : terms) {
    if (!v) return std::nullopt;
    auto m = checked_mul(w, *v);
    if (!m) return std::nullopt;
    auto s = checked_add(r, *m);
    if (!s) return std::nullopt;
    r = *s;
  }
  return r;
}

/// "2^33" for powers of two, else the decimal value.
std::string limit_text(int64_t v) {
  if (v > 0 && (v & (v - 1)) == 0) return "2^" + std::to_string(__builtin_ctzll(static_cast<unsigned long long>(v)));
  return std::to_string(v);
}

std::string amount(const std::optional<int64_t>& v) {
  return v ? std::to_string(*v) : std::string("more than 2^63");
}

}  // namespace

ProblemSizes problem_sizes(const Problem& p) {
  ProblemSizes s;
  s.q = checked_product({p.batch, p.heads_q, p.seq_q, p.head_dim});
  s.k = checked_product({p.batch, p.heads_kv, p.seq_k, p.head_dim});
  s.v = checked_product({p.batch, p.heads_kv, p.seq_k, p.head_dim_v});
  s.o = checked_product({p.batch, p.heads_q, p.seq_q, p.head_dim_v});
  s.lse = checked_product({p.batch, p.heads_q, p.seq_q});
  switch (p.score_mod.kind) {
    case ScoreMod::Kind::rel_bias: {
      auto width = checked_add(p.score_mod.max_distance, p.score_mod.max_distance);
      s.bias = width ? checked_add(*width, 1) : std::nullopt;
      if (s.bias) s.bias = checked_mul(p.heads_q, *s.bias);
      break;
    }
    case ScoreMod::Kind::offset_bias: s.bias = p.score_mod.size; break;
    default: s.bias = 0; break;
  }
  s.pairs = checked_product({p.batch, p.heads_q, p.seq_q, p.seq_k});
  // Host: float64 inputs (Q, K, V, dO, bias), and three output sets (the backend's,
  // gold, lp) of O, LSE, dQ, dK, dV, dBias.
  s.host_bytes = weighted_sum({{8, s.q}, {8, s.k}, {8, s.v}, {8, s.o}, {8, s.bias},
                               {24, s.o}, {24, s.lse}, {24, s.q}, {24, s.k}, {24, s.v}, {24, s.bias}});
  const int64_t e = dtype_bytes(p.dtype);
  // Device: Q, K, V, O, dO, dQ, dK, dV in the dtype; LSE and its backward twin
  // (row sums) in float32; a float32 dQ accumulator; bias and dBias in float32.
  s.device_bytes = weighted_sum({{e, s.q}, {e, s.k}, {e, s.v}, {e, s.o}, {e, s.o}, {e, s.q}, {e, s.k},
                                 {e, s.v}, {8, s.lse}, {4, s.q}, {8, s.bias}});
  return s;
}

void check_budget(const Problem& p, const std::string& file, const std::string& path) {
  using jsonu::child_path;
  const BudgetLimits& L = budget_limits();
  const ProblemSizes s = problem_sizes(p);
  // The field named in the message: the largest of the dimensions involved.
  auto largest = [&](std::initializer_list<std::pair<const char*, int64_t>> dims) {
    std::pair<const char*, int64_t> best = *dims.begin();
    for (const auto& d : dims)
      if (d.second > best.second) best = d;
    return best;
  };
  auto dims_text = [](std::initializer_list<std::pair<const char*, int64_t>> dims) {
    std::string t;
    for (const auto& d : dims) t += (t.empty() ? "" : " x ") + std::string(d.first) + " " + std::to_string(d.second);
    return t;
  };
  auto check = [&](const char* what, const std::optional<int64_t>& v, int64_t limit, const char* unit,
                   std::initializer_list<std::pair<const char*, int64_t>> dims) {
    if (v && *v <= limit) return;
    const auto field = largest(dims);
    throw BudgetError(file, child_path(path, field.first),
                      std::string(what) + " would need " + amount(v) + " " + unit + " (" + dims_text(dims) +
                          "), more than the budget of " + limit_text(limit) + " (value " +
                          std::to_string(field.second) + ")");
  };
  const int64_t T = L.max_tensor_elements;
  check("Q", s.q, T, "elements", {{"batch", p.batch}, {"heads_q", p.heads_q}, {"seq_q", p.seq_q}, {"head_dim", p.head_dim}});
  check("K", s.k, T, "elements", {{"batch", p.batch}, {"heads_kv", p.heads_kv}, {"seq_k", p.seq_k}, {"head_dim", p.head_dim}});
  check("V", s.v, T, "elements", {{"batch", p.batch}, {"heads_kv", p.heads_kv}, {"seq_k", p.seq_k}, {"head_dim_v", p.head_dim_v}});
  check("O", s.o, T, "elements", {{"batch", p.batch}, {"heads_q", p.heads_q}, {"seq_q", p.seq_q}, {"head_dim_v", p.head_dim_v}});
  check("LSE", s.lse, T, "elements", {{"batch", p.batch}, {"heads_q", p.heads_q}, {"seq_q", p.seq_q}});
  if (!s.bias || *s.bias > T)
    throw BudgetError(file, child_path(path, "score_mod"),
                      "the learnable bias would need " + amount(s.bias) + " elements, more than the budget of " +
                          limit_text(T));
  check("the (i, j) pairs", s.pairs, L.max_pairs, "pairs",
        {{"batch", p.batch}, {"heads_q", p.heads_q}, {"seq_q", p.seq_q}, {"seq_k", p.seq_k}});
  const std::initializer_list<std::pair<const char*, int64_t>> all = {
      {"batch", p.batch}, {"heads_q", p.heads_q}, {"heads_kv", p.heads_kv}, {"seq_q", p.seq_q},
      {"seq_k", p.seq_k}, {"head_dim", p.head_dim}, {"head_dim_v", p.head_dim_v}};
  check("the host", s.host_bytes, L.max_host_bytes, "bytes", all);
  check("a device", s.device_bytes, L.max_device_bytes, "bytes", all);

  for (size_t i = 0; i < p.mask.size(); ++i) {
    const auto* d = std::get_if<DocumentTerm>(&p.mask[i]);
    if (!d) continue;
    const std::string mp = child_path(child_path(path, "mask"), i);
    int64_t docs = 0;
    for (const auto& row : d->doc_lengths) docs += static_cast<int64_t>(row.size());
    if (docs > L.max_documents)
      throw BudgetError(file, child_path(mp, "doc_lengths"),
                        "the document mask holds " + std::to_string(docs) + " documents, more than the budget of " +
                            limit_text(L.max_documents));
    for (size_t r = 0; r < d->doc_lengths.size(); ++r)
      if (!checked_sum(d->doc_lengths[r]))
        throw BudgetError(file, child_path(child_path(mp, "doc_lengths"), r),
                          "document lengths sum to more than 2^63 (they must sum to seq_q = " +
                              std::to_string(p.seq_q) + ")");
  }
}

}  // namespace attnbench
