// R-CNN's WindowData (window files, box warping, fg/bg sampling) and SegNet's DenseImageData
// (image and label-image pairs): the readers, the batches they build to the pixel, the
// layers, and the errors bad input gives.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "caffe.pb.h"
#include "cli_util.h"
#include "core/error.h"
#include "data/dense_image_data.h"
#include "data/image_decode.h"
#include "data/window_data.h"
#include "op_harness.h"

namespace bks {
namespace {
namespace fs = std::filesystem;
using test::at4;

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("bks_wd_" + name);
  fs::remove_all(d);
  fs::create_directories(d / "img");
  return d;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// Colour value of RGB channel k at (y, x): 1 + 10k + 3y + x.
uint8_t rgb(int k, int y, int x) { return static_cast<uint8_t>(1 + 10 * k + 3 * y + x); }
// The same as the data layers read it: BGR, so output channel c is RGB channel 2 - c.
float bgr(int c, int y, int x) { return rgb(2 - c, y, x); }

void write_rgb_png(const fs::path& file, int h, int w) {
  std::vector<uint8_t> chw(static_cast<size_t>(3 * h * w));
  for (int k = 0; k < 3; ++k)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) chw[static_cast<size_t>((k * h + y) * w + x)] = rgb(k, y, x);
  std::ofstream(file, std::ios::binary) << encode_image(chw.data(), 3, h, w, false, false);
}

void write_grey_png(const fs::path& file, int h, int w, const std::vector<uint8_t>& px) {
  std::ofstream(file, std::ios::binary) << encode_image(px.data(), 1, h, w, false, false);
}

// ---- WindowData ----

// Two images: a.png 8 x 10 (declared 9 x 10: the file's size counts) and b.png 6 x 6.
fs::path write_window_file(const fs::path& dir, const std::string& windows_a = "") {
  write_rgb_png(dir / "img/a.png", 8, 10);
  write_rgb_png(dir / "img/b.png", 6, 6);
  std::ofstream f(dir / "windows.txt");
  f << "# 0\nimg/a.png\n3\n9\n10\n"
    << (windows_a.empty() ? "4\n1 0.8 2 1 5 4\n2 0.5 0 0 9 7\n3 0.45 1 1 4 4\n5 0.2 0 0 3 3\n" : windows_a)
    << "# 1\nimg/b.png\n3\n6\n6\n1\n4 0.1 0 0 5 5\n";
  return dir / "windows.txt";
}

WindowFileOptions window_options(const fs::path& dir) {
  WindowFileOptions o;
  o.root_folder = dir.string() + "/";
  o.fg_threshold = 0.5f;
  o.bg_threshold = 0.4f;
  return o;
}

TEST(WindowFile, SplitsWindowsByOverlapAndReadsImageSizes) {
  fs::path dir = fresh_dir("read");
  auto ws = read_window_file(write_window_file(dir).string(), window_options(dir));
  ASSERT_EQ(ws->images.size(), 2u);
  EXPECT_EQ(ws->images[0].height, 8) << "the file's height, not the declared 9";
  EXPECT_EQ(ws->images[0].width, 10);
  EXPECT_TRUE(ws->images[0].encoded.empty()) << "read per window without cache_images";
  // overlap >= 0.5: foreground with its class; < 0.4: background, class 0; 0.45: neither.
  ASSERT_EQ(ws->fg.size(), 2u);
  EXPECT_EQ(ws->fg[0].label, 1);
  EXPECT_EQ(ws->fg[1].label, 2);
  EXPECT_EQ(ws->fg[0].x1, 2);
  EXPECT_EQ(ws->fg[0].y2, 4);
  ASSERT_EQ(ws->bg.size(), 2u);
  for (const Window& w : ws->bg) EXPECT_EQ(w.label, 0);
  EXPECT_EQ(ws->bg[1].image, 1);
  WindowFileOptions cached = window_options(dir);
  cached.cache_images = true;
  EXPECT_FALSE(read_window_file((dir / "windows.txt").string(), cached)->images[1].encoded.empty());
}

TEST(WindowFile, BadInputNamesFileAndLine) {
  fs::path dir = fresh_dir("bad");
  write_window_file(dir);
  const WindowFileOptions o = window_options(dir);
  auto error_for = [&](const std::string& text) {
    std::ofstream(dir / "w.txt") << text;
    return error_of([&] { read_window_file((dir / "w.txt").string(), o); });
  };
  const std::string w = (dir / "w.txt").string();
  EXPECT_NE(error_for("# 0\nimg/a.png\n3\n8\nten\n").find(w + ":5: expected the image's width (an integer), got 'ten'"),
            std::string::npos);
  EXPECT_NE(error_for("# 0\nimg/a.png\n3\n8\n10\n1\n1 0.9 0 0 3\n").find(w + ":7: the file ends where a window's y2"),
            std::string::npos);
  EXPECT_NE(error_for("# 0\nimg/none.png\n3\n8\n10\n0\n").find(w + ":2: cannot open image"), std::string::npos);
  EXPECT_NE(error_for("# 0\nimg/a.png\n3\n8\n10\n1\n0 0.9 0 0 3 3\n").find(w + ":7: window of class 0"),
            std::string::npos);
  EXPECT_NE(error_for("# 0\nimg/a.png\n3\n8\n10\n1\n1 0.9 0 0 10 3\n").find(w + ":7: window (0, 0) - (10, 3) does not"),
            std::string::npos);
  EXPECT_NE(error_for("# 1\nimg/a.png\n3\n8\n10\n0\n").find(w + ":1: image index 1 out of order"), std::string::npos);
  EXPECT_NE(error_for("# 0\nimg/a.png\n1\n8\n10\n0\n").find(w + ":3: image"), std::string::npos);
  EXPECT_NE(error_for("0\n").find(w + ":1: expected '# image_index'"), std::string::npos);
  EXPECT_NE(error_for("\n").find("lists no images"), std::string::npos);
  // With context padding a box may reach past the image (it is clipped), but not miss it.
  WindowFileOptions clipped = o;
  clipped.clipped = true;
  std::ofstream(dir / "w.txt") << "# 0\nimg/a.png\n3\n8\n10\n2\n1 0.9 -2 0 10 3\n1 0.9 10 0 12 3\n";
  EXPECT_NE(error_of([&] { read_window_file(w, clipped); }).find(w + ":8: window (10, 0) - (12, 3) lies outside"),
            std::string::npos);
}

// Caffe's geometry by hand. crop 10, context_pad 2: context_scale 10/6. Box (0,0)-(5,3) in a
// 10 x 8 image: half sizes 3 and 2 about (3, 2) grow to x -2..8, y -1..5 (11 x 7); clipped
// to 0..8 x 0..5 with 2 columns cut on the left, 1 row on top. Scales 10/11 and 10/7: the
// 9 x 6 region warps to round(8.18) x round(8.57) = 8 x 9, padding round(1.82) = 2 left and
// round(1.43) = 1 on top; mirrored, the left padding is the right's (0).
TEST(WindowWarp, ContextPadGrowsClipsAndMirrorsThePadding) {
  Window w;
  w.x1 = 0, w.y1 = 0, w.x2 = 5, w.y2 = 3;
  WindowWarp g = window_warp(w, 10, 8, 10, 2, false, false);
  EXPECT_EQ(std::vector<int>({g.x1, g.y1, g.x2, g.y2, g.width, g.height, g.pad_w, g.pad_h}),
            std::vector<int>({0, 0, 8, 5, 8, 9, 2, 1}));
  EXPECT_EQ(window_warp(w, 10, 8, 10, 2, false, true).pad_w, 0);
  // No context, warp: the box as it is, to the whole square.
  g = window_warp(w, 10, 8, 10, 0, false, false);
  EXPECT_EQ(std::vector<int>({g.x1, g.y1, g.x2, g.y2, g.width, g.height, g.pad_w, g.pad_h}),
            std::vector<int>({0, 0, 5, 3, 10, 10, 0, 0}));
  // Square: (2,1)-(3,6) is 2 x 6; half sizes become 3 and 3 about (3, 4): x 0..6, y 1..7.
  w.x1 = 2, w.y1 = 1, w.x2 = 3, w.y2 = 6;
  g = window_warp(w, 10, 8, 10, 0, true, false);
  EXPECT_EQ(std::vector<int>({g.x1, g.y1, g.x2, g.y2, g.width, g.height, g.pad_w, g.pad_h}),
            std::vector<int>({0, 1, 6, 7, 10, 10, 0, 0}));
}

// crop_size 4 on 4 x 4 boxes: the warp is the identity, so every value is known.
TEST(WindowBatch, PixelsLabelsMeanScaleAndMirror) {
  fs::path dir = fresh_dir("batch");
  auto ws = read_window_file(write_window_file(dir, "3\n7 0.9 2 1 5 4\n3 0.45 0 0 3 3\n5 0.1 0 3 3 6\n").string(),
                             window_options(dir));
  WindowBatchOptions o;
  o.batch = 4;
  o.crop_size = 4;
  o.fg_fraction = 0.5f;
  o.scale = 0.5f;
  o.mean = {1, 2, 3};
  o.name = "data";
  EXPECT_EQ(window_foreground_items(o), 2);
  std::vector<float> data(4 * 3 * 16), label(4);
  // Background windows: (0,3)-(3,6) of a.png and the whole of b.png (6 x 6, not 4 x 4).
  std::vector<float> want_fg(48), want_bg(48);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 4; ++x) {
        want_fg[(c * 4 + y) * 4 + x] = (bgr(c, y + 1, x + 2) - o.mean[c]) * 0.5f;
        want_bg[(c * 4 + y) * 4 + x] = (bgr(c, y + 3, x) - o.mean[c]) * 0.5f;
      }
  auto item = [&](int i) { return std::vector<float>(data.begin() + i * 48, data.begin() + (i + 1) * 48); };
  int bg_from_a = 0;
  for (int64_t step = 0; step < 6; ++step) {
    build_window_batch(*ws, o, step, data.data(), label.data());
    EXPECT_EQ(label, (std::vector<float>{0, 0, 7, 7})) << "background first, then foreground";
    EXPECT_EQ(item(2), want_fg);
    EXPECT_EQ(item(3), want_fg);
    for (int i : {0, 1}) bg_from_a += item(i) == want_bg;
  }
  EXPECT_GT(bg_from_a, 0) << "a.png's background window is drawn";
  EXPECT_LT(bg_from_a, 12) << "so is b.png's";

