// The SQL connection under the results history (history/store.hpp): one small
// interface, two engines. SQLite (a file; Debian's libsqlite3 through the SQLiteCpp
// wrapper, libsqlitecpp-dev) is the embedded default; PostgreSQL (libpq,
// libpq-dev) serves a team. Both run the same SQL: parameters are written $1, $2,
// ... (PostgreSQL's syntax; SQLite binds them by name), and the few DDL words that
// differ come from Database::ddl().
//
// Errors: a failed statement throws DbError naming the database (file or URL
// without its password) and the engine's message; opening a file that is not a
// database, or a server that refuses the connection, throws the same.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace attnbench::history {

/// A failed database operation; what() names the database and the engine's message.
class DbError : public std::runtime_error {
 public:
  DbError(const std::string& database, const std::string& message)
      : std::runtime_error(database + ": " + message), database_(database), message_(message) {}
  const std::string& database() const { return database_; }
  /// The engine's message alone.
  const std::string& message() const { return message_; }

 private:
  std::string database_, message_;
};

/// One SQL value: NULL, a 64-bit integer, a double or text.
using DbValue = std::variant<std::nullptr_t, int64_t, double, std::string>;
/// One result row, columns in SELECT order.
using DbRow = std::vector<DbValue>;

/// The integer of `v` (a double is truncated); throws std::bad_variant_access for
/// NULL or text.
int64_t as_int(const DbValue& v);
/// The number of `v`; throws for NULL or text.
double as_double(const DbValue& v);
/// The text of `v` ("" for NULL; numbers as decimal text).
std::string as_text(const DbValue& v);
/// Whether `v` is NULL.
inline bool is_null(const DbValue& v) { return std::holds_alternative<std::nullptr_t>(v); }

/// A connection.
class Database {
 public:
  virtual ~Database() = default;
  /// Run one statement with parameters $1..$n bound to `params` in order; returns
  /// its rows (none for a statement without a result). Throws DbError.
  virtual std::vector<DbRow> query(const std::string& sql, const std::vector<DbValue>& params = {}) = 0;
  /// query() without rows.
  void exec(const std::string& sql, const std::vector<DbValue>& params = {}) { query(sql, params); }
  /// Start a write transaction that holds the database's write lock at once
  /// (SQLite: BEGIN IMMEDIATE, waiting up to the busy timeout; PostgreSQL: BEGIN
  /// and a transaction-level advisory lock when `exclusive`, so that schema
  /// creation and migration never race).
  virtual void begin(bool exclusive) = 0;
  virtual void commit() = 0;
  /// Roll back the open transaction; never throws.
  virtual void rollback() noexcept = 0;
  /// Names of the tables in the database (SQLite) or the current schema (PostgreSQL).
  virtual std::vector<std::string> tables() = 0;
  /// "sqlite" or "postgresql".
  virtual std::string engine() const = 0;
  /// DDL for `word`: "id" (an auto-numbered 64-bit primary key column type),
  /// "real" (double precision), "bigint".
  virtual std::string ddl(const std::string& word) const = 0;
  /// The database as messages name it: the file, or the URL without its password.
  const std::string& label() const { return label_; }

 protected:
  explicit Database(std::string label) : label_(std::move(label)) {}

 private:
  std::string label_;
};

/// RAII transaction: begin() in the constructor, rollback() in the destructor
/// unless commit() ran.
class Transaction {
 public:
  Transaction(Database& db, bool exclusive = false) : db_(db) { db_.begin(exclusive); }
  ~Transaction() {
    if (!done_) db_.rollback();
  }
  void commit() {
    db_.commit();
    done_ = true;
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

 private:
  Database& db_;
  bool done_ = false;
};

/// Whether `url` names a PostgreSQL server (postgresql:// or postgres://).
bool is_postgres_url(const std::string& url);
/// `url` with the password of its user-info part replaced by "***".
std::string redact_url(const std::string& url);

/// Open `url`: a postgresql:// or postgres:// URL (libpq's connection URI), else a
/// SQLite file path (an optional "sqlite:" prefix is dropped). `read_only`: the
/// file must exist and is never written. SQLite waits up to `busy_timeout_ms` for
/// another writer's lock. Throws DbError when the database cannot be opened or
/// this build has no PostgreSQL client (built without libpq-dev).
std::unique_ptr<Database> open_database(const std::string& url, bool read_only, int busy_timeout_ms = 120000);

/// The SQLite engine (history/db_sqlite.cpp).
std::unique_ptr<Database> open_sqlite(const std::string& path, bool read_only, int busy_timeout_ms);
/// The PostgreSQL engine (history/db_postgres.cpp); throws DbError in a build
/// without libpq.
std::unique_ptr<Database> open_postgres(const std::string& url);

}  // namespace attnbench::history
