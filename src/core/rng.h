// Deterministic random numbers. Every consumer (fillers, dropout, data shuffling, crops)
// draws from its own stream derived from the run's seed, so results do not depend on
// the order in which parts of the program happen to run.
#pragma once

#include <cstdint>
#include <random>
#include <string_view>

namespace bks {

// Stateless, counter-based randomness: a pure function of (key, index), so loops can draw
// in parallel and a resumed run draws the same numbers.
inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline float uniform01(uint64_t key, uint64_t index) {
  return static_cast<float>(mix64(key ^ mix64(index)) >> 40) * (1.0f / 16777216.0f);
}
uint64_t stream_key(uint64_t seed, std::string_view name, int64_t step);
// FNV-1a of `text`: the same bytes hash alike in every run and on every host.
uint64_t fnv1a(std::string_view text);

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : gen_(seed) {}
  // A stream for a named consumer: same seed and name give the same stream.
  static Rng derive(uint64_t seed, std::string_view name);
  uint32_t next_u32() { return static_cast<uint32_t>(gen_()); }
  float uniform(float lo, float hi);
  float gaussian(float mean, float stddev);
  uint64_t below(uint64_t n) { return gen_() % n; }
  std::mt19937_64& engine() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

}  // namespace bks
