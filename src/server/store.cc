#include "server/store.h"

#include <sqlite3.h>

#include "core/error.h"

namespace bks::server {

namespace {

const char* checked_table(const std::string& t) {
  if (t == "datasets" || t == "models" || t == "jobs") return t.c_str();
  throw RuntimeError("store: no table '" + t + "'");
}

// One prepared statement, finalized on every path.
struct Statement {
  sqlite3_stmt* s = nullptr;
  Statement(sqlite3* db, const std::string& sql, const std::string& path) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) != SQLITE_OK)
      throw RuntimeError(path + ": " + sqlite3_errmsg(db));
  }
  ~Statement() { sqlite3_finalize(s); }
};

}  // namespace

Store::Store(const std::string& path) : path_(path) {
  if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    throw RuntimeError(path + ": cannot open the database (" + msg + ")");
  }
  sqlite3_busy_timeout(db_, 5000);
  exec("PRAGMA journal_mode=WAL");
  for (const char* t : {"datasets", "models", "jobs"})
    exec(std::string("CREATE TABLE IF NOT EXISTS ") + t + " (id INTEGER PRIMARY KEY AUTOINCREMENT, doc TEXT NOT NULL)");
}

Store::~Store() { sqlite3_close(db_); }

void Store::exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw RuntimeError(path_ + ": " + msg);
  }
}

int64_t Store::insert(const std::string& table, json& doc) {
  std::lock_guard<std::mutex> lock(mu_);
  Statement st(db_, std::string("INSERT INTO ") + checked_table(table) + " (doc) VALUES ('{}')", path_);
  if (sqlite3_step(st.s) != SQLITE_DONE) throw RuntimeError(path_ + ": " + sqlite3_errmsg(db_));
  int64_t id = sqlite3_last_insert_rowid(db_);
  doc["id"] = id;
  Statement up(db_, std::string("UPDATE ") + table + " SET doc = ?1 WHERE id = ?2", path_);
  std::string text = doc.dump();
  sqlite3_bind_text(up.s, 1, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(up.s, 2, id);
  if (sqlite3_step(up.s) != SQLITE_DONE) throw RuntimeError(path_ + ": " + sqlite3_errmsg(db_));
  return id;
}

std::optional<json> Store::get(const std::string& table, int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  Statement st(db_, std::string("SELECT doc FROM ") + checked_table(table) + " WHERE id = ?1", path_);
  sqlite3_bind_int64(st.s, 1, id);
  if (sqlite3_step(st.s) != SQLITE_ROW) return std::nullopt;
  return json::parse(reinterpret_cast<const char*>(sqlite3_column_text(st.s, 0)));
}

std::vector<json> Store::list(const std::string& table) {
  std::lock_guard<std::mutex> lock(mu_);
  Statement st(db_, std::string("SELECT doc FROM ") + checked_table(table) + " ORDER BY id", path_);
  std::vector<json> out;
  while (sqlite3_step(st.s) == SQLITE_ROW)
    out.push_back(json::parse(reinterpret_cast<const char*>(sqlite3_column_text(st.s, 0))));
  return out;
}

void Store::put(const std::string& table, const json& doc) {
  std::lock_guard<std::mutex> lock(mu_);
  Statement st(db_, std::string("UPDATE ") + checked_table(table) + " SET doc = ?1 WHERE id = ?2", path_);
  std::string text = doc.dump();
  sqlite3_bind_text(st.s, 1, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 2, doc.at("id").get<int64_t>());
  if (sqlite3_step(st.s) != SQLITE_DONE) throw RuntimeError(path_ + ": " + sqlite3_errmsg(db_));
}

bool Store::remove(const std::string& table, int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  Statement st(db_, std::string("DELETE FROM ") + checked_table(table) + " WHERE id = ?1", path_);
  sqlite3_bind_int64(st.s, 1, id);
  if (sqlite3_step(st.s) != SQLITE_DONE) throw RuntimeError(path_ + ": " + sqlite3_errmsg(db_));
  return sqlite3_changes(db_) > 0;
}

}  // namespace bks::server
