// The dashboard's store: datasets, models and jobs as JSON documents in one SQLite file in
// the data directory, so they survive a restart of the server. Thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace bks::server {

using json = nlohmann::json;

class Store {
 public:
  // Opens (creating if needed) the database at `path`. Throws RuntimeError naming it.
  explicit Store(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // table: "datasets", "models" or "jobs". insert() sets doc["id"] and returns it.
  int64_t insert(const std::string& table, json& doc);
  std::optional<json> get(const std::string& table, int64_t id);
  std::vector<json> list(const std::string& table);     // by id
  void put(const std::string& table, const json& doc);  // replaces the document doc["id"]
  bool remove(const std::string& table, int64_t id);    // false when there was no such row

 private:
  void exec(const std::string& sql);
  sqlite3* db_ = nullptr;
  std::string path_;
  std::mutex mu_;
};

}  // namespace bks::server
