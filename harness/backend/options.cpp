#include "harness/backend/options.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>
#include <stdexcept>

#include "harness/model/errors.hpp"
#include "harness/model/printable.hpp"

namespace attnbench {

namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

bool reserved_char(char c) {
  return c == ',' || c == '[' || c == ']' || c == '=' || std::iscntrl(static_cast<unsigned char>(c));
}

}  // namespace

const char* to_string(OptionType t) {
  switch (t) {
    case OptionType::boolean: return "bool";
    case OptionType::integer: return "int";
    case OptionType::enumeration: return "enum";
    case OptionType::string: return "string";
  }
  return "?";
}

OptionSpec OptionSpec::flag(std::string name, bool def, std::string doc) {
  OptionSpec s;
  s.name = std::move(name);
  s.type = OptionType::boolean;
  s.default_value = def ? "true" : "false";
  s.doc = std::move(doc);
  return s;
}

OptionSpec OptionSpec::integer(std::string name, int64_t def, int64_t min, int64_t max, std::string doc) {
  if (min > max || def < min || def > max) throw std::logic_error("option " + name + ": default outside [min, max]");
  OptionSpec s;
  s.name = std::move(name);
  s.type = OptionType::integer;
  s.default_value = std::to_string(def);
  s.min = min;
  s.max = max;
  s.doc = std::move(doc);
  return s;
}

OptionSpec OptionSpec::choice(std::string name, std::string def, std::vector<std::string> choices, std::string doc) {
  if (std::find(choices.begin(), choices.end(), def) == choices.end())
    throw std::logic_error("option " + name + ": default \"" + def + "\" is not one of its choices");
  OptionSpec s;
  s.name = std::move(name);
  s.type = OptionType::enumeration;
  s.default_value = std::move(def);
  s.choices = std::move(choices);
  s.doc = std::move(doc);
  return s;
}

OptionSpec OptionSpec::text(std::string name, std::string def, std::string doc) {
  OptionSpec s;
  s.name = std::move(name);
  s.type = OptionType::string;
  s.default_value = std::move(def);
  s.doc = std::move(doc);
  return s;
}

std::string OptionSpec::allowed() const {
  switch (type) {
    case OptionType::boolean: return "true|false";
    case OptionType::integer: return std::to_string(min) + ".." + std::to_string(max);
    case OptionType::enumeration: return join(choices, "|");
    case OptionType::string: return "string";
  }
  return "";
}

std::string OptionSpec::canonical(const std::string& value, const std::string& backend, const std::string& file,
                                  const std::string& pointer) const {
  auto bad = [&](const std::string& why) {
    return InputError(file, pointer,
                      "backend \"" + printable(backend) + "\": option " + name + "=\"" + printable(value) + "\": " +
                          why + " (allowed: " + allowed() + ")");
  };
  switch (type) {
    case OptionType::boolean: {
      const std::string v = lower(value);
      if (v == "true" || v == "1" || v == "on" || v == "yes") return "true";
      if (v == "false" || v == "0" || v == "off" || v == "no") return "false";
      throw bad("not a boolean");
    }
    case OptionType::integer: {
      int64_t n = 0;
      const char* b = value.data();
      const char* e = b + value.size();
      const auto [p, ec] = std::from_chars(b, e, n);
      if (value.empty() || ec != std::errc() || p != e) throw bad("not an integer");
      if (n < min || n > max) throw bad("out of range");
      return std::to_string(n);
    }
    case OptionType::enumeration:
      if (std::find(choices.begin(), choices.end(), value) == choices.end()) throw bad("not one of the choices");
      return value;
    case OptionType::string:
      for (char c : value)
        if (reserved_char(c)) throw bad("a string option may not hold ',', '[', ']', '=' or control characters");
      return value;
  }
  throw bad("unknown option type");
}

nlohmann::json OptionSpec::typed(const std::string& value) const {
  if (type == OptionType::boolean) return value == "true";
  if (type == OptionType::integer) return std::stoll(value);
  return value;
}

nlohmann::json OptionSpec::to_json() const {
  nlohmann::json j = {{"name", name},
                      {"type", attnbench::to_string(type)},
                      {"default", typed(default_value)},
                      {"allowed", allowed()},
                      {"doc", doc}};
  if (type == OptionType::enumeration) j["choices"] = choices;
  if (type == OptionType::integer) {
    j["min"] = min;
    j["max"] = max;
  }
  return j;
}

OptionSpec OptionSpec::from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("name") || !j.contains("type") || !j.contains("default"))
    throw std::invalid_argument("option declaration: expected {name, type, default, ...}, got " + j.dump());
  const std::string name = j.at("name").get<std::string>(), type = j.at("type").get<std::string>();
  const std::string doc = j.value("doc", std::string());
  const nlohmann::json& def = j.at("default");
  if (type == "bool") return flag(name, def.get<bool>(), doc);
  if (type == "int") return integer(name, def.get<int64_t>(), j.at("min").get<int64_t>(), j.at("max").get<int64_t>(), doc);
  if (type == "enum") return choice(name, def.get<std::string>(), j.at("choices").get<std::vector<std::string>>(), doc);
  if (type == "string") return text(name, def.get<std::string>(), doc);
  throw std::invalid_argument("option declaration \"" + name + "\": unknown type \"" + type + "\"");
}

