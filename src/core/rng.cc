#include "core/rng.h"

namespace bks {

uint64_t fnv1a(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (char c : text) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

Rng Rng::derive(uint64_t seed, std::string_view name) {
  // FNV-1a over the name, mixed with the seed (splitmix64 finaliser).
  uint64_t z = seed + 0x9e3779b97f4a7c15ull + fnv1a(name);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return Rng(z ^ (z >> 31));
}

uint64_t stream_key(uint64_t seed, std::string_view name, int64_t step) {
  return mix64(seed ^ mix64(fnv1a(name) ^ mix64(static_cast<uint64_t>(step))));
}

float Rng::uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }

float Rng::gaussian(float mean, float stddev) { return std::normal_distribution<float>(mean, stddev)(gen_); }

}  // namespace bks
