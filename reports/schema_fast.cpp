// The compiled schema check: see schema_fast.hpp.
#include "reports/schema_fast.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <utility>

#if defined(ATTNBENCH_HAVE_RAPIDJSON)
#include <rapidjson/document.h>
#endif

#include "harness/model/json_fast.hpp"

namespace attnbench {

namespace {

enum TypeBit : unsigned {
  kNull = 1,
  kBoolean = 2,
  kInteger = 4,
  kNumber = 8,  ///< any number: "number" also admits integers
  kString = 16,
  kArray = 32,
  kObject = 64,
};

unsigned type_bit(const std::string& name, const std::string& where) {
  if (name == "null") return kNull;
  if (name == "boolean") return kBoolean;
  if (name == "integer") return kInteger;
  if (name == "number") return kNumber | kInteger;
  if (name == "string") return kString;
  if (name == "array") return kArray;
  if (name == "object") return kObject;
  throw std::invalid_argument(where + "/type: unknown type \"" + name + "\"");
}

/// The type bits a value has (valijson's strict types: a float is never an integer).
unsigned bits_of(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null: return kNull;
    case nlohmann::json::value_t::boolean: return kBoolean;
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return kInteger;
    case nlohmann::json::value_t::number_float: return kNumber;
    case nlohmann::json::value_t::string: return kString;
    case nlohmann::json::value_t::array: return kArray;
    case nlohmann::json::value_t::object: return kObject;
    default: return 0;  // binary, discarded: never in a parsed report
  }
}

/// valijson reads integers as int64_t: an unsigned above 2^63 - 1 wraps to a
/// negative number there (18446744073709551615 reads as -1), so a bound or an
/// equality on it is valijson's to decide.
bool wraps_in_valijson(const nlohmann::json& v) {
  return v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
}

/// enum / const equality, decided only where valijson's answer is certain:
/// scalars of one kind; a number against a number of the other kind (1 vs
/// 1.0), arrays and objects are left to valijson.
SchemaAnswer equal3(const nlohmann::json& candidate, const nlohmann::json& v) {
  const unsigned a = bits_of(candidate), b = bits_of(v);
  if ((a | b) & (kArray | kObject) || wraps_in_valijson(candidate) || wraps_in_valijson(v)) return SchemaAnswer::unknown;
  const bool a_num = a & (kInteger | kNumber), b_num = b & (kInteger | kNumber);
  if (a_num && b_num && a != b) return SchemaAnswer::unknown;
  if (a != b) return SchemaAnswer::invalid;
  return candidate == v ? SchemaAnswer::valid : SchemaAnswer::invalid;
}

/// Folds the answers of sub-checks: all must hold (kAll: allOf, the keywords
/// of one schema; stops at the first invalid) or one must (kAny: anyOf, enum
/// candidates; stops at the first valid). An unknown answer makes the result
/// unknown unless a stopping answer comes.
class Fold {
 public:
  enum Kind { kAll, kAny };
  explicit Fold(Kind kind = kAll)
      : stop_(kind == kAll ? SchemaAnswer::invalid : SchemaAnswer::valid),
        answer_(kind == kAll ? SchemaAnswer::valid : SchemaAnswer::invalid) {}
  /// False once the result is decided (stop).
  bool add(SchemaAnswer a) {
    if (a == stop_) {
      answer_ = a;
      return false;
    }
    if (a == SchemaAnswer::unknown) answer_ = a;
    return true;
  }
  SchemaAnswer answer() const { return answer_; }

