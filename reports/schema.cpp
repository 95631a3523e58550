// Report schema validation (reports/schema.hpp).
#include "reports/schema.hpp"

#include <atomic>
#include <cstdio>
#include <memory>
#include <vector>

#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"
#include "reports/schema_fast.hpp"

#if defined(ATTNBENCH_HAVE_RAPIDJSON)
#include <rapidjson/document.h>
#endif

#if defined(ATTNBENCH_HAVE_VALIJSON)
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validator.hpp>
#endif

namespace attnbench {

extern const char* const kReportSchemaText;  // generated from reports/report.schema.json

const std::string& report_schema_text() {
  static const std::string text(kReportSchemaText);
  return text;
}

#if defined(ATTNBENCH_HAVE_VALIJSON)

namespace {

/// valijson's context ("<root>", "[results]", "[0]", ...) as a JSON pointer.
std::string pointer_of(const std::vector<std::string>& context) {
  std::string out;
  for (const auto& c : context) {
    if (c == "<root>" || c.size() < 2 || c.front() != '[' || c.back() != ']') continue;
    std::string key = c.substr(1, c.size() - 2);
    std::string esc;
    for (char ch : key) esc += ch == '~' ? std::string("~0") : ch == '/' ? std::string("~1") : std::string(1, ch);
    out += "/" + esc;
  }
  return out;
}

/// The property a message names ("Missing required property 'backend'.", "...
/// constraints: 'both'."): the field itself is then one level below the context.
std::string named_property(const std::string& description) {
  for (const char* lead : {"Missing required property '", "'additionalProperties' constraints: '"}) {
    const size_t at = description.find(lead);
    if (at == std::string::npos) continue;
    const size_t from = at + std::string(lead).size(), to = description.find('\'', from);
    if (to != std::string::npos) return description.substr(from, to - from);
  }
  return "";
}

/// The report schema (`row` false) or its row definition ($defs/row, `row`
/// true), parsed once each for valijson and compiled once each for the quick
/// check (thread-safe). `fast` is null when the schema uses a keyword the
/// quick check does not implement (every value then goes to valijson).
struct ParsedSchema {
  std::unique_ptr<valijson::Schema> schema;
  std::unique_ptr<CompiledSchema> fast;
};

const ParsedSchema& report_schema(bool row = false) {
  auto parse = [](bool for_row) {
    ParsedSchema p;
    p.schema = std::make_unique<valijson::Schema>();
    nlohmann::json doc = nlohmann::json::parse(report_schema_text());
    if (for_row) doc = {{"$ref", "#/$defs/row"}, {"$defs", doc["$defs"]}};  // the same definitions, a row at the root
    valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);
    valijson::adapters::NlohmannJsonAdapter adapter(doc);
    parser.populateSchema(adapter, *p.schema);
    try {
      p.fast = std::make_unique<CompiledSchema>(doc);
    } catch (const std::invalid_argument&) {  // tests/test_schema_fast.cpp requires it for the report schema
    }
    return p;
  };
  static const ParsedSchema whole = parse(false), one_row = parse(true);
  return row ? one_row : whole;
}

/// Validate `doc` against `schema`; on failure throw InputError naming `file`
/// and the pointer `prefix` + the deepest violation's pointer within `doc`.
void validate_against(const ParsedSchema& parsed, const nlohmann::json& doc, const std::string& file,
                      const std::string& prefix) {
  // The quick check's "valid" is final; anything else is valijson's to decide and explain.
  if (parsed.fast && parsed.fast->check(doc) == SchemaAnswer::valid) return;
  const valijson::Schema& schema = *parsed.schema;
  thread_local valijson::Validator validator;  // keeps its compiled "pattern" regexes from row to row
  valijson::adapters::NlohmannJsonAdapter target(doc);
  // Without a results object valijson builds no message for the branches of
  // anyOf / if that fail on the way to a pass: about twice as fast.
  if (validator.validate(schema, target, nullptr)) return;
  valijson::ValidationResults results;
  validator.validate(schema, target, &results);
  // The deepest violation names the field; the enclosing ones only say "in here".
  valijson::ValidationResults::Error e, best;
  while (results.popError(e))
    if (e.context.size() > best.context.size()) best = e;
  std::vector<std::string> context = best.context;
  if (const std::string prop = named_property(best.description); !prop.empty()) context.push_back("[" + prop + "]");
  const std::string ptr = pointer_of(context);
  std::string value = "(absent)";
  try {
    value = jsonu::show(doc.at(nlohmann::json::json_pointer(ptr)));
  } catch (const std::exception&) {
  }
  throw InputError(file, prefix + ptr,
                   "does not match reports/report.schema.json: " + best.description + " (value " + value + ")");
}

}  // namespace

bool schema_validation_available() { return true; }

bool fast_schema_check_available() { return report_schema().fast && report_schema(true).fast; }

bool valijson_accepts(const nlohmann::json& value, bool row) {
  thread_local valijson::Validator validator;
  valijson::adapters::NlohmannJsonAdapter target(value);
  return validator.validate(*report_schema(row).schema, target, nullptr);
}

void validate_report_schema(const nlohmann::json& doc, const std::string& file) {
  validate_against(report_schema(), doc, file, "");
}

bool row_passes_quick_check(const rapidjson::Value& row) {
#if defined(ATTNBENCH_HAVE_RAPIDJSON)
  const ParsedSchema& parsed = report_schema(true);
  return parsed.fast && parsed.fast->check_rapidjson(row) == SchemaAnswer::valid;
#else
  (void)row;  // no rapidjson::Value exists without RapidJSON
  return false;
#endif
}

void validate_report_row(const nlohmann::json& row, const std::string& file, const std::string& row_path) {
  validate_against(report_schema(true), row, file, row_path);
}

#else

bool schema_validation_available() { return false; }

bool fast_schema_check_available() { return false; }

bool valijson_accepts(const nlohmann::json&, bool) { return true; }

bool row_passes_quick_check(const rapidjson::Value&) { return true; }

void validate_report_row(const nlohmann::json&, const std::string&, const std::string&) {}

void validate_report_schema(const nlohmann::json&, const std::string&) {
  static std::atomic<bool> noted{false};
  if (!noted.exchange(true))
    std::fprintf(stderr,
                 "attnbench: note: built without valijson (Debian libvalijson-dev): reports are read without "
                 "validation against reports/report.schema.json\n");
}

#endif

}  // namespace attnbench
