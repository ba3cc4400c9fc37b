#include "formats/range_coder.h"

#include <algorithm>
#include <vector>

namespace bks {
namespace {

constexpr int kProbBits = 12;
constexpr uint32_t kOne = 1u << kProbBits, kTop = 1u << 24;

// A bit's probability of being 0, in 1/4096ths, moving 1/32 of the way to each bit seen:
// it follows a stream whose statistics drift (a float plane, channel after channel).
struct MovingProbability {
  uint32_t p0 = kOne / 2;
  void saw(int b) { p0 = b ? p0 - (p0 >> 5) : p0 + ((kOne - p0) >> 5); }
};

// The same from counts (Krichevsky-Trofimov: (zeros + 1/2) / (bits + 1)), halved past
// 65,536: a mask's density hardly drifts, and counts get within a few bytes of its
// entropy where a moving probability pays its own noise (4% at 2% density). Kept inside
// [8, 4088] so that no stream codes more than kRangeMaxRatio raw bytes per byte.
struct CountedProbability {
  uint32_t zeros = 0, ones = 0, p0 = kOne / 2;
  void saw(int b) {
    (b ? ones : zeros) += 1;
    if (zeros + ones > 65536) zeros /= 2, ones /= 2;
    const uint64_t p = (uint64_t{2} * zeros + 1) * kOne / (uint64_t{2} * (zeros + ones) + 2);
    p0 = static_cast<uint32_t>(std::clamp<uint64_t>(p, 8, kOne - 8));
  }
};

class Encoder {
 public:
  template <class Probability>
  void bit(Probability& p, int b) {
    const uint32_t split = (range_ >> kProbBits) * p.p0;
    p.saw(b);
    if (b == 0) {
      range_ = split;
    } else {
      low_ += split;
      range_ -= split;
    }
    while (range_ < kTop) {
      range_ <<= 8;
      shift();
    }
  }
  std::string finish() {
    for (int i = 0; i < 5; ++i) shift();
    return std::move(out_);
  }

 private:
  // Emits low's top byte once no carry can reach it: a byte below 0xff is held back
  // (held_) with the 0xff bytes after it (ones_), which a carry would all change.
  void shift() {
    if (low_ < 0xff000000u || low_ >= (uint64_t{1} << 32)) {
      const auto carry = static_cast<uint8_t>(low_ >> 32);
      out_.push_back(static_cast<char>(static_cast<uint8_t>(held_ + carry)));
      for (; ones_ > 0; --ones_) out_.push_back(static_cast<char>(static_cast<uint8_t>(0xff + carry)));
      held_ = static_cast<uint8_t>(low_ >> 24);
    } else {
      ++ones_;
    }
    low_ = (low_ & 0x00ffffffu) << 8;
  }

  uint64_t low_ = 0;
  uint32_t range_ = 0xffffffffu;
  uint8_t held_ = 0;
  uint64_t ones_ = 0;
  std::string out_;
};

class Decoder {
 public:
  explicit Decoder(std::string_view in) : in_(in) {
    for (int i = 0; i < 5; ++i) code_ = (code_ << 8) | next();
  }
  template <class Probability>
  int bit(Probability& p) {
    const uint32_t split = (range_ >> kProbBits) * p.p0;
    const int b = code_ < split ? 0 : 1;
    p.saw(b);
    if (b == 0) {
      range_ = split;
    } else {
      code_ -= split;
      range_ -= split;
    }
    while (range_ < kTop) {
      range_ <<= 8;
      code_ = (code_ << 8) | next();
    }
    return b;
  }
  bool overran() const { return overran_; }
  bool used_all() const { return at_ == in_.size(); }

 private:
  uint32_t next() {
    if (at_ < in_.size()) return static_cast<uint8_t>(in_[at_++]);
    overran_ = true;
    return 0;
  }
  std::string_view in_;
  size_t at_ = 0;
  uint32_t range_ = 0xffffffffu, code_ = 0;
  bool overran_ = false;
};

}  // namespace

std::string range_encode(std::string_view raw, RangeModel model) {
  Encoder e;
  CountedProbability one;
  std::vector<MovingProbability> tree(256);
  for (char c : raw) {
    const auto byte = static_cast<uint8_t>(c);
    if (model == RangeModel::kBits) {
      for (int k = 0; k < 8; ++k) e.bit(one, (byte >> k) & 1);
    } else {
      for (unsigned node = 1, k = 8; k-- > 0;) {
        const int b = (byte >> k) & 1;
        e.bit(tree[node], b);
        node = node * 2 + static_cast<unsigned>(b);
      }
    }
  }
  return e.finish();
}

bool range_decode(std::string_view coded, uint64_t raw_len, RangeModel model, std::string& out) {
  if (coded.empty() || coded[0] != 0) return false;  // the encoder's first byte is always 0
  Decoder d(coded);
  CountedProbability one;
  std::vector<MovingProbability> tree(256);
  out.assign(raw_len, '\0');
  for (uint64_t i = 0; i < raw_len && !d.overran(); ++i) {
    unsigned byte = 0;
    if (model == RangeModel::kBits) {
      for (int k = 0; k < 8; ++k) byte |= static_cast<unsigned>(d.bit(one)) << k;
    } else {
      unsigned node = 1;
      for (int k = 0; k < 8; ++k) node = node * 2 + static_cast<unsigned>(d.bit(tree[node]));
      byte = node - 256;
    }
    out[i] = static_cast<char>(byte);
  }
  // The encoder writes exactly the bytes the decoder reads: any left over are not its.
  return !d.overran() && d.used_all();
}

}  // namespace bks
