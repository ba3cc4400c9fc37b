#include "data/convert_imageset.h"

#include <algorithm>
#include <filesystem>
#include <random>

#include "caffe.pb.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/dataset.h"
#include "data/image_decode.h"

namespace bks {

namespace fs = std::filesystem;

namespace {

std::string lower_extension(const std::string& file) {
  std::string e = fs::path(file).extension().string();
  if (!e.empty()) e.erase(0, 1);
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e == "jpeg" ? "jpg" : e;
}

}  // namespace

int64_t convert_imageset(const std::string& root, const std::string& list_file, const std::string& db,
                         const ConvertImagesetOptions& o, const std::function<void(int64_t, int64_t)>& progress) {
  if ((o.resize_height > 0) != (o.resize_width > 0))
    input_error("convert_imageset: --resize_height and --resize_width must be given together");
  if (!o.encode_type.empty() && o.encode_type != "png" && o.encode_type != "jpg")
    input_error("convert_imageset: --encode_type {} is not png or jpg", o.encode_type);
  std::error_code ec;
  if (fs::exists(db, ec)) input_error("{}: already exists; give a new database path", db);
  std::vector<std::pair<std::string, int>> lines = read_image_list_file(list_file);
  if (o.shuffle) std::shuffle(lines.begin(), lines.end(), std::mt19937_64(o.seed));

  const std::string tmp = temporary_path(db);
  auto writer = DbWriter::create(tmp, o.backend);
  ImageDecodeOptions dec;
  dec.channels = o.gray ? 1 : 3;
  dec.height = o.resize_height;
  dec.width = o.resize_width;
  dec.bgr = true;
  const bool resized = o.resize_height > 0;
  proto::Datum datum;
  int first_h = 0, first_w = 0;
  std::string value;
  const int64_t total = static_cast<int64_t>(lines.size());
  for (int64_t i = 0; i < total; ++i) {
    const auto& [file, label] = lines[static_cast<size_t>(i)];
    const std::string path = root + file;
    std::string bytes = read_file(path, "image");
    datum.Clear();
    datum.set_label(label);
    const std::string ext = lower_extension(file);
    const std::string enc = o.encode_type.empty() ? ext : o.encode_type;
    int c = 0, h = 0, w = 0;
    if (!image_header(bytes, c, h, w)) input_error("{}: not a PNG or JPEG image", path);
    if (o.encoded && !resized && enc == ext && (c == 1) == o.gray) {
      // The file itself, as Caffe's ReadFileToDatum stores it (no shape fields).
      datum.set_data(std::move(bytes));
      datum.set_encoded(true);
    } else {
      DecodedImage img;
      std::string why;
      if (decode_image(bytes, dec, img, why) != Decoded::ok) input_error("{}: cannot decode: {}", path, why);
      h = img.height, w = img.width;
      if (o.encoded) {
        if (enc != "png" && enc != "jpg")
          input_error("{}: cannot encode as '{}' (png or jpg; --encode_type chooses)", path, enc);
        datum.set_data(encode_image(img.chw.data(), img.channels, img.height, img.width, true, enc == "jpg"));
        datum.set_encoded(true);
      } else {
        datum.set_channels(img.channels);
        datum.set_height(img.height);
        datum.set_width(img.width);
        datum.set_data(std::string(img.chw.begin(), img.chw.end()));
      }
    }
    if (i == 0) first_h = h, first_w = w;
    if (o.check_size && (h != first_h || w != first_w))
      input_error("{}: is {}x{} but the first image is {}x{} (--check_size)", path, w, h, first_w, first_h);
    datum.SerializeToString(&value);
    // Caffe's keys: the line number, then the file name, so key order is list order.
    writer->put(fmt::format("{:08d}_{}", i, file), value);
    if ((i + 1) % 1000 == 0) {
      writer->commit();
      if (progress) progress(i + 1, total);
    }
  }
  writer->commit();
  writer.reset();
  if (progress && total % 1000 != 0) progress(total, total);
  fs::rename(tmp, db, ec);
  if (ec) runtime_error("{}: cannot rename to {} ({})", tmp, db, ec.message());
  return total;
}

std::vector<double> compute_image_mean(const std::string& db, const std::string& out) {
  auto ds = open_datum_db(db, {});
  const DatasetField& f = ds->fields[0];
  const int64_t per = f.sample_numel();
  std::vector<double> sum(static_cast<size_t>(per), 0.0);
  std::vector<uint8_t> scratch;
  for (int64_t i = 0; i < ds->size; ++i) {
    if (f.dtype == DType::u8) {
      const uint8_t* p = f.sample_u8(i, scratch, db);
      for (int64_t k = 0; k < per; ++k) sum[static_cast<size_t>(k)] += p[k];
    } else {
      const float* p = f.f32(i);
      for (int64_t k = 0; k < per; ++k) sum[static_cast<size_t>(k)] += p[k];
    }
  }
  proto::BlobProto blob;
  blob.set_num(1);
  blob.set_channels(static_cast<int32_t>(f.sample_shape[0]));
  blob.set_height(static_cast<int32_t>(f.sample_shape[1]));
  blob.set_width(static_cast<int32_t>(f.sample_shape[2]));
  for (double s : sum) blob.add_data(static_cast<float>(s / static_cast<double>(ds->size)));
  std::string bytes;
  blob.SerializeToString(&bytes);
  write_file_atomic(out, bytes);
  const int64_t c = f.sample_shape[0], plane = per / c;
  std::vector<double> channel(static_cast<size_t>(c), 0.0);
  for (int64_t k = 0; k < per; ++k)
    channel[static_cast<size_t>(k / plane)] += sum[static_cast<size_t>(k)] / static_cast<double>(ds->size * plane);
  return channel;
}

}  // namespace bks
