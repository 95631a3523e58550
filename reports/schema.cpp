// Report schema validation (reports/schema.hpp).
#include "reports/schema.hpp"

#include <atomic>
#include <cstdio>
#include <memory>
#include <vector>

#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"

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

const valijson::Schema& report_schema() {
  static const std::unique_ptr<valijson::Schema> schema = [] {  // parsed once (thread-safe)
    auto s = std::make_unique<valijson::Schema>();
    const nlohmann::json doc = nlohmann::json::parse(report_schema_text());
    valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);
    valijson::adapters::NlohmannJsonAdapter adapter(doc);
    parser.populateSchema(adapter, *s);
    return s;
  }();
  return *schema;
}

}  // namespace

bool schema_validation_available() { return true; }

void validate_report_schema(const nlohmann::json& doc, const std::string& file) {
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::NlohmannJsonAdapter target(doc);
  if (validator.validate(report_schema(), target, &results)) return;
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
  throw InputError(file, ptr,
                   "does not match reports/report.schema.json: " + best.description + " (value " + value + ")");
}

#else

bool schema_validation_available() { return false; }

void validate_report_schema(const nlohmann::json&, const std::string&) {
  static std::atomic<bool> noted{false};
  if (!noted.exchange(true))
    std::fprintf(stderr,
                 "attnbench: note: built without valijson (Debian libvalijson-dev): reports are read without "
                 "validation against reports/report.schema.json\n");
}

#endif

}  // namespace attnbench
