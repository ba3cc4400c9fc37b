#include "formats/weight_coding.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <vector>

#include "formats/byte_streams.h"

namespace bks {
namespace {

// Layout (little-endian; BKW2, written now): "BKW2", flags, element size, channel_last,
// then varints: element count, grid levels, grid channels; a CRC-32 of those bytes and of
// every stream's raw bytes, so that a changed byte anywhere is found; then the streams: the
// mask (when sparse), each grid channel's max |w| (on a grid), the stored elements' byte
// planes. Each stream is its method (raw, deflate or range coder), raw and coded lengths
// (varints) and the coded bytes (formats/byte_streams.h).
// BKW1 (bundles of format 3, still read) has a reserved zero byte after channel_last, and
// fixed-width lengths: element count u64, grid levels u32, grid channels u64, stream lengths u64.
constexpr char kMagic1[4] = {'B', 'K', 'W', '1'}, kMagic2[4] = {'B', 'K', 'W', '2'};
constexpr uint8_t kSparse = 1, kGrid = 2;

bool is_float(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16; }

// Zero elements are not stored; a float's sign bit does not count (-0 decodes as +0).
bool is_zero(const uint8_t* e, size_t elem, bool floating) {
  for (size_t b = 0; b + 1 < elem; ++b)
    if (e[b]) return false;
  return (e[elem - 1] & (floating ? 0x7f : 0xff)) == 0;
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
  if (t.dtype() != DType::f32 || n == 0 || g.channels <= 0 || n % g.channels != 0 || g.levels < 1 || g.levels > 127)
    return false;
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
  out.append(kMagic2, 4);
  put_fixed<uint8_t>(out, static_cast<uint8_t>((sparse ? kSparse : 0) | (on_grid ? kGrid : 0)));
  put_fixed<uint8_t>(out, static_cast<uint8_t>(elem));
  put_fixed<uint8_t>(out, on_grid && grid->channel_last ? 1 : 0);
  put_varint(out, static_cast<uint64_t>(n));
  put_varint(out, on_grid ? static_cast<uint64_t>(grid->levels) : 0);
  put_varint(out, on_grid ? static_cast<uint64_t>(grid->channels) : 0);
  uint32_t crc = crc32_of(0, out);
  const size_t crc_at = out.size();
  put_fixed<uint32_t>(out, 0);
  auto stream = [&](std::string_view raw) {
    crc = crc32_of(crc, raw);
    put_stream(out, raw);
  };
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
    stream(mask);
  }
  const size_t count = sparse ? kept.size() : static_cast<size_t>(n);
  auto position = [&](size_t k) { return sparse ? static_cast<size_t>(kept[k]) : k; };
  if (on_grid) {
    stream(std::string_view(reinterpret_cast<const char*>(g.max.data()), g.max.size() * sizeof(float)));
    std::string q(count, '\0');
    for (size_t k = 0; k < count; ++k) q[k] = static_cast<char>(g.q[position(k)]);
    stream(q);
  } else {
    stream(byte_planes(count, elem, [&](size_t k) { return p + position(k) * elem; }));
  }
  std::memcpy(out.data() + crc_at, &crc, sizeof crc);
  c.stored = static_cast<int64_t>(count);
  c.layout = fmt::format("{} {}{}", sparse ? "sparse" : "dense", on_grid ? "int8" : dtype_name(t.dtype()),
                         on_grid ? " grid" : "");
  std::transform(c.layout.begin(), c.layout.end(), c.layout.begin(), [](char ch) { return std::tolower(ch); });
  return c;
}

Tensor decode_weights(std::string_view bytes, const Shape& shape, DType dtype, const std::string& what) {
  check_shape(shape, dtype_size(dtype), what);
  ByteReader r(bytes, what + ": corrupt coded tensor: ");
  char magic[4];
  for (char& m : magic) m = static_cast<char>(r.fixed<uint8_t>("magic"));
  const bool v1 = std::memcmp(magic, kMagic1, 4) == 0;
  if (!v1 && std::memcmp(magic, kMagic2, 4) != 0) r.fail("it does not start with BKW2 (or BKW1)");
  const auto flags = r.fixed<uint8_t>("flags");
  const auto elem = r.fixed<uint8_t>("element size");
  const auto channel_last = r.fixed<uint8_t>("channel axis");
  const auto reserved = v1 ? r.fixed<uint8_t>("reserved byte") : uint8_t{0};
  const uint64_t n = v1 ? r.fixed<uint64_t>("element count") : r.varint("element count");
  const uint64_t levels = v1 ? r.fixed<uint32_t>("grid levels") : r.varint("grid levels");
  const uint64_t channels = v1 ? r.fixed<uint64_t>("grid channels") : r.varint("grid channels");
  r.restart_crc();
  const auto crc = r.fixed<uint32_t>("checksum");
  if (reserved) r.fail("reserved byte {}", reserved);
  if (flags & ~(kSparse | kGrid)) r.fail("unknown flags {:#x}", flags);
  if (elem != dtype_size(dtype)) r.fail("{}-byte elements, the tensor is {}", elem, dtype_name(dtype));
  const uint64_t numel = static_cast<uint64_t>(shape_numel(shape));
  if (n != numel) r.fail("{} elements, the tensor's shape {} has {}", n, shape_str(shape), numel);
  const bool sparse = flags & kSparse, on_grid = flags & kGrid;
  if (on_grid) {
    if (dtype != DType::f32) r.fail("an int8 grid for a {} tensor", dtype_name(dtype));
    if (levels < 1 || levels > 127) r.fail("grid levels {} outside [1, 127]", levels);
    if (channels < 1 || channels > numel || numel % channels != 0)
      r.fail("{} grid channels for {} elements", channels, numel);
    if (channel_last > 1) r.fail("channel axis flag {}", channel_last);
  }

  // Which elements are stored, and how many.
  std::string mask;
  uint64_t stored = numel;
  if (sparse) {
    mask = r.stream((numel + 7) / 8, "mask", !v1);
    stored = 0;
    for (char m : mask) stored += static_cast<uint64_t>(std::popcount(static_cast<uint8_t>(m)));
    if (numel % 8 && (static_cast<uint8_t>(mask.back()) >> (numel % 8)))
      r.fail("its mask marks elements past the last");
  }
  auto is_stored = [&](uint64_t i) { return !sparse || (static_cast<uint8_t>(mask[i / 8]) >> (i % 8)) & 1; };
  std::string maxima;
  if (on_grid) maxima = r.stream(channels * sizeof(float), "channel maximum", !v1);
  std::string values = r.stream(stored * (on_grid ? 1 : elem), "values", !v1);
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