 private:
  SchemaAnswer stop_, answer_;
};

double number_of(const nlohmann::json& j, const std::string& where) {
  if (!j.is_number()) throw std::invalid_argument(where + ": expected a number");
  return j.get<double>();
}

size_t count_of(const nlohmann::json& j, const std::string& where) {
  if (!j.is_number_integer() || j.get<int64_t>() < 0) throw std::invalid_argument(where + ": expected a count");
  return j.get<size_t>();
}

bool ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

/// How the check reads a value of each JSON library: nlohmann (documents,
/// headers) and RapidJSON (rows read by jsonu::stream_file_fast()).
template <class V>
struct Access;

template <>
struct Access<nlohmann::json> {
  using V = nlohmann::json;
  static unsigned bits(const V& v) { return bits_of(v); }
  static bool wraps(const V& v) { return wraps_in_valijson(v); }
  static double number(const V& v) { return v.get<double>(); }
  static std::string_view string(const V& v) { return v.get_ref<const std::string&>(); }
  static size_t size(const V& v) { return v.size(); }
  static const V& elements(const V& v) { return v; }
  static bool contains(const V& v, const std::string& key) { return v.contains(key); }
  static SchemaAnswer equal(const nlohmann::json& candidate, const V& v) { return equal3(candidate, v); }
  /// Iterating an object gives (name, value) pairs.
  static const nlohmann::json::object_t& members(const V& v) { return v.get_ref<const nlohmann::json::object_t&>(); }
};

#if defined(ATTNBENCH_HAVE_RAPIDJSON)
template <>
struct Access<rapidjson::Value> {
  using V = rapidjson::Value;
  static unsigned bits(const V& v) {
    switch (v.GetType()) {
      case rapidjson::kNullType: return kNull;
      case rapidjson::kFalseType:
      case rapidjson::kTrueType: return kBoolean;
      case rapidjson::kNumberType: return v.IsDouble() ? kNumber : kInteger;
      case rapidjson::kStringType: return kString;
      case rapidjson::kArrayType: return kArray;
      case rapidjson::kObjectType: return kObject;
    }
    return 0;
  }
  static bool wraps(const V& v) { return v.IsUint64() && !v.IsInt64(); }
  static double number(const V& v) { return v.GetDouble(); }
  static std::string_view string(const V& v) { return {v.GetString(), v.GetStringLength()}; }
  static size_t size(const V& v) { return v.Size(); }
  static auto elements(const V& v) { return v.GetArray(); }
  static bool contains(const V& v, const std::string& key) {
    return v.FindMember(rapidjson::StringRef(key.data(), key.size())) != v.MemberEnd();
  }
  static SchemaAnswer equal(const nlohmann::json& candidate, const V& v) {
    if (v.IsArray() || v.IsObject()) return SchemaAnswer::unknown;
    return equal3(candidate, jsonu::to_nlohmann(v));
  }
  /// Iterating an object gives (name, value) pairs.
  struct Members {
    const V& v;
    struct It {
      V::ConstMemberIterator m;
      std::pair<std::string_view, const V&> operator*() const {
        return {std::string_view(m->name.GetString(), m->name.GetStringLength()), m->value};
      }
      It& operator++() {
        ++m;
        return *this;
      }
      bool operator!=(const It& o) const { return m != o.m; }
    };
    It begin() const { return {v.MemberBegin()}; }
    It end() const { return {v.MemberEnd()}; }
  };
  static Members members(const V& v) { return {v}; }
};
#endif

}  // namespace

struct CompiledSchema::Node {
  bool always_false = false;  ///< the boolean schema false
  unsigned types = 0;         ///< 0 = any type
  bool has_enum = false;
  std::vector<nlohmann::json> enum_values;
  /// "properties", sorted by name as nlohmann sorts an object's keys, so that an
  /// object and its schema are walked side by side; `required`: also named in
  /// "required".
  struct Property {
    std::string name;
    int schema = -1;
    bool required = false;
  };
  std::vector<Property> properties;
  size_t required_properties = 0;      ///< how many of `properties` are required
  std::vector<std::string> required_others;  ///< required names without a "properties" entry
  bool additional_false = false;
  int additional = -1, property_names = -1, items = -1, ref = -1;
  int if_ = -1, then_ = -1, else_ = -1;
  std::optional<double> minimum, maximum, exclusive_minimum, exclusive_maximum;
  std::optional<size_t> min_length, max_length, min_items, max_items;
  std::optional<std::regex> pattern;
  std::vector<int> all_of, any_of, one_of;
};

