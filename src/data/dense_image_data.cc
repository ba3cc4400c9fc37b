#include "data/dense_image_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/sysinfo.h"
#include "data/image_decode.h"
#include "data/weak_cache.h"
#include "profile/profiler.h"

namespace bks {
namespace {

WeakCache<DenseImageList>& cache() {
  static WeakCache<DenseImageList> c;
  return c;
}

bool read_bytes(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  try {
    out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::bad_alloc&) {
    input_error("{}: not enough memory to hold it", path);
  }
  return true;
}

// The size an image of `h` x `w` has once read (new_height/new_width resize it).
std::pair<int64_t, int64_t> read_size(const DenseImageOptions& o, int h, int w) {
  return o.new_height > 0 ? std::pair{o.new_height, o.new_width} : std::pair<int64_t, int64_t>{h, w};
}

ImageDecodeOptions image_decoding(const DenseImageOptions& o) {
  ImageDecodeOptions d;
  d.channels = o.is_color ? 3 : 1;
  d.bgr = true;  // OpenCV's order, as the fork reads them
  d.height = static_cast<int>(o.new_height);
  d.width = static_cast<int>(o.new_width);
  return d;
}

// Label images read grey, resized by nearest neighbour (the fork's ReadImageToCVMat with
// nearest_neighbour_interp).
ImageDecodeOptions label_decoding(const DenseImageOptions& o) {
  ImageDecodeOptions d = image_decoding(o);
  d.channels = 1;
  d.resize = ImageDecodeOptions::Resize::nearest;
  return d;
}

}  // namespace

std::shared_ptr<DenseImageList> read_dense_image_list(const std::string& list_file, const DenseImageOptions& o) {
  const double t0 = now_us();
  std::ifstream in(list_file);
  if (!in) input_error("{}: cannot open the image list", list_file);
  auto list = std::make_shared<DenseImageList>();
  list->source = list_file;
  list->channels = o.is_color ? 3 : 1;
  std::string line;
  int64_t total = 0;
  const double memory = physical_memory_bytes();
  for (int64_t n = 1; std::getline(in, line); ++n) {
    std::istringstream words(line);
    std::vector<std::string> w{std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
    if (w.empty()) continue;
    if (w.size() != 2) input_error("{}:{}: expected 'IMAGE LABEL_IMAGE', got '{}'", list_file, n, line);
    DenseImagePair p{o.root_folder + w[0], o.root_folder + w[1], {}, {}, n};
    int hc = 0, h = 0, wd = 0, lc = 0, lh = 0, lw = 0;
    for (auto [path, bytes, c, ih, iw, what] : {std::tuple{&p.image_path, &p.image, &hc, &h, &wd, "image"},
                                                std::tuple{&p.label_path, &p.label, &lc, &lh, &lw, "label image"}}) {
      if (!read_bytes(*path, *bytes))
        input_error("{}:{}: cannot open {} {} (root_folder '{}')", list_file, n, what, *path, o.root_folder);
      if (!image_header(*bytes, *c, *ih, *iw))
        input_error("{}:{}: {} {} is not a PNG or JPEG image", list_file, n, what, *path);
    }
    auto [ih, iw] = read_size(o, h, wd);
    auto [lh2, lw2] = read_size(o, lh, lw);
    if (ih != lh2 || iw != lw2)
      input_error("{}:{}: label image {} is {} x {} (height x width) but image {} is {} x {}; they must match",
                  list_file, n, p.label_path, lh2, lw2, p.image_path, ih, iw);
    if (list->pairs.empty()) {
      list->height = ih;
      list->width = iw;
    } else if (o.crop_height == 0 && (ih != list->height || iw != list->width)) {
      input_error(
          "{}:{}: image {} is {} x {} but the first is {} x {}; a batch needs one size: give "
          "dense_image_data_param new_height/new_width or crop_height/crop_width",
          list_file, n, p.image_path, ih, iw, list->height, list->width);
    }
    if (ih < o.crop_height || iw < o.crop_width)
      input_error("{}:{}: image {} is {} x {}, smaller than the {} x {} crop", list_file, n, p.image_path, ih, iw,
                  o.crop_height, o.crop_width);
    total += static_cast<int64_t>(p.image.size() + p.label.size());
    if (memory > 0 && static_cast<double>(total) > memory * 0.75)
      input_error(
          "{}:{}: the listed files pass {:.1f} GB, more than this machine's memory ({:.1f} GB) holds; "
          "DenseImageData keeps them in memory",
          list_file, n, static_cast<double>(total) / 1e9, memory / 1e9);
    list->pairs.push_back(std::move(p));
  }
  if (list->pairs.empty()) input_error("{}: lists no images", list_file);
  log::info("Read {} image and label pairs listed in {} ({:.1f} MB encoded in memory, {:.2f} s)", list->pairs.size(),
            list_file, static_cast<double>(total) / 1e6, (now_us() - t0) / 1e6);
  return list;
}

std::shared_ptr<const DenseImageList> open_dense_image_list(const std::string& list_file, const DenseImageOptions& o) {
  std::error_code ec;
  std::string key = fmt::format("{}|{}|{}|{}x{}|{}x{}", std::filesystem::weakly_canonical(list_file, ec).string(),
                                o.root_folder, o.is_color, o.new_height, o.new_width, o.crop_height, o.crop_width);
  return cache().get(key, [&] { return read_dense_image_list(list_file, o); });
}

namespace {

DecodedImage decode(const std::string& source, const std::string& path, const std::string& bytes,
                    const ImageDecodeOptions& d) {
  DecodedImage img;
  std::string why;
  if (decode_image(bytes, d, img, why) != Decoded::ok) runtime_error("{}: {} cannot be decoded: {}", source, path, why);
  return img;
}

// One sample into `data` and `label`: decoded, flipped, cropped, transformed.
void build_sample(const DenseImageList& list, const DenseImageOptions& io, const DenseImagePair& p, Rng& rng,
                  bool mirror, const Transform* transform, float* data, float* label) {
  DecodedImage img = decode(list.source, p.image_path, p.image, image_decoding(io));
  DecodedImage lab = decode(list.source, p.label_path, p.label, label_decoding(io));
  if (img.height != lab.height || img.width != lab.width)
    runtime_error("{}: label image {} decodes to {} x {} but image {} to {} x {}", list.source, p.label_path,
                  lab.height, lab.width, p.image_path, img.height, img.width);
  // The fork flips first, then crops at a random offset (in both phases).
  const bool flip = mirror && (rng.next_u32() & 1u);
  const int64_t H = img.height, W = img.width;
  const int64_t oh = io.crop_height > 0 ? io.crop_height : H, ow = io.crop_width > 0 ? io.crop_width : W;
  int64_t y0 = 0, x0 = 0;
  if (io.crop_height > 0) {
    y0 = static_cast<int64_t>(rng.below(static_cast<uint64_t>(H - oh + 1)));
    x0 = static_cast<int64_t>(rng.below(static_cast<uint64_t>(W - ow + 1)));
  }
  // Source column of output column x: the crop is taken from the flipped image.
  auto src_x = [&](int64_t x) { return flip ? W - 1 - (x0 + x) : x0 + x; };
  std::vector<uint8_t> crop(static_cast<size_t>(img.channels * oh * ow));
  for (int64_t c = 0; c < img.channels; ++c)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t x = 0; x < ow; ++x)
        crop[static_cast<size_t>((c * oh + y) * ow + x)] =
            img.chw[static_cast<size_t>((c * H + y0 + y) * W + src_x(x))];
  if (transform)
    transform->apply_u8(crop.data(), data, nullptr);
  else
    std::copy(crop.begin(), crop.end(), data);
  for (int64_t y = 0; y < oh; ++y)
    for (int64_t x = 0; x < ow; ++x) label[y * ow + x] = lab.chw[static_cast<size_t>((y0 + y) * W + src_x(x))];
}

}  // namespace

void build_dense_batch(const DenseImageList& list, const DenseImageOptions& io, const DenseBatchOptions& o,
                       const EpochOrder& order, const Transform* transform, int64_t step, float* data, float* label) {
  const int64_t oh = io.crop_height > 0 ? io.crop_height : list.height;
  const int64_t ow = io.crop_width > 0 ? io.crop_width : list.width;
  const int64_t per = list.channels * oh * ow, per_label = oh * ow;
  // One thread, as the fork's prefetch thread: the step's compute has the cores.
  for (int64_t i = 0; i < o.batch; ++i) {
    const DenseImagePair& p = list.pairs[static_cast<size_t>(order.sample(step, i))];
    Rng rng = Rng::derive(o.seed, o.name + ".dense." + std::to_string(step * o.batch + i));
    build_sample(list, io, p, rng, o.mirror, transform, data + i * per, label + i * per_label);
  }
}

}  // namespace bks
