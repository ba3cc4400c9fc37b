#include "data/image_decode.h"

#include <stb_image.h>
#include <stb_image_resize.h>
#include <stb_image_write.h>

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>

#include "data/dataset.h"
#include "data/jpeg_decode.h"
#include "data/png_stream_check.h"

namespace bks {
namespace {

bool is_png(std::string_view b) { return b.substr(0, 8) == std::string_view("\x89PNG\r\n\x1a\n", 8); }
bool is_jpeg(std::string_view b) { return b.substr(0, 3) == "\xff\xd8\xff"; }

// OpenCV's INTER_LINEAR geometry: pixel centres aligned (src = (dst + 0.5) * scale - 0.5),
// clamped at the borders. Interleaved (H x W x C) in and out; source rows `row` bytes apart.
void resize_bilinear(const uint8_t* src, int sw, int sh, size_t row, uint8_t* dst, int dw, int dh, int c) {
  const double fx = static_cast<double>(sw) / dw, fy = static_cast<double>(sh) / dh;
  std::vector<int> x0(static_cast<size_t>(dw)), x1(static_cast<size_t>(dw));
  std::vector<float> ax(static_cast<size_t>(dw));
  for (int x = 0; x < dw; ++x) {
    double s = (x + 0.5) * fx - 0.5;
    int i = static_cast<int>(std::floor(s));
    float a = static_cast<float>(s - i);
    if (i < 0) i = 0, a = 0.f;
    if (i >= sw - 1) i = sw - 1, a = 0.f;
    x0[static_cast<size_t>(x)] = i;
    x1[static_cast<size_t>(x)] = std::min(i + 1, sw - 1);
    ax[static_cast<size_t>(x)] = a;
  }
  for (int y = 0; y < dh; ++y) {
    double s = (y + 0.5) * fy - 0.5;
    int i = static_cast<int>(std::floor(s));
    float b = static_cast<float>(s - i);
    if (i < 0) i = 0, b = 0.f;
    if (i >= sh - 1) i = sh - 1, b = 0.f;
    const uint8_t* r0 = src + static_cast<size_t>(i) * row;
    const uint8_t* r1 = src + static_cast<size_t>(std::min(i + 1, sh - 1)) * row;
    uint8_t* out = dst + static_cast<size_t>(y) * dw * c;
    for (int x = 0; x < dw; ++x) {
      const size_t p0 = static_cast<size_t>(x0[static_cast<size_t>(x)]) * c,
                   p1 = static_cast<size_t>(x1[static_cast<size_t>(x)]) * c;
      const float a = ax[static_cast<size_t>(x)];
      for (int k = 0; k < c; ++k) {
        float top = r0[p0 + k] + a * (r0[p1 + k] - r0[p0 + k]);
        float bot = r1[p0 + k] + a * (r1[p1 + k] - r1[p0 + k]);
        float v = top + b * (bot - top);
        out[static_cast<size_t>(x) * c + k] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
    }
  }
}

// OpenCV's INTER_NEAREST: source pixel floor(dst * scale), its scale computed as OpenCV
// does (the inverse of dst / src), so exact multiples land on the same pixels.
void resize_nearest(const uint8_t* src, int sw, int sh, size_t row, uint8_t* dst, int dw, int dh, int c) {
  const double fx = 1.0 / (static_cast<double>(dw) / sw), fy = 1.0 / (static_cast<double>(dh) / sh);
  std::vector<size_t> sx(static_cast<size_t>(dw));
  for (int x = 0; x < dw; ++x)
    sx[static_cast<size_t>(x)] = static_cast<size_t>(std::min(static_cast<int>(std::floor(x * fx)), sw - 1)) * c;
  for (int y = 0; y < dh; ++y) {
    const uint8_t* r = src + static_cast<size_t>(std::min(static_cast<int>(std::floor(y * fy)), sh - 1)) * row;
    uint8_t* out = dst + static_cast<size_t>(y) * dw * c;
    for (int x = 0; x < dw; ++x)
      for (int k = 0; k < c; ++k) out[static_cast<size_t>(x) * c + k] = r[sx[static_cast<size_t>(x)] + k];
  }
}

}  // namespace

void resize_plane(const uint8_t* src, int stride, int sw, int sh, uint8_t* dst, int dw, int dh,
                  ImageDecodeOptions::Resize how) {
  if (how == ImageDecodeOptions::Resize::nearest)
    resize_nearest(src, sw, sh, static_cast<size_t>(stride), dst, dw, dh, 1);
  else
    resize_bilinear(src, sw, sh, static_cast<size_t>(stride), dst, dw, dh, 1);
}

bool image_header(std::string_view bytes, int& channels, int& height, int& width) {
  if ((!is_png(bytes) && !is_jpeg(bytes)) || bytes.size() > static_cast<size_t>(INT_MAX)) return false;
  int ic = 0;
  if (!stbi_info_from_memory(reinterpret_cast<const stbi_uc*>(bytes.data()), static_cast<int>(bytes.size()), &width,
                             &height, &ic))
    return false;
  channels = ic <= 2 ? 1 : 3;
  return true;
}

Decoded decode_image(std::string_view bytes, const ImageDecodeOptions& o, DecodedImage& out, std::string& why) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    why = fmt::format("the file has {} bytes; stb reads at most {}", bytes.size(), INT_MAX);
    return Decoded::too_large;
  }
  // PNG and JPEG only: stb's other decoders crash on crafted files (fuzzing: a 23-byte PNM).
  if (!is_png(bytes) && !is_jpeg(bytes)) {
    why = "not a PNG or JPEG file";
    return Decoded::not_an_image;
  }
  const auto* data = reinterpret_cast<const stbi_uc*>(bytes.data());
  const int size = static_cast<int>(bytes.size());
  int iw = 0, ih = 0, ic = 0;
  // The header first: its dimensions decide whether decoding is affordable.
  if (!stbi_info_from_memory(data, size, &iw, &ih, &ic)) {
    why = stbi_failure_reason();
    return Decoded::not_an_image;
  }
  if (iw <= 0 || ih <= 0 || int64_t{iw} * ih > kMaxImagePixels) {
    why = fmt::format("{} x {} pixels; images of at most {} Mpixel are decoded", iw, ih, kMaxImagePixels >> 20);
    return Decoded::too_large;
  }
  // Nor more pixels than the file's bytes can encode (a 26-byte PNM header declaring 64
  // Mpixel made stb fill them all): deflate packs at most ~1032 bytes into one, a 1-bit PNG
  // 8 pixels into a byte, and JPEG's blocks stay below that product.
  if (int64_t{iw} * ih > static_cast<int64_t>(size) * 8 * kMaxDecompressionRatio) {
    why = fmt::format("{} x {} pixels declared by a {}-byte file", iw, ih, size);
    return Decoded::not_an_image;
  }
  const int c = o.channels > 0 ? o.channels : (ic <= 2 ? 1 : 3);
  if (c != 1 && c != 3) {
    why = fmt::format("{} channels asked for; 1 (grey) or 3 (colour) are decoded", c);
    return Decoded::not_an_image;
  }
  const int h = o.height > 0 ? o.height : ih, w = o.width > 0 ? o.width : iw;
  if (int64_t{h} * w > kMaxImagePixels) {
    why = fmt::format("resizing to {} x {}; at most {} Mpixel", w, h, kMaxImagePixels >> 20);
    return Decoded::too_large;
  }
  // JPEGs through libjpeg-turbo (Caffe's pixels, faster); PNGs, and JPEGs libjpeg does not
  // convert (CMYK), through stb.
  std::vector<uint8_t> jpeg;
  std::string jpeg_why;
  stbi_uc* px = nullptr;
  const bool by_libjpeg = is_jpeg(bytes) && decode_jpeg(bytes, c, int64_t{iw} * ih, jpeg, iw, ih, jpeg_why);
  if (by_libjpeg) {
    px = jpeg.data();
  } else {
    if (is_png(bytes) && !png_stream_is_bounded(bytes, iw, ih, why)) return Decoded::not_an_image;
    px = stbi_load_from_memory(data, size, &iw, &ih, &ic, c);
    if (!px) {
      why = jpeg_why.empty() ? stbi_failure_reason() : jpeg_why;
      return Decoded::not_an_image;
    }
  }
  // stb's pixels are freed when this returns; libjpeg's are in `jpeg`.
  std::unique_ptr<stbi_uc, void (*)(void*)> owned(by_libjpeg ? nullptr : px, stbi_image_free);
  const uint8_t* hwc = px;
  std::vector<uint8_t> resized;
  if (h != ih || w != iw) {
    resized.resize(static_cast<size_t>(w) * h * c);
    const size_t row = static_cast<size_t>(iw) * c;
    if (o.resize == ImageDecodeOptions::Resize::bilinear) {
      resize_bilinear(px, iw, ih, row, resized.data(), w, h, c);
    } else if (o.resize == ImageDecodeOptions::Resize::nearest) {
      resize_nearest(px, iw, ih, row, resized.data(), w, h, c);
    } else if (!stbir_resize_uint8(px, iw, ih, 0, resized.data(), w, h, 0, c)) {
      why = "cannot resize";
      return Decoded::not_an_image;
    }
    hwc = resized.data();
  }
  out.channels = c;
  out.height = h;
  out.width = w;
  out.chw.resize(static_cast<size_t>(c) * h * w);
  const size_t plane = static_cast<size_t>(h) * w;
  for (int ch = 0; ch < c; ++ch) {  // HWC -> CHW, RGB -> BGR where asked
    int from = (o.bgr && c == 3) ? 2 - ch : ch;
    uint8_t* dst = out.chw.data() + ch * plane;
    for (size_t i = 0; i < plane; ++i) dst[i] = hwc[i * c + from];
  }
  return Decoded::ok;
}

std::string encode_image(const uint8_t* chw, int c, int h, int w, bool bgr, bool jpeg) {
  const size_t plane = static_cast<size_t>(h) * w;
  std::vector<uint8_t> hwc(plane * c);
  for (int ch = 0; ch < c; ++ch) {
    int from = (bgr && c == 3) ? 2 - ch : ch;
    for (size_t i = 0; i < plane; ++i) hwc[i * c + ch] = chw[from * plane + i];
  }
  std::string out;
  auto append = [](void* ctx, void* data, int n) {
    static_cast<std::string*>(ctx)->append(static_cast<char*>(data), n);
  };
  int ok = jpeg ? stbi_write_jpg_to_func(append, &out, w, h, c, hwc.data(), 95)
                : stbi_write_png_to_func(append, &out, w, h, c, hwc.data(), w * c);
  if (!ok) out.clear();
  return out;
}

}  // namespace bks