CompiledSchema::CompiledSchema(const nlohmann::json& document, const std::string& root) : document_(&document) {
  root_ = compile(root);
  document_ = nullptr;
}

CompiledSchema::~CompiledSchema() = default;

int CompiledSchema::compile(const std::string& pointer) {
  if (const auto it = compiled_.find(pointer); it != compiled_.end()) return it->second;
  const nlohmann::json* s = nullptr;
  try {
    s = &document_->at(nlohmann::json::json_pointer(pointer));
  } catch (const nlohmann::json::exception&) {
    throw std::invalid_argument("$ref \"#" + pointer + "\" names nothing in the schema");
  }
  const int index = static_cast<int>(nodes_.size());
  nodes_.push_back(std::make_unique<Node>());
  compiled_[pointer] = index;  // before the children: a recursive $ref finds it
  Node& n = *nodes_[index];    // stable: nodes are held by pointer
  if (s->is_boolean()) n.always_false = !s->get<bool>();
  else if (s->is_object()) compile_keywords(n, *s, pointer);
  else throw std::invalid_argument(pointer + ": a schema must be an object or a boolean");
  return index;
}

void CompiledSchema::compile_keywords(Node& n, const nlohmann::json& s, const std::string& pointer) {
  auto sub = [&](const std::string& key) { return compile(pointer + "/" + key); };
  auto subs = [&](const std::string& key, std::vector<int>& out) {
    const auto& list = s.at(key);
    if (!list.is_array() || list.empty()) throw std::invalid_argument(pointer + "/" + key + ": expected a non-empty array");
    for (size_t i = 0; i < list.size(); ++i) out.push_back(compile(pointer + "/" + key + "/" + std::to_string(i)));
  };
  for (const auto& [key, value] : s.items()) {
    const std::string at = pointer + "/" + key;
    if (key == "$schema" || key == "$id" || key == "title" || key == "description" || key == "$comment" ||
        key == "default" || key == "examples" || key == "$defs") {
      continue;
    } else if (key == "$ref") {
      // draft 7: keywords beside $ref are ignored; only annotations may stand beside it here
      const std::string ref = value.is_string() ? value.get<std::string>() : "";
      if (ref.rfind('#', 0) != 0) throw std::invalid_argument(at + ": only refs within the schema (\"#/...\") are supported");
      n.ref = compile(ref.substr(1));
    } else if (key == "type") {
      if (value.is_string()) n.types = type_bit(value.get<std::string>(), pointer);
      else if (value.is_array())
        for (const auto& t : value) n.types |= type_bit(t.is_string() ? t.get<std::string>() : "?", pointer);
      else throw std::invalid_argument(at + ": expected a type name or a list of them");
    } else if (key == "enum" || key == "const") {
      if (key == "enum" && !value.is_array()) throw std::invalid_argument(at + ": expected an array");
      n.has_enum = true;
      if (key == "enum") n.enum_values.assign(value.begin(), value.end());
      else n.enum_values.push_back(value);
    } else if (key == "required") {
      for (const auto& r : value)
        if (!r.is_string()) throw std::invalid_argument(at + ": expected property names");
    } else if (key == "properties") {
      if (!value.is_object()) throw std::invalid_argument(at + ": expected an object");
      for (const auto& [name, unused] : value.items()) {  // sorted: nlohmann's object is a std::map
        std::string token;  // the name as a JSON pointer token
        for (char c : name) token += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
        n.properties.push_back({name, compile(at + "/" + token), false});
      }
    } else if (key == "additionalProperties") {
      if (value.is_boolean() && !value.get<bool>()) n.additional_false = true;
      else n.additional = sub(key);
    } else if (key == "propertyNames") {
      n.property_names = sub(key);
    } else if (key == "items") {
      if (value.is_array()) throw std::invalid_argument(at + ": tuple items are not supported");
      n.items = sub(key);
    } else if (key == "minimum") {
      n.minimum = number_of(value, at);
    } else if (key == "maximum") {
      n.maximum = number_of(value, at);
    } else if (key == "exclusiveMinimum") {
      n.exclusive_minimum = number_of(value, at);
    } else if (key == "exclusiveMaximum") {
      n.exclusive_maximum = number_of(value, at);
    } else if (key == "minLength") {
      n.min_length = count_of(value, at);
    } else if (key == "maxLength") {
      n.max_length = count_of(value, at);
    } else if (key == "minItems") {
      n.min_items = count_of(value, at);
    } else if (key == "maxItems") {
      n.max_items = count_of(value, at);
    } else if (key == "pattern") {
      if (!value.is_string()) throw std::invalid_argument(at + ": expected a string");
      n.pattern.emplace(value.get<std::string>());  // std::regex's default: ECMAScript, as valijson
    } else if (key == "allOf") {
      subs(key, n.all_of);
    } else if (key == "anyOf") {
      subs(key, n.any_of);
    } else if (key == "oneOf") {
      subs(key, n.one_of);
    } else if (key == "if") {
      n.if_ = sub(key);
    } else if (key == "then") {
      n.then_ = sub(key);
    } else if (key == "else") {
      n.else_ = sub(key);
    } else {
      throw std::invalid_argument(at + ": keyword \"" + key + "\" is not supported by the compiled check");
    }
  }
  if (const auto r = s.find("required"); r != s.end()) {
    for (const auto& name : *r) {
      const std::string req = name.get<std::string>();
      auto p = std::find_if(n.properties.begin(), n.properties.end(), [&](const Node::Property& q) { return q.name == req; });
      if (p == n.properties.end()) n.required_others.push_back(req);
      else if (!p->required) p->required = true, ++n.required_properties;
    }
  }
  if (n.ref >= 0)
    for (const auto& [key, unused] : s.items())
      if (key != "$ref" && key != "$schema" && key != "$id" && key != "title" && key != "description" &&
          key != "$comment" && key != "$defs")
        throw std::invalid_argument(pointer + ": keyword \"" + key + "\" beside $ref (draft 7 ignores it)");
}

