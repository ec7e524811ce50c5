// Known-answer tests of Philox4x32 against the published Random123 vectors.
#include "normgate/seeds/philox.h"

#include <gtest/gtest.h>

#include <set>

namespace normgate::seeds {
namespace {

struct Kat {
  Philox4 ctr;
  Key2 key;
  Philox4 expected;
};

void expect_eq(const Philox4& got, const Philox4& want) {
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want.v[i]) << "word " << i;
}

// Random123 (D. E. Shaw Research), tests/kat_vectors, the three
// "philox4x32 10" lines (columns: counter[4] key[2] -> output[4], hex):
//   philox4x32 10 00000000 00000000 00000000 00000000 00000000 00000000   6627e8d5 e169c58d bc57ac4c 9b00dbd8
//   philox4x32 10 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   408f276d 41c83b0e a20bc7c6 6d5451fd
//   philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   d16cfe09 94fdcceb 5001e420 24126ea1
TEST(Philox, Random123KnownAnswers10Rounds) {
  const Kat kats[] = {
      {{{0u, 0u, 0u, 0u}}, {{0u, 0u}}, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       {{0xffffffffu, 0xffffffffu}},
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       {{0xa4093822u, 0x299f31d0u}},
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Kat& k : kats) {
    SCOPED_TRACE(::testing::Message() << std::hex << "ctr " << k.ctr.v[0] << " key " << k.key.k[0]);
    expect_eq(philox4x32_10(k.ctr, k.key), k.expected);
    expect_eq(philox4x32_R<10>(k.ctr, k.key), k.expected);
  }
}

// Same file, the "philox4x32 7" line for the pi digits: checks that the
// round count is a real parameter (7 rounds differ from 10).
//   philox4x32 7 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   4dfccaba 190a87f0 c47362ba b6b5242a
TEST(Philox, Random123KnownAnswer7Rounds) {
  const Philox4 ctr{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
  const Key2 key{{0xa4093822u, 0x299f31d0u}};
  expect_eq(philox4x32_R<7>(ctr, key), Philox4{{0x4dfccabau, 0x190a87f0u, 0xc47362bau, 0xb6b5242au}});
}

TEST(Philox, MulHiLoMatches64BitProduct) {
  const uint32_t vals[] = {0u, 1u, 2u, 0x7fffffffu, 0x80000000u, 0xffffffffu, kPhiloxM0, kPhiloxM1, 0x12345678u};
  for (uint32_t a : vals)
    for (uint32_t b : vals) {
      uint32_t hi = 0;
      const uint32_t lo = mulhilo32(a, b, &hi);
      const uint64_t p = uint64_t{a} * b;
      EXPECT_EQ(lo, static_cast<uint32_t>(p));
      EXPECT_EQ(hi, static_cast<uint32_t>(p >> 32));
    }
}

// Neighbouring counters give unrelated outputs: no collisions among 2^16
// consecutive counters in any word, and every output bit is set about half
// the time (a gross-defect check, not a statistical test suite).
TEST(Philox, NeighbouringCountersLookRandom) {
  const Key2 key{{17u, 0u}};
  std::set<uint32_t> seen;
  int64_t bits[32] = {};
  const int n = 1 << 16;
  for (int i = 0; i < n; ++i) {
    const Philox4 o = philox4x32_10(Philox4{{static_cast<uint32_t>(i), 0u, 0u, 0u}}, key);
    seen.insert(o.v[0]);
    for (int b = 0; b < 32; ++b) bits[b] += (o.v[2] >> b) & 1u;
  }
  EXPECT_GT(seen.size(), static_cast<size_t>(n - 3));  // birthday bound: ~0.5 expected collisions
  for (int b = 0; b < 32; ++b) EXPECT_NEAR(bits[b], n / 2, 5 * 128) << "bit " << b;  // 5 sigma, sigma = sqrt(n)/2
}

}  // namespace
}  // namespace normgate::seeds
