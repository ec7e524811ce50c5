// tests/validators/stats_test.cpp: Tests for validators/stats: histogram binning, quantile bounds, the
// streaming summary and merge == one sequential pass.
#include "normgate/validators/stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "normgate/core/bf16.h"

#include "util/xorshift64.h"
#include "util/stats_eq.h"

namespace nv = normgate::validators;
using nv::Histogram;
using nv::Output;
using nv::RatioStats;
using nv::testing::expect_same;

namespace {
const double inf = std::numeric_limits<double>::infinity();
const double nan_ = std::numeric_limits<double>::quiet_NaN();
constexpr int kLast = Histogram::kBins - 1;
constexpr int kOverflow = Histogram::kBins - 2;
}  // namespace

TEST(Histogram, Layout) {
  // One bin for 0, one underflow, (kMax-kMin)*kPerDecade log bins, one finite
  // overflow, one for inf.
  EXPECT_EQ(Histogram::kBins, 4 + (Histogram::kMaxDecade - Histogram::kMinDecade) * Histogram::kPerDecade);
  EXPECT_EQ(Histogram::lower(0), 0.0);
  EXPECT_EQ(Histogram::upper(0), 0.0);
  EXPECT_EQ(Histogram::lower(1), 0.0);
  EXPECT_EQ(Histogram::upper(1), 1e-8);
  EXPECT_EQ(Histogram::lower(kOverflow), 1e4);
  EXPECT_EQ(Histogram::upper(kOverflow), inf);
  EXPECT_EQ(Histogram::lower(kLast), inf);
  EXPECT_EQ(Histogram::upper(kLast), inf);
  EXPECT_THROW(Histogram::lower(-1), std::out_of_range);
  EXPECT_THROW(Histogram::upper(Histogram::kBins), std::out_of_range);
}

TEST(Histogram, EdgesAreContiguousAndLogSpaced) {
  const double step = std::pow(10.0, 1.0 / Histogram::kPerDecade);
  for (int k = 1; k < kOverflow; ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(Histogram::upper(k), Histogram::lower(k + 1));
    // Closed above: the upper edge itself is in bin k, the next double is not.
    EXPECT_EQ(Histogram::bin(Histogram::upper(k)), k);
    EXPECT_EQ(Histogram::bin(std::nextafter(Histogram::upper(k), inf)), k + 1);
    if (k >= 2) {
      EXPECT_NEAR(Histogram::upper(k) / Histogram::lower(k), step, 1e-12);
      // Geometric midpoint 10^(kMin + (k-2+0.5)/kPerDecade) lies inside bin k.
      const double mid = std::pow(10.0, Histogram::kMinDecade + (k - 2 + 0.5) / Histogram::kPerDecade);
      EXPECT_EQ(Histogram::bin(mid), k);
    }
  }
  // Decade edges are the decimal literals: 1 is the upper edge of a bin.
  const int k1 = Histogram::bin(1.0);
  EXPECT_EQ(Histogram::upper(k1), 1.0);
  EXPECT_EQ(k1, 2 + (0 - Histogram::kMinDecade) * Histogram::kPerDecade - 1);
  EXPECT_EQ(Histogram::bin(1e4), kOverflow - 1);
  EXPECT_EQ(Histogram::upper(kOverflow - 1), 1e4);
}

TEST(Histogram, BinContainsRatio) {
  // Definition check on log-uniform ratios over [1e-10, 1e6]: bin(r) = k iff
  // lower(k) < r <= upper(k).
  uint64_t s = 3;
  for (int i = 0; i < 200000; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double r = std::pow(10.0, -10 + 16 * (static_cast<double>(s >> 11) * 0x1p-53));
    const int k = Histogram::bin(r);
    ASSERT_LT(Histogram::lower(k), r) << r;
    ASSERT_LE(r, Histogram::upper(k)) << r;
  }
}

