#include "formats/weight_coding.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <vector>

namespace bks {
namespace {

// Layout (little-endian): "BKW1", flags, element size, channel_last, 0, element count (u64),
// grid levels (u32), grid channels (u64), then a CRC-32 of those 28 bytes and of every
// stream's raw bytes, so that a changed byte anywhere is found; then the streams: the mask
// (when sparse), each grid channel's max |w| (on a grid), the stored elements' byte planes. Each
// stream is its method (u8: raw or deflate), raw length (u64), coded length (u64) and the
// coded bytes.
constexpr char kMagic[4] = {'B', 'K', 'W', '1'};
constexpr uint8_t kSparse = 1, kGrid = 2;
constexpr uint8_t kRaw = 0, kDeflate = 1;
// Deflate cannot expand data more than 1032 times (RFC 1951's longest match per bit); a
// stream claiming more is corrupt, and so never makes us allocate for it.
constexpr uint64_t kMaxDeflateRatio = 1032;
// zlib's lengths are 32-bit: larger inputs go in pieces.
constexpr size_t kZlibChunk = size_t{1} << 30;

bool is_float(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16; }

// Zero elements are not stored; a float's sign bit does not count (-0 decodes as +0).
bool is_zero(const uint8_t* e, size_t elem, bool floating) {
  for (size_t b = 0; b + 1 < elem; ++b)
    if (e[b]) return false;
  return (e[elem - 1] & (floating ? 0x7f : 0xff)) == 0;
}

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

template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only, as the rest of bakusoku
  out.append(b, sizeof(T));
}

uLong crc_of(uLong crc, std::string_view b) {
  for (size_t at = 0; at < b.size(); at += kZlibChunk)
    crc = crc32(crc, reinterpret_cast<const Bytef*>(b.data() + at), static_cast<uInt>(std::min(kZlibChunk, b.size() - at)));
  return crc;
}

// The smallest of raw, deflate and Huffman-only deflate.
void put_stream(std::string& out, std::string_view raw, uLong& crc) {
  crc = crc_of(crc, raw);
  std::string best(raw);
  uint8_t method = kRaw;
  if (!raw.empty())
    for (int strategy : {Z_DEFAULT_STRATEGY, Z_HUFFMAN_ONLY}) {
      std::string c = deflate_with(raw, strategy);
      if (c.size() < best.size()) best = std::move(c), method = kDeflate;
    }
  put<uint8_t>(out, method);
  put<uint64_t>(out, raw.size());
  put<uint64_t>(out, best.size());
  out += best;
}

// The k-th stored element's byte b goes to plane b; element(k) points at it.
template <class Element>
std::string byte_planes(size_t count, size_t elem, const Element& element) {
  std::string p(count * elem, '\0');
  for (size_t k = 0; k < count; ++k) {
    const uint8_t* e = element(k);
    for (size_t b = 0; b < elem; ++b) p[b * count + k] = static_cast<char>(e[b]);
  }
  return p;
}

struct GridRounding {
  std::vector<float> max;  // per channel: max |w|
  std::vector<int8_t> q;   // per element
};

// What the INT8 kernels compute from the weights: scale levels / max |w| per channel, then
// round to nearest. False when the tensor does not fit the grid's shape or is not finite.
bool round_to_grid(const Tensor& t, const ChannelGrid& g, GridRounding& r) {
  const int64_t n = t.numel();
  if (t.dtype() != DType::f32 || g.channels <= 0 || n % g.channels != 0 || g.levels < 1 || g.levels > 127) return false;
  const int64_t per = n / g.channels;
  const float* w = t.f32();
  auto channel = [&](int64_t i) { return g.channel_last ? i % g.channels : i / per; };
  std::vector<float> mx(static_cast<size_t>(g.channels), 0.f);
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(w[i])) return false;
    float& m = mx[static_cast<size_t>(channel(i))];
    m = std::max(m, std::fabs(w[i]));
  }
  std::vector<float> scale(mx.size());
  for (size_t c = 0; c < mx.size(); ++c) scale[c] = mx[c] > 0.f ? static_cast<float>(g.levels) / mx[c] : 1.f;
  r.max = mx;
  r.q.resize(static_cast<size_t>(n));
  const float top = static_cast<float>(g.levels);
  for (int64_t i = 0; i < n; ++i)
    r.q[static_cast<size_t>(i)] =
        static_cast<int8_t>(std::clamp(std::nearbyint(w[i] * scale[static_cast<size_t>(channel(i))]), -top, top));
  return true;
}

