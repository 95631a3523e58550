// The derive step (reports/derive.hpp): throughput and roofline figures per pass.
#include "reports/derive.hpp"

#include <algorithm>
#include <cmath>

namespace attnbench {

namespace {

/// A positive finite number at `key` of object `j`, else nullopt.
std::optional<double> positive(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  const double v = j[key].get<double>();
  return std::isfinite(v) && v > 0 ? std::optional<double>(v) : std::nullopt;
}

std::optional<double> finite(double v) { return std::isfinite(v) ? std::optional<double>(v) : std::nullopt; }

}  // namespace

ProblemSize problem_size(const Problem& p) {
  ProblemSize s;
  s.batch = static_cast<double>(p.batch);
  s.heads_q = static_cast<double>(p.heads_q);
  s.heads_kv = static_cast<double>(p.heads_kv);
  s.seq_q = static_cast<double>(p.seq_q);
  s.seq_k = static_cast<double>(p.seq_k);
  s.head_dim = static_cast<double>(p.head_dim);
  s.head_dim_v = static_cast<double>(p.head_dim_v);
  s.elem_bytes = dtype_bytes(p.dtype);
  s.bias_numel = static_cast<double>(p.bias_numel());
  s.offset_numel = static_cast<double>(p.offset_numel());
  return s;
}

std::optional<ProblemSize> problem_size_from_json(const nlohmann::json& p) {
  ProblemSize s;
  const auto b = positive(p, "batch"), hq = positive(p, "heads_q"), sq = positive(p, "seq_q"),
             sk = positive(p, "seq_k"), d = positive(p, "head_dim");
  if (!b || !hq || !sq || !sk || !d) return std::nullopt;
  s.batch = *b;
  s.heads_q = *hq;
  s.heads_kv = positive(p, "heads_kv").value_or(*hq);
  s.seq_q = *sq;
  s.seq_k = *sk;
  s.head_dim = *d;
  s.head_dim_v = positive(p, "head_dim_v").value_or(*d);
  s.elem_bytes = (p.contains("dtype") && p["dtype"] == "fp32") ? 4 : 2;
  if (p.contains("score_mod") && p["score_mod"].is_object()) {
    const auto& m = p["score_mod"];
    const std::string kind = m.value("kind", std::string("none"));
    if (kind == "rel_bias") {
      const double dist = m.contains("max_distance") && m["max_distance"].is_number() ? m["max_distance"].get<double>() : 0;
      s.bias_numel = s.heads_q * (2 * dist + 1);
    } else if (kind == "offset_bias") {
      s.bias_numel = positive(m, "size").value_or(0);
      s.offset_numel = s.seq_k;
    }
  }
  return s;
}

double min_bytes(const ProblemSize& s, bool backward) {
  const double q = s.batch * s.heads_q * s.seq_q * s.head_dim, k = s.batch * s.heads_kv * s.seq_k * s.head_dim,
               v = s.batch * s.heads_kv * s.seq_k * s.head_dim_v, o = s.batch * s.heads_q * s.seq_q * s.head_dim_v,
               lse = s.batch * s.heads_q * s.seq_q;
  const double e = s.elem_bytes;
  if (!backward) return e * (q + k + v + o) + 4 * (lse + s.bias_numel + s.offset_numel);
  // read Q, K, V, O, dO; write dQ, dK, dV (|dO| = |O|); LSE read; bias read, dBias written.
  return 2 * e * (q + k + v + o) + 4 * (lse + 2 * s.bias_numel + s.offset_numel);
}

WorkFigures count_work(const Problem& p, int64_t useful_pairs, int64_t executed_pairs) {
  const double per_pair = 2.0 * static_cast<double>(p.head_dim + p.head_dim_v);
  WorkFigures w;
  w.useful_pairs = useful_pairs;
  w.executed_pairs = executed_pairs;
  w.useful_flops_fwd = per_pair * static_cast<double>(useful_pairs);
  w.executed_flops_fwd = per_pair * static_cast<double>(executed_pairs);
  w.useful_flops_bwd = 2.5 * w.useful_flops_fwd;
  w.executed_flops_bwd = 2.5 * w.executed_flops_fwd;
  w.tile_efficiency =
      executed_pairs > 0 ? static_cast<double>(useful_pairs) / static_cast<double>(executed_pairs) : 0.0;
  const ProblemSize size = problem_size(p);
  w.min_bytes_fwd = min_bytes(size, false);
  w.min_bytes_bwd = min_bytes(size, true);
  w.flop_convention =
      "fwd = 2 * pairs * (Dqk + Dv) summed over batch and query heads; bwd = 2.5 * fwd (FlashAttention); "
      "bytes: each tensor read or written once (docs/semantics.md section 8)";
  return w;
}

CeilingRates ceiling_rates(const nlohmann::json& c) {
  CeilingRates r;
  if (!c.is_object() || !c.value("measured", false)) return r;
  r.gemm_tflops = positive(c, "gemm_bf16_tflops");
  r.copy_gbps = positive(c, "copy_gbps");
  return r;
}

const PassFigures* DerivedFigures::get(Pass pass) const {
  const auto& f = pass == Pass::forward ? fwd : pass == Pass::backward ? bwd : fwd_bwd;
  return f ? &*f : nullptr;
}

void to_json(nlohmann::json& j, const DerivedFigures& d) {
  j = nlohmann::json::object();
  for (Pass p : {Pass::forward, Pass::backward, Pass::forward_backward})
    if (const PassFigures* f = d.get(p)) j[to_string(p)] = *f;
}

void from_json(const nlohmann::json& j, DerivedFigures& d) {
  d = {};
  d.fwd = j.value("fwd", std::optional<PassFigures>());
  d.bwd = j.value("bwd", std::optional<PassFigures>());
  d.fwd_bwd = j.value("fwd_bwd", std::optional<PassFigures>());
}

PassFigures derive_pass(double useful_flops, double executed_flops, std::optional<double> bytes, double median_ms,
                        const CeilingRates& ceilings) {
  PassFigures f;
  f.median_ms = median_ms;
  f.useful_flops = useful_flops;
  f.executed_flops = executed_flops;
  f.min_bytes = bytes;
  if (!(median_ms > 0) || !std::isfinite(median_ms)) return f;
  const double t = median_ms * 1e-3;  // seconds
  f.useful_tflops = finite(useful_flops / t / 1e12);
  f.executed_tflops = finite(executed_flops / t / 1e12);
  if (bytes) f.achieved_gbps = finite(*bytes / t / 1e9);
  if (ceilings.gemm_tflops) {
    f.pct_gemm = finite(100.0 * useful_flops / t / (*ceilings.gemm_tflops * 1e12));
    f.compute_floor_ms = finite(1e3 * useful_flops / (*ceilings.gemm_tflops * 1e12));
  }
  if (ceilings.copy_gbps && bytes) {
    f.pct_copy = finite(100.0 * *bytes / t / (*ceilings.copy_gbps * 1e9));
    f.memory_floor_ms = finite(1e3 * *bytes / (*ceilings.copy_gbps * 1e9));
  }
  if (f.memory_floor_ms && f.compute_floor_ms) {
    const bool memory = *f.memory_floor_ms >= *f.compute_floor_ms;
    f.floor_ms = memory ? f.memory_floor_ms : f.compute_floor_ms;
    f.bound = memory ? "memory" : "compute";
    if (*f.floor_ms > 0) f.x_floor = finite(median_ms / *f.floor_ms);
  }
  return f;
}

std::optional<DerivedFigures> derive_row(const std::optional<WorkFigures>& work, const PassTimings& timing,
                                         const nlohmann::json& problem, const CeilingRates& ceilings) {
  if (!work || timing.empty()) return std::nullopt;
  const std::optional<ProblemSize> size = problem_size_from_json(problem);
  std::optional<double> bytes_fwd = work->min_bytes_fwd, bytes_bwd = work->min_bytes_bwd;
  if (!bytes_fwd && size) bytes_fwd = min_bytes(*size, false);
  if (!bytes_bwd && size) bytes_bwd = min_bytes(*size, true);
  std::optional<double> bytes_both;
  if (bytes_fwd && bytes_bwd) bytes_both = *bytes_fwd + *bytes_bwd;
  DerivedFigures d;
  for (Pass p : {Pass::forward, Pass::backward, Pass::forward_backward}) {
    const TimingStats* st = timing.get(p);
    if (!st) continue;
    // The GPU ceilings say nothing about a pass timed on the host (CPU backends).
    const CeilingRates c = st->timer == "steady_clock" ? CeilingRates{} : ceilings;
    PassFigures f;
    if (p == Pass::forward)
      f = derive_pass(work->useful_flops_fwd, work->executed_flops_fwd, bytes_fwd, st->median_ms, c);
    else if (p == Pass::backward)
      f = derive_pass(work->useful_flops_bwd, work->executed_flops_bwd, bytes_bwd, st->median_ms, c);
    else
      f = derive_pass(work->useful_flops_fwd + work->useful_flops_bwd,
                      work->executed_flops_fwd + work->executed_flops_bwd, bytes_both, st->median_ms, c);
    (p == Pass::forward ? d.fwd : p == Pass::backward ? d.bwd : d.fwd_bwd) = f;
  }
  return d;
}

}  // namespace attnbench
