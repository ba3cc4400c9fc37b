#include "formats/byte_streams.h"

#include "formats/range_coder.h"

#include <zlib.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace bks {
namespace {

constexpr uint8_t kRaw = 0, kDeflate = 1, kRangeBits = 2, kRangeBytes = 3;
// Deflate cannot expand data more than 1032 times (RFC 1951's longest match per bit); a
// stream claiming more is corrupt, and so never makes us allocate for it.
constexpr uint64_t kMaxDeflateRatio = 1032;
// zlib's lengths are 32-bit: larger inputs go in pieces.
constexpr size_t kZlibChunk = size_t{1} << 30;

std::string deflate_with(std::string_view raw, int strategy) {
  z_stream z{};
  if (deflateInit2(&z, 9, Z_DEFLATED, 15, 9, strategy) != Z_OK) throw std::runtime_error("deflateInit2 failed");
  std::string out;
  std::vector<unsigned char> buf(size_t{1} << 16);
  size_t fed = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (z.avail_in == 0 && fed < raw.size()) {
      const size_t n = std::min(kZlibChunk, raw.size() - fed);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data() + fed));
      z.avail_in = static_cast<uInt>(n);
      fed += n;
    }
    z.next_out = buf.data();
    z.avail_out = static_cast<uInt>(buf.size());
    rc = deflate(&z, fed == raw.size() ? Z_FINISH : Z_NO_FLUSH);
    if (rc == Z_STREAM_ERROR) {
      deflateEnd(&z);
      throw std::runtime_error("deflate failed");
    }
    out.append(reinterpret_cast<char*>(buf.data()), buf.size() - z.avail_out);
  }
  deflateEnd(&z);
  return out;
}

}  // namespace

uint32_t crc32_of(uint32_t crc, std::string_view b) {
  uLong c = crc;
  for (size_t at = 0; at < b.size(); at += kZlibChunk)
    c = crc32(c, reinterpret_cast<const Bytef*>(b.data() + at), static_cast<uInt>(std::min(kZlibChunk, b.size() - at)));
  return static_cast<uint32_t>(c);
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_bytes(std::string& out, std::string_view b) {
  put_varint(out, b.size());
  out += b;
}

void put_stream(std::string& out, std::string_view raw) {
  std::string best(raw);
  uint8_t method = kRaw;
  if (!raw.empty())
    for (int strategy : {Z_DEFAULT_STRATEGY, Z_HUFFMAN_ONLY}) {
      std::string c = deflate_with(raw, strategy);
      if (c.size() < best.size()) best = std::move(c), method = kDeflate;
    }
  if (!raw.empty())
    for (auto [m, model] : {std::pair{kRangeBits, RangeModel::kBits}, std::pair{kRangeBytes, RangeModel::kByteTree}}) {
      std::string c = range_encode(raw, model);
      if (c.size() < best.size()) best = std::move(c), method = m;
    }
  put_fixed<uint8_t>(out, method);
  put_varint(out, raw.size());
  put_varint(out, best.size());
  out += best;
}

uint64_t ByteReader::varint(const char* field) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    need(1, field);
    const auto byte = static_cast<uint8_t>(b_[pos_++]);
    if (shift == 63 && byte > 1) break;
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return v;
  }
  fail("its {} is not a 64-bit number", field);
}

std::string ByteReader::bytes(const char* field) {
  const uint64_t n = varint(field);
  if (n > left()) fail("its {} ({} bytes) runs past the end", field, n);
  std::string s(b_.substr(pos_, n));
  pos_ += n;
  return s;
}

std::string ByteReader::stream(uint64_t expect, const char* name, bool varint_lengths) {
  return read_stream(name, varint_lengths, expect, true);
}

std::string ByteReader::stream_up_to(uint64_t limit, const char* name, bool varint_lengths) {
  return read_stream(name, varint_lengths, limit, false);
}

std::string ByteReader::read_stream(const char* name, bool varint_lengths, uint64_t expect, bool exact) {
  const auto method = fixed<uint8_t>(name);
  auto length = [&] { return varint_lengths ? varint(name) : fixed<uint64_t>(name); };
  const uint64_t raw_len = length(), coded_len = length();
  if (exact && raw_len != expect) fail("its {} stream holds {} bytes, the header implies {}", name, raw_len, expect);
  if (!exact && raw_len > expect) fail("its {} stream holds {} bytes, more than {}", name, raw_len, expect);
  if (coded_len > left()) fail("its {} stream ({} bytes) runs past the end", name, coded_len);
  std::string_view coded = b_.substr(pos_, coded_len);
  pos_ += coded_len;
  if (method == kRaw) {
    if (coded_len != raw_len) fail("its raw {} stream is {} bytes, not {}", name, coded_len, raw_len);
    crc_ = crc32_of(crc_, coded);
    return std::string(coded);
  }
  // BKW1 (fixed-width lengths) predates the range coder.
  if (varint_lengths && (method == kRangeBits || method == kRangeBytes)) {
    if (raw_len / kRangeMaxRatio > coded_len)
      fail("its {} stream claims {} bytes from {}, more than the range coder can expand", name, raw_len, coded_len);
    std::string raw;
    if (!range_decode(coded, raw_len, method == kRangeBits ? RangeModel::kBits : RangeModel::kByteTree, raw))
      fail("its {} stream does not decode to its {} bytes", name, raw_len);
    crc_ = crc32_of(crc_, raw);
    return raw;
  }
  if (method != kDeflate) fail("its {} stream has unknown method {}", name, method);
  if (raw_len / kMaxDeflateRatio > coded_len + 1)
    fail("its {} stream claims {} bytes from {}, more than deflate can expand", name, raw_len, coded_len);
  std::string raw = inflate_exactly(coded, raw_len, name);
  crc_ = crc32_of(crc_, raw);
  return raw;
}

std::string ByteReader::inflate_exactly(std::string_view coded, uint64_t raw_len, const char* name) const {
  std::string out(raw_len, '\0');
  z_stream z{};
  if (inflateInit(&z) != Z_OK) fail("zlib could not start");
  size_t fed = 0, given = 0;
  int rc = Z_OK;
  // Z_OK means progress, so this ends: at the stream's end, on bad data, or (Z_BUF_ERROR)
  // when the input or the room runs out first.
  do {
    if (z.avail_in == 0 && fed < coded.size()) {
      const size_t n = std::min(kZlibChunk, coded.size() - fed);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(coded.data() + fed));
      z.avail_in = static_cast<uInt>(n);
      fed += n;
    }
    if (z.avail_out == 0 && given < out.size()) {
      const size_t n = std::min(kZlibChunk, out.size() - given);
      z.next_out = reinterpret_cast<Bytef*>(out.data() + given);
      z.avail_out = static_cast<uInt>(n);
      given += n;
    }
    rc = inflate(&z, Z_NO_FLUSH);
  } while (rc == Z_OK);
  const bool whole = rc == Z_STREAM_END && z.avail_in == 0 && fed == coded.size() && z.total_out == out.size();
  inflateEnd(&z);
  if (!whole) fail("its {} stream does not inflate to its {} bytes", name, raw_len);
  return out;
}

}  // namespace bks