  // Mirror: each item is the crop or its reflection, both occur, and the batch is a function
  // of (seed, step) alone.
  o.mirror = true;
  std::vector<float> flipped(48);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 4; ++x) flipped[(c * 4 + y) * 4 + x] = want_fg[(c * 4 + y) * 4 + 3 - x];
  int flips = 0;
  for (int64_t step = 0; step < 8; ++step) {
    build_window_batch(*ws, o, step, data.data(), label.data());
    for (int i : {2, 3}) {
      EXPECT_TRUE(item(i) == want_fg || item(i) == flipped) << "step " << step << " item " << i;
      flips += item(i) == flipped;
    }
  }
  EXPECT_GT(flips, 0);
  EXPECT_LT(flips, 16);
  std::vector<float> again(data.size()), other(data.size());
  build_window_batch(*ws, o, 7, again.data(), label.data());
  EXPECT_EQ(again, data) << "step 7 rebuilt";
  o.seed = 1;
  bool differs = false;
  for (int64_t step = 0; step < 8 && !differs; ++step) {
    build_window_batch(*ws, o, step, other.data(), label.data());
    o.seed = 0;
    build_window_batch(*ws, o, step, again.data(), label.data());
    o.seed = 1;
    differs = other != again;
  }
  EXPECT_TRUE(differs) << "another seed draws other windows and flips";
}

