// The loud skip of tests that need report schema validation (valijson), which
// is optional in the build (reports/schema.hpp).
#pragma once

#include <doctest/doctest.h>

#include <string>

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

}  // namespace attnbench::test
