// A quick yes / no / "cannot tell" check of a JSON value against a JSON Schema,
// compiled once from the schema document: the fast path of the report schema
// validation (reports/schema.hpp). valijson (the validator that states what is
// wrong) walks a row of report.json in about 95 us, copying its error context
// at every node even when no error is asked for; this check walks the same row
// in a few microseconds. Only its "valid" is trusted: "invalid" and "unknown"
// send the value to valijson, which decides and names the field, so a message
// is always valijson's and the check can only err by calling an invalid value
// valid (tests/test_schema_fast.cpp compares the two on thousands of mutated
// rows).
//
// Keywords (draft 7, with valijson's strict types: 1.0 is a number, not an
// integer): type, enum, const, required, properties, additionalProperties,
// propertyNames, items (one schema), minItems, maxItems, minLength, maxLength,
// minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers), pattern
// (std::regex, ECMAScript, searched as valijson does), allOf, anyOf, oneOf,
// if / then / else, $ref to a JSON pointer within the document ("#/$defs/x"),
// boolean schemas; annotations ($schema, $id, title, description, $comment,
// default, examples, $defs) are skipped. Any other keyword is refused when the
// schema is compiled.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include "harness/model/rapidjson_fwd.hpp"

namespace attnbench {

/// What CompiledSchema::check() can say of a value.
enum class SchemaAnswer {
  valid,    ///< the value satisfies the schema
  invalid,  ///< it violates the schema (as far as this check can tell: ask valijson)
  unknown,  ///< the check cannot decide (an enum value compared across number types, a
            ///< length of a non-ASCII string): ask valijson
};

/// A JSON Schema compiled into a tree of checks (see the top of this file for
/// the keywords). Immutable after construction; check() is thread-safe.
class CompiledSchema {
 public:
  /// Compile the subschema of `document` at JSON pointer `root` ("" = the whole
  /// document; "/$defs/row": one of its definitions), following $refs within
  /// `document`. Throws std::invalid_argument naming the pointer and the keyword
  /// for a keyword it does not implement, a $ref outside the document, or a
  /// keyword of the wrong type ("minimum": "3").
  explicit CompiledSchema(const nlohmann::json& document, const std::string& root = "");
  ~CompiledSchema();
  CompiledSchema(const CompiledSchema&) = delete;
  CompiledSchema& operator=(const CompiledSchema&) = delete;

  /// Check `value`. Cost: one walk of the value's nodes that the schema
  /// describes, no allocation except for propertyNames keys.
  SchemaAnswer check(const nlohmann::json& value) const;
  /// check() of a RapidJSON value (jsonu::stream_file_fast()), with the
  /// same answers: numbers typed as nlohmann types them (json_fast.hpp).
  SchemaAnswer check_rapidjson(const rapidjson::Value& value) const;

 private:
  struct Node;
  int compile(const std::string& pointer);
  void compile_keywords(Node& n, const nlohmann::json& s, const std::string& pointer);
  template <class V>
  SchemaAnswer run(int node, const V& v) const;
  template <class V>
  SchemaAnswer run_object(const Node& n, const V& v) const;
  const nlohmann::json* document_ = nullptr;  ///< while compiling only
  std::vector<std::unique_ptr<Node>> nodes_;
  std::map<std::string, int> compiled_;  ///< pointer -> node (a $ref seen twice, recursion)
  int root_ = -1;
};

}  // namespace attnbench
