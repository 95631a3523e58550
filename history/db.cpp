// Engine-independent parts of history/db.hpp.
#include "history/db.hpp"

#include <cstdio>

namespace attnbench::history {

int64_t as_int(const DbValue& v) {
  if (const auto* d = std::get_if<double>(&v)) return static_cast<int64_t>(*d);
  return std::get<int64_t>(v);
}

double as_double(const DbValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return std::get<double>(v);
}

std::string as_text(const DbValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v)) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.17g", *d);
    return buf;
  }
  return "";
}

bool is_postgres_url(const std::string& url) {
  return url.rfind("postgresql://", 0) == 0 || url.rfind("postgres://", 0) == 0;
}

std::string redact_url(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const size_t start = scheme + 3;
  const size_t at = url.find('@', start);
  const size_t slash = url.find('/', start);
  if (at == std::string::npos || (slash != std::string::npos && slash < at)) return url;
  const size_t colon = url.find(':', start);
  if (colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon + 1) + "***" + url.substr(at);
}

std::unique_ptr<Database> open_database(const std::string& url, bool read_only, int busy_timeout_ms) {
  if (is_postgres_url(url)) return open_postgres(url);
  std::string path = url;
  if (path.rfind("sqlite://", 0) == 0) path = path.substr(9);
  else if (path.rfind("sqlite:", 0) == 0) path = path.substr(7);
  if (path.empty()) throw DbError("<database>", "empty database path");
  return open_sqlite(path, read_only, busy_timeout_ms);
}

}  // namespace attnbench::history
