#include "harness/model/json_util.hpp"

#include <fstream>
#include <sstream>

namespace attnbench::jsonu {

namespace {
std::string escape_pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}
}  // namespace

std::string child_path(const std::string& path, const std::string& key) {
  return path + "/" + escape_pointer_token(key);
}
std::string child_path(const std::string& path, size_t index) {
  return path + "/" + std::to_string(index);
}

std::string show(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

nlohmann::json load_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(file, "", "cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(file, "", std::string("malformed JSON: ") + e.what());
  }
}

void require_object(const nlohmann::json& j, const std::string& file, const std::string& path) {
  if (!j.is_object()) throw InputError(file, path, "expected an object, got " + show(j));
}

void reject_unknown_keys(const nlohmann::json& j, const std::vector<std::string>& allowed,
                         const std::string& file, const std::string& path) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = false;
    for (const auto& a : allowed) ok = ok || a == it.key();
    if (!ok) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw InputError(file, child_path(path, it.key()),
                       "unknown field \"" + it.key() + "\" (expected one of: " + list + ")");
    }
  }
}

int64_t get_int(const nlohmann::json& j, const std::string& file, const std::string& path) {
  if (j.is_number_integer() || j.is_number_unsigned()) return j.get<int64_t>();
  if (j.is_number_float()) {
    double d = j.get<double>();
    if (d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
  }
  throw InputError(file, path, "expected an integer, got " + show(j));
}

double get_number(const nlohmann::json& j, const std::string& file, const std::string& path) {
  if (j.is_number()) return j.get<double>();
  throw InputError(file, path, "expected a number, got " + show(j));
}

std::string get_string(const nlohmann::json& j, const std::string& file, const std::string& path) {
  if (j.is_string()) return j.get<std::string>();
  throw InputError(file, path, "expected a string, got " + show(j));
}

bool get_bool(const nlohmann::json& j, const std::string& file, const std::string& path) {
  if (j.is_boolean()) return j.get<bool>();
  throw InputError(file, path, "expected true or false, got " + show(j));
}

std::vector<int64_t> get_int_array(const nlohmann::json& j, const std::string& file,
                                   const std::string& path) {
  if (!j.is_array()) throw InputError(file, path, "expected an array of integers, got " + show(j));
  std::vector<int64_t> out;
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) out.push_back(get_int(j[i], file, child_path(path, i)));
  return out;
}

int64_t opt_int(const nlohmann::json& obj, const std::string& key, int64_t fallback,
                const std::string& file, const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end()) return fallback;
  return get_int(*it, file, child_path(path, key));
}

double opt_number(const nlohmann::json& obj, const std::string& key, double fallback,
                  const std::string& file, const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  return get_number(*it, file, child_path(path, key));
}

std::string opt_string(const nlohmann::json& obj, const std::string& key,
                       const std::string& fallback, const std::string& file,
                       const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end()) return fallback;
  return get_string(*it, file, child_path(path, key));
}

const nlohmann::json& require(const nlohmann::json& obj, const std::string& key,
                              const std::string& file, const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end()) throw InputError(file, child_path(path, key), "missing required field");
  return *it;
}

}  // namespace attnbench::jsonu
