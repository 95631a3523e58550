// report.json rows (DESIGN.md section 6; schema v1 in reports/report.schema.json,
// documented in docs/report-format.md). The writer rewrites the file after
// every row, so results already computed survive a later crash or Ctrl-C.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnbench {

/// Status of one (case, backend) row.
enum class RowStatus { pass, fail, unsupported, error, oom, timeout, crashed };
const char* to_string(RowStatus s);

/// One result row. Optional parts are null in the JSON when absent.
struct ReportRow {
  std::string case_id;
  std::string backend;
  RowStatus status = RowStatus::error;
  std::string reason;    ///< unsupported: why
  std::string message;   ///< error/oom/timeout/crashed: what happened
  nlohmann::json problem;     ///< compact problem (to_json(p, true))
  nlohmann::json work;        ///< useful/executed pairs and FLOPs, tile efficiency
  nlohmann::json packing;     ///< packing stats, if any
  nlohmann::json check;       ///< CheckResult::to_json()
  nlohmann::json timing;      ///< {"fwd": TimingStats, "bwd": ..., "fwd_bwd": ...}
  nlohmann::json memory;      ///< {"peak_bytes", "workspace_bytes", "allocated_bytes"}
  nlohmann::json extra;       ///< backend-specific: setup_ms, determinism, ...
  nlohmann::json to_json() const;
};

/// Accumulates rows and the run header, writing DIR/report.json atomically
/// (write to a temp file, rename) after each add_row().
class ReportWriter {
 public:
  /// `header` holds schema version, environment, command line, scenario.
  ReportWriter(std::string path, nlohmann::json header);
  void add_row(const ReportRow& row);
  /// Merge extra top-level fields (e.g. ceilings measured during the run).
  void set_field(const std::string& key, nlohmann::json value);
  const nlohmann::json& document() const { return doc_; }
  const std::string& path() const { return path_; }
  /// Write now (also called by add_row). Throws std::runtime_error on I/O failure.
  void flush() const;

 private:
  std::string path_;
  nlohmann::json doc_;
};

}  // namespace attnbench
