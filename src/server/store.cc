#include "server/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace bks::server {

namespace {

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
  lock_for_this_process();
  if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    ::close(lock_fd_);
    throw RuntimeError(path + ": cannot open the database (" + msg + ")");
  }
  try {
    sqlite3_busy_timeout(db_, 5000);
    exec("PRAGMA journal_mode=WAL");
    for (const char* t : {"datasets", "models", "jobs"}) {
      exec(std::string("CREATE TABLE IF NOT EXISTS ") + t +
           " (id INTEGER PRIMARY KEY AUTOINCREMENT, doc TEXT NOT NULL)");
      Statement st(db_, std::string("SELECT id, doc FROM ") + t, path_);
      Rows& r = rows(t);
      while (sqlite3_step(st.s) == SQLITE_ROW) {
        json doc = json::parse(reinterpret_cast<const char*>(sqlite3_column_text(st.s, 1)), nullptr, false);
        // A row damaged outside bakusoku is left in the file, out of sight, not fatal.
        if (doc.is_discarded() || !doc.is_object())
          fmt::print(stderr, "{}: table {}, row {} is not a JSON object; leaving it out\n", path_, t,
                     sqlite3_column_int64(st.s, 0));
        else
          r[sqlite3_column_int64(st.s, 0)] = std::move(doc);
      }
    }
  } catch (...) {
    sqlite3_close(db_);
    ::close(lock_fd_);
    throw;
  }
}

Store::~Store() {
  sqlite3_close(db_);
  ::close(lock_fd_);
}

// One server per data directory: a second would run the same queued jobs and see a stale
// copy of the documents. The lock goes with the process, also when it is killed.
void Store::lock_for_this_process() {
  const std::string lock_path = path_ + ".lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) throw RuntimeError(fmt::format("{}: cannot open ({})", lock_path, std::strerror(errno)));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(lock_fd_);
    if (err == EWOULDBLOCK)
      input_error("{}: another bakusoku serve uses this data directory; stop it or give --data-dir another folder",
                  path_);
    throw RuntimeError(fmt::format("{}: cannot lock ({})", lock_path, std::strerror(err)));
  }
}

void Store::exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw RuntimeError(path_ + ": " + msg);
  }
}

Store::Rows& Store::rows(const std::string& table) {
  if (table == "datasets") return datasets_;
  if (table == "models") return models_;
  if (table == "jobs") return jobs_;
  throw RuntimeError("store: no table '" + table + "'");
}

void Store::write_doc(const std::string& table, const json& doc) {
  Statement st(db_, "UPDATE " + table + " SET doc = ?1 WHERE id = ?2", path_);
  std::string text = doc.dump();
  sqlite3_bind_text(st.s, 1, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 2, doc.at("id").get<int64_t>());
  if (sqlite3_step(st.s) != SQLITE_DONE) throw RuntimeError(path_ + ": " + sqlite3_errmsg(db_));
}

int64_t Store::insert(const std::string& table, json& doc) {
  std::unique_lock lock(mu_);
  Rows& r = rows(table);
  Statement st(db_, "INSERT INTO " + table + " (doc) VALUES ('{}')", path_);
  if (sqlite3_step(st.s) != SQLITE_DONE) throw RuntimeError(path_ + ": " + sqlite3_errmsg(db_));
  const int64_t id = sqlite3_last_insert_rowid(db_);
  doc["id"] = id;
  write_doc(table, doc);
  r[id] = doc;
  ++r.version;
  return id;
}

std::optional<json> Store::get(const std::string& table, int64_t id) {
  std::shared_lock lock(mu_);
  const Rows& r = rows(table);
  auto it = r.find(id);
  if (it == r.end()) return std::nullopt;
  return it->second;
}

std::vector<json> Store::list(const std::string& table, uint64_t* version) {
  std::shared_lock lock(mu_);
  const Rows& r = rows(table);
  if (version) *version = r.version;
  std::vector<json> out;
  out.reserve(r.size());
  for (const auto& [id, doc] : r) out.push_back(doc);
  return out;
}

uint64_t Store::version(const std::string& table) {
  std::shared_lock lock(mu_);
  return rows(table).version;
}

void Store::put(const std::string& table, const json& doc) {
  std::unique_lock lock(mu_);
  Rows& r = rows(table);
  const int64_t id = doc.at("id").get<int64_t>();
  write_doc(table, doc);
  // As SQLite's UPDATE: a document that is not (or no longer) there is not added.
  if (auto it = r.find(id); it != r.end()) it->second = doc, ++r.version;
}

bool Store::remove(const std::string& table, int64_t id) {
  std::unique_lock lock(mu_);
  Rows& r = rows(table);
  Statement st(db_, "DELETE FROM " + table + " WHERE id = ?1", path_);
  sqlite3_bind_int64(st.s, 1, id);
  if (sqlite3_step(st.s) != SQLITE_DONE) throw RuntimeError(path_ + ": " + sqlite3_errmsg(db_));
  if (r.erase(id)) ++r.version;
  return sqlite3_changes(db_) > 0;
}

}  // namespace bks::server
