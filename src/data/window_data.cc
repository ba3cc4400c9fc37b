#include "data/window_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/file_io.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/image_decode.h"
#include "data/weak_cache.h"

namespace bks {
namespace {

// The window file's whitespace-separated tokens, each with its line, as Caffe's `infile >>`
// reads them.
class Tokens {
 public:
  Tokens(std::string path, const std::string& text) : path_(std::move(path)) {
    int64_t line = 1;
    size_t i = 0;
    while (i < text.size()) {
      if (text[i] == '\n') ++line;
      if (std::isspace(static_cast<unsigned char>(text[i]))) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
      toks_.push_back({text.substr(i, j - i), line});
      i = j;
    }
  }
  bool done() const { return at_ >= toks_.size(); }
  int64_t line() const { return at_ < toks_.size() ? toks_[at_].line : toks_.empty() ? 1 : toks_.back().line; }
  // The next token; InputError saying what was expected when the file ends.
  const std::string& word(const char* what) {
    if (done()) input_error("{}:{}: the file ends where {} is expected", path_, line(), what);
    return toks_[at_++].text;
  }
  int64_t integer(const char* what) {
    int64_t l = line();
    const std::string& t = word(what);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(t.c_str(), &end, 10);
    if (end == t.c_str() || *end != 0 || errno == ERANGE || v < INT_MIN || v > INT_MAX)
      input_error("{}:{}: expected {} (an integer), got '{}'", path_, l, what, t);
    return v;
  }
  float number(const char* what) {
    int64_t l = line();
    const std::string& t = word(what);
    char* end = nullptr;
    float v = std::strtof(t.c_str(), &end);
    if (end == t.c_str() || *end != 0 || !std::isfinite(v))
      input_error("{}:{}: expected {} (a number), got '{}'", path_, l, what, t);
    return v;
  }

