// Deterministic random numbers. Every consumer (fillers, dropout, data shuffling, crops)
// draws from its own stream derived from the run's seed, so results do not depend on
// the order in which parts of the program happen to run.
#pragma once

#include <cstdint>
#include <random>
#include <string_view>

namespace bks {

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
