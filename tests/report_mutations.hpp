// Random one-node changes of report rows: what the tests of the schema checks
// (tests/test_schema_fast.cpp) and of the fast report reader
// (tests/test_report_fast.cpp) feed the readers to find rows they disagree on.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/json_util.hpp"
#include "tests/test_util.hpp"

namespace attnbench::test {

/// Every JSON pointer of `v`'s nodes (the root "").
inline void pointers(const nlohmann::json& v, const std::string& at, std::vector<std::string>& out) {
  out.push_back(at);
  if (v.is_object())
    for (const auto& [k, c] : v.items()) pointers(c, jsonu::child_path(at, k), out);
  else if (v.is_array())
    for (size_t i = 0; i < v.size(); ++i) pointers(v[i], jsonu::child_path(at, i), out);
}

/// `row` with one random change: a node replaced by a value of another kind, a
/// member removed, an unknown member added, or a string or number nudged.
inline nlohmann::json mutated(nlohmann::json row, Rng& rng) {
  std::vector<std::string> ptrs;
  pointers(row, "", ptrs);
  const nlohmann::json::json_pointer p(ptrs[static_cast<size_t>(rng.uniform(1, static_cast<int64_t>(ptrs.size()) - 1))]);
  using json = nlohmann::json;
  static const std::vector<json> replacements = {nullptr, true, false, 0, -1, 1, 2.5, -0.5, 1.0, 3, "", "x", "inf",
                                                 "nan", "pass", "fail", "unsupported", "error", "O", "fwd",
                                                 json::array(), json::array({1}), json::object(),
                                                 json::object({{"k", 1}}), 1e30, 18446744073709551615ULL};
  switch (rng.uniform(0, 4)) {
    case 0:  // replace
      row[p] = replacements[static_cast<size_t>(rng.uniform(0, static_cast<int64_t>(replacements.size()) - 1))];
      break;
    case 1:  // remove
      if (row[p.parent_pointer()].is_object()) row[p.parent_pointer()].erase(p.back());
      else row[p] = nullptr;
      break;
    case 2:  // an unknown member in the enclosing object
      if (row[p.parent_pointer()].is_object()) row[p.parent_pointer()]["zz_unknown"] = 1;
      break;
    case 3:  // nudge a number below zero or a string to empty / non-ASCII
      if (row[p].is_number()) row[p] = -row[p].get<double>() - 1;
      else if (row[p].is_string()) row[p] = rng.coin(0.5) ? std::string() : std::string("\xc3\xa9");
      break;
    default:  // a status with or without its message, reason, check
      row["status"] = replacements[static_cast<size_t>(rng.uniform(14, 17))];
      break;
  }
  return row;
}

}  // namespace attnbench::test
