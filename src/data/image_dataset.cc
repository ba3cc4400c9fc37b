// Datasets of images as Caffe keeps them: Datum records in LMDB/LevelDB (convert_imageset,
// convert_mnist_data) and ImageData's list of image files. Both are decoded once into the
// in-memory cache (uint8 C x H x W), encoded images on all cores.
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <new>

#include "caffe.pb.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/log.h"
#include "data/caffe_db.h"
#include "data/dataset.h"
#include "data/image_decode.h"
#include "profile/profiler.h"

namespace bks {
namespace {

namespace fs = std::filesystem;

double physical_memory() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

// Refuses a dataset whose decoded samples would not fit in this machine's memory.
void check_fits(const std::string& source, int64_t samples, int64_t sample_bytes) {
  double bytes = static_cast<double>(samples) * static_cast<double>(sample_bytes), mem = physical_memory();
  if (mem > 0 && bytes > mem * 0.75)
    input_error(
        "{}: {} samples of {} bytes ({:.1f} GB) do not fit in this machine's memory ({:.1f} GB); datasets "
        "are cached in memory decoded, and reading them from disk as training goes is not supported yet",
        source, samples, sample_bytes, bytes / 1e9, mem / 1e9);
}

std::vector<uint8_t> allocate(const std::string& source, int64_t samples, int64_t sample_bytes) {
  check_fits(source, samples, sample_bytes);
  try {
    return std::vector<uint8_t>(static_cast<size_t>(samples) * static_cast<size_t>(sample_bytes));
  } catch (const std::bad_alloc&) {
    input_error("{}: not enough memory for {} samples of {} bytes", source, samples, sample_bytes);
  }
}

// Decodes each encoded image into its slot of `out` (all of `shape`), on all cores. `name(i)`
// says which record or file failed.
void decode_all(const std::string& source, const std::vector<std::string>& encoded, const ImageDecodeOptions& o,
                const Shape& shape, std::vector<uint8_t>& out, const std::function<std::string(size_t)>& name) {
  const size_t per = static_cast<size_t>(shape_numel(shape));
  std::mutex mu;
  std::string error;
  std::atomic<bool> failed{false};
  const auto n = static_cast<int64_t>(encoded.size());
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t i = 0; i < n; ++i) {
    if (failed.load(std::memory_order_relaxed)) continue;
    DecodedImage img;
    std::string why;
    Decoded d = decode_image(encoded[static_cast<size_t>(i)], o, img, why);
    if (d == Decoded::ok && (img.channels != shape[0] || img.height != shape[1] || img.width != shape[2]))
      why = fmt::format("is {}x{}x{} (channels x height x width) but the first sample is {}", img.channels, img.height,
                        img.width, shape_str(shape)),
      d = Decoded::not_an_image;
    else if (d != Decoded::ok)
      why = "cannot be decoded: " + why;
    if (d != Decoded::ok) {
      std::lock_guard lk(mu);
      if (!failed.exchange(true)) error = fmt::format("{}: {} {}", source, name(static_cast<size_t>(i)), why);
      continue;
    }
    std::copy(img.chw.begin(), img.chw.end(), out.begin() + static_cast<std::ptrdiff_t>(i * per));
  }
  if (failed) input_error("{}", error);
}

// The shape an encoded image decodes to under `o`.
Shape decoded_shape(const std::string& source, const std::string& what, std::string_view bytes,
                    const ImageDecodeOptions& o) {
  int c = 0, h = 0, w = 0;
  if (!image_header(bytes, c, h, w)) input_error("{}: {} is not a PNG or JPEG image", source, what);
  return {o.channels > 0 ? o.channels : c, o.height > 0 ? o.height : h, o.width > 0 ? o.width : w};
}

}  // namespace

