// Images for the dashboard: PNG / JPEG bytes to the C x H x W bytes networks read (stb),
// resized and made grey or colour on the way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bks::server {

// Appends the image in `bytes` as `channels` x `height` x `width` bytes to `chw`; false,
// with the reason in `why`, when the bytes are not a PNG or JPEG image.
bool decode_chw(const std::string& bytes, int channels, int height, int width, std::vector<uint8_t>& chw,
                std::string& why);

}  // namespace bks::server
