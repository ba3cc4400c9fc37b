// Images for the dashboard: PNG / JPEG bytes to the C x H x W bytes networks read, resized
// and made grey or colour on the way (data/image_decode.h, with stb's filtered resize and
// RGB order, as dashboard datasets have always been made).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/image_decode.h"

namespace bks::server {

using ::bks::Decoded;
using ::bks::kMaxImagePixels;

// Appends the image in `bytes` as `channels` x `height` x `width` bytes to `chw`. Otherwise
// says why in `why`: not a PNG or JPEG image, or more than kMaxImagePixels pixels.
Decoded decode_chw(const std::string& bytes, int channels, int height, int width, std::vector<uint8_t>& chw,
                   std::string& why);

}  // namespace bks::server
