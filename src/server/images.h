// Images for the dashboard: PNG / JPEG bytes to the C x H x W bytes networks read (stb),
// resized and made grey or colour on the way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bks::server {

// The most pixels an image may have to be decoded: 64 Mpixel (e.g. 8192 x 8192; up to
// 256 MB decoded). A PNG of a few hundred KB can declare far more (a decompression bomb),
// so the size in its header is checked before any pixel is decoded.
constexpr int64_t kMaxImagePixels = int64_t{64} << 20;

enum class Decoded { ok, not_an_image, too_large };

// Appends the image in `bytes` as `channels` x `height` x `width` bytes to `chw`. Otherwise
// says why in `why`: not a PNG or JPEG image, or more than kMaxImagePixels pixels.
Decoded decode_chw(const std::string& bytes, int channels, int height, int width, std::vector<uint8_t>& chw,
                   std::string& why);

}  // namespace bks::server
