// Validation of report.json against reports/report.schema.json (JSON Schema,
// docs/report-format.md) with valijson (Debian libvalijson-dev), when attnbench
// was built with it. The schema text is compiled into the binary (CMake embeds
// the file), so an installed attnbench validates without the source tree.
//
// Sharp edges: valijson implements draft 7; the schema uses only keywords whose
// meaning is the same in draft 7 and 2020-12 ($defs is reached through plain
// JSON-pointer $refs), so Ajv (tests/html/validate_report.mjs) and valijson agree.
#pragma once

#include <string>

#include <nlohmann/json.hpp>
#include "harness/model/rapidjson_fwd.hpp"

namespace attnbench {

/// True when this build validates reports (valijson was found at configure time).
bool schema_validation_available();

/// True when validation first tries the compiled quick check
/// (reports/schema_fast.hpp) on the whole schema and on its row definition:
/// valijson (with it) and every keyword of the schema implemented by the check.
bool fast_schema_check_available();

/// valijson's own verdict on `value` against the report schema (`row` false)
/// or its row definition (`row` true), without the quick check; true without
/// valijson. What tests compare the quick check with.
bool valijson_accepts(const nlohmann::json& value, bool row);

/// The quick check alone of a row parsed by RapidJSON (stream_report()'s fast
/// path) against the row definition: true when it says valid, which is final
/// (validate_report_row() would accept the row); false when valijson must decide
/// (the row then goes to validate_report_row()). True without valijson, whose
/// build validates no row; false when the quick check is unavailable.
bool row_passes_quick_check(const rapidjson::Value& row);

/// The text of reports/report.schema.json as built into the binary.
const std::string& report_schema_text();

/// Validate `doc` against the report schema: the compiled quick check
/// (reports/schema_fast.hpp) first, whose "valid" is final, else valijson,
/// which decides and names the field. On the first violation (the deepest
/// one valijson reports) throws InputError naming `file`, the JSON pointer of the
/// offending field, its value and what the schema expected (exit code 2). Without
/// valijson prints, once per process, a note to stderr that schema validation is
/// unavailable and returns.
void validate_report_schema(const nlohmann::json& doc, const std::string& file);

/// Validate one row against the schema's row definition ($defs/row), as
/// validate_report_schema() validates each element of "results"; the
/// InputError's pointer is `row_path` ("/results/7") + the field's. Without
/// valijson returns (validate_report_schema() prints the note).
void validate_report_row(const nlohmann::json& row, const std::string& file, const std::string& row_path);

}  // namespace attnbench