TEST(Histogram, BinAtEveryEdge) {
  // Each log edge e and its neighbours: e itself is in the bin it closes,
  // the next double up in the next bin (the one-compare lookup must agree).
  for (int k = 2; k < kOverflow; ++k) {
    const double e = Histogram::upper(k);
    EXPECT_EQ(Histogram::bin(e), k) << e;
    EXPECT_EQ(Histogram::bin(std::nextafter(e, inf)), k + 1) << e;
    EXPECT_EQ(Histogram::bin(std::nextafter(e, 0.0)), k) << e;
  }
}

TEST(Histogram, SpecialValues) {
  EXPECT_EQ(Histogram::bin(0.0), 0);
  EXPECT_EQ(Histogram::bin(-0.0), 0);
  EXPECT_EQ(Histogram::bin(std::numeric_limits<double>::denorm_min()), 1);
  EXPECT_EQ(Histogram::bin(1e-9), 1);
  EXPECT_EQ(Histogram::bin(1e-8), 1);
  EXPECT_EQ(Histogram::bin(std::nextafter(1e-8, 1.0)), 2);
  EXPECT_EQ(Histogram::bin(std::nextafter(1e4, inf)), kOverflow);
  EXPECT_EQ(Histogram::bin(std::numeric_limits<double>::max()), kOverflow);
  EXPECT_EQ(Histogram::bin(inf), kLast);
  EXPECT_EQ(Histogram::bin(nan_), kLast);
}

TEST(Histogram, QuantileUpper) {
  Histogram h;
  EXPECT_EQ(h.quantile_upper(0.5), 0.0);  // empty
  EXPECT_THROW(h.quantile_upper(-0.1), std::invalid_argument);
  EXPECT_THROW(h.quantile_upper(1.1), std::invalid_argument);
  EXPECT_THROW(h.quantile_upper(nan_), std::invalid_argument);
  // 7 zeros, 2 x 0.5, 1 x 3: n = 10, the q-quantile is the ceil(10q)-th smallest.
  for (int i = 0; i < 7; ++i) ++h.count[Histogram::bin(0.0)];
  for (int i = 0; i < 2; ++i) ++h.count[Histogram::bin(0.5)];
  ++h.count[Histogram::bin(3.0)];
  EXPECT_EQ(h.total(), 10);
  const double u05 = Histogram::upper(Histogram::bin(0.5));
  const double u3 = Histogram::upper(Histogram::bin(3.0));
  EXPECT_GE(u05, 0.5);
  EXPECT_LT(Histogram::lower(Histogram::bin(0.5)), 0.5);
  EXPECT_GE(u3, 3.0);
  EXPECT_EQ(h.quantile_upper(0.0), 0.0);   // rank 1
  EXPECT_EQ(h.quantile_upper(0.7), 0.0);   // rank 7
  EXPECT_EQ(h.quantile_upper(0.71), u05);  // rank 8
  EXPECT_EQ(h.quantile_upper(0.9), u05);   // rank 9
  EXPECT_EQ(h.quantile_upper(0.91), u3);   // rank 10
  EXPECT_EQ(h.quantile_upper(1.0), u3);
  ++h.count[Histogram::bin(inf)];
  EXPECT_EQ(h.quantile_upper(1.0), inf);
}

TEST(Histogram, RatioOneBoundsQuantileByOne) {
  Histogram h;
  ++h.count[Histogram::bin(1.0)];
  ++h.count[Histogram::bin(0.25)];
  EXPECT_EQ(h.quantile_upper(1.0), 1.0);
  ++h.count[Histogram::bin(std::nextafter(1.0, 2.0))];
  EXPECT_GT(h.quantile_upper(1.0), 1.0);
}

