// Minimal report writer (to be extended with the schema, HTML and comparator work).
#include "harness/report.hpp"

#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace attnbench {

const char* to_string(RowStatus s) {
  switch (s) {
    case RowStatus::pass: return "pass";
    case RowStatus::fail: return "fail";
    case RowStatus::unsupported: return "unsupported";
    case RowStatus::error: return "error";
    case RowStatus::oom: return "oom";
    case RowStatus::timeout: return "timeout";
    case RowStatus::crashed: return "crashed";
  }
  return "error";
}

nlohmann::json ReportRow::to_json() const {
  nlohmann::json j;
  j["case_id"] = case_id;
  j["backend"] = backend;
  j["status"] = to_string(status);
  if (!reason.empty()) j["reason"] = reason;
  if (!message.empty()) j["message"] = message;
  j["problem"] = problem;
  j["work"] = work;
  j["packing"] = packing;
  j["check"] = check;
  j["timing"] = timing;
  j["memory"] = memory;
  j["extra"] = extra;
  return j;
}

ReportWriter::ReportWriter(std::string path, nlohmann::json header) : path_(std::move(path)), doc_(std::move(header)) {
  doc_["results"] = nlohmann::json::array();
  flush();
}

void ReportWriter::add_row(const ReportRow& row) {
  doc_["results"].push_back(row.to_json());
  flush();
}

void ReportWriter::set_field(const std::string& key, nlohmann::json value) {
  doc_[key] = std::move(value);
  flush();
}

void ReportWriter::flush() const {
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write " + tmp);
    out << doc_.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    if (!out) throw std::runtime_error("write failed: " + tmp);
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp + " to " + path_);
}

}  // namespace attnbench
