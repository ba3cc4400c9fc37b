// The dashboard's store: datasets, models and jobs as JSON documents in one SQLite file in
// the data directory, so they survive a restart of the server. Thread-safe.
//
// The server is the database's only user (the constructor locks it for this process), so
// every document is also kept in memory: reads, which every page poll makes, take a shared
// lock and copy a document instead of querying SQLite and parsing JSON; writes go to SQLite
// first and then to memory.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

struct sqlite3;

namespace bks::server {

using json = nlohmann::json;

class Store {
 public:
  // Opens (creating if needed) the database at `path` and reads it into memory. Throws
  // InputError when another process holds it, RuntimeError when it cannot be opened.
  explicit Store(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // table: "datasets", "models" or "jobs". insert() sets doc["id"] and returns it.
  int64_t insert(const std::string& table, json& doc);
  std::optional<json> get(const std::string& table, int64_t id);
  // By id; `version`, when given, receives the table's version (see version()) that this
  // list is.
  std::vector<json> list(const std::string& table, uint64_t* version = nullptr);
  // Counts the table's changes (insert, put, remove): equal versions, equal documents.
  uint64_t version(const std::string& table);
  void put(const std::string& table, const json& doc);  // replaces the document doc["id"]
  bool remove(const std::string& table, int64_t id);    // false when there was no such row

 private:
  struct Rows : std::map<int64_t, json> {
    uint64_t version = 0;
  };
  void exec(const std::string& sql);
  void lock_for_this_process();
  Rows& rows(const std::string& table);  // the table's documents in memory
  void write_doc(const std::string& table, const json& doc);
  sqlite3* db_ = nullptr;
  std::string path_;
  int lock_fd_ = -1;
  std::shared_mutex mu_;
  Rows datasets_, models_, jobs_;
};

}  // namespace bks::server