TEST(RatioStats, AddTracksWorstAndCounts) {
  RatioStats s(Output::y);
  const double tol1 = 1e-2 + 1e-2 * 1.0;  // y tolerance at |ref| = 1
  EXPECT_EQ(s.add(10, 1.0, 1.0, 0.0, 1.0), 0.0);
  EXPECT_EQ(s.worst.index, 10);  // first element is the worst of one
  const double r = s.add(20, 1.5, 1.0, 1e-3, 1.001);
  EXPECT_EQ(r, 0.5 / tol1);
  EXPECT_EQ(s.worst.index, 20);
  EXPECT_EQ(s.worst.ratio, 0.5 / tol1);
  EXPECT_EQ(s.worst.got, 1.5);
  EXPECT_EQ(s.worst.ref, 1.0);
  EXPECT_EQ(s.worst.err, 0.5);
  EXPECT_EQ(s.worst.tol, tol1);
  EXPECT_EQ(s.worst.bound, 1e-3);
  EXPECT_EQ(s.worst.ideal, 1.001);
  EXPECT_EQ(s.worst.forced, std::fabs(1.001 - 1.0) / tol1);
  EXPECT_EQ(s.max_forced, std::fabs(1.001 - 1.0) / tol1);
  EXPECT_EQ(s.max_bound_ratio, 1e-3 / tol1);
  // Same ratio at a higher index: worst stays; at a lower index: worst moves.
  s.add(30, 0.5, 1.0, 0.0, 1.0);
  EXPECT_EQ(s.worst.index, 20);
  s.add(5, 0.5, 1.0, 0.0, 1.0);
  EXPECT_EQ(s.worst.index, 5);
  EXPECT_EQ(s.worst.got, 0.5);
  EXPECT_EQ(s.n, 4);
  EXPECT_EQ(s.over, 3);  // ratio 0.5/0.02 = 25 three times
  EXPECT_EQ(s.nonfinite_fail, 0);
  EXPECT_FALSE(s.pass());
  EXPECT_EQ(s.hist.total(), 4);
  EXPECT_EQ(s.hist.count[0], 1);
  EXPECT_EQ(s.hist.count[Histogram::bin(0.5 / tol1)], 3);
  // A NaN beats every finite failure.
  s.add(40, nan_, 2.0, 0.0, 2.0);
  EXPECT_EQ(s.worst.index, 40);
  EXPECT_EQ(s.worst.ratio, inf);
  EXPECT_EQ(s.worst.err, inf);
  EXPECT_EQ(s.nonfinite_fail, 1);
  EXPECT_EQ(s.over, 4);
  EXPECT_EQ(s.hist.count[kLast], 1);
}

TEST(RatioStats, RatioOneIsNotOver) {
  RatioStats s(Output::dx);
  // Make got - ref exactly tol: pick ref = 0 so tol = atol = 1e-2 and got = 1e-2.
  EXPECT_EQ(s.add(0, 1e-2, 0.0, 0.0, 0.0), 1.0);
  EXPECT_EQ(s.over, 0);
  EXPECT_TRUE(s.pass());
}

TEST(RatioStats, BoundRatioRules) {
  RatioStats s(Output::rstd);
  s.add(0, 0.0, 0.0, 0.0, 0.0);  // tol 0, bound 0 -> 0
  EXPECT_EQ(s.max_bound_ratio, 0.0);
  s.add(1, inf, inf, 5.0, inf);  // non-finite ref: no bound ratio
  EXPECT_EQ(s.max_bound_ratio, 0.0);
  EXPECT_EQ(s.over, 0);
  s.add(2, 0.0, 0.0, 1e-300, 0.0);  // tol 0 < bound -> inf
  EXPECT_EQ(s.max_bound_ratio, inf);
}

namespace {

// Deterministic element stream with a spread of ratios, ties on the max
// ratio (indices 123, 456, 789), non-finite values and zero errors.
struct Elem {
  double got, ref, bound, ideal;
};

std::vector<Elem> stream(int n) {
  std::vector<Elem> v(n);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(s >> 11) * 0x1p-53;  // [0, 1)
  };
  for (int i = 0; i < n; ++i) {
    const double ref = 4 * next() - 2;
    const double e = std::pow(10.0, -9 + 11 * next()) * (next() < 0.5 ? -1 : 1);  // |err| 1e-9 .. 1e2
    v[i] = {ref + e, ref, 1e-9 * next(), ref + e * 1e-3};
    if (i % 97 == 0) v[i].got = ref;  // zero errors
  }
  for (int i : {123, 456, 789}) v[i] = {2.0 + 1e3, 2.0, 0.0, 2.0};  // the max finite ratio, tied
  v[901] = {nan_, nan_, 0.0, nan_};  // NaN expected NaN: passes
  v[902] = {inf, inf, 0.0, inf};
  return v;
}

