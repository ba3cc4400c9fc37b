#include "data/png_stream_check.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cstdint>
#include <vector>

namespace bks {
namespace {

uint32_t be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

bool png_stream_is_bounded(std::string_view bytes, int width, int height, std::string& why) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  // The IDAT data in file order, as stb joins it, up to IEND.
  std::string idat;
  for (size_t at = 8; at + 8 <= n;) {
    const uint64_t len = be32(p + at);
    const std::string_view type(bytes.data() + at + 4, 4);
    if (len > n - at - 8) break;  // a chunk running past the file: stb stops there too
    if (type == "IDAT") idat.append(bytes.data() + at + 8, len);
    if (type == "IEND") break;
    at += 8 + len + 4;
  }
  // The most any pixel format needs: 8 bytes a pixel (RGBA, 16 bits) and a filter byte a
  // row, for each of Adam7's seven passes at worst.
  const uint64_t cap = (uint64_t(width) * 8 + 7) * uint64_t(height) + 7 * (uint64_t(height) + 8);
  z_stream z{};
  if (inflateInit(&z) != Z_OK) {
    why = "zlib could not start";
    return false;
  }
  z.next_in = reinterpret_cast<Bytef*>(idat.data());
  z.avail_in = static_cast<uInt>(idat.size());
  std::vector<unsigned char> sink(64 << 10);
  uint64_t out = 0;
  int rc = Z_OK;
  while (rc == Z_OK && out <= cap) {
    z.next_out = sink.data();
    z.avail_out = static_cast<uInt>(sink.size());
    rc = inflate(&z, Z_NO_FLUSH);
    out += sink.size() - z.avail_out;
  }
  // The verdict before inflateEnd, while z.msg still belongs to a live stream.
  if (out > cap)
    why = fmt::format("PNG pixel data inflates past the {} bytes a {} x {} image can hold", cap, width, height);
  else if (rc != Z_STREAM_END)
    why = rc == Z_DATA_ERROR && z.msg ? fmt::format("PNG pixel data is corrupt ({})", z.msg)
                                      : "PNG pixel data ends before its compressed stream does";
  inflateEnd(&z);
  return out <= cap && rc == Z_STREAM_END;
}

}  // namespace bks
