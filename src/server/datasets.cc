#include "server/datasets.h"

#include <stb_image_resize.h>
#include <stb_image_write.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>

#include "core/error.h"
#include "core/file_io.h"
#include "data/dataset.h"
#include "data/text_corpus.h"
#include "server/api_error.h"
#include "server/images.h"

namespace bks::server {

namespace fs = std::filesystem;

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                              "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

namespace {

// The largest width or height a packed dataset has.
constexpr int64_t kMaxPackedSide = 512;

// Progress of packing images, as shares of the whole, in proportion to the time each stage
// took on Fashion-MNIST (28x28 as it is, and resized to 32x32 colour): reading the source
// files (gzip), converting (decoding, resizing) each image, the mean image, the training
// split's HDF5 file, then the rest (validation split, thumbnails).
constexpr double kFilesRead = 0.2, kImagesDone = 0.65, kMeanDone = 0.7, kTrainWritten = 0.92;

// `done` of `total` steps of the stage from `from` to `to`.
double share(double from, double to, size_t done, size_t total) {
  return from + (to - from) * static_cast<double>(done) / static_cast<double>(std::max<size_t>(total, 1));
}

// `p` with every link and ".." resolved, when that exists and lies inside one of `roots`.
std::optional<fs::path> resolved_inside(const fs::path& p, const std::vector<std::string>& roots) {
  std::error_code ec;
  fs::path real = fs::canonical(p, ec);
  if (ec) return std::nullopt;
  for (const auto& r : roots) {
    fs::path root = fs::weakly_canonical(r, ec);
    if (ec) continue;
    auto rel = real.lexically_relative(root);
    if (!rel.empty() && *rel.begin() != "..") return real;
  }
  return std::nullopt;
}

// The real path of `p`, a file packing reads; InputError naming it when it is missing or
// leads (through a link) outside the import folders.
fs::path checked_source(const fs::path& p, const std::vector<std::string>& roots, const char* what) {
  std::error_code ec;
  if (!fs::exists(p, ec)) throw InputError(fmt::format("{}: {} not found", p.string(), what));
  auto real = resolved_inside(p, roots);
  if (!real)
    throw InputError(fmt::format("{}: {} leads to {}, outside the folders datasets may come from ({})", p.string(),
                                 what, fs::weakly_canonical(p, ec).string(), fmt::join(roots, ", ")));
  return *real;
}

// The labels file an IDX images file implies must be inside the import folders too.
void check_labels_beside(const json& spec, const char* field, const std::vector<std::string>& roots) {
  const fs::path labels = idx_labels_path(spec[field].get<std::string>());
  std::error_code ec;
  if (fs::exists(labels, ec) && !resolved_inside(labels, roots))
    throw ApiError(400, field,
                   fmt::format("'{}': its labels file {} leads outside the folders datasets may come from", field,
                               labels.string()));
}

}  // namespace

json validate_dataset_spec(const json& body, const std::vector<std::string>& roots) {
  json spec;
  spec["name"] = string_field(body, "name", true, 100);
  std::string source = string_field(body, "source", true, 20);
  spec["source"] = source;
  spec["val_percent"] = integer_field(body, "val_percent", 0, 50, 10);
  // Size and colour: required for folders (default 28x28 grey); for IDX files only when
  // they should change (otherwise the files' own).
  auto geometry = [&](bool defaults) {
    for (const char* f : {"width", "height"})
      if (defaults || body.contains(f)) spec[f] = integer_field(body, f, 4, kMaxPackedSide, 28);
    std::string color = string_field(body, "color", false, 20);
    if (color.empty() && defaults) color = "grayscale";
    if (!color.empty() && color != "grayscale" && color != "color")
      throw ApiError(400, "color", "'color' must be \"grayscale\" or \"color\"");
    if (!color.empty()) spec["color"] = color;
  };
  if (source == "idx") {
    spec["train_images"] = path_field(body, "train_images", roots, false);
    check_labels_beside(spec, "train_images", roots);
    if (body.contains("test_images") && !body["test_images"].is_null()) {
      spec["test_images"] = path_field(body, "test_images", roots, false);
      check_labels_beside(spec, "test_images", roots);
    }
    geometry(false);
  } else if (source == "folder") {
    spec["root"] = path_field(body, "root", roots, true);
    geometry(true);
  } else if (source == "text") {
    spec["file"] = path_field(body, "file", roots, false);
  } else {
    throw ApiError(400, "source", "'source' must be \"idx\", \"folder\" or \"text\"");
  }
  if (body.contains("class_names") && !body["class_names"].is_null()) {
    const json& c = body["class_names"];
    if (!c.is_array() || c.size() > 1000) throw ApiError(400, "class_names", "'class_names' must be a list of names");
    for (const auto& n : c)
      if (!n.is_string() || n.get<std::string>().size() > 100)
        throw ApiError(400, "class_names", "'class_names' must hold strings of up to 100 characters");
    spec["class_names"] = c;
  }
  return spec;
}

namespace {

// Samples of one split gathered in memory: images as bytes (C x H x W each), labels.
struct Split {
  std::vector<uint8_t> data;
  std::vector<float> labels;
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

struct Packing {
  Shape shape;  // C, H, W
  std::vector<std::string> classes;
  Split train, val;
};

void check(const std::atomic<bool>& cancelled) {
  if (cancelled) throw RuntimeError("cancelled");
}

// Appends one C x H x W byte image as `to` (C, H, W): channels 1 -> 3 repeated, 3 -> 1
// averaged, each channel resized.
void append_as(const uint8_t* chw, const Shape& from, const Shape& to, std::vector<uint8_t>& out) {
  if (from == to) {
    out.insert(out.end(), chw, chw + shape_numel(from));
    return;
  }
  const int64_t fc = from[0], fh = from[1], fw = from[2], tc = to[0], th = to[1], tw = to[2];
  std::vector<uint8_t> plane(static_cast<size_t>(fh * fw)), resized(static_cast<size_t>(th * tw));
  for (int64_t c = 0; c < tc; ++c) {
    if (fc == tc) {
      std::copy_n(chw + c * fh * fw, fh * fw, plane.begin());
    } else if (fc == 1) {
      std::copy_n(chw, fh * fw, plane.begin());
    } else {
      for (int64_t i = 0; i < fh * fw; ++i) {
        int sum = 0;
        for (int64_t k = 0; k < fc; ++k) sum += chw[k * fh * fw + i];
        plane[static_cast<size_t>(i)] = static_cast<uint8_t>(sum / fc);
      }
    }
    if (!stbir_resize_uint8(plane.data(), static_cast<int>(fw), static_cast<int>(fh), 0, resized.data(),
                            static_cast<int>(tw), static_cast<int>(th), 0, 1))
      throw RuntimeError("cannot resize an image");
    out.insert(out.end(), resized.begin(), resized.end());
  }
}

// An IDX images file and the labels file beside it, both checked to be inside `roots`.
std::shared_ptr<Dataset> read_idx_inside(const std::string& images, const std::vector<std::string>& roots) {
  const fs::path real = checked_source(images, roots, "IDX images file");
  const fs::path labels = checked_source(idx_labels_path(real.string()), roots, "IDX labels file");
  return read_idx_pair(real.string(), labels.string());
}

void from_idx(const json& spec, const std::vector<std::string>& roots, Packing& p,
              const std::function<void(double)>& progress, const std::atomic<bool>& cancelled) {
  std::string images = spec["train_images"];
  auto train = read_idx_inside(images, roots);
  const DatasetField& d = *train->field("data");
  const DatasetField& l = *train->field("label");
  const Shape& stored = d.sample_shape;
  if (stored.size() != 3 || (stored[0] != 1 && stored[0] != 3))
    throw InputError(images + ": images must have 1 or 3 channels");
  // The packed shape: the files' own, or the width, height and colour asked for.
  p.shape = {spec.contains("color") ? (spec["color"] == "color" ? 3 : 1) : stored[0], spec.value("height", stored[1]),
             spec.value("width", stored[2])};
  // As large as the dashboard packs (the width and height fields' limit): the mean image
  // alone costs 8 bytes a value.
  if (p.shape[1] > kMaxPackedSide || p.shape[2] > kMaxPackedSide)
    throw InputError(fmt::format("{}: images are {} x {}; give a width and height of at most {} to resize them", images,
                                 stored[2], stored[1], kMaxPackedSide));
  int max_label = 0;
  for (int64_t i = 0; i < train->size; ++i) max_label = std::max<int>(max_label, l.u8(i)[0]);
  const bool has_test = spec.contains("test_images");
  progress(has_test ? kFilesRead / 2 : kFilesRead);
  check(cancelled);
  std::shared_ptr<Dataset> test;
  if (has_test) {
    std::string t = spec["test_images"];
    test = read_idx_inside(t, roots);
    if (test->field("data")->sample_shape != stored)
      throw InputError(fmt::format("{}: test images are {} but training images are {}", t,
                                   shape_str(test->field("data")->sample_shape), shape_str(stored)));
    progress(kFilesRead);
  }
  const auto total = static_cast<size_t>(train->size + (test ? test->size : 0));
  size_t done = 0;
  auto add = [&](Split& s, const Dataset& ds, int64_t i) {
    append_as(ds.field("data")->u8(i), ds.field("data")->sample_shape, p.shape, s.data);
    s.labels.push_back(static_cast<float>(ds.field("label")->u8(i)[0]));
    if (++done % 1024 == 0) check(cancelled);
    progress(share(kFilesRead, kImagesDone, done, total));
  };
  if (test) {
    for (int64_t i = 0; i < train->size; ++i) add(p.train, *train, i);
    for (int64_t i = 0; i < test->size; ++i) add(p.val, *test, i);
  } else {
    // Every k-th sample to validation, k from the percentage (deterministic, class-balanced
    // enough for shuffled sets like Fashion-MNIST).
    int pct = spec.value("val_percent", 10);
    for (int64_t i = 0; i < train->size; ++i) add(pct > 0 && (i * pct) % 100 < pct ? p.val : p.train, *train, i);
  }
  p.classes.resize(max_label + 1);
  for (int c = 0; c <= max_label; ++c) p.classes[c] = std::to_string(c);
}

// The bytes of one image file, refused (naming it) when larger than an image can be.
std::string read_image_file(const fs::path& file) {
  std::error_code ec;
  const auto bytes = fs::file_size(file, ec);
  if (ec) throw InputError(fmt::format("{}: cannot read ({})", file.string(), ec.message()));
  if (bytes > kMaxImageFileBytes)
    throw InputError(fmt::format("{}: {} bytes; image files of at most {} MB are read", file.string(), bytes,
                                 kMaxImageFileBytes >> 20));
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open", file.string()));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void from_folder(const json& spec, const std::vector<std::string>& roots, Packing& p,
                 const std::function<void(double)>& progress, const std::atomic<bool>& cancelled) {
  const fs::path root = checked_source(spec["root"].get<std::string>(), roots, "image folder");
  const int w = spec["width"], h = spec["height"], c = spec["color"] == "color" ? 3 : 1;
  p.shape = {c, h, w};
  std::vector<std::pair<std::string, std::vector<fs::path>>> classes;
  // Every class folder and image is read through its real path, which must stay inside the
  // import folders: a link to anywhere else is refused, naming it.
  for (const auto& e : fs::directory_iterator(root)) {
    if (!e.is_directory()) continue;
    const fs::path folder = checked_source(e.path(), roots, "class folder");
    std::vector<fs::path> files;
    for (const auto& f : fs::directory_iterator(folder)) {
      std::string ext = f.path().extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
      if (f.is_regular_file() && (ext == ".png" || ext == ".jpg" || ext == ".jpeg"))
        files.push_back(checked_source(f.path(), roots, "image"));
    }
    std::sort(files.begin(), files.end());
    if (!files.empty()) classes.emplace_back(e.path().filename().string(), std::move(files));
  }
  std::sort(classes.begin(), classes.end());
  if (classes.size() < 2)
    throw InputError(fmt::format("{} needs at least two class folders holding .png or .jpg images", root.string()));
  size_t total = 0, done = 0;
  for (auto& [name, files] : classes) total += files.size();
  const int pct = spec.value("val_percent", 10);
  for (size_t label = 0; label < classes.size(); ++label) {
    auto& files = classes[label].second;
    p.classes.push_back(classes[label].first);
    std::mt19937 rng(static_cast<unsigned>(label + 1));
    std::shuffle(files.begin(), files.end(), rng);
    const size_t n_val = files.size() * static_cast<size_t>(pct) / 100;
    for (size_t k = 0; k < files.size(); ++k) {
      check(cancelled);
      Split& s = k < n_val ? p.val : p.train;
      std::string why;
      switch (decode_chw(read_image_file(files[k]), c, h, w, s.data, why)) {
        case Decoded::ok: break;
        case Decoded::too_large: throw InputError(fmt::format("{}: image too large: {}", files[k].string(), why));
        case Decoded::not_an_image:
          throw InputError(fmt::format("{}: not a readable PNG or JPEG image ({})", files[k].string(), why));
      }
      s.labels.push_back(static_cast<float>(label));
      progress(share(0, kImagesDone, ++done, total));
    }
  }
}

void write_split(const fs::path& file, const Split& s, const Shape& shape, const std::vector<float>* mean) {
  DatasetField data{"data", shape, DType::u8, s.data};
  DatasetField label{"label", {}, DType::f32, {}};
  label.bytes.resize(s.labels.size() * sizeof(float));
  std::memcpy(label.bytes.data(), s.labels.data(), label.bytes.size());
  std::vector<DatasetField> fields{std::move(data), std::move(label)};
  write_hdf5(file.string(), fields, s.size());
  if (mean) {
    // The mean image in its own file: HDF5 datasets of one file share the sample axis here.
    DatasetField m{"mean", shape, DType::f32, {}};
    m.bytes.resize(mean->size() * sizeof(float));
    std::memcpy(m.bytes.data(), mean->data(), m.bytes.size());
    write_hdf5((file.parent_path() / "mean.h5").string(), {m}, 1);
  }
}

// One CHW byte image as a PNG.
void write_png(const fs::path& file, const uint8_t* chw, const Shape& shape) {
  const int c = static_cast<int>(shape[0]), h = static_cast<int>(shape[1]), w = static_cast<int>(shape[2]);
  std::vector<uint8_t> hwc(static_cast<size_t>(c * h * w));
  for (int ch = 0; ch < c; ++ch)
    for (int i = 0; i < h * w; ++i) hwc[static_cast<size_t>(i * c + ch)] = chw[ch * h * w + i];
  if (!stbi_write_png(file.c_str(), w, h, c, hwc.data(), w * c))
    throw RuntimeError(file.string() + ": cannot write PNG");
}

// A UTF-8 text file (character-level models): copied as text.txt, which the networks'
// TextData layers read, the last val_percent of it held out for validation. info.json
// holds the vocabulary (the distinct characters, as TextData orders them: by code point)
// as the classes, the counts in characters, and the start of the text.
void pack_text(const json& spec, const std::vector<std::string>& roots, const fs::path& dir,
               const std::function<void(double)>& progress) {
  const fs::path file = checked_source(spec["file"].get<std::string>(), roots, "text file");
  std::error_code ec;
  const uintmax_t bytes = fs::file_size(file, ec);
  if (ec) throw InputError(fmt::format("{}: cannot read the text file ({})", file.string(), ec.message()));
  if (bytes > kMaxTextFileBytes)
    throw InputError(
        fmt::format("{}: {} bytes; text datasets hold at most {} MiB", file.string(), bytes, kMaxTextFileBytes >> 20));
  const std::string text = read_file(file.string(), "text file");
  progress(0.2);
  const std::vector<char32_t> chars = decode_utf8(text, file.string());
  if (chars.empty()) throw InputError(fmt::format("{}: the file holds no text", file.string()));
  progress(0.5);
  std::vector<char32_t> vocabulary = chars;
  std::sort(vocabulary.begin(), vocabulary.end());
  vocabulary.erase(std::unique(vocabulary.begin(), vocabulary.end()), vocabulary.end());
  if (vocabulary.size() > kMaxTextVocabulary)
    throw InputError(fmt::format("{}: {} distinct characters; text datasets hold at most {}", file.string(),
                                 vocabulary.size(), kMaxTextVocabulary));
  // As TextData computes its held-out part from the holdout the networks are given.
  const auto total = static_cast<int64_t>(chars.size());
  const float holdout = static_cast<float>(spec.value("val_percent", 10)) / 100.f;
  const auto held = static_cast<int64_t>(static_cast<double>(total) * holdout);
  progress(0.7);
  write_file_atomic((dir / "text.txt").string(), text);
  progress(0.9);
  json info;
  info["kind"] = "text";
  info["holdout"] = holdout;
  info["characters"] = total;
  info["train_count"] = total - held;
  info["val_count"] = held;
  json classes = json::array();
  for (char32_t c : vocabulary) classes.push_back(encode_utf8(c));
  info["classes"] = classes;
  std::string preview;
  for (size_t i = 0; i < chars.size() && i < 1000; ++i) preview += encode_utf8(chars[i]);
  info["preview"] = preview;
  write_file_atomic((dir / "info.json").string(), info.dump(1));
  progress(1.0);
}

}  // namespace

void pack_dataset(const json& spec, const std::string& dir_name, const std::vector<std::string>& roots,
                  const std::function<void(double)>& progress, const std::atomic<bool>& cancelled) {
  const fs::path dir = dir_name;
  fs::create_directories(dir / "thumbs");
  if (spec.value("source", "") == "text") return pack_text(spec, roots, dir, progress);
  Packing p;
  if (spec.value("source", "") == "idx")
    from_idx(spec, roots, p, progress, cancelled);
  else
    from_folder(spec, roots, p, progress, cancelled);
  if (spec.contains("class_names")) {
    auto names = spec["class_names"].get<std::vector<std::string>>();
    for (size_t i = 0; i < names.size() && i < p.classes.size(); ++i) p.classes[i] = names[i];
  }
  if (p.train.size() == 0) throw InputError("the training split is empty");
  check(cancelled);
  const int64_t per = shape_numel(p.shape);
  std::vector<double> sum(static_cast<size_t>(per), 0.0);
  for (int64_t i = 0; i < p.train.size(); ++i) {
    for (int64_t k = 0; k < per; ++k) sum[k] += p.train.data[i * per + k];
    progress(share(kImagesDone, kMeanDone, static_cast<size_t>(i + 1), static_cast<size_t>(p.train.size())));
  }
  std::vector<float> mean(sum.size());
  std::vector<uint8_t> mean8(sum.size());
  for (size_t k = 0; k < sum.size(); ++k) {
    mean[k] = static_cast<float>(sum[k] / static_cast<double>(p.train.size()));
    mean8[k] = static_cast<uint8_t>(std::clamp(mean[k] + 0.5f, 0.f, 255.f));
  }
  write_split(dir / "train.h5", p.train, p.shape, &mean);
  progress(kTrainWritten);
  write_split(dir / "val.h5", p.val, p.shape, nullptr);
  write_png(dir / "mean.png", mean8.data(), p.shape);
  // Per-class counts and up to 8 thumbnails a class from the training split.
  json info;
  info["shape"] = p.shape;
  info["classes"] = p.classes;
  std::vector<int64_t> train_counts(p.classes.size(), 0), val_counts(p.classes.size(), 0);
  json thumbs = json::array();
  for (int64_t i = 0; i < p.train.size(); ++i) {
    size_t c = static_cast<size_t>(p.train.labels[i]);
    if (c >= p.classes.size()) continue;
    if (train_counts[c]++ < 8) {
      std::string name = fmt::format("{}_{}.png", c, train_counts[c] - 1);
      write_png(dir / "thumbs" / name, p.train.data.data() + i * per, p.shape);
      thumbs.push_back({{"class", c}, {"file", name}, {"index", i}});
    }
  }
  for (float l : p.val.labels)
    if (static_cast<size_t>(l) < p.classes.size()) ++val_counts[static_cast<size_t>(l)];
  info["train_count"] = p.train.size();
  info["val_count"] = p.val.size();
  info["train_per_class"] = train_counts;
  info["val_per_class"] = val_counts;
  info["thumbnails"] = thumbs;
  write_file_atomic((dir / "info.json").string(), info.dump(1));
  progress(1.0);
}

std::filesystem::path import_file(const std::string& path, const std::vector<std::string>& roots, const char* what) {
  return checked_source(path, roots, what);
}

}  // namespace bks::server
