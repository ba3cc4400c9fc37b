#include "server/images.h"

#include <stb_image.h>
#include <stb_image_resize.h>

#include <fmt/format.h>

#include <climits>

namespace bks::server {

Decoded decode_chw(const std::string& bytes, int c, int h, int w, std::vector<uint8_t>& chw, std::string& why) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    why = fmt::format("the file has {} bytes; stb reads at most {}", bytes.size(), INT_MAX);
    return Decoded::too_large;
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
  stbi_uc* px = stbi_load_from_memory(data, size, &iw, &ih, &ic, c);
  if (!px) {
    why = stbi_failure_reason();
    return Decoded::not_an_image;
  }
  std::vector<uint8_t> hwc(static_cast<size_t>(w) * h * c);
  int ok = stbir_resize_uint8(px, iw, ih, 0, hwc.data(), w, h, 0, c);
  stbi_image_free(px);
  if (!ok) {
    why = "cannot resize";
    return Decoded::not_an_image;
  }
  for (int ch = 0; ch < c; ++ch)  // HWC -> CHW
    for (int i = 0; i < w * h; ++i) chw.push_back(hwc[static_cast<size_t>(i * c + ch)]);
  return Decoded::ok;
}

}  // namespace bks::server