RatioStats sequential(const std::vector<Elem>& v, int lo, int hi, bool reverse = false) {
  RatioStats s(Output::dx);
  for (int k = 0; k < hi - lo; ++k) {
    const int i = reverse ? hi - 1 - k : lo + k;
    s.add(i, v[i].got, v[i].ref, v[i].bound, v[i].ideal);
  }
  return s;
}

}  // namespace

TEST(RatioStats, MergeEqualsSequential) {
  const std::vector<Elem> v = stream(1000);
  const RatioStats seq = sequential(v, 0, 1000);
  EXPECT_EQ(seq.worst.index, 123);  // lowest of the three tied indices
  EXPECT_EQ(seq.worst.ratio, 1e3 / (1e-2 + 1e-2 * 2.0));
  EXPECT_EQ(seq.n, 1000);
  const int cuts[] = {0, 137, 456, 457, 800, 1000};  // one cut lands on a tie
  std::vector<RatioStats> parts;
  for (int c = 0; c + 1 < 6; ++c) parts.push_back(sequential(v, cuts[c], cuts[c + 1]));
  RatioStats merged(Output::dx);
  for (const RatioStats& p : parts) merged.merge(p);
  expect_same(merged, seq);
  // Order independence: reverse merge order and a reversed sequential pass.
  RatioStats rmerged(Output::dx);
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) rmerged.merge(*it);
  expect_same(rmerged, seq);
  expect_same(sequential(v, 0, 1000, true), seq);
  // Merging an empty partial changes nothing.
  RatioStats with_empty = seq;
  with_empty.merge(RatioStats(Output::dx));
  expect_same(with_empty, seq);
  RatioStats empty_first(Output::dx);
  empty_first.merge(seq);
  expect_same(empty_first, seq);
}

TEST(RatioStats, MergeRejectsOtherOutput) {
  RatioStats a(Output::y);
  EXPECT_THROW(a.merge(RatioStats(Output::dx)), std::invalid_argument);
}

