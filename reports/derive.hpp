// The derive step: from a row's counted work and measured times, and the run's
// measured ceilings, every throughput and roofline figure the report shows
// (docs/semantics.md section 8, docs/report-format.md "derived"). Computed once
// when a row is written (schema version 2) or when a version 1 report is loaded;
// the HTML report and the ci/*.py scripts only read the stored figures.
//
// Per pass (fwd, bwd, fwd_bwd), with t the median time in seconds, F the FLOPs of
// the pass (fwd_bwd: fwd + bwd), B its fewest bytes (fwd_bwd: fwd + bwd), G the
// measured bf16 GEMM rate (FLOP/s) and W the measured device copy bandwidth
// (bytes/s, read plus written):
//   useful_tflops   = F_useful / t / 1e12       executed_tflops = F_executed / t / 1e12
//   pct_gemm        = 100 * F_useful / t / G    achieved_gbps   = B / t / 1e9
//   pct_copy        = 100 * B / t / W
//   memory_floor_ms = 1e3 * B / W               compute_floor_ms = 1e3 * F_useful / G
//   floor_ms        = max(memory_floor_ms, compute_floor_ms)   (the roofline floor)
//   bound           = "memory" if memory_floor_ms >= compute_floor_ms, else "compute"
//   x_floor         = median_ms / floor_ms     (1 = at the roofline; larger = slower)
// The ceilings are the machine's GPU ceilings: rows timed by the steady clock
// (CPU backends) get the rates but no ceiling-relative figures.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/model/problem.hpp"
#include "reports/row_types.hpp"

namespace attnbench {

/// The sizes the byte count needs: element counts of the logical tensors and the
/// element size. Q [B, Hq, Sq, Dqk], K [B, Hkv, Sk, Dqk], V [B, Hkv, Sk, Dv],
/// O and dO [B, Hq, Sq, Dv], LSE [B, Hq, Sq] float32, bias float32 [bias_numel],
/// offset int32 [offset_numel].
struct ProblemSize {
  double batch = 0, heads_q = 0, heads_kv = 0, seq_q = 0, seq_k = 0, head_dim = 0, head_dim_v = 0;
  double elem_bytes = 2;     ///< dtype_bytes(p.dtype): 2 for bf16 / fp16, 4 for fp32
  double bias_numel = 0;     ///< learnable bias elements (Problem::bias_numel())
  double offset_numel = 0;   ///< offset_bias index elements (Problem::offset_numel())
};

/// The sizes of problem `p`.
ProblemSize problem_size(const Problem& p);
/// The sizes from a row's compact problem JSON (to_json(p, true): batch, heads_q,
/// heads_kv, seq_q, seq_k, head_dim, head_dim_v, dtype, score_mod); std::nullopt
/// when a size is missing or not a positive number (e.g. an error row's null problem).
std::optional<ProblemSize> problem_size_from_json(const nlohmann::json& problem);

/// Fewest HBM bytes a pass must move, each tensor read or written once
/// (docs/semantics.md section 8), e = elem_bytes, |X| the element count:
///   fwd: read Q, K, V, bias, offset; write O, LSE
///        e * (|Q| + |K| + |V| + |O|) + 4 * (|LSE| + |bias| + |offset|)
///   bwd: read Q, K, V, O, dO, LSE, bias, offset; write dQ, dK, dV, dBias
///        2e * (|Q| + |K| + |V| + |O|) + 4 * (|LSE| + 2 |bias| + |offset|)
/// (the backward reads the bias again to recompute the scores.) `backward` picks bwd.
double min_bytes(const ProblemSize& s, bool backward);

/// The work of problem `p` for a backend that executes `executed_pairs`
/// (docs/semantics.md section 8): forward FLOPs = 2 * pairs * (Dqk + Dv),
/// backward = 2.5 * forward (FlashAttention's convention), from the useful and the
/// executed pairs (both summed over batch and query heads); tile_efficiency =
/// useful / executed (0 when nothing executed); min_bytes_fwd / _bwd = min_bytes().
WorkFigures count_work(const Problem& p, int64_t useful_pairs, int64_t executed_pairs);

/// The measured ceilings of a run: the report header's "ceilings" object
/// (gemm_bf16_tflops, copy_gbps); both absent when not measured.
struct CeilingRates {
  std::optional<double> gemm_tflops;  ///< bf16 GEMM, TFLOP/s
  std::optional<double> copy_gbps;    ///< device-to-device copy, GB/s (read + written)
};
/// From a report header's "ceilings" (null, not measured, or missing fields: nullopt).
CeilingRates ceiling_rates(const nlohmann::json& ceilings);

/// The figures of one timed pass (formulas at the top of this file). Absent
/// (nullopt) where an input is missing: no ceilings, no byte count, zero time.
struct PassFigures {
  double median_ms = 0;
  double useful_flops = 0, executed_flops = 0;
  std::optional<double> useful_tflops, executed_tflops;
  std::optional<double> pct_gemm;           ///< % of the measured GEMM rate
  std::optional<double> min_bytes;          ///< fewest bytes of the pass
  std::optional<double> achieved_gbps;      ///< min_bytes / time
  std::optional<double> pct_copy;           ///< % of the measured copy bandwidth
  std::optional<double> memory_floor_ms, compute_floor_ms, floor_ms;
  std::optional<double> x_floor;            ///< median_ms / floor_ms
  std::string bound;                        ///< "memory", "compute" or "" (no floor)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(PassFigures, median_ms, useful_flops, executed_flops, useful_tflops,
                                                executed_tflops, pct_gemm, min_bytes, achieved_gbps, pct_copy,
                                                memory_floor_ms, compute_floor_ms, floor_ms, x_floor, bound)

/// The derived figures of a row, one entry per timed pass.
struct DerivedFigures {
  std::optional<PassFigures> fwd, bwd, fwd_bwd;
  const PassFigures* get(Pass pass) const;
};
void to_json(nlohmann::json& j, const DerivedFigures& d);  ///< only the timed passes
void from_json(const nlohmann::json& j, DerivedFigures& d);

/// The figures of one pass from its FLOPs, bytes (nullopt: unknown) and median
/// time, against `ceilings` (pass {} for none). Formulas at the top of this file.
PassFigures derive_pass(double useful_flops, double executed_flops, std::optional<double> bytes, double median_ms,
                        const CeilingRates& ceilings);

/// Every timed pass of a row. Bytes come from `work.min_bytes_*`, else from
/// `problem` (problem_size_from_json). `ceilings` are ignored for passes timed
/// by the steady clock (CPU backends). std::nullopt when no pass was timed or
/// there is no work.
std::optional<DerivedFigures> derive_row(const std::optional<WorkFigures>& work, const PassTimings& timing,
                                         const nlohmann::json& problem, const CeilingRates& ceilings);

}  // namespace attnbench