class Reader {
 public:
  Reader(std::string_view b, const std::string& what) : b_(b), what_(what) {}
  template <class T>
  T get(const char* field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  // A stream of exactly `expect` raw bytes.
  std::string stream(uint64_t expect, const char* name) {
    const auto method = get<uint8_t>(name);
    const auto raw_len = get<uint64_t>(name), coded_len = get<uint64_t>(name);
    if (raw_len != expect) fail("its {} stream holds {} bytes, the header implies {}", name, raw_len, expect);
    if (coded_len > b_.size() - pos_) fail("its {} stream ({} bytes) runs past the end", name, coded_len);
    std::string_view coded = b_.substr(pos_, coded_len);
    pos_ += coded_len;
    if (method == kRaw) {
      if (coded_len != raw_len) fail("its raw {} stream is {} bytes, not {}", name, coded_len, raw_len);
      crc_ = crc_of(crc_, coded);
      return std::string(coded);
    }
    if (method != kDeflate) fail("its {} stream has unknown method {}", name, method);
    if (raw_len / kMaxDeflateRatio > coded_len + 1)
      fail("its {} stream claims {} bytes from {}, more than deflate can expand", name, raw_len, coded_len);
    std::string raw = inflate_exactly(coded, raw_len, name);
    crc_ = crc_of(crc_, raw);
    return raw;
  }
  void start_crc() { crc_ = crc_of(crc32(0, nullptr, 0), b_.substr(0, pos_)); }
  uLong crc() const { return crc_; }
  void expect_end() const {
    if (pos_ != b_.size()) fail("{} bytes after its last stream", b_.size() - pos_);
  }
  template <class... A>
  [[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) const {
    throw InputError(what_ + ": corrupt coded tensor: " + fmt::format(f, std::forward<A>(a)...));
  }

 private:
  void need(size_t n, const char* field) const {
    if (b_.size() - pos_ < n) fail("truncated at its {}", field);
  }
  std::string inflate_exactly(std::string_view coded, uint64_t raw_len, const char* name) const {
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

  std::string_view b_;
  size_t pos_ = 0;
  uLong crc_ = 0;
  const std::string& what_;
};

}  // namespace

CodedWeights encode_weights(const Tensor& t, const ChannelGrid* grid) {
  const size_t elem = dtype_size(t.dtype());
  const int64_t n = t.numel();
  const auto* p = static_cast<const uint8_t*>(t.raw());
  GridRounding g;
  const bool on_grid = grid && round_to_grid(t, *grid, g);
  const bool floating = is_float(t.dtype());
  auto zero = [&](int64_t i) {
    return on_grid ? g.q[static_cast<size_t>(i)] == 0 : is_zero(p + static_cast<size_t>(i) * elem, elem, floating);
  };
  int64_t zeros = 0;
  for (int64_t i = 0; i < n; ++i) zeros += zero(i);
  // The mask costs a bit per element and saves a stored element per zero.
  const size_t stored_bits = on_grid ? 8 : elem * 8;
  const bool sparse = zeros > 0 && static_cast<uint64_t>(zeros) * stored_bits > static_cast<uint64_t>(n);

  CodedWeights c;
  std::string& out = c.bytes;
  out.append(kMagic, 4);
  put<uint8_t>(out, static_cast<uint8_t>((sparse ? kSparse : 0) | (on_grid ? kGrid : 0)));
  put<uint8_t>(out, static_cast<uint8_t>(elem));
  put<uint8_t>(out, on_grid && grid->channel_last ? 1 : 0);
  put<uint8_t>(out, 0);
  put<uint64_t>(out, static_cast<uint64_t>(n));
  put<uint32_t>(out, on_grid ? static_cast<uint32_t>(grid->levels) : 0);
  put<uint64_t>(out, on_grid ? static_cast<uint64_t>(grid->channels) : 0);
  uLong crc = crc_of(crc32(0, nullptr, 0), out);
  const size_t crc_at = out.size();
  put<uint32_t>(out, 0);
  // The stored elements' positions (all of them when dense, without listing them).
  std::vector<int64_t> kept;
  if (sparse) {
    kept.reserve(static_cast<size_t>(n - zeros));
    std::string mask(static_cast<size_t>((n + 7) / 8), '\0');
    for (int64_t i = 0; i < n; ++i)
      if (!zero(i)) {
        mask[static_cast<size_t>(i / 8)] = static_cast<char>(mask[static_cast<size_t>(i / 8)] | (1 << (i % 8)));
        kept.push_back(i);
      }
    put_stream(out, mask, crc);
  }
  const size_t count = sparse ? kept.size() : static_cast<size_t>(n);
  auto position = [&](size_t k) { return sparse ? static_cast<size_t>(kept[k]) : k; };
  if (on_grid) {
    put_stream(out, std::string_view(reinterpret_cast<const char*>(g.max.data()), g.max.size() * sizeof(float)),
               crc);
    std::string q(count, '\0');
    for (size_t k = 0; k < count; ++k) q[k] = static_cast<char>(g.q[position(k)]);
    put_stream(out, q, crc);
  } else {
    put_stream(out, byte_planes(count, elem, [&](size_t k) { return p + position(k) * elem; }), crc);
  }
  const auto crc32_value = static_cast<uint32_t>(crc);
  std::memcpy(out.data() + crc_at, &crc32_value, sizeof crc32_value);
  c.stored = static_cast<int64_t>(count);
  c.layout = fmt::format("{} {}{}", sparse ? "sparse" : "dense", on_grid ? "int8" : dtype_name(t.dtype()),
                         on_grid ? " grid" : "");
  std::transform(c.layout.begin(), c.layout.end(), c.layout.begin(), [](char ch) { return std::tolower(ch); });
  return c;
}

Tensor decode_weights(std::string_view bytes, const Shape& shape, DType dtype, const std::string& what) {
  check_shape(shape, dtype_size(dtype), what);
  Reader r(bytes, what);
  char magic[4];
  for (char& m : magic) m = static_cast<char>(r.get<uint8_t>("magic"));
  if (std::memcmp(magic, kMagic, 4) != 0) r.fail("it does not start with BKW1");
  const auto flags = r.get<uint8_t>("flags");
  const auto elem = r.get<uint8_t>("element size");
  const auto channel_last = r.get<uint8_t>("channel axis");
  const auto reserved = r.get<uint8_t>("reserved byte");
  const auto n = r.get<uint64_t>("element count");
  const auto levels = r.get<uint32_t>("grid levels");
  const auto channels = r.get<uint64_t>("grid channels");
  r.start_crc();
  const auto crc = r.get<uint32_t>("checksum");
  if (reserved) r.fail("reserved byte {}", reserved);
  if (flags & ~(kSparse | kGrid)) r.fail("unknown flags {:#x}", flags);
  if (elem != dtype_size(dtype)) r.fail("{}-byte elements, the tensor is {}", elem, dtype_name(dtype));
  const uint64_t numel = static_cast<uint64_t>(shape_numel(shape));
  if (n != numel) r.fail("{} elements, the tensor's shape {} has {}", n, shape_str(shape), numel);
  const bool sparse = flags & kSparse, on_grid = flags & kGrid;
  if (on_grid) {
    if (dtype != DType::f32) r.fail("an int8 grid for a {} tensor", dtype_name(dtype));
    if (levels < 1 || levels > 127) r.fail("grid levels {} outside [1, 127]", levels);
    if (channels < 1 || numel % channels != 0) r.fail("{} grid channels for {} elements", channels, numel);
    if (channel_last > 1) r.fail("channel axis flag {}", channel_last);
  }

  // Which elements are stored, and how many.
  std::string mask;
  uint64_t stored = numel;
  if (sparse) {
    mask = r.stream((numel + 7) / 8, "mask");
    stored = 0;
    for (char m : mask) stored += static_cast<uint64_t>(std::popcount(static_cast<uint8_t>(m)));
    if (numel % 8 && (static_cast<uint8_t>(mask.back()) >> (numel % 8)))
      r.fail("its mask marks elements past the last");
  }
  auto is_stored = [&](uint64_t i) { return !sparse || (static_cast<uint8_t>(mask[i / 8]) >> (i % 8)) & 1; };
  std::string maxima;
  if (on_grid) maxima = r.stream(channels * sizeof(float), "channel maximum");
  std::string values = r.stream(stored * (on_grid ? 1 : elem), "values");
  r.expect_end();
  if (r.crc() != crc) r.fail("its checksum does not match its bytes (the file changed after it was written)");

  Tensor t(shape, dtype);
  auto* out = static_cast<uint8_t*>(t.raw());
  uint64_t k = 0;
  if (on_grid) {
    std::vector<float> mx(channels);
    std::memcpy(mx.data(), maxima.data(), maxima.size());
    const uint64_t per = numel / channels;
    const int top = static_cast<int>(levels);
    float* w = t.f32();
    for (uint64_t i = 0; i < numel; ++i)
      if (is_stored(i)) {
        const float m = mx[channel_last ? i % channels : i / per];
        const int q = static_cast<int8_t>(values[k++]);
        // The top level is the channel's maximum itself, so that a kernel finds the same
        // maximum, hence the same scale, as in the original weights.
        w[i] = q == top ? m : q == -top ? -m : static_cast<float>(q) * (m / static_cast<float>(top));
      }
  } else {
    for (uint64_t i = 0; i < numel; ++i)
      if (is_stored(i)) {
        for (size_t b = 0; b < elem; ++b) out[i * elem + b] = static_cast<uint8_t>(values[b * stored + k]);
        ++k;
      }
  }
  return t;
}

}  // namespace bks
