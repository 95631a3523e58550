// The SQLite engine of history/db.hpp, through SQLiteCpp (libsqlitecpp-dev).
#include <SQLiteCpp/SQLiteCpp.h>
#include <sqlite3.h>

#include <filesystem>

#include "history/db.hpp"

namespace attnbench::history {

namespace {

class SqliteDatabase final : public Database {
 public:
  SqliteDatabase(const std::string& path, bool read_only, int busy_timeout_ms)
      : Database(path), db_(open(path, read_only, busy_timeout_ms)) {}

  std::vector<DbRow> query(const std::string& sql, const std::vector<DbValue>& params) override {
    try {
      SQLite::Statement st(db_, sql);
      for (size_t i = 0; i < params.size(); ++i) {
        std::string name(1, '$');
        name += std::to_string(i + 1);
        if (st.getIndex(name.c_str()) == 0) continue;  // a parameter the statement does not use
        std::visit(
            [&](const auto& v) {
              using T = std::decay_t<decltype(v)>;
              if constexpr (std::is_same_v<T, std::nullptr_t>) st.bind(name.c_str());
              else st.bind(name.c_str(), v);
            },
            params[i]);
      }
      std::vector<DbRow> rows;
      while (st.executeStep()) {
        DbRow row;
        for (int c = 0; c < st.getColumnCount(); ++c) {
          const SQLite::Column col = st.getColumn(c);
          if (col.isNull()) row.emplace_back(nullptr);
          else if (col.isInteger()) row.emplace_back(static_cast<int64_t>(col.getInt64()));
          else if (col.isFloat()) row.emplace_back(col.getDouble());
          else row.emplace_back(col.getString());
        }
        rows.push_back(std::move(row));
      }
      return rows;
    } catch (const SQLite::Exception& e) {
      throw DbError(label(), e.what());
    }
  }

  void begin(bool) override { exec("BEGIN IMMEDIATE"); }
  void commit() override { exec("COMMIT"); }
  void rollback() noexcept override {
    try {
      if (!sqlite3_get_autocommit(db_.getHandle())) db_.exec("ROLLBACK");
    } catch (...) {
    }
  }
  std::vector<std::string> tables() override {
    std::vector<std::string> out;
    for (const auto& r : query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name", {}))
      out.push_back(as_text(r.at(0)));
    return out;
  }
  std::string engine() const override { return "sqlite"; }
  std::string ddl(const std::string& word) const override {
    if (word == "id") return "INTEGER PRIMARY KEY";  // the rowid alias: auto-numbered
    if (word == "real") return "REAL";
    return "INTEGER";
  }

 private:
  static SQLite::Database open(const std::string& path, bool read_only, int busy_timeout_ms) {
    try {
      std::error_code ec;
      if (read_only && !std::filesystem::exists(path, ec))
        throw DbError(path, "no such history database (create it with `attnbench history add`)");
      SQLite::Database db(path, read_only ? SQLite::OPEN_READONLY : (SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE),
                          busy_timeout_ms);
      db.exec("PRAGMA foreign_keys = ON");
      return db;
    } catch (const SQLite::Exception& e) {
      throw DbError(path, e.what());
    }
  }
  SQLite::Database db_;
};

}  // namespace

std::unique_ptr<Database> open_sqlite(const std::string& path, bool read_only, int busy_timeout_ms) {
  return std::make_unique<SqliteDatabase>(path, read_only, busy_timeout_ms);
}

}  // namespace attnbench::history
