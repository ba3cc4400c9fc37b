#include "data/dataset.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <new>

#include "core/error.h"
#include "core/log.h"
#include "core/sysinfo.h"
#include "data/shared_dataset.h"
#include "profile/profiler.h"

namespace bks {

const DatasetField* Dataset::field(const std::string& name) const {
  for (auto& f : fields)
    if (f.name == name) return &f;
  return nullptr;
}

int64_t data_cache_bytes() {
  if (const char* env = std::getenv("BKS_DATA_CACHE_MB"); env && *env) {
    char* end = nullptr;
    const long long mb = std::strtoll(env, &end, 10);
    if (*end != 0 || mb < 0 || mb > (int64_t{1} << 40))
      input_error("BKS_DATA_CACHE_MB: expected a number of megabytes, got '{}'", env);
    return static_cast<int64_t>(mb) << 20;
  }
  return static_cast<int64_t>(physical_memory_bytes() / 2);
}

bool decode_sample(std::string_view bytes, const ImageDecodeOptions& o, const Shape& shape, uint8_t* out,
                   std::string& why) {
  DecodedImage img;
  switch (decode_image(bytes, o, img, why)) {
    case Decoded::ok: break;
    case Decoded::not_an_image:
    case Decoded::too_large: why = "cannot be decoded: " + why; return false;
  }
  if (img.channels != shape[0] || img.height != shape[1] || img.width != shape[2]) {
    why = fmt::format("is {}x{}x{} (channels x height x width) but the first sample is {}", img.channels, img.height,
                      img.width, shape_str(shape));
    return false;
  }
  std::memcpy(out, img.chw.data(), img.chw.size());
  return true;
}

const uint8_t* DatasetField::sample_u8(int64_t i, std::vector<uint8_t>& scratch, const std::string& source) const {
  if (!encoded) return u8(i);
  const auto k = static_cast<size_t>(i);
  std::string_view img(reinterpret_cast<const char*>(data()) + encoded->offsets[k],
                       encoded->offsets[k + 1] - encoded->offsets[k]);
  scratch.resize(static_cast<size_t>(sample_numel()));
  std::string why;
  if (!decode_sample(img, encoded->decode, sample_shape, scratch.data(), why))
    input_error("{}: {} {}", source, encoded->names[k], why);
  return scratch.data();
}

namespace {
std::mutex g_cache_mu;
std::map<std::string, std::weak_ptr<const Dataset>> g_cache;
int g_pins = 0;                                        // DatasetPins alive
std::vector<std::shared_ptr<const Dataset>> g_pinned;  // what was opened while one was

std::shared_ptr<const Dataset> cached(const std::string& key,
                                      const std::function<std::shared_ptr<const Dataset>()>& load) {
  std::lock_guard lk(g_cache_mu);
  if (auto hit = g_cache[key].lock()) return hit;
  // Data-parallel ranks on one host read it once, into memory they share.
  auto ds = datasets_shared_between_processes() ? open_shared_dataset(key, load) : load();
  g_cache[key] = ds;
  if (g_pins > 0) g_pinned.push_back(ds);
  return ds;
}
}  // namespace

DatasetPin::DatasetPin() {
  std::lock_guard lk(g_cache_mu);
  ++g_pins;
}

DatasetPin::~DatasetPin() {
  std::vector<std::shared_ptr<const Dataset>> release;  // freed outside the lock
  std::lock_guard lk(g_cache_mu);
  if (--g_pins == 0) release.swap(g_pinned);
}

std::shared_ptr<const Dataset> open_datum_db(const std::string& path, const ImageChannels& channels) {
  auto backend = detect_db(path);
  if (!backend) input_error("{}: is a directory but neither an LMDB (data.mdb) nor a LevelDB (CURRENT) database", path);
  std::string key = std::filesystem::weakly_canonical(path).string();
  key += channels.force_color ? "|color" : channels.force_gray ? "|gray" : "";
  return cached("db:" + key, [&] { return read_datum_db(path, *backend, channels); });
}

std::shared_ptr<const Dataset> open_image_list(const std::string& list_file, const ImageListOptions& opt) {
  std::string key = fmt::format("{}|{}|{}|{}x{}", std::filesystem::weakly_canonical(list_file).string(),
                                opt.root_folder, opt.is_color, opt.new_height, opt.new_width);
  return cached("images:" + key, [&] { return read_image_list(list_file, opt); });
}

std::shared_ptr<const Dataset> open_dataset(const std::string& source, const ImageChannels& channels) {
  if (detect_file_kind(source) == FileKind::directory) return open_datum_db(source, channels);
  std::string key = std::filesystem::weakly_canonical(source).string();
  return cached("data:" + key, [&]() -> std::shared_ptr<const Dataset> {
    switch (detect_file_kind(source)) {
      case FileKind::missing: input_error("{}: data source not found", source);
      case FileKind::idx:
      case FileKind::gzip: {
        std::string labels = idx_labels_path(source);
        if (labels == source)
          input_error("{}: cannot tell where its labels file is (name should contain 'images')", source);
        double t0 = now_us();
        auto ds = read_idx_pair(source, labels);
        log::info("Loaded {} samples of shape {} from {} ({:.1f} MB in memory, {:.2f} s)", ds->size,
                  shape_str(ds->fields[0].sample_shape), source, ds->fields[0].bytes.size() / 1e6,
                  (now_us() - t0) / 1e6);
        return ds;
      }
      case FileKind::hdf5: return read_hdf5(source, {"data", "label"});
      default:
        input_error(
            "{}: unrecognised data source (expected an IDX, gzip-compressed IDX or HDF5 file, or an LMDB/LevelDB "
            "directory)",
            source);
    }
  });
}

std::shared_ptr<const Dataset> open_hdf5_list(const std::string& list_file, const std::vector<std::string>& fields) {
  std::string key = std::filesystem::weakly_canonical(list_file).string();
  for (auto& f : fields) key += "|" + f;
  return cached("h5list:" + key, [&]() -> std::shared_ptr<const Dataset> {
    std::ifstream in(list_file);
    if (!in) input_error("{}: cannot open HDF5 file list", list_file);
    std::vector<std::string> files;
    std::string line;
    auto dir = std::filesystem::path(list_file).parent_path();
    while (std::getline(in, line)) {
      auto b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
      if (b == std::string::npos) continue;
      std::string f = line.substr(b, e - b + 1);
      // Relative paths resolve against the current directory as in Caffe, then the list's folder.
      if (!std::filesystem::exists(f) && std::filesystem::exists(dir / f)) f = (dir / f).string();
      files.push_back(f);
    }
    if (files.empty()) input_error("{}: lists no HDF5 files", list_file);
    std::shared_ptr<Dataset> all;
    double held = 0;  // bytes read so far: a list naming one big file many times must stop
    for (auto& f : files) {
      if (detect_file_kind(f) != FileKind::hdf5) input_error("{}: listed file {} is not an HDF5 file", list_file, f);
      auto part = read_hdf5(f, fields);
      for (const auto& field : part->fields) held += static_cast<double>(field.bytes.size());
      if (const double memory = physical_memory_bytes(); memory > 0 && held > memory)
        input_error("{}: the files it lists hold more than this machine's {:.1f} GB of memory (at {})", list_file,
                    memory / 1e9, f);
      if (!all) {
        all = part;
        all->source = list_file;
        continue;
      }
      for (size_t i = 0; i < fields.size(); ++i) {
        if (part->fields[i].sample_shape != all->fields[i].sample_shape)
          input_error("{}: dataset '{}' has sample shape {} in {} but {} before", list_file, fields[i],
                      shape_str(part->fields[i].sample_shape), f, shape_str(all->fields[i].sample_shape));
        // Bytes in one file and floats in another cannot share one buffer.
        auto kind = [](DType t) { return t == DType::u8 ? "unsigned bytes" : "floats"; };
        if (part->fields[i].dtype != all->fields[i].dtype)
          input_error("{}: dataset '{}' holds {} in {} but {} before", list_file, fields[i],
                      kind(part->fields[i].dtype), f, kind(all->fields[i].dtype));
        auto& dst = all->fields[i].bytes;
        try {
          dst.insert(dst.end(), part->fields[i].bytes.begin(), part->fields[i].bytes.end());
        } catch (const std::bad_alloc&) {
          input_error("{}: not enough memory to add dataset '{}' of {}", list_file, fields[i], f);
        }
      }
      all->size += part->size;
    }
    return all;
  });
}

}  // namespace bks
