#include "server/images.h"

#include <stb_image.h>
#include <stb_image_resize.h>

#include <fmt/format.h>

#include <climits>

#include "data/dataset.h"

namespace bks::server {

Decoded decode_chw(const std::string& bytes, int c, int h, int w, std::vector<uint8_t>& chw, std::string& why) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    why = fmt::format("the file has {} bytes; stb reads at most {}", bytes.size(), INT_MAX);
    return Decoded::too_large;
  }
  // PNG and JPEG only, the formats the dashboard takes: stb's other decoders crash on
  // crafted files (fuzzing: a 23-byte PNM).
  const bool png = bytes.rfind("\x89PNG\r\n\x1a\n", 0) == 0, jpeg = bytes.rfind("\xff\xd8\xff", 0) == 0;
  if (!png && !jpeg) {
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
  // 8 pixels into a byte, and GIF's LZW and JPEG's blocks stay below that product.
  if (int64_t{iw} * ih > static_cast<int64_t>(size) * 8 * kMaxDecompressionRatio) {
    why = fmt::format("{} x {} pixels declared by a {}-byte file", iw, ih, size);
    return Decoded::not_an_image;
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
