// JPEG decoding with libjpeg-turbo, the library OpenCV (Caffe's decoder) uses: the same
// pixels as Caffe for the same file, and several times stb's speed (SIMD IDCT and colour
// conversion), which decides how fast encoded datasets feed training.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bks {

// Decodes a JPEG into interleaved H x W x `channels` bytes (1: grey, straight from the luma
// as OpenCV's IMREAD_GRAYSCALE gives it; 3: RGB). False, saying why, when libjpeg cannot
// decode it (a damaged file, a colour space it does not convert, such as CMYK, or more than
// `max_pixels` pixels).
bool decode_jpeg(std::string_view bytes, int channels, int64_t max_pixels, std::vector<uint8_t>& hwc, int& width,
                 int& height, std::string& why);

}  // namespace bks