// add_row must give bit for bit what add() gives element by element: random
// rows mixing ordinary values with zeros, NaN/Inf in got, ref, ideal and
// bound, huge errors over tiny tolerances (err/tol overflowing to inf), bounds
// that make comparisons uncertified, exact ties, err/tol spread over every
// histogram bin (1e-14 to 1e8), and slow-path elements in the middle of a
// row; for every output's budget (h_new: exact).
TEST(RatioStats, AddRowEqualsAddElementByElement) {
  using normgate::validators::testing::expect_same;
  normgate::test::Xorshift64 next(99);
  auto uni = [&] { return next.uniform(); };
  const double special[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e300, 1e-300, 5e-324};
  for (Output o : {Output::y, Output::rstd, Output::dx, Output::dw, Output::h_new}) {
    for (int rep = 0; rep < 40; ++rep) {
      const int64_t n = 1 + static_cast<int64_t>(next() % 700);
      std::vector<double> got(n), ref(n), bound(n), ideal(n);
      for (int64_t j = 0; j < n; ++j) {
        ref[j] = (uni() - 0.5) * std::ldexp(1.0, static_cast<int>(next() % 40) - 20);
        const double tol = budget(o).atol + budget(o).rtol * std::fabs(ref[j]);
        got[j] = ref[j] + (uni() - 0.5) * 4 * tol;         // err/tol in [0, 2]
        ideal[j] = ref[j] + (uni() - 0.5) * tol;
        bound[j] = (next() % 4 == 0) ? 0.0 : uni() * 1e-12 * tol;
        const uint64_t kind = next() % 50;
        if (kind == 0) got[j] = special[next() % 8];
        if (kind == 1) ref[j] = special[next() % 8];
        if (kind == 2) ideal[j] = special[next() % 8];
        if (kind == 3) bound[j] = special[next() % 8];
        if (kind == 4) bound[j] = uni() * 0.5 * tol;       // likely uncertified near the budget
        if (kind == 5) got[j] = ref[j] + tol;              // err/tol exactly ~1
        if (kind == 6) got[j] = ref[j];                    // exact
        if (kind == 7 && j > 0) got[j] = got[j - 1], ref[j] = ref[j - 1];  // a tie with the previous element
        if (kind >= 8 && kind < 14) got[j] = ref[j] + std::pow(10.0, -14 + 22 * uni()) * tol;  // every bin
        if (kind == 14) got[j] = ref[j] + 1e-8 * tol;  // at the underflow bin's edge
      }
      RatioStats a(o), b(o);
      for (int64_t j = 0; j < n; ++j) a.add(1000 + j, got[j], ref[j], bound[j], ideal[j]);
      b.add_row(1000, got.data(), ref.data(), bound.data(), ideal.data(), n);
      SCOPED_TRACE(std::string(to_string(o)) + " rep " + std::to_string(rep));
      expect_same(a, b);
      // And across rows: two rows into one accumulator.
      RatioStats c(o), d(o);
      for (int64_t j = 0; j < n; ++j) c.add(j, got[j], ref[j], bound[j], ideal[j]);
      for (int64_t j = 0; j < n; ++j) c.add(n + j, ideal[j], ref[j], bound[j], got[j]);
      d.add_row(0, got.data(), ref.data(), bound.data(), ideal.data(), n);
      d.add_row(n, ideal.data(), ref.data(), bound.data(), got.data(), n);
      expect_same(c, d);
    }
  }
}

// add_row skips the forced and bound divisions of a block that cannot raise
// max_forced or max_bound_ratio: long rows (many blocks) whose forced and bound
// ratios creep upward, repeat the running maximum exactly, sit just above or
// below it (a few ulps), or start from maxima at the edges of that shortcut
// (0, subnormal, 2^-1000, huge), must still match add() bit for bit.
TEST(RatioStats, AddRowEqualsAddWhenMaximaSettle) {
  using normgate::validators::testing::expect_same;
  normgate::test::Xorshift64 next(5);
  auto uni = [&] { return next.uniform(); };
  const double seed_ratio[] = {0.0, 5e-324, 0x1p-1000, 0x1.0000000000001p-1000, 1e-300, 0.3, 1e300, 0x1p1020};
  for (Output o : {Output::y, Output::dx}) {
    const auto bu = budget(o);
    for (int rep = 0; rep < 16; ++rep) {
      const int64_t n = 2000 + static_cast<int64_t>(next() % 1500);
      std::vector<double> got(n), ref(n), bound(n), ideal(n);
      double top = 0.0;  // the largest forced ratio so far, as add() computes it
      for (int64_t j = 0; j < n; ++j) {
        ref[j] = (uni() - 0.5) * std::ldexp(1.0, static_cast<int>(next() % 30) - 15);
        const double tol = bu.atol + bu.rtol * std::fabs(ref[j]);
        got[j] = ref[j] + (uni() - 0.5) * 3 * tol;
        const double creep = 0.1 + 0.4 * static_cast<double>(j) / static_cast<double>(n);
        ideal[j] = ref[j] + uni() * creep * tol;
        bound[j] = uni() * creep * 1e-9 * tol;
        const uint64_t kind = next() % 16;
        if (kind == 0) ideal[j] = ref[j] + top * tol;  // near or at the running maximum
        if (kind == 1) ideal[j] = ref[j] + std::nextafter(top, INFINITY) * tol;
        if (kind == 2) ideal[j] = ref[j];
        if (kind == 3) bound[j] = 0.0;
        const double f = std::fabs(ideal[j] - ref[j]);
        if (f != 0.0) top = std::max(top, f / tol);
      }
      const double s = seed_ratio[rep % 8];
      RatioStats a(o), b(o);
      // A first element (index 0) that sets both maxima to about s.
      const double t0 = bu.atol;
      a.add(0, 0.0, 0.0, s * t0, s * t0);
      b.add(0, 0.0, 0.0, s * t0, s * t0);
      for (int64_t j = 0; j < n; ++j) a.add(1 + j, got[j], ref[j], bound[j], ideal[j]);
      for (int64_t j0 = 0; j0 < n; j0 += 256) {
        const int64_t m = std::min<int64_t>(256, n - j0);
        b.add_row(1 + j0, got.data() + j0, ref.data() + j0, bound.data() + j0, ideal.data() + j0, m);
      }
      SCOPED_TRACE(std::string(to_string(o)) + " rep " + std::to_string(rep));
      expect_same(a, b);
    }
  }
}

