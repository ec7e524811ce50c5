// tests/util/stats_eq.h: bitwise comparison of RatioStats for the validators tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "normgate/validators/stats.h"

namespace normgate::validators::testing {

/// Bit pattern of a double (so NaN == NaN and +0 != -0).
inline uint64_t bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

/// EXPECT that two summaries are bitwise identical, field by field.
inline void expect_same(const RatioStats& a, const RatioStats& b) {
  EXPECT_EQ(a.output(), b.output());
  EXPECT_EQ(a.n, b.n);
  EXPECT_EQ(a.over, b.over);
  EXPECT_EQ(a.nonfinite_fail, b.nonfinite_fail);
  EXPECT_EQ(bits(a.max_forced), bits(b.max_forced));
  EXPECT_EQ(bits(a.max_bound_ratio), bits(b.max_bound_ratio));
  EXPECT_EQ(a.worst.index, b.worst.index);
  EXPECT_EQ(bits(a.worst.ratio), bits(b.worst.ratio));
  EXPECT_EQ(bits(a.worst.got), bits(b.worst.got));
  EXPECT_EQ(bits(a.worst.ref), bits(b.worst.ref));
  EXPECT_EQ(bits(a.worst.err), bits(b.worst.err));
  EXPECT_EQ(bits(a.worst.tol), bits(b.worst.tol));
  EXPECT_EQ(bits(a.worst.bound), bits(b.worst.bound));
  EXPECT_EQ(bits(a.worst.forced), bits(b.worst.forced));
  EXPECT_EQ(bits(a.worst.ideal), bits(b.worst.ideal));
  EXPECT_EQ(a.uncertified, b.uncertified);
  EXPECT_EQ(a.over_certified, b.over_certified);
  EXPECT_EQ(a.uncertain.index, b.uncertain.index);
  EXPECT_EQ(bits(a.uncertain.ratio), bits(b.uncertain.ratio));
  EXPECT_EQ(bits(a.uncertain.bound), bits(b.uncertain.bound));
  EXPECT_EQ(bits(a.uncertain.got), bits(b.uncertain.got));
  EXPECT_EQ(bits(a.uncertain.ref), bits(b.uncertain.ref));
  for (int k = 0; k < Histogram::kBins; ++k) EXPECT_EQ(a.hist.count[k], b.hist.count[k]) << "bin " << k;
}

}  // namespace normgate::validators::testing
