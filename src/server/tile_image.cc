#include "server/tile_image.h"

#include <stb_image_write.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace bks::server {

namespace {

std::string base64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                 static_cast<unsigned char>(in[i + 2]);
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], t[v & 63]};
  }
  if (i + 1 == in.size()) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    out += {t[v >> 18], t[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], '='};
  }
  return out;
}

// [min, max] of the finite values in p[0, n); {0, 0} when there are none.
std::pair<float, float> finite_range(const float* p, int64_t n) {
  float lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < n; ++i)
    if (std::isfinite(p[i])) {
      lo = std::min(lo, p[i]);
      hi = std::max(hi, p[i]);
    }
  return lo <= hi ? std::pair{lo, hi} : std::pair{0.f, 0.f};
}

}  // namespace

std::string tile_png(const float* maps, int64_t count, int64_t h, int64_t w, int64_t cols, bool shared_range) {
  cols = std::min(cols, count);
  const int64_t rows = (count + cols - 1) / cols, W = cols * (w + 1) - 1, H = rows * (h + 1) - 1;
  std::vector<uint8_t> img(static_cast<size_t>(W * H), 255);
  const auto shared = shared_range ? finite_range(maps, count * h * w) : std::pair{0.f, 0.f};
  for (int64_t k = 0; k < count; ++k) {
    const float* m = maps + k * h * w;
    const auto [lo, hi] = shared_range ? shared : finite_range(m, h * w);
    // In double: hi - lo may overflow a float.
    const double scale = hi > lo ? 255.0 / (static_cast<double>(hi) - lo) : 0.0;
    int64_t ox = (k % cols) * (w + 1), oy = (k / cols) * (h + 1);
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        const float v = m[y * w + x];
        img[static_cast<size_t>((oy + y) * W + ox + x)] =
            std::isfinite(v) ? static_cast<uint8_t>((v - static_cast<double>(lo)) * scale) : 0;
      }
  }
  std::string png;
  auto append = [](void* ctx, void* data, int size) {
    static_cast<std::string*>(ctx)->append(static_cast<char*>(data), size);
  };
  stbi_write_png_to_func(append, &png, static_cast<int>(W), static_cast<int>(H), 1, img.data(), static_cast<int>(W));
  return "data:image/png;base64," + base64(png);
}

}  // namespace bks::server