// add_bf16_exact_row must give bit for bit what add() gives element by
// element on widened BF16 values: rows mostly equal to the expected bits, with
// mismatches, NaNs (several payloads), +-0, +-Inf, rows added out of index
// order (a tie at ratio 0 with a lower index arriving later), and rows with
// no mismatch at all.
TEST(RatioStats, ExactBf16RowEqualsAddElementByElement) {
  normgate::test::Xorshift64 next(7);
  const uint16_t special[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0x0001};
  auto widen = [](uint16_t b) { return static_cast<double>(normgate::bf16_to_float(b)); };
  for (int rep = 0; rep < 60; ++rep) {
    const int64_t n = 1 + static_cast<int64_t>(next() % 300);
    std::vector<uint16_t> got(n), expect(n);
    for (int64_t j = 0; j < n; ++j) {
      expect[j] = static_cast<uint16_t>(next());
      if (next() % 10 == 0) expect[j] = special[next() % 8];
      got[j] = expect[j];
      const uint64_t kind = next() % 20;
      if (kind == 0) got[j] = static_cast<uint16_t>(got[j] ^ 1);       // one ulp off
      if (kind == 1) got[j] = special[next() % 8];
      if (kind == 2) got[j] = static_cast<uint16_t>(got[j] ^ 0x8000);  // sign flipped
    }
    const int64_t base = static_cast<int64_t>(next() % 3) * 1000;
    RatioStats a(Output::h_new), b(Output::h_new);
    const int64_t h = n / 2;
    SCOPED_TRACE("rep " + std::to_string(rep));
    if (rep % 3 == 0) {
      // In order, the second half all equal (the whole-row path once
      // `worst` is set; ties at ratio 0 and equal NaNs included).
      for (int64_t j = h; j < n; ++j) got[j] = expect[j];
      for (int64_t j = 0; j < n; ++j) a.add(base + j, widen(got[j]), widen(expect[j]), 0.0, widen(expect[j]));
      b.add_bf16_exact_row(base, got.data(), expect.data(), h);
      b.add_bf16_exact_row(base + h, got.data() + h, expect.data() + h, n - h);
      expect_same(a, b);
      continue;
    }
    // Second half first, then the first half: indices not in order.
    for (int64_t j = h; j < n; ++j) a.add(base + j, widen(got[j]), widen(expect[j]), 0.0, widen(expect[j]));
    for (int64_t j = 0; j < h; ++j) a.add(base + j, widen(got[j]), widen(expect[j]), 0.0, widen(expect[j]));
    b.add_bf16_exact_row(base + h, got.data() + h, expect.data() + h, n - h);
    b.add_bf16_exact_row(base, got.data(), expect.data(), h);
    expect_same(a, b);
  }
  RatioStats y(Output::y);
  const uint16_t one = 0x3F80;
  EXPECT_THROW(y.add_bf16_exact_row(0, &one, &one, 1), std::logic_error);
}

