// The loud skips of tests that need report schema validation (valijson) or the
// fast reader of reports (RapidJSON), both optional in the build
// (reports/schema.hpp, harness/model/json_fast.hpp).
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "harness/model/json_fast.hpp"
#include "reports/schema.hpp"

namespace attnbench::test {

/// Inside a test case: true when this build validates reports against
/// reports/report.schema.json; otherwise a loud skip (a MESSAGE and a failing
/// WARN naming `what`) and false, so the caller returns.
inline bool schema_validation_or_loud_skip(const char* what) {
  if (schema_validation_available()) return true;
  const std::string note =
      "SKIPPED (LOUD): built without valijson (apt-get install libvalijson-dev): " + std::string(what) + " untested";
  MESSAGE(note);
  WARN(schema_validation_available());
  return false;
}

/// Inside a test case: true when this build reads reports with RapidJSON
/// (ATTNBENCH_HAVE_RAPIDJSON); otherwise a loud skip naming `what`, as above.
inline bool fast_reader_or_loud_skip(const char* what) {
#if defined(ATTNBENCH_HAVE_RAPIDJSON)
  (void)what;
  return true;
#else
  const std::string note =
      "SKIPPED (LOUD): built without RapidJSON (apt-get install rapidjson-dev): " + std::string(what) + " untested";
  MESSAGE(note);
  WARN(jsonu::fast_json_reading());
  return false;
#endif
}

}  // namespace attnbench::test