const std::string& OptionValues::text(const std::string& name) const {
  const auto it = values_.find(name);
  if (it == values_.end()) throw std::logic_error("backend option \"" + name + "\" is not declared");
  return it->second;
}

bool OptionValues::flag(const std::string& name) const { return text(name) == "true"; }

int64_t OptionValues::integer(const std::string& name) const { return std::stoll(text(name)); }

VariantRequest parse_variant(const std::string& text, const std::string& file, const std::string& pointer) {
  auto bad = [&](const std::string& why) {
    return InputError(file, pointer, "backend variant \"" + printable(text) + "\": " + why);
  };
  VariantRequest v;
  const size_t open = text.find('[');
  v.backend = trim(text.substr(0, open));
  if (v.backend.empty()) throw bad("no backend name");
  if (v.backend.find(']') != std::string::npos) throw bad("']' without '['");
  if (open == std::string::npos) return v;
  const size_t close = text.find(']', open);
  if (close == std::string::npos) throw bad("'[' without ']'");
  if (!trim(text.substr(close + 1)).empty()) throw bad("text after ']'");
  const std::string body = text.substr(open + 1, close - open - 1);
  if (body.find('[') != std::string::npos) throw bad("nested '['");
  std::set<std::string> seen;
  size_t start = 0;
  while (start <= body.size()) {
    const size_t comma = std::min(body.find(',', start), body.size());
    const std::string item = trim(body.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) {
      if (trim(body).empty()) break;  // "flex[]" is "flex"
      throw bad("empty option");
    }
    const size_t eq = item.find('=');
    if (eq == std::string::npos) throw bad("option \"" + printable(item) + "\" has no '=' (write name=value)");
    const std::string key = trim(item.substr(0, eq)), value = trim(item.substr(eq + 1));
    if (key.empty()) throw bad("option without a name");
    if (!seen.insert(key).second) throw bad("option \"" + printable(key) + "\" given twice");
    v.options.emplace_back(key, value);
  }
  return v;
}

std::vector<std::string> split_backend_list(const std::string& text) {
  std::vector<std::string> out;
  int depth = 0;
  std::string item;
  auto flush = [&] {
    if (!trim(item).empty()) out.push_back(trim(item));
    item.clear();
  };
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth <= 0) {
      flush();
      continue;
    }
    item += c;
  }
  flush();
  return out;
}

std::vector<VariantRequest> parse_backend_list(const std::string& text, const std::string& file,
                                               const std::string& pointer) {
  std::vector<VariantRequest> out;
  for (const auto& entry : split_backend_list(text)) out.push_back(parse_variant(entry, file, pointer));
  return out;
}

OptionValues resolve_options(const std::string& backend, const OptionSpecs& specs,
                             const std::vector<std::pair<std::string, std::string>>& given, const std::string& file,
                             const std::string& pointer) {
  std::map<std::string, std::string> values;
  for (const auto& s : specs) values[s.name] = s.default_value;
  for (const auto& kv : given) {
    const std::string& key = kv.first;  // not a structured binding: lambdas capture it (clang < 16)
    const std::string& value = kv.second;
    const auto it = std::find_if(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.name == key; });
    if (it == specs.end()) {
      std::vector<std::string> names;
      for (const auto& s : specs) names.push_back(s.name);
      throw InputError(file, pointer,
                       "backend \"" + printable(backend) + "\" has no option \"" + printable(key) + "\" (value \"" +
                           printable(value) + "\"; its options: " + (names.empty() ? "none" : join(names, ", ")) +
                           "; `attnbench list backends --options`)");
    }
    values[key] = it->canonical(value, backend, file, pointer);
  }
  return OptionValues(std::move(values));
}

std::string variant_label(const std::string& backend, const OptionSpecs& specs, const OptionValues& values) {
  std::vector<std::string> parts;  // std::map order: sorted by name
  for (const auto& kv : values.all()) {
    const std::string& key = kv.first;  // not a structured binding: lambdas capture it (clang < 16)
    const std::string& value = kv.second;
    const auto it = std::find_if(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.name == key; });
    if (it == specs.end() || it->default_value != value) parts.push_back(key + "=" + value);
  }
  return parts.empty() ? backend : backend + "[" + join(parts, ",") + "]";
}

nlohmann::json options_json(const OptionSpecs& specs, const OptionValues& values) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& s : specs)
    if (values.all().count(s.name)) j[s.name] = s.typed(values.text(s.name));
  return j;
}

std::vector<std::pair<std::string, std::string>> option_pairs_from_json(const nlohmann::json& j) {
  std::vector<std::pair<std::string, std::string>> out;
  if (j.is_null()) return out;
  if (!j.is_object()) throw std::invalid_argument("backend options: not an object");
  for (const auto& [k, v] : j.items()) {
    if (v.is_boolean())
      out.emplace_back(k, v.get<bool>() ? "true" : "false");
    else if (v.is_number_integer())
      out.emplace_back(k, std::to_string(v.get<int64_t>()));
    else if (v.is_string())
      out.emplace_back(k, v.get<std::string>());
    else
      throw std::invalid_argument("backend option \"" + k + "\": not a bool, integer or string");
  }
  return out;
}

}  // namespace attnbench
