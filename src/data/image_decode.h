// PNG / JPEG bytes to the C x H x W bytes networks read (stb), resized and made grey or
// colour on the way. Shared by Caffe's data sources (LMDB/LevelDB Datums, ImageData lists,
// convert_imageset) and the dashboard.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bks {

// The most pixels an image may have to be decoded: 64 Mpixel (e.g. 8192 x 8192; up to
// 256 MB decoded). A PNG of a few hundred KB can declare far more (a decompression bomb),
// so the size in its header is checked before any pixel is decoded.
constexpr int64_t kMaxImagePixels = int64_t{64} << 20;

enum class Decoded { ok, not_an_image, too_large };

struct ImageDecodeOptions {
  int channels = 0;           // 1 (grey) or 3 (colour); 0: the file's own (grey or colour, alpha dropped)
  int height = 0, width = 0;  // 0 and 0: the file's own size
  bool bgr = false;           // colour channels in Caffe's (OpenCV's) order, blue first
  // How a size change is computed: OpenCV's INTER_LINEAR, as Caffe's tools and layers do,
  // stb's filtered resampling (smoother when shrinking a lot; the dashboard's choice), or
  // OpenCV's INTER_NEAREST (label images: class ids must not blend).
  enum class Resize { bilinear, filtered, nearest } resize = Resize::bilinear;
};

struct DecodedImage {
  int channels = 0, height = 0, width = 0;
  std::vector<uint8_t> chw;
};

// Decodes `bytes` into `out`. Otherwise says why in `why`: not a PNG or JPEG image, or more
// than kMaxImagePixels pixels.
Decoded decode_image(std::string_view bytes, const ImageDecodeOptions& o, DecodedImage& out, std::string& why);

// The channel count and size a PNG/JPEG header declares, without decoding; false if `bytes`
// is not such an image.
bool image_header(std::string_view bytes, int& channels, int& height, int& width);

// Resizes one plane of bytes (sw x sh, rows `stride` bytes apart: a crop of a larger
// plane) to dw x dh as OpenCV's cv::resize does with INTER_LINEAR (bilinear) or
// INTER_NEAREST (nearest); `filtered` is not offered here.
void resize_plane(const uint8_t* src, int stride, int sw, int sh, uint8_t* dst, int dw, int dh,
                  ImageDecodeOptions::Resize how);

// Encodes C x H x W bytes (channels 1 or 3; colour in the order `bgr` says) as a PNG or JPEG
// (quality 95) file. For convert_imageset --encoded with a resize.
std::string encode_image(const uint8_t* chw, int channels, int height, int width, bool bgr, bool jpeg);

}  // namespace bks
