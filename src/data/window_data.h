// R-CNN's window data (BVLC Caffe's WindowData layer): a window file lists images and
// candidate boxes in them, each with a class and its overlap with a ground-truth box.
// Batches sample foreground boxes (overlap >= fg_threshold, their class) and background
// ones (overlap < bg_threshold, class 0) at fg_fraction, and warp each to a square crop.
//
// The window file, as Caffe reads it (whitespace-separated), repeated per image:
//   # image_index
//   image_path
//   channels
//   height
//   width
//   num_windows
//   class_index overlap x1 y1 x2 y2      (num_windows lines; inclusive pixel coordinates)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bks {

struct Window {
  int image = 0;  // index into WindowSet::images
  int label = 0;
  float overlap = 0.f;
  int x1 = 0, y1 = 0, x2 = 0, y2 = 0;
};

struct WindowImage {
  std::string path;           // root_folder + the listed path
  int height = 0, width = 0;  // the file's own (windows are checked against these)
  std::string encoded;        // the file's bytes with cache_images; else read for each window
};

struct WindowFileOptions {
  std::string root_folder;
  float fg_threshold = 0.5f, bg_threshold = 0.5f;
  bool cache_images = false;
  // Boxes are expanded and then clipped to the image (context_pad or square crops): a box
  // need only overlap its image; otherwise it must lie inside it.
  bool clipped = false;
};

struct WindowSet {
  std::string source;
  std::vector<WindowImage> images;
  std::vector<Window> fg, bg;  // bg windows have label 0 and overlap 0, as Caffe sets them
};

// Reads (or returns the cached) window file: every image is opened and its size read, and
// every box checked. InputError naming the file and line of a malformed entry, an image that
// cannot be read, a foreground box of class 0 or a box outside its image.
std::shared_ptr<const WindowSet> open_window_file(const std::string& path, const WindowFileOptions& o);
std::shared_ptr<WindowSet> read_window_file(const std::string& path, const WindowFileOptions& o);

// Where a window lands in its crop_size x crop_size sample (Caffe's load_batch geometry):
// image region [x1, x2] x [y1, y2] (clipped) resized to width x height and written at
// (pad_h, pad_w); the rest of the sample stays 0. With context_pad or square, the box is
// first grown about its centre so that context_pad pixels of context surround it after the
// warp (square: to its longer side), and the part outside the image becomes padding,
// mirrored with the crop when `mirror`.
struct WindowWarp {
  int x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  int width = 0, height = 0;
  int pad_w = 0, pad_h = 0;
};
WindowWarp window_warp(const Window& w, int image_width, int image_height, int crop_size, int context_pad, bool square,
                       bool mirror);

struct WindowBatchOptions {
  int64_t batch = 0;
  int crop_size = 0, context_pad = 0;
  bool square = false;  // crop_mode "square"; else "warp"
  bool mirror = false;  // random horizontal flips
  float fg_fraction = 0.25f;
  float scale = 1.f;  // after the mean is subtracted
  // The mean: per channel (3 values), or a per-pixel mean image (3 x mean_h x mean_w) read at
  // an offset of (mean_w - crop_size) / 2 on both axes, as Caffe does; empty: none.
  std::vector<float> mean;
  int mean_h = 0, mean_w = 0;
  uint64_t seed = 0;
  std::string name;  // the layer, for its random stream
};

// The foreground items in a batch: floor(batch x fg_fraction); the rest are background.
int64_t window_foreground_items(const WindowBatchOptions& o);

// InputError naming the window file when the batch needs windows of a set that is empty.
void check_window_batch(const WindowSet& ws, const WindowBatchOptions& o);

// Fills batch `step` (a pure function of o.seed, o.name and step): background items first,
// then foreground, each a box drawn at random from its set. `data` is batch x 3 x crop_size x
// crop_size (BGR), `label` batch values. RuntimeError naming the image when one that was
// readable at open no longer decodes.
void build_window_batch(const WindowSet& ws, const WindowBatchOptions& o, int64_t step, float* data, float* label);

}  // namespace bks