// The validation sweep and the oracle take rows in dynamic chunks (check.cpp):
// which thread summarizes which rows, and in what order, varies from run to
// run. That is exact only because a row's summary does not depend on what its
// accumulator saw before. Here: a [40, 300] tensor swept row by row in tiles
// of 256 columns (as check.cpp) with ties on the max ratio in different rows,
// uncertified comparisons, NaN/Inf, and an h_new tensor of BF16 bits (equal
// almost everywhere: ties at ratio 0), against 30 random row orders spread
// over 1-6 partials merged in partial order: the same summary bit for bit.
TEST(RatioStats, RowsInAnyOrderAndAnyPartialEqualTheSequentialSweep) {
  normgate::test::Xorshift64 next(2024);
  auto uni = [&] { return next.uniform(); };
  constexpr int64_t R = 40, C = 300, kTile = 256;
  for (Output o : {Output::y, Output::dx, Output::h_new}) {
    SCOPED_TRACE(std::string(to_string(o)));
    const bool exact = o == Output::h_new;
    std::vector<double> got(R * C), ref(R * C), bound(R * C), ideal(R * C);
    std::vector<uint16_t> gb(R * C), eb(R * C);
    for (int64_t i = 0; i < R * C; ++i) {
      ref[i] = (uni() - 0.5) * std::ldexp(1.0, static_cast<int>(next() % 30) - 15);
      const double tol = budget(o).atol + budget(o).rtol * std::fabs(ref[i]);
      got[i] = ref[i] + (uni() - 0.5) * 3 * tol;
      ideal[i] = ref[i] + (uni() - 0.5) * tol;
      bound[i] = next() % 3 == 0 ? 0.0 : uni() * 1e-12 * tol;
      const uint64_t kind = next() % 60;
      if (kind == 0) got[i] = nan_;
      if (kind == 1) ref[i] = inf;
      if (kind == 2) bound[i] = uni() * 0.5 * tol;  // likely uncertified
      eb[i] = static_cast<uint16_t>(next());
      gb[i] = next() % 40 == 0 ? static_cast<uint16_t>(eb[i] ^ 1) : eb[i];
    }
    // The same large finite error in rows 31, 7 and 19 (column 5): a tie
    // (below the inf ratios of NaN got / Inf ref, which tie among themselves).
    for (int64_t r : {31, 7, 19}) {
      got[r * C + 5] = 1e6;
      ref[r * C + 5] = 1.0;
      bound[r * C + 5] = 0.0;
      ideal[r * C + 5] = 1.0;
    }
    auto sweep_row = [&](RatioStats& s, int64_t r) {
      for (int64_t j0 = 0; j0 < C; j0 += kTile) {
        const int64_t n = std::min(kTile, C - j0), b = r * C + j0;
        if (exact) {
          s.add_bf16_exact_row(b, gb.data() + b, eb.data() + b, n);
        } else {
          s.add_row(b, got.data() + b, ref.data() + b, bound.data() + b, ideal.data() + b, n);
        }
      }
    };
    RatioStats seq(o);
    for (int64_t r = 0; r < R; ++r) sweep_row(seq, r);
    if (!exact) {  // the lowest index among the elements with the largest ratio (inf: NaN got, Inf ref)
      int64_t first = -1;
      double mx = -1;
      for (int64_t i = 0; i < R * C; ++i)
        if (const double q = nv::ratio(budget(o), got[i], ref[i]); q > mx) mx = q, first = i;
      EXPECT_EQ(seq.worst.index, first);
      EXPECT_GT(seq.over, 3);
    }
    for (int rep = 0; rep < 30; ++rep) {
      SCOPED_TRACE(rep);
      std::vector<int64_t> order(R);
      for (int64_t r = 0; r < R; ++r) order[r] = r;
      for (int64_t r = R - 1; r > 0; --r) std::swap(order[r], order[next() % (r + 1)]);
      const int np = 1 + static_cast<int>(next() % 6);
      std::vector<RatioStats> parts(np, RatioStats(o));
      for (int64_t r : order) sweep_row(parts[next() % np], r);
      RatioStats merged(o);
      for (const RatioStats& p : parts) merged.merge(p);
      expect_same(merged, seq);
    }
  }
}
