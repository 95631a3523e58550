// Rows written in run order while their checks finish: see row_pipeline.hpp.
#include "harness/run/row_pipeline.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>

#include "harness/model/printable.hpp"

namespace attnbench {

uint64_t pending_row_bytes(const Problem& p, bool backward) {
  const auto rows_q = static_cast<uint64_t>(p.batch * p.heads_q * p.seq_q);
  const auto rows_k = static_cast<uint64_t>(p.batch * p.heads_kv * p.seq_k);
  uint64_t elements = rows_q * static_cast<uint64_t>(p.head_dim_v + 1);  // O, LSE
  if (backward) elements += rows_q * static_cast<uint64_t>(p.head_dim) + rows_k * static_cast<uint64_t>(p.head_dim + p.head_dim_v);
  return 8 * elements;
}

int auto_pending_checks(const Problem& p, bool backward, uint64_t available_bytes) {
  const uint64_t per_row = std::max<uint64_t>(1, pending_row_bytes(p, backward));
  return static_cast<int>(std::clamp<uint64_t>(available_bytes / 4 / per_row, 1, 4));
}

uint64_t host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);)  // "MemAvailable:   123456 kB"
    if (line.rfind("MemAvailable:", 0) == 0) {
      unsigned long long kib = 0;
      return std::sscanf(line.c_str() + 13, "%llu", &kib) == 1 ? static_cast<uint64_t>(kib) * 1024 : 0;
    }
  return 0;
}

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
