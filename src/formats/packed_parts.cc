#include "formats/packed_parts.h"

#include <algorithm>
#include <limits>

#include "formats/byte_streams.h"

namespace bks {
namespace {

// Layout: "BKP1"; an index stream (byte_streams.h, varint lengths), then a CRC-32 of the
// index's raw bytes; then every blob's bytes, in the index's order. The index: the number of
// strings, each key and value (put_bytes); the number of blobs, each name, rank, dimensions
// and byte length (varints).
constexpr char kMagic[4] = {'B', 'K', 'P', '1'};
// The index of a net with thousands of layers is a few MB, and JSON deflates about tenfold:
// an index larger than this, or 64 times its bytes (plus 1 MB), is corrupt, so a small file
// cannot ask for gigabytes.
constexpr uint64_t kMaxIndexBytes = uint64_t{1} << 30, kMaxIndexRatio = 64, kIndexSlack = uint64_t{1} << 20;
constexpr uint64_t kMaxRank = 32;

}  // namespace

std::string pack_parts(const PackedParts& p) {
  std::string index;
  put_varint(index, p.strings.size());
  for (const auto& [key, value] : p.strings) {
    put_bytes(index, key);
    put_bytes(index, value);
  }
  put_varint(index, p.blobs.size());
  for (const PackedBlob& b : p.blobs) {
    put_bytes(index, b.name);
    put_varint(index, b.shape.size());
    for (int64_t d : b.shape) put_varint(index, static_cast<uint64_t>(d));
    put_varint(index, b.bytes.size());
  }
  std::string out(kMagic, 4);
  put_stream(out, index);
  put_fixed<uint32_t>(out, crc32_of(0, index));
  for (const PackedBlob& b : p.blobs) out += b.bytes;
  return out;
}

PackedParts unpack_parts(std::string_view bytes, const std::string& what) {
  ByteReader r(bytes, what + ": corrupt bundle: ");
  for (char m : kMagic)
    if (r.fixed<char>("magic") != m) r.fail("its packed part does not start with BKP1");
  const std::string index =
      r.stream_up_to(std::min<uint64_t>(kMaxIndexBytes, kIndexSlack + kMaxIndexRatio * bytes.size()), "index", true);
  const auto crc = r.fixed<uint32_t>("index checksum");
  ByteReader x(index, what + ": corrupt bundle: index: ");
  PackedParts p;
  // Every entry takes at least `least` bytes of the index: counts past that are corrupt.
  auto count = [&](const char* field, uint64_t least) {
    const uint64_t n = x.varint(field);
    if (n > x.left() / least) x.fail("{} {} in {} bytes", n, field, x.left());
    return n;
  };
  for (uint64_t k = count("strings", 2); k > 0; --k) {
    std::string key = x.bytes("key");
    if (p.strings.count(key)) x.fail("'{}' twice", key);
    p.strings[key] = x.bytes("value");
  }
  uint64_t total = 0;
  // Each blob holds at least a byte of what follows the index.
  const uint64_t tensors = count("tensors", 3);
  if (tensors > r.left()) x.fail("{} tensors in {} bytes", tensors, r.left());
  for (uint64_t k = tensors; k > 0; --k) {
    PackedBlob b;
    b.name = x.bytes("tensor name");
    const uint64_t rank = count("dimensions", 1);
    if (rank > kMaxRank) x.fail("tensor '{}' has {} dimensions", b.name, rank);
    for (uint64_t d = rank; d > 0; --d) {
      const uint64_t dim = x.varint("dimension");
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        x.fail("tensor '{}' has dimension {}", b.name, dim);
      b.shape.push_back(static_cast<int64_t>(dim));
    }
    const uint64_t n = x.varint("tensor length");
    if (n == 0) x.fail("tensor '{}' has no bytes", b.name);
    if (n > r.left() - total) x.fail("tensor '{}' ({} bytes) runs past the end of the file", b.name, n);
    total += n;
    b.bytes.resize(n);
    p.blobs.push_back(std::move(b));
  }
  x.expect_end();
  // Checked after the parse (which needs no checksum to be safe), so that a fuzzer reaches it.
  if (crc != crc32_of(0, index))
    r.fail("its index's checksum does not match its bytes (the file changed after it was written)");
  if (total != r.left()) r.fail("{} bytes after its last tensor", r.left() - total);
  for (PackedBlob& b : p.blobs) {
    const std::string_view got = r.raw(b.bytes.size(), "tensor");
    b.bytes.assign(got.data(), got.size());
  }
  return p;
}

}  // namespace bks
