#include "data/shared_dataset.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"

namespace bks {
namespace {

constexpr char kMagic[8] = {'B', 'K', 'S', 'S', 'H', 'D', 'S', '1'};
constexpr uint64_t kAlign = 64;

struct Sharing {
  std::mutex mu;
  bool on = false;
  std::string tag, dir;
  std::vector<std::string> created;
};
Sharing& sharing() {
  static Sharing s;
  return s;
}

// Little-endian values and length-prefixed strings, appended.
struct Writer {
  std::string out;
  template <class T>
  void value(T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void text(const std::string& s) {
    value<uint64_t>(s.size());
    out += s;
  }
};

// The same, read back from a mapping; every read is checked against its end.
struct Reader {
  const uint8_t* p;
  size_t size, at = 0;
  bool ok = true;
  template <class T>
  T value() {
    T v{};
    if (!ok || size - at < sizeof(T)) return ok = false, v;
    std::memcpy(&v, p + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::string text() {
    uint64_t n = value<uint64_t>();
    if (!ok || size - at < n) return ok = false, std::string();
    std::string s(reinterpret_cast<const char*>(p + at), n);
    at += n;
    return s;
  }
};

// The header of `ds` (key, whether it is shared, its fields with their data offsets) and
// the file's total size.
std::string header(const std::string& key, const Dataset* ds, uint64_t& total) {
  Writer w;
  w.out.append(kMagic, sizeof(kMagic));
  w.text(key);
  w.value<uint8_t>(ds ? 1 : 0);
  if (ds) {
    w.text(ds->source);
    w.text(ds->format);
    w.value<int64_t>(ds->size);
    w.value<uint32_t>(static_cast<uint32_t>(ds->fields.size()));
  }
  // Offsets depend on the header's own length: lay the fields out after a first pass.
  const size_t fixed = w.out.size();
  size_t per_field = 0;
  if (ds)
    for (const DatasetField& f : ds->fields) per_field += 8 + f.name.size() + 1 + 4 + 8 * f.sample_shape.size() + 8 + 8;
  uint64_t offset = (fixed + per_field + 8 + kAlign - 1) / kAlign * kAlign;  // 8: the checksum
  if (ds)
    for (const DatasetField& f : ds->fields) {
      w.text(f.name);
      w.value<uint8_t>(static_cast<uint8_t>(f.dtype));
      w.value<uint32_t>(static_cast<uint32_t>(f.sample_shape.size()));
      for (int64_t d : f.sample_shape) w.value<int64_t>(d);
      w.value<uint64_t>(offset);
      w.value<uint64_t>(f.byte_size());
      offset = (offset + f.byte_size() + kAlign - 1) / kAlign * kAlign;
    }
  total = std::max<uint64_t>(offset, w.out.size() + 8);
  // The header's own checksum: a copy changed after it was written is not trusted.
  w.value<uint64_t>(fnv1a(w.out));
  return w.out;
}

struct Mapping {
  void* p = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (p != MAP_FAILED) munmap(p, size);
  }
};

enum class Found { none, unshared, dataset };

// The dataset in file `path` if it holds `key`: Found::none when there is no such file (or
// it is not one of ours), Found::unshared when the rank that read the source left word
// that it cannot be shared.
Found map_file(const std::string& path, const std::string& key, std::shared_ptr<const Dataset>& out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Found::none;
  struct stat st {};
  auto map = std::make_shared<Mapping>();
  if (fstat(fd, &st) == 0 && st.st_size > 0) {
    map->size = static_cast<size_t>(st.st_size);
    map->p = mmap(nullptr, map->size, PROT_READ, MAP_SHARED, fd, 0);
  }
  ::close(fd);
  if (map->p == MAP_FAILED) return Found::none;
  Reader r{static_cast<const uint8_t*>(map->p), map->size};
  if (map->size < sizeof(kMagic) || std::memcmp(map->p, kMagic, sizeof(kMagic)) != 0) return Found::none;
  r.at = sizeof(kMagic);
  if (r.text() != key || !r.ok) return Found::none;
  // The header's checksum follows its last field.
  auto checksum_ok = [&] {
    const size_t end = r.at;
    const uint64_t stored = r.value<uint64_t>();
    return r.ok && stored == fnv1a(std::string_view(static_cast<const char*>(map->p), end));
  };
  if (r.value<uint8_t>() == 0) return r.ok && checksum_ok() ? Found::unshared : Found::none;
  auto ds = std::make_shared<Dataset>();
  ds->source = r.text();
  ds->format = r.text();
  ds->size = r.value<int64_t>();
  const uint32_t fields = r.value<uint32_t>();
  for (uint32_t i = 0; r.ok && i < fields && i < 64; ++i) {
    DatasetField f;
    f.name = r.text();
    f.dtype = static_cast<DType>(r.value<uint8_t>());
    const uint32_t dims = r.value<uint32_t>();
    for (uint32_t d = 0; r.ok && d < dims && d < 8; ++d) f.sample_shape.push_back(r.value<int64_t>());
    const uint64_t offset = r.value<uint64_t>(), length = r.value<uint64_t>();
    // Offsets as header() lays them out (aligned: float fields are read in place), and
    // samples of at least one value, so that the sample count is bounded by the bytes.
    if (!r.ok || dims > 8 || (f.dtype != DType::u8 && f.dtype != DType::f32) || offset > map->size ||
        length > map->size - offset || offset % kAlign != 0)
      return Found::none;
    for (int64_t d : f.sample_shape)
      if (d < 1) return Found::none;
    // The declared sizes must multiply out, without overflow, to exactly the bytes stored.
    std::vector<int64_t> factors = f.sample_shape;
    factors.push_back(ds->size);
    factors.push_back(static_cast<int64_t>(dtype_size(f.dtype)));
    int64_t expected = 0;
    if (!checked_product(factors, static_cast<int64_t>(map->size), expected) ||
        length != static_cast<uint64_t>(expected))
      return Found::none;
    f.mapping = map;
    f.mapped = static_cast<const uint8_t*>(map->p) + offset;
    f.mapped_size = length;
    ds->fields.push_back(std::move(f));
  }
  if (!r.ok || fields == 0 || ds->fields.size() != fields || !checksum_ok()) return Found::none;
  out = std::move(ds);
  return Found::dataset;
}

// Writes `ds` (or, null, the word that it is not shared) under `path` through a temporary
// file renamed into place; false, with a warning, when that cannot be done.
bool write_file(const std::string& path, const std::string& key, const Dataset* ds) {
  uint64_t total = 0;
  const std::string head = header(key, ds, total);
  struct statvfs vfs {};
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (statvfs(dir.c_str(), &vfs) == 0 && static_cast<double>(vfs.f_bavail) * vfs.f_frsize < 1.05 * total) {
    log::warn("{}: {:.0f} MB free, too little for a {:.0f} MB shared copy of {}; each rank reads its own", dir,
              static_cast<double>(vfs.f_bavail) * vfs.f_frsize / 1e6, total / 1e6, ds ? ds->source : key);
    return false;
  }
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = ::pwrite(fd, head.data(), head.size(), 0) == static_cast<ssize_t>(head.size());
  if (ds) {
    // Offsets as header() laid them out.
    uint64_t offset = (head.size() + kAlign - 1) / kAlign * kAlign;
    for (const DatasetField& f : ds->fields) {
      for (size_t done = 0; ok && done < f.byte_size();) {
        ssize_t n = ::pwrite(fd, f.data() + done, f.byte_size() - done, static_cast<off_t>(offset + done));
        ok = n > 0;
        done += ok ? static_cast<size_t>(n) : 0;
      }
      offset = (offset + f.byte_size() + kAlign - 1) / kAlign * kAlign;
    }
    ok = ok && ::ftruncate(fd, static_cast<off_t>(total)) == 0;
  }
  ok = ::close(fd) == 0 && ok;
  if (ok) ok = std::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) {
    std::remove(tmp.c_str());
    log::warn("{}: could not write the shared copy of {} ({}); each rank reads its own", path, ds ? ds->source : key,
              std::strerror(errno));
  }
  return ok;
}

}  // namespace

void share_datasets_between_processes(const std::string& tag, const std::string& dir) {
  Sharing& s = sharing();
  std::lock_guard lk(s.mu);
  s.on = !tag.empty();
  s.tag = tag;
  s.dir = dir;
}

bool datasets_shared_between_processes() {
  Sharing& s = sharing();
  std::lock_guard lk(s.mu);
  return s.on;
}

std::shared_ptr<const Dataset> open_shared_dataset(const std::string& key,
                                                   const std::function<std::shared_ptr<const Dataset>()>& load) {
  Sharing& s = sharing();
  std::string base;
  {
    std::lock_guard lk(s.mu);
    base = fmt::format("{}/bakusoku-{}-{:016x}", s.dir, s.tag, fnv1a(key));
  }
  // One rank at a time: the first reads the source, the rest find its copy.
  int lock = ::open((base + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0 || flock(lock, LOCK_EX) != 0) {
    if (lock >= 0) ::close(lock);
    log::warn("{}: cannot take the lock for sharing {} ({}); this rank reads its own copy", s.dir, key,
              std::strerror(errno));
    return load();
  }
  struct Unlock {
    int fd;
    ~Unlock() {
      flock(fd, LOCK_UN);
      ::close(fd);
    }
  } unlock{lock};
  std::shared_ptr<const Dataset> ds;
  switch (map_file(base, key, ds)) {
    case Found::dataset: log::debug("{}: mapped the copy another rank read", ds->source); return ds;
    case Found::unshared: return load();
    case Found::none: break;
  }
  std::shared_ptr<const Dataset> loaded = load();
  bool shareable = true;
  for (const DatasetField& f : loaded->fields) shareable = shareable && !f.encoded;
  const bool written = write_file(base, key, shareable ? loaded.get() : nullptr);
  {
    std::lock_guard lk(s.mu);
    s.created.push_back(base + ".lock");
    if (written) s.created.push_back(base);
  }
  if (!written || !shareable) {
    if (!written) write_file(base, key, nullptr);  // tell the others not to wait for a copy
    return loaded;
  }
  // This rank, too, reads the shared pages; its own copy goes when `loaded` does.
  if (map_file(base, key, ds) == Found::dataset) return ds;
  return loaded;
}

int remove_shared_dataset_files() {
  Sharing& s = sharing();
  std::lock_guard lk(s.mu);
  int n = 0;
  for (const std::string& f : s.created) n += std::remove(f.c_str()) == 0;
  s.created.clear();
  return n;
}

}  // namespace bks
