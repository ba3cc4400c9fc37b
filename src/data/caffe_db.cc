#include "data/caffe_db.h"

#include <leveldb/db.h>
#include <leveldb/write_batch.h>
#include <lmdb.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "core/isolated_call.h"

namespace bks {

namespace fs = std::filesystem;

const char* db_backend_name(DbBackend b) { return b == DbBackend::lmdb ? "LMDB" : "LevelDB"; }

std::optional<DbBackend> detect_db(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return std::nullopt;
  if (fs::is_regular_file(fs::path(path) / "data.mdb", ec)) return DbBackend::lmdb;
  if (fs::is_regular_file(fs::path(path) / "CURRENT", ec)) return DbBackend::leveldb;
  return std::nullopt;
}

namespace {

void check_lmdb(int rc, const std::string& path, const char* what) {
  if (rc != MDB_SUCCESS) input_error("{}: cannot {} the LMDB database ({})", path, what, mdb_strerror(rc));
}

// Sends each record as (key length, key, value length, value).
void send(ChildWriter& out, std::string_view key, std::string_view value) {
  out.value(static_cast<uint64_t>(key.size()));
  out.write(key.data(), key.size());
  out.value(static_cast<uint64_t>(value.size()));
  out.write(value.data(), value.size());
}

void read_lmdb(const std::string& path, ChildWriter& out) {
  std::error_code ec;
  const auto bytes = fs::file_size(fs::path(path) / "data.mdb", ec);
  if (ec) input_error("{}: cannot read data.mdb ({})", path, ec.message());
  // LMDB maps the whole file: the child's address-space limit makes room for it.
  allow_child_memory(static_cast<uint64_t>(bytes));
  MDB_env* env = nullptr;
  check_lmdb(mdb_env_create(&env), path, "open");
  // The map as large as the file, not the size its writer reserved (Caffe's tools and ours
  // reserve up to 1 TiB of address space, more than the child may map).
  check_lmdb(mdb_env_set_mapsize(env, std::max<size_t>(static_cast<size_t>(bytes), 1 << 16)), path, "open");
  int rc = mdb_env_open(env, path.c_str(), MDB_RDONLY | MDB_NOTLS, 0664);
  // A database on a read-only disk has no lock file to write: Caffe opens it without locking.
  if (rc == EACCES || rc == EROFS) rc = mdb_env_open(env, path.c_str(), MDB_RDONLY | MDB_NOTLS | MDB_NOLOCK, 0664);
  check_lmdb(rc, path, "open");
  MDB_txn* txn = nullptr;
  check_lmdb(mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn), path, "read");
  MDB_dbi dbi;
  check_lmdb(mdb_dbi_open(txn, nullptr, 0, &dbi), path, "read");
  MDB_cursor* cur = nullptr;
  check_lmdb(mdb_cursor_open(txn, dbi, &cur), path, "read");
  MDB_val k, v;
  for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == MDB_SUCCESS; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
    send(out, {static_cast<const char*>(k.mv_data), k.mv_size}, {static_cast<const char*>(v.mv_data), v.mv_size});
  if (rc != MDB_NOTFOUND) check_lmdb(rc, path, "read");
  mdb_cursor_close(cur);
  mdb_txn_abort(txn);
  mdb_env_close(env);
}

void read_leveldb(const std::string& path, ChildWriter& out) {
  leveldb::Options opt;
  opt.create_if_missing = false;
  opt.paranoid_checks = true;
  leveldb::DB* raw = nullptr;
  leveldb::Status st = leveldb::DB::Open(opt, path, &raw);
  if (!st.ok()) input_error("{}: cannot open the LevelDB database ({})", path, st.ToString());
  std::unique_ptr<leveldb::DB> db(raw);
  leveldb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;
  std::unique_ptr<leveldb::Iterator> it(db->NewIterator(ro));
  for (it->SeekToFirst(); it->Valid(); it->Next())
    send(out, {it->key().data(), it->key().size()}, {it->value().data(), it->value().size()});
  if (!it->status().ok()) input_error("{}: cannot read the LevelDB database ({})", path, it->status().ToString());
}

class LmdbWriter final : public DbWriter {
 public:
  explicit LmdbWriter(const std::string& path) : path_(path) {
    check_lmdb(mdb_env_create(&env_), path, "create");
    // The map only reserves address space; the file grows with what is written.
    check_lmdb(mdb_env_set_mapsize(env_, size_t{1} << 40), path, "create");
    check_lmdb(mdb_env_open(env_, path.c_str(), 0, 0664), path, "create");
    begin();
  }
  ~LmdbWriter() override {
    if (txn_) mdb_txn_abort(txn_);
    mdb_env_close(env_);
  }
  void put(std::string_view key, std::string_view value) override {
    MDB_val k{key.size(), const_cast<char*>(key.data())}, v{value.size(), const_cast<char*>(value.data())};
    check_lmdb(mdb_put(txn_, dbi_, &k, &v, 0), path_, "write");
  }
  void commit() override {
    int rc = mdb_txn_commit(txn_);
    txn_ = nullptr;
    check_lmdb(rc, path_, "commit");
    begin();
  }