// A per-pixel mean is read at offset (mean_w - crop) / 2; context padding stays 0.
TEST(WindowBatch, MeanImageAndContextPadding) {
  fs::path dir = fresh_dir("mean");
  auto ws = read_window_file(write_window_file(dir, "1\n1 0.9 0 0 5 3\n").string(), [&] {
    WindowFileOptions f = window_options(dir);
    f.clipped = true;
    return f;
  }());
  WindowBatchOptions o;
  o.batch = 1;
  o.crop_size = 10;
  o.context_pad = 2;
  o.fg_fraction = 1.f;
  o.mean_h = o.mean_w = 12;
  o.mean.resize(3 * 12 * 12);
  for (size_t i = 0; i < o.mean.size(); ++i) o.mean[i] = static_cast<float>(i % 7) * 0.25f;
  std::vector<float> data(3 * 100), label(1);
  build_window_batch(*ws, o, 0, data.data(), label.data());
  // The geometry of WindowWarp's test: an 8 x 9 warp at column 2, row 1.
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 10; ++y)
      for (int x = 0; x < 10; ++x) {
        const float v = data[(c * 10 + y) * 10 + x];
        if (y < 1 || x < 2) {
          EXPECT_EQ(v, 0.f) << c << " " << y << " " << x;
        } else {
          // Inside the warp, v is a pixel (an integer, at least 1) less the mean at (y + 1, x + 1).
          const float px = v + o.mean[(c * 12 + y + 1) * 12 + x + 1];
          EXPECT_EQ(px, std::round(px)) << c << " " << y << " " << x;
          EXPECT_GE(px, 1.f);
        }
      }
  // The warp's first pixel: the image's (0, 0), blended 1/16 with (0, 1) and rounded back.
  EXPECT_EQ(data[(0 * 10 + 1) * 10 + 2] + o.mean[(0 * 12 + 2) * 12 + 3], bgr(0, 0, 0));
}