 private:
  struct Token {
    std::string text;
    int64_t line;
  };
  std::string path_;
  std::vector<Token> toks_;
  size_t at_ = 0;
};

std::string read_image_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

WeakCache<WindowSet>& cache() {
  static WeakCache<WindowSet> c;
  return c;
}

}  // namespace

std::shared_ptr<WindowSet> read_window_file(const std::string& path, const WindowFileOptions& o) {
  Tokens in(path, read_file(path, "window file"));
  if (in.done()) input_error("{}: the window file lists no images", path);
  auto ws = std::make_shared<WindowSet>();
  ws->source = path;
  int64_t dropped = 0;
  while (!in.done()) {
    const int64_t at = in.line();
    if (const std::string& hash = in.word("'#'"); hash != "#")
      input_error("{}:{}: expected '# image_index' to start image {}, got '{}'", path, at, ws->images.size(), hash);
    const int64_t index = in.integer("the image index");
    // Caffe indexes its images by this number: it must count them.
    if (index != static_cast<int64_t>(ws->images.size()))
      input_error("{}:{}: image index {} out of order; the images must be numbered 0, 1, 2, ... (expected {})", path,
                  at, index, ws->images.size());
    WindowImage img;
    const int64_t path_line = in.line();
    img.path = o.root_folder + in.word("the image path");
    const int64_t channels_line = in.line();
    if (int64_t c = in.integer("the image's channels"); c != 3)
      input_error("{}:{}: image {} declares {} channels; WindowData reads images in colour (3), as Caffe's does", path,
                  channels_line, img.path, c);
    const int64_t size_line = in.line();
    const int64_t height = in.integer("the image's height"), width = in.integer("the image's width");
    if (height <= 0 || width <= 0)
      input_error("{}:{}: image {} declares a size of {} x {}; height and width must be positive", path, size_line,
                  img.path, height, width);
    const int64_t num_line = in.line();
    const int64_t num = in.integer("the number of windows");
    if (num < 0) input_error("{}:{}: image {} declares {} windows", path, num_line, img.path, num);
    // The size that counts is the file's: Caffe crops the decoded image.
    std::string bytes = read_image_bytes(img.path);
    if (bytes.empty())
      input_error("{}:{}: cannot open image {} (root_folder '{}')", path, path_line, img.path, o.root_folder);
    int c = 0;
    if (!image_header(bytes, c, img.height, img.width))
      input_error("{}:{}: image {} is not a PNG or JPEG image", path, path_line, img.path);
    if (o.cache_images) img.encoded = std::move(bytes);
    for (int64_t k = 0; k < num; ++k) {
      const int64_t line = in.line();
      Window w;
      w.image = static_cast<int>(ws->images.size());
      w.label = static_cast<int>(in.integer("a window's class"));
      w.overlap = in.number("a window's overlap");
      w.x1 = static_cast<int>(in.integer("a window's x1"));
      w.y1 = static_cast<int>(in.integer("a window's y1"));
      w.x2 = static_cast<int>(in.integer("a window's x2"));
      w.y2 = static_cast<int>(in.integer("a window's y2"));
      if (w.x1 > w.x2 || w.y1 > w.y2)
        input_error("{}:{}: window ({}, {}) - ({}, {}) is empty: x1 <= x2 and y1 <= y2 are needed", path, line, w.x1,
                    w.y1, w.x2, w.y2);
      const bool inside = w.x1 >= 0 && w.y1 >= 0 && w.x2 < img.width && w.y2 < img.height;
      const bool overlaps = w.x2 >= 0 && w.y2 >= 0 && w.x1 < img.width && w.y1 < img.height;
      if (!(o.clipped ? overlaps : inside))
        input_error("{}:{}: window ({}, {}) - ({}, {}) {} image {} ({} x {} pixels){}", path, line, w.x1, w.y1, w.x2,
                    w.y2, o.clipped ? "lies outside" : "does not lie inside", img.path, img.width, img.height,
                    o.clipped ? "" : "; without context_pad or square crops, windows are cropped as given");
      if (w.overlap >= o.fg_threshold) {
        if (w.label <= 0)
          input_error(
              "{}:{}: window of class {} has overlap {} >= fg_threshold {}: foreground classes start at 1 "
              "(0 is background)",
              path, line, w.label, w.overlap, o.fg_threshold);
        ws->fg.push_back(w);
      } else if (w.overlap < o.bg_threshold) {
        w.label = 0;
        w.overlap = 0.f;
        ws->bg.push_back(w);
      } else {
        ++dropped;  // between the thresholds: neither, as in Caffe
      }
    }
    ws->images.push_back(std::move(img));
  }
  log::info("Read {} images with {} foreground and {} background windows from {} ({} between the thresholds left out)",
            ws->images.size(), ws->fg.size(), ws->bg.size(), path, dropped);
  return ws;
}

std::shared_ptr<const WindowSet> open_window_file(const std::string& path, const WindowFileOptions& o) {
  std::error_code ec;
  std::string key = fmt::format("{}|{}|{}|{}|{}|{}", std::filesystem::weakly_canonical(path, ec).string(),
                                o.root_folder, o.fg_threshold, o.bg_threshold, o.cache_images, o.clipped);
  return cache().get(key, [&] { return read_window_file(path, o); });
}

WindowWarp window_warp(const Window& w, int cols, int rows, int crop_size, int context_pad, bool square, bool mirror) {
  WindowWarp g{w.x1, w.y1, w.x2, w.y2, crop_size, crop_size, 0, 0};
  if (context_pad == 0 && !square) return g;
  // In float, as Caffe's float nets compute it: the box grown so that, warped to crop_size,
  // context_pad pixels surround it.
  const float crop = static_cast<float>(crop_size);
  const float context_scale = crop / static_cast<float>(crop_size - 2 * context_pad);
  float half_h = static_cast<float>(w.y2 - w.y1 + 1) / 2.f, half_w = static_cast<float>(w.x2 - w.x1 + 1) / 2.f;
  const float cx = static_cast<float>(w.x1) + half_w, cy = static_cast<float>(w.y1) + half_h;
  if (square) half_w = half_h = std::max(half_w, half_h);
  int x1 = static_cast<int>(std::round(cx - half_w * context_scale));
  int x2 = static_cast<int>(std::round(cx + half_w * context_scale));
  int y1 = static_cast<int>(std::round(cy - half_h * context_scale));
  int y2 = static_cast<int>(std::round(cy + half_h * context_scale));
  // The part beyond the image, clipped off, becomes padding of the warped size.
  const int unclipped_w = x2 - x1 + 1, unclipped_h = y2 - y1 + 1;
  const int pad_x1 = std::max(0, -x1), pad_y1 = std::max(0, -y1);
  const int pad_x2 = std::max(0, x2 - cols + 1), pad_y2 = std::max(0, y2 - rows + 1);
  x1 += pad_x1;
  x2 -= pad_x2;
  y1 += pad_y1;
  y2 -= pad_y2;
  const float scale_x = crop / static_cast<float>(unclipped_w), scale_y = crop / static_cast<float>(unclipped_h);
  auto scaled = [](int v, float s) { return static_cast<int>(std::round(static_cast<float>(v) * s)); };
  g = {x1, y1, x2, y2, scaled(x2 - x1 + 1, scale_x), scaled(y2 - y1 + 1, scale_y), 0, scaled(pad_y1, scale_y)};
  // A mirrored crop has its padding mirrored too.
  g.pad_w = mirror ? scaled(pad_x2, scale_x) : scaled(pad_x1, scale_x);
  // Rounding may overshoot the square by a pixel.
  g.height = std::min(g.height, crop_size - g.pad_h);
  g.width = std::min(g.width, crop_size - g.pad_w);
  return g;
}

int64_t window_foreground_items(const WindowBatchOptions& o) {
  return static_cast<int64_t>(static_cast<float>(o.batch) * o.fg_fraction);
}

namespace {

// Item `item` of a batch: window `w` of `ws` warped into `out` (3 x crop x crop, zeroed).
void warp_window(const WindowSet& ws, const WindowBatchOptions& o, const Window& w, bool mirror, float* out) {
  const WindowImage& wi = ws.images[static_cast<size_t>(w.image)];
  std::string read;
  if (wi.encoded.empty()) read = read_image_bytes(wi.path);
  std::string_view bytes = wi.encoded.empty() ? std::string_view(read) : std::string_view(wi.encoded);
  if (bytes.empty()) runtime_error("{}: cannot read image {}", ws.source, wi.path);
  ImageDecodeOptions d;
  d.channels = 3;
  d.bgr = true;  // Caffe reads with OpenCV: blue first
  DecodedImage img;
  std::string why;
  if (decode_image(bytes, d, img, why) != Decoded::ok)
    runtime_error("{}: image {} cannot be decoded: {}", ws.source, wi.path, why);
  const WindowWarp g = window_warp(w, img.width, img.height, o.crop_size, o.context_pad, o.square, mirror);
  if (g.width <= 0 || g.height <= 0) return;
  const int crop = o.crop_size, sw = g.x2 - g.x1 + 1, sh = g.y2 - g.y1 + 1;
  const int mean_off = (o.mean_w - crop) / 2;
  const bool per_pixel = o.mean_h > 0;
  std::vector<uint8_t> warped(static_cast<size_t>(g.width) * g.height);
  const size_t plane = static_cast<size_t>(img.width) * img.height;
  for (int c = 0; c < 3; ++c) {
    const uint8_t* src = img.chw.data() + c * plane + static_cast<size_t>(g.y1) * img.width + g.x1;
    resize_plane(src, img.width, sw, sh, warped.data(), g.width, g.height, ImageDecodeOptions::Resize::bilinear);
    for (int h = 0; h < g.height; ++h) {
      const int y = h + g.pad_h;
      float* row = out + (static_cast<size_t>(c) * crop + y) * crop + g.pad_w;
      const float* mrow =
          per_pixel ? o.mean.data() + (static_cast<size_t>(c) * o.mean_h + y + mean_off) * o.mean_w + mean_off + g.pad_w
                    : nullptr;
      const float mc = per_pixel || o.mean.empty() ? 0.f : o.mean[static_cast<size_t>(c)];
      for (int x = 0; x < g.width; ++x) {
        const int sx = mirror ? g.width - 1 - x : x;
        const float px = warped[static_cast<size_t>(h) * g.width + sx];
        row[x] = (px - (mrow ? mrow[x] : mc)) * o.scale;
      }
    }
  }
}

}  // namespace

void check_window_batch(const WindowSet& ws, const WindowBatchOptions& o) {
  const int64_t fg = window_foreground_items(o), bg = o.batch - fg;
  if ((fg > 0 && ws.fg.empty()) || (bg > 0 && ws.bg.empty()))
    input_error(
        "{}: a batch of {} takes {} foreground and {} background windows (fg_fraction {}), but the file has {} "
        "foreground and {} background windows",
        ws.source, o.batch, fg, bg, o.fg_fraction, ws.fg.size(), ws.bg.size());
}

void build_window_batch(const WindowSet& ws, const WindowBatchOptions& o, int64_t step, float* data, float* label) {
  check_window_batch(ws, o);
  const int64_t fg = window_foreground_items(o), bg = o.batch - fg;
  const size_t per = static_cast<size_t>(3) * o.crop_size * o.crop_size;
  std::fill(data, data + per * static_cast<size_t>(o.batch), 0.f);
  // One thread, as Caffe's prefetch thread: the step's compute has the cores.
  for (int64_t item = 0; item < o.batch; ++item) {
    // Each item's own stream: its window and flip depend on nothing else.
    Rng rng = Rng::derive(o.seed, o.name + ".window." + std::to_string(step * o.batch + item));
    const std::vector<Window>& set = item < bg ? ws.bg : ws.fg;
    const Window& w = set[static_cast<size_t>(rng.below(set.size()))];
    const bool mirror = o.mirror && (rng.next_u32() & 1u);
    label[item] = static_cast<float>(w.label);
    warp_window(ws, o, w, mirror, data + per * static_cast<size_t>(item));
  }
}

}  // namespace bks
