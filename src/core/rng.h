// Seeded pseudo-random generator (xoshiro256**, seeded by splitmix64). Identical output
// on every platform and run for the same seed, unlike std::*_distribution.
#pragma once

#include <cstdint>

namespace treespec::core {

// splitmix64's increment (the golden ratio) and its output mixer (a bijection of 64-bit
// values); also the counter-based hash of coupled sampling's noise (src/sampling).
constexpr uint64_t kSplitmixGamma = 0x9e3779b97f4a7c15ULL;
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// splitmix64: advances x by the golden-ratio increment and returns a mixed value.
inline uint64_t splitmix64(uint64_t& x) { return mix64(x += kSplitmixGamma); }

// An independent seed for stream i derived from `seed` (the i-th splitmix64 output of a
// generator started at seed): for per-sample or per-layer generators.
inline uint64_t derive_seed(uint64_t seed, uint64_t i) {
  uint64_t x = seed + kSplitmixGamma * i;
  return splitmix64(x);
}

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }

  void reseed(uint64_t seed) {
    uint64_t z = seed;
    for (auto& s : s_) s = splitmix64(z);
  }

  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

  // Uniform integer in [0, n); n > 0. Lemire's multiply-shift with rejection.
  uint64_t uniform_int(uint64_t n) {
    if (n <= 1) return 0;
    const uint64_t limit = (0 - n) % n;  // 2^64 mod n
    for (;;) {
      const uint64_t x = next_u64();
      const unsigned __int128 m = static_cast<unsigned __int128>(x) * n;
      if (static_cast<uint64_t>(m) >= limit) return static_cast<uint64_t>(m >> 64);
    }
  }

  // Standard normal (Box-Muller), for weight initialisation in tests and tools.
  double normal();

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace treespec::core