std::shared_ptr<Dataset> read_datum_db(const std::string& path, DbBackend backend, const ImageChannels& channels) {
  double t0 = now_us();
  auto ds = std::make_shared<Dataset>();
  ds->source = path;
  ds->format = backend == DbBackend::lmdb ? "lmdb" : "leveldb";
  // The records are collected first (raw pixels copied, encoded files kept) and counted;
  // then the pixels are laid out once.
  std::vector<std::string> keys, encoded;
  std::vector<std::string> raw;  // raw bytes or floats, per record
  std::vector<float> labels;
  Shape shape;
  enum { unknown, bytes, floats, files } kind = unknown;
  ImageDecodeOptions o;
  o.bgr = true;  // Caffe decodes with OpenCV: blue first
  o.channels = channels.force_color ? 3 : channels.force_gray ? 1 : 0;
  proto::Datum d;
  read_db(path, backend, [&](std::string_view key, std::string_view value) {
    const std::string where = fmt::format("record '{}'", key);
    if (!d.ParseFromArray(value.data(), static_cast<int>(value.size())))
      input_error("{}: {} is not a Caffe Datum", path, where);
    decltype(kind) k = d.encoded() ? files : d.float_data_size() > 0 ? floats : bytes;
    Shape s;
    if (k == files) {
      s = decoded_shape(path, where, d.data(), o);
      encoded.push_back(d.data());
    } else {
      s = {d.channels(), d.height(), d.width()};
      for (int64_t v : s)
        if (v <= 0)
          input_error("{}: {} has shape {}; channels, height and width must be positive", path, where, shape_str(s));
      int64_t have = k == floats ? d.float_data_size() : static_cast<int64_t>(d.data().size());
      if (have != shape_numel(s))
        input_error("{}: {} declares {} values ({}) but holds {}", path, where, shape_numel(s), shape_str(s), have);
      raw.push_back(k == floats ? std::string(reinterpret_cast<const char*>(d.float_data().data()),
                                              static_cast<size_t>(have) * sizeof(float))
                                : d.data());
    }
    if (kind == unknown) kind = k, shape = s;
    if (k != kind)
      input_error("{}: {} holds {} but the first record holds {}", path, where,
                  k == files    ? "an encoded image"
                  : k == floats ? "float_data"
                                : "bytes",
                  kind == files    ? "an encoded image"
                  : kind == floats ? "float_data"
                                   : "bytes");
    if (s != shape)
      input_error("{}: {} has shape {} but the first record has {}; every sample must have the same shape", path, where,
                  shape_str(s), shape_str(shape));
    keys.emplace_back(key);
    labels.push_back(static_cast<float>(d.label()));
  });
  if (keys.empty()) input_error("{}: the {} database holds no records", path, db_backend_name(backend));
  if (kind != files && (channels.force_color || channels.force_gray))
    log::warn("{}: transform_param.{} applies to encoded images; this database holds raw pixels", path,
              channels.force_color ? "force_color" : "force_gray");
  ds->size = static_cast<int64_t>(keys.size());
  DatasetField data{"data", shape, kind == floats ? DType::f32 : DType::u8, {}};
  const int64_t sample_bytes = shape_numel(shape) * (kind == floats ? 4 : 1);
  data.bytes = allocate(path, ds->size, sample_bytes);
  if (kind == files) {
    decode_all(path, encoded, o, shape, data.bytes, [&](size_t i) { return fmt::format("record '{}'", keys[i]); });
  } else {
    for (size_t i = 0; i < raw.size(); ++i)
      std::copy(raw[i].begin(), raw[i].end(), data.bytes.begin() + static_cast<std::ptrdiff_t>(i * sample_bytes));
  }
  DatasetField label{"label", {}, DType::f32, {}};
  label.bytes.resize(labels.size() * sizeof(float));
  std::memcpy(label.bytes.data(), labels.data(), label.bytes.size());
  ds->fields.push_back(std::move(data));
  ds->fields.push_back(std::move(label));
  log::info("Loaded {} samples of shape {} from {} {} ({}{:.1f} MB in memory, {:.2f} s)", ds->size, shape_str(shape),
            db_backend_name(backend), path, kind == files ? "decoded, " : "", ds->fields[0].bytes.size() / 1e6,
            (now_us() - t0) / 1e6);
  return ds;
}

std::vector<std::pair<std::string, int>> read_image_list_file(const std::string& list_file) {
  std::ifstream in(list_file);
  if (!in) input_error("{}: cannot open the image list", list_file);
  std::vector<std::pair<std::string, int>> lines;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    auto end = line.find_last_not_of(" \t\r");
    if (end == std::string::npos) continue;
    line.resize(end + 1);
    // "path label", split at the last space as Caffe does, so paths may hold spaces.
    auto sp = line.find_last_of(" \t");
    char* stop = nullptr;
    long label = sp == std::string::npos ? 0 : std::strtol(line.c_str() + sp + 1, &stop, 10);
    if (sp == std::string::npos || *stop != 0 || stop == line.c_str() + sp + 1 || label < INT32_MIN ||
        label > INT32_MAX)
      input_error("{}:{}: expected 'PATH LABEL', got '{}'", list_file, n, line);
    lines.emplace_back(line.substr(0, line.find_last_not_of(" \t", sp) + 1), static_cast<int>(label));
  }
  if (lines.empty()) input_error("{}: lists no images", list_file);
  return lines;
}

std::shared_ptr<Dataset> read_image_list(const std::string& list_file, const ImageListOptions& opt) {
  double t0 = now_us();
  std::vector<std::string> files, encoded;
  std::vector<float> labels;
  for (auto& [file, label] : read_image_list_file(list_file)) {
    files.push_back(opt.root_folder + file);
    labels.push_back(static_cast<float>(label));
  }
  ImageDecodeOptions o;
  o.bgr = true;
  o.channels = opt.is_color ? 3 : 1;
  o.height = static_cast<int>(opt.new_height);
  o.width = static_cast<int>(opt.new_width);
  encoded.reserve(files.size());
  for (const auto& f : files) {
    std::ifstream img(f, std::ios::binary);
    if (!img) input_error("{}: cannot open image {} (root_folder '{}')", list_file, f, opt.root_folder);
    encoded.emplace_back(std::istreambuf_iterator<char>(img), std::istreambuf_iterator<char>());
  }
  Shape shape = decoded_shape(list_file, files[0], encoded[0], o);
  auto ds = std::make_shared<Dataset>();
  ds->source = list_file;
  ds->format = "image list";
  ds->size = static_cast<int64_t>(files.size());
  DatasetField data{"data", shape, DType::u8, allocate(list_file, ds->size, shape_numel(shape))};
  decode_all(list_file, encoded, o, shape, data.bytes, [&](size_t i) { return "image " + files[i]; });
  DatasetField label{"label", {}, DType::f32, std::vector<uint8_t>(labels.size() * sizeof(float))};
  std::memcpy(label.bytes.data(), labels.data(), label.bytes.size());
  ds->fields.push_back(std::move(data));
  ds->fields.push_back(std::move(label));
  log::info("Loaded {} images of shape {} listed in {} ({:.1f} MB in memory, {:.2f} s)", ds->size, shape_str(shape),
            list_file, ds->fields[0].bytes.size() / 1e6, (now_us() - t0) / 1e6);
  return ds;
}

}  // namespace bks
