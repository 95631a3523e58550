// The typed parts of a report row (docs/report-format.md, "Rows"): the work a
// case represents, the memory an instance held, the timing of each pass and the
// correctness verdict. ReportRow (reports/report.hpp) holds them; their JSON is
// written and read with nlohmann's type macros (NLOHMANN_DEFINE_TYPE_*) or, where
// a field is written only when it applies, an explicit to_json / from_json pair.
//
// Sharp edges:
//  - Absent optional numbers are written as null by the macros (the schema,
//    reports/report.schema.json, allows null for each of them).
//  - from_json tolerates missing fields (the *_WITH_DEFAULT macros): rows of
//    schema version 1 and hand-made rows in tests lack some. Type errors throw
//    nlohmann::json::exception; load_report() validates against the schema first.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/measure/measure.hpp"

// std::optional<T> as "null or T" (nlohmann 3.11 has no built-in support).
namespace nlohmann {
template <typename T>
struct adl_serializer<std::optional<T>> {
  static void to_json(json& j, const std::optional<T>& v) {
    if (v) j = *v;
    else j = nullptr;
  }
  static void from_json(const json& j, std::optional<T>& v) {
    if (j.is_null()) v.reset();
    else v = j.get<T>();
  }
};
}  // namespace nlohmann

namespace attnbench {

/// Counted work of one (case, backend) row (docs/semantics.md section 8).
/// FLOPs: fwd = 2 * pairs * (Dqk + Dv) summed over batch and query heads, bwd =
/// 2.5 * fwd (FlashAttention's convention). Bytes: fewest bytes a pass must move
/// (min_bytes() in reports/derive.hpp); absent in schema version 1 rows, where
/// derive_row() computes them from the row's problem.
struct WorkFigures {
  int64_t useful_pairs = 0;      ///< allowed (i, j) pairs, summed over batch and query heads
  int64_t executed_pairs = 0;    ///< pairs inside the tiles the backend computes
  double useful_flops_fwd = 0, executed_flops_fwd = 0;
  double useful_flops_bwd = 0, executed_flops_bwd = 0;
  double tile_efficiency = 0;    ///< useful_pairs / executed_pairs (0 when nothing executed)
  std::optional<double> min_bytes_fwd, min_bytes_bwd;  ///< bytes (reports/derive.hpp)
  std::string flop_convention;   ///< the convention, in words
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(WorkFigures, useful_pairs, executed_pairs, useful_flops_fwd,
                                                executed_flops_fwd, useful_flops_bwd, executed_flops_bwd,
                                                tile_efficiency, min_bytes_fwd, min_bytes_bwd, flop_convention)

/// Memory of one row, bytes; a field not measured is absent (null in JSON).
struct MemoryFigures {
  std::optional<int64_t> allocated_bytes;  ///< inputs, outputs and workspace the instance holds
  std::optional<int64_t> workspace_bytes;  ///< scratch beyond inputs and outputs
  std::optional<int64_t> peak_bytes;       ///< peak device memory during the case
};
void to_json(nlohmann::json& j, const MemoryFigures& m);  ///< only the measured fields
void from_json(const nlohmann::json& j, MemoryFigures& m);

/// TimingStats as JSON (its own to_json / from_json, harness/measure/measure.hpp).
void to_json(nlohmann::json& j, const TimingStats& s);
void from_json(const nlohmann::json& j, TimingStats& s);

/// The timed passes of a row: {"fwd": stats, "bwd": stats, "fwd_bwd": stats},
/// each only when that pass was timed; null in JSON when none was.
struct PassTimings {
  std::optional<TimingStats> fwd, bwd, fwd_bwd;
  /// The stats of `pass`, nullptr when it was not timed.
  const TimingStats* get(Pass pass) const;
  /// Set the stats of `pass`.
  void set(Pass pass, TimingStats stats);
  bool empty() const { return !fwd && !bwd && !fwd_bwd; }
};
void to_json(nlohmann::json& j, const PassTimings& t);  ///< null when empty
/// Throws InputError (no file) for a key other than fwd, bwd, fwd_bwd.
void from_json(const nlohmann::json& j, PassTimings& t);

/// A figure of a check: a number; a non-finite one written as "inf", "-inf" or
/// "nan" (CheckResult::to_json(): JSON has no non-finite numbers); or null when
/// absent. Reads back exactly what it writes.
struct CheckNumber {
  std::optional<double> value;  ///< nullopt: null
};
void to_json(nlohmann::json& j, const CheckNumber& n);
/// Throws std::invalid_argument for a string other than inf, -inf, nan.
void from_json(const nlohmann::json& j, CheckNumber& n);

/// One tensor of a check (CheckResult::to_json() in harness/check/check.hpp;
/// docs/semantics.md section 7).
struct TensorCheckFigures {
  std::string name;  ///< O, LSE, dQ, dK, dV, dBias
  bool pass = false;
  CheckNumber max_abs_err, mean_abs_err, rel_l2_err, lp_max_abs_err, ulp, r, tolerance, ratio;
  int64_t checked = 0, nan_mismatch = 0, unwritten = 0, masked_nonzero = 0, masked_checked = 0,
          masked_rows_mismatch = 0;
  CheckNumber rest_max_abs_err;
  bool rest_pass = false;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TensorCheckFigures, name, pass, max_abs_err, mean_abs_err, rel_l2_err,
                                                lp_max_abs_err, ulp, r, tolerance, ratio, checked, nan_mismatch,
                                                unwritten, masked_nonzero, masked_checked, masked_rows_mismatch,
                                                rest_max_abs_err, rest_pass)

/// The correctness verdict of a row as the report stores it: CheckResult plus
/// the runner's plan and reference time; with --check off only mode, scope and
/// the non-finite counts.
struct CheckFigures {
  std::optional<bool> pass;            ///< absent with mode "off"
  std::string mode;                    ///< full, sample, off
  std::string scope, plan, rule;       ///< in words ("" = not written)
  CheckNumber worst_ratio;
  std::optional<double> reference_ms;  ///< float64 reference time, shared by the case's backends
  /// Where this row's reference came from (harness/run/gold_cache.hpp):
  /// "computed" by its unit, or "shared" (computed once for the case by another
  /// unit, in memory or through OUT/.gold/); "" in rows written before it existed.
  std::string gold_source;
  std::optional<double> gold_ms;       ///< what obtaining the reference cost this row: computing or loading it (ms)
  std::vector<TensorCheckFigures> tensors;
  std::optional<int64_t> fully_masked_rows;
  std::string failure_class;           ///< fully_masked_rows or numerics; "" when passing
  std::string failure_detail;
  std::map<std::string, int64_t> nonfinite;  ///< --check off: NaN/Inf per output tensor
};
/// Writes what applies: "tensors" only when non-empty or mode != off, failure_*
/// only when set, "nonfinite" only with mode "off".
void to_json(nlohmann::json& j, const CheckFigures& c);
void from_json(const nlohmann::json& j, CheckFigures& c);

}  // namespace attnbench