 private:
  void begin() {
    check_lmdb(mdb_txn_begin(env_, nullptr, 0, &txn_), path_, "write");
    check_lmdb(mdb_dbi_open(txn_, nullptr, 0, &dbi_), path_, "write");
  }
  std::string path_;
  MDB_env* env_ = nullptr;
  MDB_txn* txn_ = nullptr;
  MDB_dbi dbi_ = 0;
};

class LevelDbWriter final : public DbWriter {
 public:
  explicit LevelDbWriter(const std::string& path) : path_(path) {
    leveldb::Options opt;
    opt.create_if_missing = true;
    opt.error_if_exists = true;
    opt.write_buffer_size = 256 << 20;  // as Caffe's tools
    leveldb::DB* raw = nullptr;
    leveldb::Status st = leveldb::DB::Open(opt, path, &raw);
    if (!st.ok()) input_error("{}: cannot create the LevelDB database ({})", path, st.ToString());
    db_.reset(raw);
  }
  void put(std::string_view key, std::string_view value) override {
    batch_.Put(leveldb::Slice(key.data(), key.size()), leveldb::Slice(value.data(), value.size()));
  }
  void commit() override {
    leveldb::WriteOptions wo;
    wo.sync = true;
    leveldb::Status st = db_->Write(wo, &batch_);
    if (!st.ok()) runtime_error("{}: cannot write to the LevelDB database ({})", path_, st.ToString());
    batch_.Clear();
  }

 private:
  std::string path_;
  std::unique_ptr<leveldb::DB> db_;
  leveldb::WriteBatch batch_;
};

}  // namespace

void read_db(const std::string& path, DbBackend backend,
             const std::function<void(std::string_view, std::string_view)>& record) {
  const char* library = backend == DbBackend::lmdb ? "liblmdb" : "libleveldb";
  ChildOutput result = run_isolated(path, library, [&](ChildWriter& out) {
    if (backend == DbBackend::lmdb)
      read_lmdb(path, out);
    else
      read_leveldb(path, out);
  });
  ChildReader in(result, path);
  while (in.left() > 0) {
    auto kn = in.value<uint64_t>();
    if (kn > in.left()) input_error("{}: the reading process returned a truncated record", path);
    std::string_view key(reinterpret_cast<const char*>(in.bytes(kn)), kn);
    auto vn = in.value<uint64_t>();
    if (vn > in.left()) input_error("{}: the reading process returned a truncated record", path);
    std::string_view value(reinterpret_cast<const char*>(in.bytes(vn)), vn);
    record(key, value);
  }
}

std::unique_ptr<DbWriter> DbWriter::create(const std::string& path, DbBackend backend) {
  std::error_code ec;
  if (fs::exists(path, ec)) input_error("{}: already exists; give a new database path", path);
  if (backend == DbBackend::leveldb) return std::make_unique<LevelDbWriter>(path);
  // LMDB opens an existing directory.
  if (!fs::create_directories(path, ec)) input_error("{}: cannot create the directory ({})", path, ec.message());
  return std::make_unique<LmdbWriter>(path);
}

}  // namespace bks