// The layer: Caffe's shapes, transform_param's crop and mean, window_data_param's scale.
TEST(WindowDataLayer, ShapesValuesAndErrors) {
  fs::path dir = fresh_dir("layer");
  write_window_file(dir, "2\n7 0.9 2 1 5 4\n3 0.1 2 1 5 4\n");
  // The layer with more window_data_param fields and a transform_param.
  auto layer = [&](const std::string& window, const std::string& transform) {
    return fmt::format(
        "type: 'WindowData' window_data_param {{ source: '{}' root_folder: '{}/' batch_size: 4 scale: 2 {} }} "
        "transform_param {{ {} }}",
        (dir / "windows.txt").string(), dir.string(), window, transform);
  };
  test::OpHarness h(layer("fg_fraction: 0.5", "crop_size: 4 mean_value: 5"), {}, proto::TRAIN, 2);
  EXPECT_EQ(h.out[0].shape(), (Shape{4, 3, 4, 4}));
  EXPECT_EQ(h.out[1].shape(), (Shape{4}));
  h.forward();
  EXPECT_EQ(std::vector<float>(h.out[1].f32(), h.out[1].f32() + 4), (std::vector<float>{0, 0, 7, 7}));
  // The foreground items (the box at (2, 1)), less the mean, times window_data_param.scale.
  for (int i : {2, 3}) EXPECT_EQ(at4(h.out[0], i, 1, 2, 3), (bgr(1, 1 + 2, 2 + 3) - 5) * 2) << "item " << i;
  auto error_for = [&](const std::string& window, const std::string& transform) {
    return error_of([&] { test::OpHarness(layer(window, transform), {}, proto::TRAIN, 2); });
  };
  EXPECT_NE(error_for("", "").find("transform_param.crop_size is required"), std::string::npos);
  EXPECT_NE(error_for("", "crop_size: 4 scale: 0.5").find("window_data_param.scale"), std::string::npos);
  EXPECT_NE(error_for("crop_size: 4", "crop_size: 4").find("deprecated; use transform_param"), std::string::npos);
  EXPECT_NE(error_for("crop_mode: 'circle'", "crop_size: 4").find("crop_mode 'circle'"), std::string::npos);
  EXPECT_NE(error_for("context_pad: 2", "crop_size: 4").find("context_pad 2 leaves no room"), std::string::npos);
  EXPECT_EQ(error_for("fg_fraction: 1 bg_threshold: 0.05", "crop_size: 4"), "(no error)")
      << "only foreground items asked for: no background windows needed";
  EXPECT_NE(error_for("fg_fraction: 0.5 bg_threshold: 0.05", "crop_size: 4")
                .find("takes 2 foreground and 2 background windows (fg_fraction 0.5), but the file has 1 foreground "
                      "and 0 background"),
            std::string::npos);
  EXPECT_NE(error_for("", "crop_size: 4 mean_file: '/nonexistent/mean.binaryproto'").find("/nonexistent/mean"),
            std::string::npos);
}

// ---- DenseImageData ----

// Pair i's 4 x 6 image: RGB channel k at (y, x) is 1 + 50k + 6y + x + 10i, so each channel
// tells which pixel it is. Its label image: (6y + x) % 5.
uint8_t pair_rgb(int k, int y, int x, int i) { return static_cast<uint8_t>(1 + 50 * k + 6 * y + x + 10 * i); }
float pair_bgr(int c, int y, int x, int i) { return pair_rgb(2 - c, y, x, i); }

