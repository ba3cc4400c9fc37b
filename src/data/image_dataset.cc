// Datasets of images as Caffe keeps them: Datum records in LMDB/LevelDB (convert_imageset,
// convert_mnist_data) and ImageData's list of image files. Raw pixels are cached as they are;
// encoded images are decoded once on all cores when their pixels fit the data cache, and
// otherwise kept encoded and decoded by the loader as batches are built.
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
#include "core/sysinfo.h"
#include "data/caffe_db.h"
#include "data/dataset.h"
#include "data/image_decode.h"
#include "profile/profiler.h"

namespace bks {
namespace {

namespace fs = std::filesystem;

// "12.3 MB" or "4.5 GB".
std::string size_text(double bytes) {
  return bytes >= 1e9 ? fmt::format("{:.1f} GB", bytes / 1e9) : fmt::format("{:.1f} MB", bytes / 1e6);
}

// Refuses a dataset whose samples would not fit in this machine's memory.
void check_fits(const std::string& source, int64_t samples, double bytes, const char* what) {
  const double mem = physical_memory_bytes();
  if (mem > 0 && bytes > mem * 0.75)
    input_error(
        "{}: {} samples take {} {}, more than this machine's memory allows ({}); reading a dataset from disk as "
        "training goes is not supported yet",
        source, samples, size_text(bytes), what, size_text(mem));
}

// Appends to a growing buffer, an InputError naming `source` when memory runs out.
void append(const std::string& source, std::vector<uint8_t>& to, std::string_view bytes) {
  try {
    to.insert(to.end(), bytes.begin(), bytes.end());
  } catch (const std::bad_alloc&) {
    input_error("{}: not enough memory to hold its samples ({} so far)", source,
                size_text(static_cast<double>(to.size())));
  }
}

// Images stored one after another in `blob` (sample i at [offsets[i], offsets[i+1])).
struct EncodedBlob {
  std::vector<uint8_t> blob;
  std::vector<uint64_t> offsets{0};
  std::vector<std::string> names;
  std::string_view at(size_t i) const {
    return {reinterpret_cast<const char*>(blob.data()) + offsets[i], offsets[i + 1] - offsets[i]};
  }
};

// Decodes every image of `e` into `out` (all of `shape`), on all cores.
void decode_all(const std::string& source, const EncodedBlob& e, const ImageDecodeOptions& o, const Shape& shape,
                std::vector<uint8_t>& out) {
  const size_t per = static_cast<size_t>(shape_numel(shape));
  std::mutex mu;
  std::string error;
  std::atomic<bool> failed{false};
  const auto n = static_cast<int64_t>(e.names.size());
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t i = 0; i < n; ++i) {
    if (failed.load(std::memory_order_relaxed)) continue;
    std::string why;
    if (!decode_sample(e.at(static_cast<size_t>(i)), o, shape, out.data() + static_cast<size_t>(i) * per, why)) {
      std::lock_guard lk(mu);
      if (!failed.exchange(true)) error = fmt::format("{}: {} {}", source, e.names[static_cast<size_t>(i)], why);
    }
  }
  if (failed) input_error("{}", error);
}

// The data field of the images in `e`, all of `shape`: decoded now when their pixels fit the
// data cache, otherwise the encoded bytes themselves (`e` is consumed either way).
DatasetField image_field(const std::string& source, EncodedBlob&& e, const ImageDecodeOptions& o, const Shape& shape) {
  const auto n = static_cast<int64_t>(e.names.size());
  const double decoded = static_cast<double>(n) * static_cast<double>(shape_numel(shape));
  DatasetField f{"data", shape, DType::u8, {}};
  if (decoded <= static_cast<double>(data_cache_bytes())) {
    check_fits(source, n, decoded + static_cast<double>(e.blob.size()), "decoded and encoded together");
    try {
      f.bytes.resize(static_cast<size_t>(decoded));
    } catch (const std::bad_alloc&) {
      input_error("{}: not enough memory for {} decoded samples of shape {}", source, n, shape_str(shape));
    }
    decode_all(source, e, o, shape, f.bytes);
    return f;
  }
  log::info(
      "{}: {} images would take {} decoded, more than the data cache ({}; BKS_DATA_CACHE_MB sets it): kept "
      "encoded ({}) and decoded by the loader's threads as batches are built",
      source, n, size_text(decoded), size_text(static_cast<double>(data_cache_bytes())),
      size_text(static_cast<double>(e.blob.size())));
  auto enc = std::make_shared<EncodedImages>();
  enc->offsets = std::move(e.offsets);
  enc->names = std::move(e.names);
  enc->decode = o;
  f.bytes = std::move(e.blob);
  f.encoded = std::move(enc);
  return f;
}

// The shape an encoded image decodes to under `o`.
Shape decoded_shape(const std::string& source, const std::string& what, std::string_view bytes,
                    const ImageDecodeOptions& o) {
  int c = 0, h = 0, w = 0;
  if (!image_header(bytes, c, h, w)) input_error("{}: {} is not a PNG or JPEG image", source, what);
  return {o.channels > 0 ? o.channels : c, o.height > 0 ? o.height : h, o.width > 0 ? o.width : w};
}

void check_same_shape(const std::string& source, const std::string& what, const Shape& s, const Shape& first) {
  if (s != first)
    input_error("{}: {} has shape {} but the first sample has {}; every sample must have the same shape", source, what,
                shape_str(s), shape_str(first));
}

}  // namespace

