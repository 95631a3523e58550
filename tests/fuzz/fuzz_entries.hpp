// One entry per input parser, shared by the libFuzzer targets (tests/fuzz/fuzz_*.cpp,
// built with clang when ATTNBENCH_FUZZ=ON; ci/fuzz.sh runs them) and by the
// deterministic mutation test (tests/test_fuzz_mutation.cpp, always built).
//
// Contract under test: every input either parses or throws attnbench::InputError
// (exit code 2 in the CLI). An entry swallows InputError only; any other exception,
// crash or sanitizer report escapes and is a finding.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/block_mask.hpp"
#include "harness/model/budget.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/json_fast.hpp"
#include "harness/model/json_util.hpp"
#include "harness/model/mask.hpp"
#include "harness/model/npy.hpp"
#include "harness/model/problem.hpp"
#include "harness/workloads/packing.hpp"
#include "harness/workloads/scenario.hpp"
#include "reports/compare.hpp"
#include "reports/html_report.hpp"
#include "reports/report.hpp"

namespace attnbench::fuzz {

/// Cases whose LSE holds at most this many elements get their pairs counted and
/// their BlockMask built (what `describe` does); larger ones are only parsed, so
/// that a fuzz iteration stays fast.
inline constexpr int64_t kCountRowsLimit = INT64_C(1) << 16;

/// A scenario or problem file: parse, expand, serialise every case and, for
/// small cases, count pairs and build the BlockMask as `describe` does.
inline void scenario(const uint8_t* data, size_t size) {
  try {
    const std::string text(reinterpret_cast<const char*>(data), size);
    Scenario s = scenario_from_json(jsonu::parse_text(text, "fuzz.json"), "fuzz.json");
    for (const auto& c : s.cases) {
      if (!c.invalid.empty()) continue;
      (void)to_json(c.problem, true).dump();
      (void)describe_mask(c.problem);
      const auto sizes = problem_sizes(c.problem);
      if (sizes.lse && *sizes.lse <= kCountRowsLimit && sizes.pairs && *sizes.pairs <= (INT64_C(1) << 24)) {
        (void)count_allowed_pairs(c.problem);
        (void)build_block_mask(c.problem, 128, 128);
      }
    }
  } catch (const InputError&) {
  }
}

/// An empirical document-length file (scenarios/data/*.json).
inline void packing_data(const uint8_t* data, size_t size) {
  try {
    const std::string text(reinterpret_cast<const char*>(data), size);
    LengthSource src = empirical_lengths_from_json(jsonu::parse_text(text, "lengths.json"), "lengths.json");
    PackingSpec spec;
    spec.source = std::move(src);
    spec.max_seq_len = 256;
    spec.num_packs = 2;
    (void)pack_documents(spec, 1);
  } catch (const InputError&) {
  }
}

/// A report.json as compare, merge and report read it: load, compare with itself,
/// merge with itself (replacing duplicates), render the HTML without charts.
/// stream_report() (compare, merge, summary) of `text` as a file, with the
/// RapidJSON reader on and off (harness/model/json_fast.hpp): the rows handed,
/// the header and the error must be the same; std::abort() (a finding) if not.
inline void report_streamed_both_ways(const std::string& text) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("attnbench_fuzz_report_" + std::to_string(::getpid()) + ".json")).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  auto outcome = [&](bool fast) {
    const bool was = jsonu::fast_json_reading();
    jsonu::set_fast_json_reading(fast);
    std::string out;
    auto shown = [](const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); };
    try {
      const nlohmann::json header =
          stream_report(path, [&](nlohmann::json&& row, size_t i) { out += std::to_string(i) + shown(row); });
      out += "header " + shown(header);
    } catch (const InputError& e) {
      out += e.what();
    }
    jsonu::set_fast_json_reading(was);
    return out;
  };
  if (outcome(true) != outcome(false)) std::abort();
}

inline void report(const uint8_t* data, size_t size) {
  try {
    const std::string text(reinterpret_cast<const char*>(data), size);
    report_streamed_both_ways(text);
    nlohmann::json doc = report_from_json(jsonu::parse_text(text, "report.json"), "report.json");
    Comparison c = compare_reports(doc, doc, "base.json", "new.json", {});
    (void)c.markdown();
    (void)c.to_json().dump();
    MergeOptions mo;
    mo.replace_duplicates = true;
    mo.allow_env_mismatch = true;
    (void)merge_reports({{"a.json", doc}, {"b.json", doc}}, mo);
    html::HtmlOptions ho;
    ho.inline_charts = false;
    (void)html::render_report(doc, ho);
  } catch (const InputError&) {
  }
}

/// A .npy file: parse the header and read the elements back.
inline void npy_file(const uint8_t* data, size_t size) {
  try {
    const std::string bytes(reinterpret_cast<const char*>(data), size);
    npy::Array a = npy::parse(bytes, "fuzz.npy");
    if (npy::is_float(a.dtype)) (void)a.to_double();
    else (void)a.to_int64();
  } catch (const InputError&) {
  }
}

}  // namespace attnbench::fuzz