SchemaAnswer CompiledSchema::check(const nlohmann::json& value) const { return run(root_, value); }
#if defined(ATTNBENCH_HAVE_RAPIDJSON)
SchemaAnswer CompiledSchema::check_rapidjson(const rapidjson::Value& value) const { return run(root_, value); }
#else
SchemaAnswer CompiledSchema::check_rapidjson(const rapidjson::Value&) const { return SchemaAnswer::unknown; }
#endif

template <class V>
SchemaAnswer CompiledSchema::run(int index, const V& v) const {
  using A = Access<V>;
  const Node& n = *nodes_[static_cast<size_t>(index)];
  if (n.always_false) return SchemaAnswer::invalid;
  if (n.ref >= 0) return run(n.ref, v);
  const unsigned bits = A::bits(v);
  if (n.types != 0 && (n.types & bits) == 0) return SchemaAnswer::invalid;
  Fold all;
  if (n.has_enum) {
    Fold any(Fold::kAny);
    for (const auto& c : n.enum_values)
      if (!any.add(A::equal(c, v))) break;
    if (!all.add(any.answer())) return all.answer();
  }
  if (bits & (kInteger | kNumber)) {
    const bool bounded = n.minimum || n.maximum || n.exclusive_minimum || n.exclusive_maximum;
    if (bounded && A::wraps(v)) {
      all.add(SchemaAnswer::unknown);
    } else {
      const double d = A::number(v);
      if ((n.minimum && d < *n.minimum) || (n.maximum && d > *n.maximum) ||
          (n.exclusive_minimum && d <= *n.exclusive_minimum) || (n.exclusive_maximum && d >= *n.exclusive_maximum))
        return SchemaAnswer::invalid;
    }
  } else if (bits & kString) {
    const std::string_view s = A::string(v);
    if (n.min_length || n.max_length) {
      if (!ascii(s)) all.add(SchemaAnswer::unknown);  // valijson counts code points
      else if ((n.min_length && s.size() < *n.min_length) || (n.max_length && s.size() > *n.max_length))
        return SchemaAnswer::invalid;
    }
    if (n.pattern && !std::regex_search(s.begin(), s.end(), *n.pattern)) return SchemaAnswer::invalid;
  } else if (bits & kArray) {
    const size_t size = A::size(v);
    if ((n.min_items && size < *n.min_items) || (n.max_items && size > *n.max_items)) return SchemaAnswer::invalid;
    if (n.items >= 0)
      for (const auto& e : A::elements(v))
        if (!all.add(run(n.items, e))) return all.answer();
  } else if (bits & kObject) {
    if (!all.add(run_object(n, v))) return all.answer();
  }
  for (int s : n.all_of)
    if (!all.add(run(s, v))) return all.answer();
  if (!n.any_of.empty()) {
    Fold any(Fold::kAny);
    for (int s : n.any_of)
      if (!any.add(run(s, v))) break;
    if (!all.add(any.answer())) return all.answer();
  }
  if (!n.one_of.empty()) {
    int valid = 0;
    bool unsure = false;
    for (int s : n.one_of) {
      const SchemaAnswer a = run(s, v);
      valid += a == SchemaAnswer::valid;
      unsure = unsure || a == SchemaAnswer::unknown;
    }
    if (!all.add(unsure ? (valid > 1 ? SchemaAnswer::invalid : SchemaAnswer::unknown)
                        : (valid == 1 ? SchemaAnswer::valid : SchemaAnswer::invalid)))
      return all.answer();
  }
  if (n.if_ >= 0) {
    const SchemaAnswer cond = run(n.if_, v);
    const int branch = cond == SchemaAnswer::valid ? n.then_ : n.else_;
    if (cond == SchemaAnswer::unknown) all.add(SchemaAnswer::unknown);
    else if (branch >= 0 && !all.add(run(branch, v))) return all.answer();
  }
  return all.answer();
}