std::shared_ptr<Dataset> read_datum_db(const std::string& path, DbBackend backend, const ImageChannels& channels) {
  double t0 = now_us();
  auto ds = std::make_shared<Dataset>();
  ds->source = path;
  ds->format = backend == DbBackend::lmdb ? "lmdb" : "leveldb";
  // Each record's pixels (raw bytes, floats or an encoded file) are appended to one buffer:
  // raw and float records of one shape are then the cached samples as they stand.
  EncodedBlob records;
  std::vector<float> labels;
  Shape shape;
  enum { unknown, bytes, floats, files } kind = unknown;
  ImageDecodeOptions o;
  o.bgr = true;  // Caffe decodes with OpenCV: blue first
  o.channels = channels.force_color ? 3 : channels.force_gray ? 1 : 0;
  proto::Datum d;
  read_db(path, backend, [&](std::string_view key, std::string_view value) {
    std::string where = fmt::format("record '{}'", key);
    if (!d.ParseFromArray(value.data(), static_cast<int>(value.size())))
      input_error("{}: {} is not a Caffe Datum", path, where);
    decltype(kind) k = d.encoded() ? files : d.float_data_size() > 0 ? floats : bytes;
    Shape s;
    if (k == files) {
      s = decoded_shape(path, where, d.data(), o);
    } else {
      s = {d.channels(), d.height(), d.width()};
      for (int64_t v : s)
        if (v <= 0)
          input_error("{}: {} has shape {}; channels, height and width must be positive", path, where, shape_str(s));
      int64_t have = k == floats ? d.float_data_size() : static_cast<int64_t>(d.data().size());
      if (have != shape_numel(s))
        input_error("{}: {} declares {} values ({}) but holds {}", path, where, shape_numel(s), shape_str(s), have);
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
    check_same_shape(path, where, s, shape);
    if (k == floats)
      append(path, records.blob,
             {reinterpret_cast<const char*>(d.float_data().data()), d.float_data().size() * sizeof(float)});
    else
      append(path, records.blob, d.data());
    records.offsets.push_back(records.blob.size());
    records.names.push_back(std::move(where));
    labels.push_back(static_cast<float>(d.label()));
  });
  if (labels.empty()) input_error("{}: the {} database holds no records", path, db_backend_name(backend));
  if (kind != files && (channels.force_color || channels.force_gray))
    log::warn("{}: transform_param.{} applies to encoded images; this database holds raw pixels", path,
              channels.force_color ? "force_color" : "force_gray");
  ds->size = static_cast<int64_t>(labels.size());
  DatasetField data;
  if (kind == files) {
    data = image_field(path, std::move(records), o, shape);
  } else {
    data = DatasetField{"data", shape, kind == floats ? DType::f32 : DType::u8, std::move(records.blob)};
    check_fits(path, ds->size, static_cast<double>(data.bytes.size()), "as stored");
  }
  DatasetField label{"label", {}, DType::f32, {}};
  label.bytes.resize(labels.size() * sizeof(float));
  std::memcpy(label.bytes.data(), labels.data(), label.bytes.size());
  const char* how = kind != files ? "" : data.encoded ? "encoded, " : "decoded, ";
  log::info("Loaded {} samples of shape {} from {} {} ({}{:.1f} MB in memory, {:.2f} s)", ds->size, shape_str(shape),
            db_backend_name(backend), path, how, data.bytes.size() / 1e6, (now_us() - t0) / 1e6);
  ds->fields.push_back(std::move(data));
  ds->fields.push_back(std::move(label));
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
  ImageDecodeOptions o;
  o.bgr = true;
  o.channels = opt.is_color ? 3 : 1;
  o.height = static_cast<int>(opt.new_height);
  o.width = static_cast<int>(opt.new_width);
  EncodedBlob files;
  std::vector<float> labels;
  Shape shape;
  for (auto& [file, label] : read_image_list_file(list_file)) {
    const std::string path = opt.root_folder + file;
    std::ifstream img(path, std::ios::binary);
    if (!img) input_error("{}: cannot open image {} (root_folder '{}')", list_file, path, opt.root_folder);
    const size_t at = files.blob.size();
    append(list_file, files.blob, std::string(std::istreambuf_iterator<char>(img), std::istreambuf_iterator<char>()));
    std::string what = "image " + path;
    Shape s = decoded_shape(list_file, what,
                            {reinterpret_cast<const char*>(files.blob.data()) + at, files.blob.size() - at}, o);
    if (labels.empty()) shape = s;
    check_same_shape(list_file, what, s, shape);
    files.offsets.push_back(files.blob.size());
    files.names.push_back(std::move(what));
    labels.push_back(static_cast<float>(label));
  }
  auto ds = std::make_shared<Dataset>();
  ds->source = list_file;
  ds->format = "image list";
  ds->size = static_cast<int64_t>(labels.size());
  DatasetField data = image_field(list_file, std::move(files), o, shape);
  DatasetField label{"label", {}, DType::f32, std::vector<uint8_t>(labels.size() * sizeof(float))};
  std::memcpy(label.bytes.data(), labels.data(), label.bytes.size());
  log::info("Loaded {} images of shape {} listed in {} ({}{:.1f} MB in memory, {:.2f} s)", ds->size, shape_str(shape),
            list_file, data.encoded ? "encoded, " : "", data.bytes.size() / 1e6, (now_us() - t0) / 1e6);
  ds->fields.push_back(std::move(data));
  ds->fields.push_back(std::move(label));
  return ds;
}

}  // namespace bks
