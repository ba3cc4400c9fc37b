// An adaptive binary range coder (the arithmetic coding LZMA uses, 12-bit probabilities
// learnt from the bits already coded), for streams that deflate codes poorly: a pruned tensor's mask, whose rare set
// bits deflate finds few repeats in, and short streams, where deflate's code tables cost more than the data saves.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace bks {

enum class RangeModel : uint8_t {
  kBits,      // every bit (least significant first) under one counted probability: bit masks
  kByteTree,  // each byte's bits down a 255-node tree of moving probabilities: byte frequencies
};

std::string range_encode(std::string_view raw, RangeModel model);
// The `raw_len` bytes `coded` holds; false when it does not start as the encoder starts,
// or decoding would read past its end or stop before it (a truncated or corrupt stream: the caller's checksum
// finds the rest; the last byte or two of a stream may change without changing what it codes).
bool range_decode(std::string_view coded, uint64_t raw_len, RangeModel model, std::string& out);
// The most raw bytes one coded byte can stand for (an all-zero stream at the probabilities'
// limit, 4088/4096: 355): a stream that claims more is corrupt.
constexpr uint64_t kRangeMaxRatio = 400;

}  // namespace bks
