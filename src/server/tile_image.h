// Grey PNG tilings of a layer's feature maps or filters for the dashboard, as data URLs
// (small enough to travel inside the visualize answer).
#pragma once

#include <cstdint>
#include <string>

namespace bks::server {

// Tiles `count` maps of h x w floats into a grid `cols` wide with a 1-pixel white gap, each
// map scaled to its own finite range (or all to one, `shared_range`); NaN and infinities
// are drawn black. A "data:image/png;base64," URL.
std::string tile_png(const float* maps, int64_t count, int64_t h, int64_t w, int64_t cols, bool shared_range);

}  // namespace bks::server