template <class V>
SchemaAnswer CompiledSchema::run_object(const Node& n, const V& v) const {
  using A = Access<V>;
  for (const auto& r : n.required_others)
    if (!A::contains(v, r)) return SchemaAnswer::invalid;
  // Each member against its property (found by name: the properties are sorted),
  // else additionalProperties. Members' names are distinct (the parsers reject a
  // repeated key), so counting the required ones seen tells whether all are there.
  Fold all;
  size_t required_seen = 0;
  // Members mostly come sorted by name (nlohmann writes them so): each search
  // starts where the last one ended (one comparison when the member is the
  // next property), back to a binary search when a name sorts lower.
  const auto begin = n.properties.begin(), end = n.properties.end();
  auto p = begin;
  auto order = [&](auto at, std::string_view key) { return at == end ? 1 : std::string_view(at->name).compare(key); };
  for (const auto& [key, value] : A::members(v)) {
    int c = order(p, key);
    if (c > 0) {
      p = std::lower_bound(begin, end, key, [](const Node::Property& q, std::string_view k) { return std::string_view(q.name) < k; });
      c = order(p, key);
    }
    while (c < 0) c = order(++p, key);
    if (c == 0) {
      const Node::Property& property = *p++;
      required_seen += property.required;
      if (!all.add(run(property.schema, value))) return all.answer();
    } else if (n.additional_false) {
      return SchemaAnswer::invalid;
    } else if (n.additional >= 0 && !all.add(run(n.additional, value))) {
      return all.answer();
    }
    if (n.property_names >= 0 && !all.add(run(n.property_names, nlohmann::json(std::string(key)))))
      return all.answer();
  }
  if (required_seen < n.required_properties) return SchemaAnswer::invalid;
  return all.answer();
}

}  // namespace attnbench