fs::path write_pairs(const fs::path& dir, int count) {
  std::ofstream list(dir / "list.txt");
  for (int i = 0; i < count; ++i) {
    std::vector<uint8_t> chw(3 * 24), lab(24);
    for (int k = 0; k < 3; ++k)
      for (int p = 0; p < 24; ++p) chw[static_cast<size_t>(k * 24 + p)] = pair_rgb(k, p / 6, p % 6, i);
    for (int p = 0; p < 24; ++p) lab[static_cast<size_t>(p)] = static_cast<uint8_t>(p % 5);
    std::ofstream(dir / fmt::format("img/{}.png", i), std::ios::binary)
        << encode_image(chw.data(), 3, 4, 6, false, false);
    write_grey_png(dir / fmt::format("img/{}_label.png", i), 4, 6, lab);
    list << fmt::format("img/{}.png img/{}_label.png\n", i, i);
  }
  return dir / "list.txt";
}

TEST(DenseImageList, ImagesAndLabelMapsToThePixel) {
  fs::path dir = fresh_dir("dense");
  DenseImageOptions io;
  io.root_folder = dir.string() + "/";
  auto list = read_dense_image_list(write_pairs(dir, 3).string(), io);
  ASSERT_EQ(list->pairs.size(), 3u);
  EXPECT_EQ(list->height, 4);
  EXPECT_EQ(list->width, 6);
  DenseBatchOptions o;
  o.batch = 2;
  o.name = "data";
  EpochOrder order(3, 2, false, 0, 0, "data");
  std::vector<float> data(2 * 3 * 24), label(2 * 24);
  build_dense_batch(*list, io, o, order, nullptr, 1, data.data(), label.data());  // pairs 2 and 0
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < 24; ++p) {
      EXPECT_EQ(data[c * 24 + p], pair_bgr(c, p / 6, p % 6, 2)) << "pair 2, BGR";
      EXPECT_EQ(data[72 + c * 24 + p], pair_bgr(c, p / 6, p % 6, 0)) << "pair 0 after wrapping";
    }
  for (int p = 0; p < 24; ++p) EXPECT_EQ(label[p], p % 5);

  // Resized: the image bilinearly, the labels by nearest neighbour (only ids 0..4 appear;
  // doubling the size repeats each label pixel twice along each axis).
  io.new_height = 8;
  io.new_width = 12;
  auto big = read_dense_image_list((dir / "list.txt").string(), io);
  std::vector<float> bdata(3 * 96), blabel(96);
  o.batch = 1;
  build_dense_batch(*big, io, o, EpochOrder(3, 1, false, 0, 0, "d"), nullptr, 0, bdata.data(), blabel.data());
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 12; ++x) EXPECT_EQ(blabel[y * 12 + x], ((y / 2) * 6 + x / 2) % 5) << y << " " << x;
  auto px = [](int y, int x) { return pair_bgr(0, y, x, 0); };
  EXPECT_EQ(bdata[1 * 12 + 1],
            static_cast<float>(std::lround((9 * px(0, 0) + 3 * px(0, 1) + 3 * px(1, 0) + px(1, 1)) / 16.0)))
      << "bilinear: source (0.25, 0.25)";
}

// Crop and mirror move image and labels alike: each output pixel's label is the one of the
// image pixel it shows. Random in both phases, a function of (seed, step).
TEST(DenseImageList, CropAndMirrorKeepLabelsOnTheirPixels) {
  fs::path dir = fresh_dir("crop");
  DenseImageOptions io;
  io.root_folder = dir.string() + "/";
  io.crop_height = 3;
  io.crop_width = 4;
  auto list = read_dense_image_list(write_pairs(dir, 1).string(), io);
  DenseBatchOptions o;
  o.batch = 1;
  o.mirror = true;
  o.name = "data";
  EpochOrder order(1, 1, false, 0, 0, "data");
  std::vector<float> data(3 * 12), label(12), first;
  std::set<std::vector<float>> seen;
  for (int64_t step = 0; step < 120; ++step) {
    build_dense_batch(*list, io, o, order, nullptr, step, data.data(), label.data());
    if (step == 3) first = data;
    seen.insert(data);
    for (int p = 0; p < 12; ++p) {
      // Red (BGR 2) is 1 + 6y + x: it says which source pixel this is.
      const int v = static_cast<int>(data[2 * 12 + p]) - 1, y = v / 6, x = v % 6;
      ASSERT_TRUE(y >= 0 && y < 4 && x >= 0 && x < 6) << v;
      EXPECT_EQ(label[p], (y * 6 + x) % 5) << "step " << step << " pixel " << p;
    }
  }
  // 2 rows x 3 columns of offsets, times 2 for the flips.
  EXPECT_EQ(seen.size(), 12u) << "every crop and flip drawn";
  build_dense_batch(*list, io, o, order, nullptr, 3, data.data(), label.data());
  EXPECT_EQ(data, first) << "step 3 rebuilt";
}

