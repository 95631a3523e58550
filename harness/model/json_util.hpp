// Typed, path-aware reads from nlohmann::json for input files. Every failure
// throws InputError naming the file, the JSON pointer and the offending value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/errors.hpp"

namespace attnbench::jsonu {

/// JSON pointer of a child: child_path("/mask", 0) == "/mask/0".
std::string child_path(const std::string& path, const std::string& key);
std::string child_path(const std::string& path, size_t index);

/// The value as compact JSON text, shortened to ~80 characters for messages.
std::string show(const nlohmann::json& v);

/// Parse a JSON file. Throws InputError (path "") if unreadable or malformed,
/// with the parser's byte position.
nlohmann::json load_file(const std::string& file);

/// Throws InputError unless `j` is an object.
void require_object(const nlohmann::json& j, const std::string& file, const std::string& path);
/// Throws InputError listing the first key of `j` not in `allowed`.
void reject_unknown_keys(const nlohmann::json& j, const std::vector<std::string>& allowed,
                         const std::string& file, const std::string& path);

/// Integer field (must be integral JSON number). Throws InputError on a wrong type.
int64_t get_int(const nlohmann::json& j, const std::string& file, const std::string& path);
/// Number field (integer or float).
double get_number(const nlohmann::json& j, const std::string& file, const std::string& path);
std::string get_string(const nlohmann::json& j, const std::string& file, const std::string& path);
bool get_bool(const nlohmann::json& j, const std::string& file, const std::string& path);
std::vector<int64_t> get_int_array(const nlohmann::json& j, const std::string& file,
                                   const std::string& path);

/// Optional member reads: return `fallback` when `key` is absent (or null for the
/// nullable variants); throw InputError when present with the wrong type.
int64_t opt_int(const nlohmann::json& obj, const std::string& key, int64_t fallback,
                const std::string& file, const std::string& path);
double opt_number(const nlohmann::json& obj, const std::string& key, double fallback,
                  const std::string& file, const std::string& path);
std::string opt_string(const nlohmann::json& obj, const std::string& key,
                       const std::string& fallback, const std::string& file,
                       const std::string& path);
/// Required member: throws InputError "missing required field" if absent.
const nlohmann::json& require(const nlohmann::json& obj, const std::string& key,
                              const std::string& file, const std::string& path);

}  // namespace attnbench::jsonu
