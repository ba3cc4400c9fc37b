// Building blocks of bakusoku's compact binary formats (coded weights, packed bundles):
// little-endian integers, LEB128 varints, and byte streams stored raw, deflated or range
// coded (formats/range_coder.h), whichever is smallest. The reader checks every length against the bytes it holds
// before it allocates, and throws InputError "<prefix><problem>" on anything that does not fit.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"

namespace bks {

uint32_t crc32_of(uint32_t crc, std::string_view bytes);

template <class T>
void put_fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only, as the rest of bakusoku
  out.append(b, sizeof(T));
}
void put_varint(std::string& out, uint64_t v);
void put_bytes(std::string& out, std::string_view b);  // varint length, then the bytes
// Method (u8), raw length, coded length (varints), coded bytes: the smallest of raw (0),
// deflate (1: default or Huffman-only) and the range coder over bits (2) or bytes (3).
void put_stream(std::string& out, std::string_view raw);

class ByteReader {
 public:
  // `prefix` starts every error: "model.bks: tensor 'w': corrupt coded tensor: ".
  ByteReader(std::string_view bytes, std::string prefix) : b_(bytes), prefix_(std::move(prefix)) {}

  template <class T>
  T fixed(const char* field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint64_t varint(const char* field);
  std::string bytes(const char* field);  // as put_bytes wrote them
  std::string_view raw(size_t n, const char* field) {
    need(n, field);
    pos_ += n;
    return b_.substr(pos_ - n, n);
  }
  // A stream as put_stream wrote it, of exactly `expect` raw bytes; without
  // `varint_lengths`, as BKW1 wrote it (u64 lengths; raw or deflate only).
  std::string stream(uint64_t expect, const char* name, bool varint_lengths);
  // A stream of at most `limit` raw bytes, whatever it says its length is.
  std::string stream_up_to(uint64_t limit, const char* name, bool varint_lengths);

  // CRC-32 of the bytes read so far (restart_crc), then of every stream's raw bytes.
  void restart_crc() { crc_ = crc32_of(0, b_.substr(0, pos_)); }
  uint32_t crc() const { return crc_; }
  size_t left() const { return b_.size() - pos_; }
  void expect_end() const {
    if (pos_ != b_.size()) fail("{} bytes after its last stream", b_.size() - pos_);
  }
  template <class... A>
  [[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) const {
    throw InputError(prefix_ + fmt::format(f, std::forward<A>(a)...));
  }

 private:
  void need(size_t n, const char* field) const {
    if (left() < n) fail("truncated at its {}", field);
  }
  std::string read_stream(const char* name, bool varint_lengths, uint64_t expect, bool exact);
  std::string inflate_exactly(std::string_view coded, uint64_t raw_len, const char* name) const;

  std::string_view b_;
  size_t pos_ = 0;
  uint32_t crc_ = 0;
  std::string prefix_;
};

}  // namespace bks