TEST(DenseImageList, BadInputNamesFileAndLine) {
  fs::path dir = fresh_dir("dense_bad");
  write_pairs(dir, 2);
  write_grey_png(dir / "img/small_label.png", 3, 6, std::vector<uint8_t>(18));
  write_rgb_png(dir / "img/wide.png", 4, 7);
  DenseImageOptions io;
  io.root_folder = dir.string() + "/";
  const std::string l = (dir / "l.txt").string();
  auto error_for = [&](const std::string& text, const DenseImageOptions& o) {
    std::ofstream(l) << text;
    return error_of([&] { read_dense_image_list(l, o); });
  };
  EXPECT_NE(error_for("img/0.png img/0_label.png\nimg/1.png\n", io).find(l + ":2: expected 'IMAGE LABEL_IMAGE'"),
            std::string::npos);
  EXPECT_NE(error_for("img/0.png img/missing.png\n", io).find(l + ":1: cannot open label image"), std::string::npos);
  EXPECT_NE(error_for("img/0.png img/small_label.png\n", io)
                .find(l + ":1: label image " + io.root_folder + "img/small_label.png is 3 x 6 (height x width) but"),
            std::string::npos);
  EXPECT_NE(error_for("img/0.png img/0_label.png\nimg/wide.png img/wide.png\n", io)
                .find(l + ":2: image " + io.root_folder + "img/wide.png is 4 x 7 but the first is 4 x 6"),
            std::string::npos);
  EXPECT_NE(error_for("\n", io).find("lists no images"), std::string::npos);
  DenseImageOptions resized = io;  // resized to one size, the pairs agree
  resized.new_height = 3, resized.new_width = 6;
  EXPECT_EQ(error_for("img/0.png img/small_label.png\n", resized), "(no error)");
  DenseImageOptions crop = io;
  crop.crop_height = 5, crop.crop_width = 2;
  EXPECT_NE(error_for("img/0.png img/0_label.png\n", crop).find("smaller than the 5 x 2 crop"), std::string::npos);
}

// The layer: (N, C, H, W) images and (N, 1, H, W) labels; transform_param's mean and scale on
// the image only; its mirror and crop_size refused.
TEST(DenseImageDataLayer, ShapesTransformAndErrors) {
  fs::path dir = fresh_dir("dense_layer");
  write_pairs(dir, 3);
  const std::string param = fmt::format(
      "type: 'DenseImageData' dense_image_data_param {{ source: '{}' root_folder: "
      "'{}/' batch_size: 2 ",
      (dir / "list.txt").string(), dir.string());
  test::OpHarness h(param + "} transform_param { mean_value: 3 scale: 0.5 }", {}, proto::TEST, 2);
  EXPECT_EQ(h.out[0].shape(), (Shape{2, 3, 4, 6}));
  EXPECT_EQ(h.out[1].shape(), (Shape{2, 1, 4, 6}));
  h.forward();
  EXPECT_EQ(at4(h.out[0], 1, 0, 2, 5), (pair_bgr(0, 2, 5, 1) - 3) * 0.5f);
  EXPECT_EQ(at4(h.out[1], 1, 0, 2, 5), (2 * 6 + 5) % 5) << "labels keep their values";
  test::OpHarness grey(param + "is_color: false crop_height: 2 crop_width: 3 }", {}, proto::TRAIN, 2);
  EXPECT_EQ(grey.out[0].shape(), (Shape{2, 1, 2, 3}));
  EXPECT_EQ(grey.out[1].shape(), (Shape{2, 1, 2, 3}));
  auto error_for = [&](const std::string& rest) {
    return error_of([&] { test::OpHarness(param + rest, {}, proto::TRAIN, 2); });
  };
  EXPECT_NE(error_for("} transform_param { mirror: true }").find("dense_image_data_param mirror"), std::string::npos);
  EXPECT_NE(error_for("crop_height: 2 }").find("crop_height and crop_width must be given together"), std::string::npos);
  EXPECT_NE(error_for("new_height: 2 new_width: 2 crop_height: 3 crop_width: 2 }").find("exceeds"), std::string::npos);
}

}  // namespace
}  // namespace bks
