// Rows written in run order while their checks finish behind later rows
// (`attnbench run --check-overlap rows`, issue 29): the host-side check of row k
// (its outputs against the float64 gold, on a worker thread of this process or
// in the finished child that ran the row) goes on while row k + 1 is prepared
// and timed on the GPU. The pipeline holds the rows whose check has not been
// joined yet, at most `max_pending` of them beside the row being run (each
// holds its host outputs: that bounds the memory), and writes every row, and
// every ordered action (removing a case's shared gold), in the order it was
// pushed: the journal and the report read exactly as without overlap.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "harness/model/problem.hpp"
#include "reports/report.hpp"

namespace attnbench {

/// Host bytes a row holds while its check is pending: its outputs as float64
/// (read_outputs: O [B,Hq,Sq,Dv], LSE [B,Hq,Sq] and, with `backward`, dQ
/// [B,Hq,Sq,D], dK [B,Hkv,Sk,D], dV [B,Hkv,Sk,Dv]), 8 bytes per element.
uint64_t pending_row_bytes(const Problem& p, bool backward);

/// `--pending-checks auto` for problem p: as many pending rows as fit, at
/// pending_row_bytes() each, in a quarter of `available_bytes` (the host's
/// MemAvailable, host_available_bytes()), at least 1 and at most 4 (beyond that
/// the rows only wait on the same reference). With `available_bytes` 0 (unknown): 1.
int auto_pending_checks(const Problem& p, bool backward, uint64_t available_bytes);

/// MemAvailable of /proc/meminfo in bytes; 0 when it cannot be read.
uint64_t host_available_bytes();


/// See the top of this file. Not thread-safe: one runner thread pushes, joins
/// and writes.
class RowPipeline {
 public:
  /// Completes a pending row in place (joins its check, reads its child's
  /// result). Returns false when no row can be written (this run was asked to
  /// stop while it waited: the row is left to --resume). An exception it throws
  /// becomes the row's `error` status, with the message: a failing check never
  /// loses the row, nor the rows after it.
  using Finish = std::function<bool(ReportRow&)>;
  /// Records a finished row (journal, report, summary).
  using Write = std::function<void(ReportRow&)>;

  /// `max_pending`: rows whose check may still run while the next row runs
  /// (0: every row is completed and written as soon as it is pushed).
  RowPipeline(size_t max_pending, Write write) : max_pending_(max_pending), write_(std::move(write)) {}
  /// A new bound for the rows pushed from now on (--pending-checks auto sets it
  /// per case); rows already pending beyond it are completed at the next push.
  void set_max_pending(size_t max_pending) { max_pending_ = max_pending; }
  RowPipeline(const RowPipeline&) = delete;
  RowPipeline& operator=(const RowPipeline&) = delete;
  /// Drains (completes and writes what is pending).
  ~RowPipeline();

  /// A complete row: written now, or after the pending rows pushed before it.
  void push_ready(ReportRow row);
  /// A row whose check still runs; `finish` completes it. Rows beyond
  /// max_pending are completed and written at once, oldest first.
  void push_pending(ReportRow row, Finish finish);
  /// `fn` runs once every row pushed before it is written (never throws out:
  /// an exception is reported on stderr).
  void push_action(std::function<void()> fn);
  /// Row `key` ("case|variant") is about to run while the pending rows' checks
  /// go on: recorded in each pending row's extra.check_overlap.beside.
  void running(const std::string& key);
  /// Complete and write everything pushed, in order.
  void drain();
  /// Rows pushed whose check has not been joined.
  size_t pending() const { return pending_; }

 private:
  struct Entry {
    ReportRow row;
    Finish finish;                    ///< empty: ready (or an action)
    std::function<void()> action;     ///< set: an ordered action, no row
    std::vector<std::string> beside;  ///< rows run while this one's check was pending
  };
  /// Write the leading entries that need no waiting; then, while more than
  /// `keep` rows are pending, complete the oldest one.
  void flush(size_t keep);
  void complete_front();

  size_t max_pending_;
  Write write_;
  std::deque<Entry> queue_;
  size_t pending_ = 0;
};

}  // namespace attnbench
