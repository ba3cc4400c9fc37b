// Caffe's key-value databases: LMDB and LevelDB directories of Datum records, as
// convert_imageset and convert_mnist_data write them. Records are read in key order (the
// order Caffe's Data layer reads them).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace bks {

enum class DbBackend { lmdb, leveldb };
const char* db_backend_name(DbBackend b);

// Which database the directory `path` holds (LMDB: data.mdb; LevelDB: CURRENT), if any.
std::optional<DbBackend> detect_db(const std::string& path);

// Calls `record` for every (key, value) in key order. The library runs in a forked child
// (core/isolated_call.h), so a crafted database that crashes it becomes an InputError naming
// `path`; the records come back through shared memory and stay valid during the call.
void read_db(const std::string& path, DbBackend backend,
             const std::function<void(std::string_view key, std::string_view value)>& record);

// Writes a new database (the directory must not exist) in batches, as Caffe's tools do.
class DbWriter {
 public:
  static std::unique_ptr<DbWriter> create(const std::string& path, DbBackend backend);
  virtual ~DbWriter() = default;
  virtual void put(std::string_view key, std::string_view value) = 0;
  // Makes what was put so far durable.
  virtual void commit() = 0;
};

}  // namespace bks
