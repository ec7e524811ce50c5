// tests/util/xorshift64.h: the small deterministic generator the tests use to
// draw bit patterns (Marsaglia, "Xorshift RNGs", J. Stat. Softw. 8(14), 2003:
// shifts 13, 7, 17). Not the project's input generator (seeds/, Philox).
#pragma once

#include <cstdint>

namespace normgate::test {

struct Xorshift64 {
  uint64_t s;  ///< state, never 0
  explicit Xorshift64(uint64_t seed) : s(seed == 0 ? 0x9E3779B97F4A7C15ull : seed) {}
  uint64_t operator()() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>((*this)() >> 11) * 0x1p-53; }
};

}  // namespace normgate::test
