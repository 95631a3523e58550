// Rows written in run order while their checks finish: see row_pipeline.hpp.
#include "harness/run/row_pipeline.hpp"

#include <cstdio>
#include <exception>

#include "harness/model/printable.hpp"

namespace attnbench {

RowPipeline::~RowPipeline() {
  try {
    drain();
  } catch (const std::exception& e) {  // a write failed while unwinding: say so, never terminate
    std::fprintf(stderr, "attnbench: error: rows pending a check could not be written: %s\n",
                 printable(e.what()).c_str());
  }
}

void RowPipeline::push_ready(ReportRow row) {
  queue_.push_back(Entry{std::move(row), {}, {}, {}});
  flush(max_pending_);
}

void RowPipeline::push_pending(ReportRow row, Finish finish) {
  queue_.push_back(Entry{std::move(row), std::move(finish), {}, {}});
  ++pending_;
  flush(max_pending_);
}

void RowPipeline::push_action(std::function<void()> fn) {
  queue_.push_back(Entry{{}, {}, std::move(fn), {}});
  flush(max_pending_);
}

void RowPipeline::running(const std::string& key) {
  for (auto& e : queue_)
    if (e.finish) e.beside.push_back(key);
}

void RowPipeline::drain() { flush(0); }

void RowPipeline::complete_front() {
  Entry e = std::move(queue_.front());
  queue_.pop_front();
  if (e.action) {
    try {
      e.action();
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "attnbench: warning: %s\n", printable(ex.what()).c_str());
    }
    return;
  }
  bool have_row = true;
  if (e.finish) {
    --pending_;
    try {
      have_row = e.finish(e.row);
    } catch (const std::exception& ex) {
      e.row.status = RowStatus::error;
      e.row.message = std::string("the row's check failed: ") + ex.what();
    }
    if (have_row) {
      if (!e.row.extra.is_object()) e.row.extra = nlohmann::json::object();
      e.row.extra["check_overlap"]["beside"] = e.beside;
    }
  }
  if (have_row) write_(e.row);
}

void RowPipeline::flush(size_t keep) {
  while (!queue_.empty() && (!queue_.front().finish || pending_ > keep)) complete_front();
}

}  // namespace attnbench
