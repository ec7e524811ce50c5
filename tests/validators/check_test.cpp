// tests/validators/check_test.cpp: Tests for validators/check: validate_case against the oracle on small
// problems whose "got" outputs are built from the ideal kernel (the oracle's
// values rounded once to the output dtype) and then perturbed in known ways.
#include "normgate/validators/check.h"

#include <gtest/gtest.h>

#include "util/xorshift64.h"

#include <bit>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "normgate/core/bf16.h"
#include "normgate/oracle/reference.h"
#include "util/stats_eq.h"

namespace nv = normgate::validators;
namespace no = normgate::oracle;
using normgate::bf16_from_float;
using normgate::bf16_to_float;
using normgate::Outputs;
using nv::Output;
using nv::testing::bits;
using nv::testing::expect_same;

namespace {

const double inf = std::numeric_limits<double>::infinity();

// The spec's budgets, written out here independently of budget().
double tol_y_dx(double ref) { return 1e-2 + 1e-2 * std::fabs(ref); }
double tol_dw(double ref) { return 1e-4 + 1e-4 * std::fabs(ref); }

/// A small problem owning its storage. x/dy are [T, heads, cols] with a
/// padded token stride (pad elements after each token) so strided views are
/// exercised when heads > 1 or pad > 0.
struct Case {
  int64_t T, heads, cols, stride_t;
  std::vector<uint16_t> x, dy, w;
  no::Problem p;

  Case(int64_t T_, int64_t heads_, int64_t cols_, int64_t pad = 0, uint64_t seed = 1)
      : T(T_), heads(heads_), cols(cols_), stride_t(heads_ * cols_ + pad) {
    x.assign(static_cast<size_t>(T * stride_t), 0);
    dy.assign(x.size(), 0);
    w.assign(static_cast<size_t>(cols), 0);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 12345;
    auto uni = [&](double lo, double hi) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      return lo + (hi - lo) * (static_cast<double>(s >> 11) * 0x1p-53);
    };
    for (int64_t r = 0; r < T * heads; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        x[at(r, j)] = bf16_from_float(static_cast<float>(uni(-2, 2)));
        dy[at(r, j)] = bf16_from_float(static_cast<float>(uni(-1, 1)));
      }
    for (int64_t j = 0; j < cols; ++j) w[j] = bf16_from_float(static_cast<float>(uni(0.5, 1.5)));
    rebind();
  }
  size_t at(int64_t r, int64_t j) const { return static_cast<size_t>((r / heads) * stride_t + (r % heads) * cols + j); }
  int64_t rows() const { return T * heads; }
  void rebind() {
    p.x = {x.data(), T, heads, cols, stride_t, cols};
    p.dy = {dy.data(), T, heads, cols, stride_t, cols};
    p.w = {normgate::WDtype::bf16, w.data(), cols};
    p.eps = 1e-6;
  }
  /// Make normalized row `dst` a copy of row `src` (x and dy).
  void copy_row(int64_t src, int64_t dst) {
    for (int64_t j = 0; j < cols; ++j) {
      x[at(dst, j)] = x[at(src, j)];
      dy[at(dst, j)] = dy[at(src, j)];
    }
  }
};

struct Refs {
  no::Reference ref, ideal;
};

Refs refs(const Case& c) {
  return {no::Reference::compute(c.p, {0, no::RstdMode::fp64}),
          no::Reference::compute(c.p, {0, no::RstdMode::fp32_rounded})};
}

/// The ideal kernel's outputs: every reference value rounded once.
Outputs ideal_outputs(const Case& c, const Refs& R) {
  Outputs o;
  const int64_t rows = c.rows(), cols = c.cols;
  o.y.resize(rows * cols);
  o.dx.resize(rows * cols);
  o.rstd.resize(rows);
  o.dw.resize(cols);
  for (int64_t r = 0; r < rows; ++r) {
    o.rstd[r] = R.ref.rstd_f32(r);  // the exact rstd rounded once to FP32
    for (int64_t j = 0; j < cols; ++j) {
      o.y[r * cols + j] = bf16_from_float(nv::round_to_bf16(R.ref.y(r, j).v));
      o.dx[r * cols + j] = bf16_from_float(nv::round_to_bf16(R.ideal.dx(r, j).v));
    }
  }
  for (int64_t j = 0; j < cols; ++j) o.dw[j] = static_cast<float>(R.ideal.dw(j).v);
  return o;
}

void expect_same_result(const nv::CaseResult& a, const nv::CaseResult& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    SCOPED_TRACE(std::string(nv::to_string(a.tensors[i].output())));
    expect_same(a.tensors[i], b.tensors[i]);
  }
  EXPECT_EQ(bits(a.dw_vs_fp32_worst), bits(b.dw_vs_fp32_worst));
  EXPECT_EQ(bits(a.dw_vs_fp32_median), bits(b.dw_vs_fp32_median));
  EXPECT_EQ(bits(a.dw_worst_condition), bits(b.dw_worst_condition));
  EXPECT_EQ(bits(a.dw_max_condition), bits(b.dw_max_condition));
}

}  // namespace

// --- round_to_bf16 ------------------------------------------------------------

TEST(RoundToBf16, AgreesWithFloatRoundingOnFloats) {
  // For a value that is already binary32 there is only one rounding, so the
  // core's bf16_from_float is the reference.
  uint32_t s = 7;
  for (int i = 0; i < 200000; ++i) {
    s = s * 1664525u + 1013904223u;
    const float f = normgate::bits_float(s);
    if (std::isnan(f)) continue;
    EXPECT_EQ(normgate::float_bits(nv::round_to_bf16(static_cast<double>(f))),
              normgate::float_bits(bf16_to_float(bf16_from_float(f))))
        << std::hexfloat << f;
  }
}

// The fast bit-manipulation path against the definition: quantum 2^(e-7) at
// binade e (e >= -126), one nearbyint (ties to even), overflow to inf past
// the largest BF16. Random doubles over exponents -140..140, plus ties.
TEST(RoundToBf16, FastPathEqualsTheDefinition) {
  auto reference = [](double v) -> float {
    if (!std::isfinite(v) || v == 0.0) return static_cast<float>(v);
    int e = std::ilogb(v);
    if (e < -126) e = -126;
    const double r = std::ldexp(std::nearbyint(std::ldexp(v, 7 - e)), e - 7);
    if (std::fabs(r) > 0x1.fep+127) return static_cast<float>(std::copysign(INFINITY, v));
    return static_cast<float>(r);
  };
  normgate::test::Xorshift64 next(12345);
  for (int i = 0; i < 400000; ++i) {
    const uint64_t frac = next() & ((uint64_t{1} << 52) - 1);
    const int e = static_cast<int>(next() % 281) - 140;
    // Every 4th value: an exact tie or a neighbour of one (low 45 bits 0x1000.., +-1).
    uint64_t f = frac;
    if (i % 4 == 0) f = (frac & ~((uint64_t{1} << 45) - 1)) | (uint64_t{1} << 44);
    if (i % 8 == 4) f += 1;
    const double v = std::bit_cast<double>((static_cast<uint64_t>(e + 1023) << 52) | (f & ((uint64_t{1} << 52) - 1))) *
                     ((i & 1) ? -1.0 : 1.0);
    ASSERT_EQ(normgate::float_bits(nv::round_to_bf16(v)), normgate::float_bits(reference(v))) << std::hexfloat << v;
  }
  // The largest BF16 and the first value that rounds past it.
  EXPECT_EQ(nv::round_to_bf16(0x1.fep+127), 0x1.fep+127f);
  EXPECT_EQ(nv::round_to_bf16(0x1.ffp+127), INFINITY);  // tie: rounds to even = 2^128 -> inf
  EXPECT_EQ(nv::round_to_bf16(-0x1.fefffp+127), -0x1.fep+127f);
}

// The row version against round_to_bf16 element by element, bit for bit:
// doubles over every exponent (subnormal doubles to the largest), ties and
// their neighbours, the overflow threshold, +-0, +-inf and NaN payloads,
// in rows of every length (vector tails).
TEST(RoundToBf16, RowEqualsElementByElement) {
  normgate::test::Xorshift64 next(777);
  const double special[] = {0.0, -0.0, INFINITY, -INFINITY, std::nan(""), -std::nan("7"),
                            std::bit_cast<double>(uint64_t{0x7FF0000000000123}), 0x1.fep+127, 0x1.ffp+127,
                            -0x1.fefffp+127, 0x1p-126, std::nextafter(0x1p-126, 0.0), 0x1p-133, 0x1p-134, 5e-324};
  for (int rep = 0; rep < 300; ++rep) {
    const int64_t n = static_cast<int64_t>(next() % 70);
    std::vector<double> v(n), out(n, 12345.0);
    for (int64_t j = 0; j < n; ++j) {
      const uint64_t frac = next() & ((uint64_t{1} << 52) - 1);
      uint64_t f = frac;
      if (j % 4 == 0) f = (frac & ~((uint64_t{1} << 45) - 1)) | (uint64_t{1} << 44);  // a tie
      if (j % 8 == 4) f += 1;
      const int e = rep % 3 == 0 ? static_cast<int>(next() % 2047) : static_cast<int>(next() % 281) + 1023 - 140;
      v[j] = std::bit_cast<double>((static_cast<uint64_t>(e) << 52) | (f & ((uint64_t{1} << 52) - 1))) *
             ((next() & 1) ? -1.0 : 1.0);
      if (next() % 10 == 0) v[j] = special[next() % std::size(special)];
    }
    nv::round_to_bf16_row(v.data(), n, out.data());
    for (int64_t j = 0; j < n; ++j)
      ASSERT_EQ(std::bit_cast<uint64_t>(out[j]), std::bit_cast<uint64_t>(static_cast<double>(nv::round_to_bf16(v[j]))))
          << std::hexfloat << v[j];
  }
}

// Form res's h_new row: every BF16 h (a stride over all 65536 patterns and
// the special ones: +-0, subnormals, the largest finite, +-inf, NaNs) against
// every BF16 u, equal to the two-step path the oracle used before
// (round_to_bf16 of the double sum, then its BF16 bits) bit for bit; when
// both are NaN, h's NaN quieted. Also the same on short rows at odd offsets
// (vector tails, unaligned). All 2^32 pairs were checked once the same way,
// for the x86-64-v3 clone and the baseline one (branch wip/res-hnew: 0
// differences).
TEST(RoundToBf16, SumRowEqualsTheTwoStepPath) {
  std::vector<uint16_t> b(65536), a(65536), got(65536);
  for (int i = 0; i < 65536; ++i) b[static_cast<size_t>(i)] = static_cast<uint16_t>(i);
  std::vector<int> as;
  for (int i = 0; i < 65536; i += 37) as.push_back(i);
  for (int i : {0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x7F7E, 0x7F80, 0xFF80, 0x7F81,
                0x7FC0, 0xFFC0, 0x7FFF, 0x3F80, 0xBF80, 0x3F81, 0x4B80})
    as.push_back(i);
  auto want = [](uint16_t x, uint16_t y) {
    const float fx = bf16_to_float(x);
    if (std::isnan(fx)) return bf16_from_float(fx);
    return bf16_from_float(nv::round_to_bf16(static_cast<double>(fx) + static_cast<double>(bf16_to_float(y))));
  };
  int64_t checked = 0;
  for (int ai : as) {
    std::fill(a.begin(), a.end(), static_cast<uint16_t>(ai));
    nv::round_sum_to_bf16_row(a.data(), b.data(), 65536, got.data());
    for (int j = 0; j < 65536; ++j)
      ASSERT_EQ(got[static_cast<size_t>(j)], want(static_cast<uint16_t>(ai), static_cast<uint16_t>(j)))
          << std::hex << "h " << ai << " u " << j;
    checked += 65536;
  }
  EXPECT_GT(checked, int64_t{100000000});
  normgate::test::Xorshift64 next(4242);
  for (int rep = 0; rep < 2000; ++rep) {
    const int64_t n = static_cast<int64_t>(next() % 70), off = static_cast<int64_t>(next() % 9);
    for (int64_t j = 0; j < n + off; ++j) {
      a[static_cast<size_t>(j)] = static_cast<uint16_t>(next());
      b[static_cast<size_t>(j)] = static_cast<uint16_t>(next());
    }
    std::fill(got.begin(), got.begin() + n + off + 1, uint16_t{0x1234});
    nv::round_sum_to_bf16_row(a.data() + off, b.data() + off, n, got.data() + off);
    for (int64_t j = 0; j < off; ++j) ASSERT_EQ(got[static_cast<size_t>(j)], 0x1234);
    for (int64_t j = off; j < n + off; ++j)
      ASSERT_EQ(got[static_cast<size_t>(j)], want(a[static_cast<size_t>(j)], b[static_cast<size_t>(j)]));
    ASSERT_EQ(got[static_cast<size_t>(n + off)], 0x1234);
  }
}

TEST(RoundToBf16, SingleRoundingFromDouble) {
  // 1 + 2^-8 + 2^-30: above the midpoint between BF16 neighbours 1 and
  // 1 + 2^-7, so it rounds up. Through binary32 first it would become the
  // exact midpoint 1 + 2^-8 (2^-30 is below binary32's half-ulp at 1) and
  // then round to even, 1: the double rounding this function avoids.
  const double v = 1.0 + 0x1p-8 + 0x1p-30;
  EXPECT_EQ(nv::round_to_bf16(v), 1.0f + 0x1p-7f);
  EXPECT_EQ(bf16_to_float(bf16_from_float(static_cast<float>(v))), 1.0f);
  // Ties to even, both ways.
  EXPECT_EQ(nv::round_to_bf16(1.0 + 0x1p-8), 1.0f);
  EXPECT_EQ(nv::round_to_bf16(1.0 + 3 * 0x1p-8), 1.0f + 0x1p-6f);
  // Subnormal BF16 quantum 2^-133; the smallest one and half of it (tie to 0).
  EXPECT_EQ(nv::round_to_bf16(0x1p-133), 0x1p-133f);
  EXPECT_EQ(nv::round_to_bf16(0x1p-134), 0.0f);
  EXPECT_EQ(nv::round_to_bf16(0x1p-134 + 0x1p-180), 0x1p-133f);  // just above the tie (exact in double)
  EXPECT_TRUE(std::signbit(nv::round_to_bf16(-0x1p-200)));
  // Overflow: largest finite BF16 (2 - 2^-7)*2^127; the midpoint above it is inf.
  const double maxb = (2.0 - 0x1p-7) * 0x1p127;
  EXPECT_EQ(nv::round_to_bf16(maxb), static_cast<float>(maxb));
  EXPECT_EQ(nv::round_to_bf16(maxb + 0x1p119), std::numeric_limits<float>::infinity());
  EXPECT_EQ(nv::round_to_bf16(std::nextafter(maxb + 0x1p119, 0.0)), static_cast<float>(maxb));
  EXPECT_EQ(nv::round_to_bf16(-1e300), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(nv::round_to_bf16(std::nan(""))));
}

TEST(RoundToBf16, NearestOnRandomDoubles) {
  // Property: the result is a BF16 value and no BF16 neighbour is closer.
  uint64_t s = 99;
  for (int i = 0; i < 100000; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double v = std::ldexp(static_cast<double>(s >> 11) * 0x1p-53 * 2 - 1, static_cast<int>(s % 60) - 30);
    const float r = nv::round_to_bf16(v);
    const uint16_t b = bf16_from_float(r);
    ASSERT_EQ(bf16_to_float(b), r);
    const double e = std::fabs(static_cast<double>(r) - v);
    for (int d : {-1, 1}) {
      const double nb = static_cast<double>(bf16_to_float(static_cast<uint16_t>(b + d)));
      if (std::isnan(nb)) continue;  // stepped past +-0 or +-inf into NaN patterns
      ASSERT_LE(e, std::fabs(nb - v)) << std::hexfloat << v;
    }
  }
}

// --- validate_case -------------------------------------------------------------

TEST(ValidateCase, IdealOutputsPass) {
  Case c(37, 1, 48);
  const Refs R = refs(c);
  const Outputs got = ideal_outputs(c, R);
  const nv::CaseResult res = nv::validate_case(c.p, got, R.ref, R.ideal, nullptr);
  EXPECT_TRUE(res.pass());
  ASSERT_EQ(res.tensors.size(), 4u);
  const Output order[] = {Output::y, Output::rstd, Output::dx, Output::dw};
  const int64_t n[] = {c.rows() * c.cols, c.rows(), c.rows() * c.cols, c.cols};
  for (int i = 0; i < 4; ++i) {
    const nv::RatioStats& s = res.tensors[i];
    SCOPED_TRACE(std::string(nv::to_string(order[i])));
    EXPECT_EQ(s.output(), order[i]);
    EXPECT_EQ(&res.get(order[i]), &s);
    EXPECT_EQ(s.n, n[i]);
    EXPECT_EQ(s.over, 0);
    EXPECT_EQ(s.hist.total(), n[i]);
    EXPECT_GE(s.worst.index, 0);
    // got is the ideal everywhere, so every ratio is its forced ratio.
    EXPECT_EQ(s.worst.ratio, s.max_forced);
    EXPECT_EQ(s.worst.forced, s.worst.ratio);
    EXPECT_EQ(s.worst.got, s.worst.ideal);
  }
  // No baseline: the comparisons with it are NaN.
  EXPECT_TRUE(std::isnan(res.dw_vs_fp32_worst));
  EXPECT_TRUE(std::isnan(res.dw_vs_fp32_median));
  EXPECT_THROW(res.get(Output::h_new), std::out_of_range);
}

TEST(ValidateCase, OnePerturbedDxElement) {
  // Perturb an element where the ideal kernel (FP32 rstd) and the FP64
  // reference round to different BF16 values, so the test also pins that the
  // forced part of dx comes from `ideal`, not from `ref`. Such elements occur
  // about once per 2^16 (the FP32 rstd moves dx by ~2^-24 relative; a BF16
  // rounding boundary lies within that with probability ~2^-24/2^-8), so a
  // 2^18-element case has a few; the data is deterministic.
  Case c(256, 1, 1024);
  const Refs R = refs(c);
  Outputs got = ideal_outputs(c, R);
  int64_t k = -1;
  for (int64_t i = 0; i < c.rows() * c.cols && k < 0; ++i)
    if (nv::round_to_bf16(R.ideal.dx(i / c.cols, i % c.cols).v) != nv::round_to_bf16(R.ref.dx(i / c.cols, i % c.cols).v))
      k = i;
  ASSERT_GE(k, 0) << "no element where BF16(ideal dx) != BF16(ref dx); change the seed";
  const int64_t r = k / c.cols, j = k % c.cols;
  const uint16_t ideal_bits = got.dx[k];
  got.dx[k] = bf16_from_float(bf16_to_float(ideal_bits) + 0.25f);
  const double g = bf16_to_float(got.dx[k]);
  const double ref = R.ref.dx(r, j).v;
  const double expected = std::fabs(g - ref) / tol_y_dx(ref);
  ASSERT_GT(expected, 1.0);  // 0.25 (less BF16 rounding) against tol <= 1e-2*(1 + |dx|)
  const nv::CaseResult res = nv::validate_case(c.p, got, R.ref, R.ideal, nullptr);
  EXPECT_FALSE(res.pass());
  const nv::RatioStats& dx = res.get(Output::dx);
  EXPECT_EQ(dx.worst.index, k);
  EXPECT_EQ(dx.worst.ratio, expected);
  EXPECT_EQ(dx.worst.got, g);
  EXPECT_EQ(dx.worst.ref, ref);
  EXPECT_EQ(dx.worst.err, std::fabs(g - ref));
  EXPECT_EQ(dx.worst.tol, tol_y_dx(ref));
  EXPECT_EQ(dx.worst.bound, R.ref.dx(r, j).bound);
  EXPECT_EQ(dx.worst.ideal, static_cast<double>(bf16_to_float(ideal_bits)));
  EXPECT_EQ(dx.worst.forced, std::fabs(static_cast<double>(bf16_to_float(ideal_bits)) - ref) / tol_y_dx(ref));
  EXPECT_EQ(dx.over, 1);
  EXPECT_EQ(dx.nonfinite_fail, 0);
  for (Output o : {Output::y, Output::rstd, Output::dw}) EXPECT_TRUE(res.get(o).pass()) << nv::to_string(o);
}

TEST(ValidateCase, PoisonedElementsFailWithInf) {
  Case c(16, 1, 40);
  const Refs R = refs(c);
  Outputs got = ideal_outputs(c, R);
  const int64_t ky = 3 * c.cols + 11, kr = 9, kw = 17;
  got.y[ky] = 0x7FC0;  // BF16 quiet NaN
  got.rstd[kr] = std::numeric_limits<float>::infinity();
  got.dw[kw] = std::numeric_limits<float>::quiet_NaN();
  const nv::CaseResult res = nv::validate_case(c.p, got, R.ref, R.ideal, nullptr);
  EXPECT_FALSE(res.pass());
  const std::pair<Output, int64_t> poisoned[] = {{Output::y, ky}, {Output::rstd, kr}, {Output::dw, kw}};
  for (auto [o, k] : poisoned) {
    SCOPED_TRACE(std::string(nv::to_string(o)));
    const nv::RatioStats& s = res.get(o);
    EXPECT_EQ(s.worst.index, k);
    EXPECT_EQ(s.worst.ratio, inf);
    EXPECT_EQ(s.over, 1);
    EXPECT_EQ(s.nonfinite_fail, 1);
    EXPECT_EQ(s.hist.count[nv::Histogram::kBins - 1], 1);
  }
  EXPECT_TRUE(res.get(Output::dx).pass());
}

TEST(ValidateCase, WrongSizesThrow) {
  Case c(8, 1, 16);
  const Refs R = refs(c);
  const Outputs good = ideal_outputs(c, R);
  auto expect_throw_naming = [&](Outputs bad, const Outputs* base, const std::string& name, size_t actual,
                                 size_t expected) {
    try {
      nv::validate_case(c.p, bad, R.ref, R.ideal, base);
      ADD_FAILURE() << "no throw for " << name;
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(name), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::to_string(actual)), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::to_string(expected)), std::string::npos) << msg;
    }
  };
  const size_t rc = static_cast<size_t>(c.rows() * c.cols), rows = c.rows(), cols = c.cols;
  Outputs b = good;
  b.y.pop_back();
  expect_throw_naming(b, nullptr, "got.y", rc - 1, rc);
  b = good;
  b.dx.push_back(0);
  expect_throw_naming(b, nullptr, "got.dx", rc + 1, rc);
  b = good;
  b.rstd.resize(rows + 3);
  expect_throw_naming(b, nullptr, "got.rstd", rows + 3, rows);
  b = good;
  b.dw.clear();
  expect_throw_naming(b, nullptr, "got.dw", 0, cols);
  Outputs base = good;
  base.dw.resize(cols - 2);
  expect_throw_naming(good, &base, "baseline->dw", cols - 2, cols);
  b = good;
  b.h_new.assign(rc, 0);  // h_new without an expected h_new
  expect_throw_naming(b, nullptr, "h_new", rc, 0);
  // The h_new overload checks both sizes.
  EXPECT_THROW(nv::validate_case(c.p, good, R.ref, R.ideal, nullptr, 0, std::vector<uint16_t>(rc, 0)),
               std::invalid_argument);
  EXPECT_THROW(nv::validate_case(c.p, b, R.ref, R.ideal, nullptr, 0, std::vector<uint16_t>(rc - 1, 0)),
               std::invalid_argument);
  // ref and ideal swapped (wrong RstdMode).
  EXPECT_THROW(nv::validate_case(c.p, good, R.ideal, R.ref, nullptr), std::invalid_argument);
  EXPECT_THROW(nv::validate_case(c.p, good, R.ref, R.ref, nullptr), std::invalid_argument);
  // A reference of another problem's shape.
  Case other(8, 1, 17);
  const Refs R2 = refs(other);
  EXPECT_THROW(nv::validate_case(c.p, good, R2.ref, R.ideal, nullptr), std::invalid_argument);
  EXPECT_THROW(nv::validate_case(c.p, good, R.ref, R2.ideal, nullptr), std::invalid_argument);
}

TEST(ValidateCase, HNewExact) {
  Case c(6, 1, 24);
  const Refs R = refs(c);
  Outputs got = ideal_outputs(c, R);
  std::vector<uint16_t> expected(static_cast<size_t>(c.rows() * c.cols));
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<uint16_t>(0x3F80 + i % 300);
  got.h_new = expected;
  nv::CaseResult res = nv::validate_case(c.p, got, R.ref, R.ideal, nullptr, 0, expected);
  ASSERT_EQ(res.tensors.size(), 5u);
  EXPECT_TRUE(res.pass());
  EXPECT_EQ(res.get(Output::h_new).n, static_cast<int64_t>(expected.size()));
  EXPECT_EQ(res.get(Output::h_new).worst.ratio, 0.0);
  const int64_t k = 2 * c.cols + 5;
  got.h_new[k] ^= 1;  // one ulp off
  res = nv::validate_case(c.p, got, R.ref, R.ideal, nullptr, 0, expected);
  EXPECT_FALSE(res.pass());
  EXPECT_EQ(res.get(Output::h_new).worst.index, k);
  EXPECT_EQ(res.get(Output::h_new).worst.ratio, inf);
  EXPECT_EQ(res.get(Output::h_new).over, 1);
}

TEST(ValidateCase, DwAgainstBaselineAndConditioning) {
  Case c(24, 1, 33);  // 32 columns with a non-zero floored baseline error: an even count for the median
  const int64_t jz = 4;  // a column with dy == 0: dw exactly 0 for every implementation
  for (int64_t r = 0; r < c.rows(); ++r) c.dy[c.at(r, jz)] = 0;
  const Refs R = refs(c);
  Outputs got = ideal_outputs(c, R);
  const int64_t jw = 21;
  got.dw[jw] = static_cast<float>(R.ref.dw(jw).v + 0.5);  // far over budget: the worst column
  const Outputs base = no::fp32_baseline(c.p);
  ASSERT_EQ(base.dw[jz], 0.0f);
  ASSERT_EQ(got.dw[jz], 0.0f);
  // Expected figures, computed here from their definitions: each column's
  // errors floored at 2^-23 * sum_r |dy*xhat| / rows (one FP32 ulp of the
  // column's mean term).
  double eg_max = 0, eb_max = 0, cmax = 0;
  std::vector<double> q;
  for (int64_t j = 0; j < c.cols; ++j) {
    const double ref = R.ref.dw(j).v,
                 f = std::min(std::ldexp(R.ref.dw_abs(j) / static_cast<double>(c.rows()), -23), tol_dw(ref));
    const double eg = std::max(std::fabs(got.dw[j] - ref), f), eb = std::max(std::fabs(base.dw[j] - ref), f);
    eg_max = std::max(eg_max, eg);
    eb_max = std::max(eb_max, eb);
    if (eb > 0) q.push_back(eg / eb);
    cmax = std::max(cmax, ref == 0 ? 1.0 : R.ref.dw_abs(j) / std::fabs(ref));
  }
  ASSERT_EQ(q.size(), static_cast<size_t>(c.cols - 1));  // only jz (no terms, no error) is skipped
  ASSERT_EQ(R.ref.dw_abs(jz), 0.0);
  std::sort(q.begin(), q.end());
  const double median = q.size() % 2 ? q[q.size() / 2] : (q[q.size() / 2 - 1] + q[q.size() / 2]) / 2;
  const nv::CaseResult res = nv::validate_case(c.p, got, R.ref, R.ideal, &base);
  const nv::RatioStats& dw = res.get(Output::dw);
  EXPECT_EQ(dw.worst.index, jw);
  EXPECT_EQ(dw.worst.ratio, std::fabs(static_cast<double>(got.dw[jw]) - R.ref.dw(jw).v) / tol_dw(R.ref.dw(jw).v));
  EXPECT_EQ(res.dw_vs_fp32_worst, eg_max / eb_max);
  EXPECT_GT(res.dw_vs_fp32_worst, 1.0);
  EXPECT_DOUBLE_EQ(res.dw_vs_fp32_median, median);
  EXPECT_EQ(res.dw_worst_condition, R.ref.dw_abs(jw) / std::fabs(R.ref.dw(jw).v));
  EXPECT_EQ(res.dw_max_condition, cmax);
  // The baseline compared with itself: not worse, exactly.
  Outputs same = got;
  same.dw = base.dw;
  const nv::CaseResult res2 = nv::validate_case(c.p, same, R.ref, R.ideal, &base);
  EXPECT_EQ(res2.dw_vs_fp32_worst, 1.0);
  EXPECT_EQ(res2.dw_vs_fp32_median, 1.0);
}

// Rows that cancel exactly (row 1 = -row 0 in x, the same dy): every dw is 0
// exactly, and FP32 eager, which rounds both products alike, gets 0 exactly.
// A kernel that accumulates with an FMA keeps the first product's rounding
// error, fma(-a, b, fl(a*b)) != 0: an error, but at most half an FP32 ulp of
// the product, under the floor of one ulp of the column's mean term, so "not
// worse than FP32 eager" (1, not the x/0 = inf of unfloored errors). An error
// over the floor still counts.
TEST(ValidateCase, DwAgainstBaselineFloorsExactCancellation) {
  Case c(2, 1, 64);
  for (int64_t j = 0; j < c.cols; ++j) {
    c.x[c.at(1, j)] = static_cast<uint16_t>(c.x[c.at(0, j)] ^ 0x8000u);  // -x, exactly
    c.dy[c.at(1, j)] = c.dy[c.at(0, j)];
  }
  const Refs R = refs(c);
  const Outputs base = no::fp32_baseline(c.p);
  Outputs got = ideal_outputs(c, R);
  ASSERT_EQ(R.ref.rstd_f32(0), R.ref.rstd_f32(1));
  const float rs = R.ref.rstd_f32(0);
  int residues = 0;
  for (int64_t j = 0; j < c.cols; ++j) {
    ASSERT_EQ(R.ref.dw(j).v, 0.0) << j;
    ASSERT_EQ(base.dw[j], 0.0f) << j;  // the baseline is exact in every column
    const float xh = bf16_to_float(c.x[c.at(0, j)]) * rs, d = bf16_to_float(c.dy[c.at(0, j)]);
    volatile float p = xh * d;  // rounded once
    got.dw[j] = std::fma(-xh, d, static_cast<float>(p));  // the FMA's residue: exact, |.| <= 2^-24 |xh*d|
    ASSERT_LE(std::fabs(got.dw[j]), std::ldexp(R.ref.dw_abs(j) / 2, -23)) << j;  // under the floor
    residues += got.dw[j] != 0.0f;
  }
  ASSERT_GT(residues, c.cols / 2);  // most products are inexact in FP32
  const nv::CaseResult res = nv::validate_case(c.p, got, R.ref, R.ideal, &base);
  EXPECT_TRUE(res.pass());
  EXPECT_GT(res.get(Output::dw).worst.ratio, 0.0);  // an error, inside the budget
  EXPECT_EQ(res.dw_vs_fp32_worst, 1.0);
  EXPECT_EQ(res.dw_vs_fp32_median, 1.0);
  // Four floors' worth of error in the column with the largest floor: worse.
  int64_t jm = 0;
  for (int64_t j = 1; j < c.cols; ++j)
    if (R.ref.dw_abs(j) > R.ref.dw_abs(jm)) jm = j;
  const double F = std::ldexp(R.ref.dw_abs(jm) / 2, -23);
  got.dw[jm] = static_cast<float>(4 * F);
  const nv::CaseResult res4 = nv::validate_case(c.p, got, R.ref, R.ideal, &base);
  EXPECT_EQ(res4.dw_vs_fp32_worst, static_cast<double>(got.dw[jm]) / F);
  EXPECT_GT(res4.dw_vs_fp32_worst, 3.9);

  // Terms 2^16 times larger: one ulp of a term is over the dw budget, so the
  // floor stops at the budget's tolerance (1e-4 at ref 0) and a column 3x
  // over budget reads 3x worse, not "not worse" (an uncapped floor: 1).
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t j = 0; j < c.cols; ++j)
      c.dy[c.at(r, j)] = bf16_from_float(bf16_to_float(c.dy[c.at(r, j)]) * 65536.0f);  // exact
  const Refs RB = refs(c);
  const Outputs baseB = no::fp32_baseline(c.p);
  Outputs gotB = ideal_outputs(c, RB);
  int64_t big = 0;
  for (int64_t j = 0; j < c.cols; ++j) {
    ASSERT_EQ(baseB.dw[j], 0.0f) << j;
    gotB.dw[j] = 0.0f;  // exact, as the baseline, but for one column
    big += std::ldexp(RB.ref.dw_abs(j) / 2, -23) > tol_dw(0.0);
  }
  ASSERT_GT(big, 0);  // some column's uncapped floor is over the budget
  gotB.dw[3] = 3e-4f;
  const nv::CaseResult resB = nv::validate_case(c.p, gotB, RB.ref, RB.ideal, &baseB);
  EXPECT_FALSE(resB.pass());
  EXPECT_EQ(resB.dw_vs_fp32_worst, static_cast<double>(3e-4f) / tol_dw(0.0));
  EXPECT_GT(resB.dw_vs_fp32_worst, 2.9);
}

TEST(ValidateCase, AllZeroDwGradient) {
  Case c(5, 1, 8);
  std::fill(c.dy.begin(), c.dy.end(), 0);
  const Refs R = refs(c);
  const Outputs got = ideal_outputs(c, R);
  const Outputs base = no::fp32_baseline(c.p);
  const nv::CaseResult res = nv::validate_case(c.p, got, R.ref, R.ideal, &base);
  EXPECT_TRUE(res.pass());
  EXPECT_EQ(res.dw_vs_fp32_worst, 1.0);          // 0/0 -> 1
  EXPECT_TRUE(std::isnan(res.dw_vs_fp32_median));  // every column skipped
  EXPECT_EQ(res.dw_worst_condition, 1.0);        // 0/0 -> 1
}

TEST(ValidateCase, StridedHeadsView) {
  // [T=9, heads=4, 16] with 8 padding elements per token: rows are r = t*4+h.
  Case c(9, 4, 16, 8);
  const Refs R = refs(c);
  Outputs got = ideal_outputs(c, R);
  const int64_t r = 4 * 6 + 3, j = 15, k = r * c.cols + j;
  got.y[k] = bf16_from_float(bf16_to_float(got.y[k]) - 1.0f);
  const nv::CaseResult res = nv::validate_case(c.p, got, R.ref, R.ideal, nullptr);
  const double ref = R.ref.y(r, j).v;
  EXPECT_EQ(res.get(Output::y).n, c.rows() * c.cols);
  EXPECT_EQ(res.get(Output::y).worst.index, k);
  EXPECT_EQ(res.get(Output::y).worst.ratio, std::fabs(static_cast<double>(bf16_to_float(got.y[k])) - ref) / tol_y_dx(ref));
  EXPECT_EQ(res.get(Output::y).over, 1);
}

// Spread of errors: nudge every y and dx element by a few BF16 ulps
// (magnitude bits, clamped to finite values so no NaN/Inf appears).
void nudge_y_dx(Outputs& got) {
  auto nudge = [](uint16_t b, int d) {
    const int mag = std::clamp(static_cast<int>(b & 0x7FFF) + d, 0, 0x7F7F);
    return static_cast<uint16_t>((b & 0x8000) | mag);
  };
  for (size_t i = 0; i < got.y.size(); ++i) {
    got.y[i] = nudge(got.y[i], static_cast<int>((i * 2654435761u) % 7) - 3);
    got.dx[i] = nudge(got.dx[i], static_cast<int>((i * 40503u) % 5) - 2);
  }
}

TEST(ValidateCase, ThreadCountIndependent) {
  Case c(61, 1, 40);
  c.copy_row(3, 30);  // rows 3 and 30 identical: equal ratios at different indices
  c.rebind();
  const Refs R = refs(c);
  Outputs got = ideal_outputs(c, R);
  nudge_y_dx(got);
  for (size_t r = 0; r < got.rstd.size(); ++r) got.rstd[r] = std::nextafter(got.rstd[r], r % 2 ? 0.0f : 4.0f);
  // The same large error in both duplicated rows: a tie on the max ratio.
  const int64_t j = 13;
  const uint16_t big = bf16_from_float(bf16_to_float(got.y[3 * c.cols + j]) + 2.0f);
  for (int64_t r : {3, 30}) got.y[r * c.cols + j] = big;
  ASSERT_EQ(R.ref.y(3, j).v, R.ref.y(30, j).v);
  const Outputs base = no::fp32_baseline(c.p);
  const nv::CaseResult one = nv::validate_case(c.p, got, R.ref, R.ideal, &base, 1);
  EXPECT_EQ(one.get(Output::y).worst.index, 3 * c.cols + j);  // lowest index among the tie
  EXPECT_GT(one.get(Output::y).over, 0);
  EXPECT_GT(one.get(Output::dx).hist.total(), 0);
  for (int t : {2, 3, 4, 7, 16, 64, 0}) {
    SCOPED_TRACE(t);
    expect_same_result(nv::validate_case(c.p, got, R.ref, R.ideal, &base, t), one);
  }
}

// The sweep reads each row in column tiles (256 columns; check.cpp): with
// cols = 600 (tiles 256, 256, 88), equal largest errors in two tiles of one
// row, and a NaN and an Inf inside tiles (add()'s slow path between fast
// runs), the summaries equal add() element by element in index order.
TEST(ValidateCase, ColumnTilesEqualElementByElementAdd) {
  Case c(5, 1, 600, 0, 7);
  // Row 2: columns 100 (tile 0) and 300 (tile 1) get equal x and w, so equal
  // references; both get the same large error below (a tie: the lower index
  // must win).
  const int64_t r = 2, ja = 100, jb = 300;
  c.x[c.at(r, jb)] = c.x[c.at(r, ja)];
  c.w[jb] = c.w[ja];
  c.rebind();
  const Refs R = refs(c);
  ASSERT_EQ(R.ref.y(r, ja).v, R.ref.y(r, jb).v);
  Outputs got = ideal_outputs(c, R);
  nudge_y_dx(got);
  const uint16_t big = bf16_from_float(bf16_to_float(got.y[r * c.cols + ja]) + 2.0f);
  got.y[r * c.cols + ja] = big;
  got.y[r * c.cols + jb] = big;
  got.dx[1 * c.cols + 300] = 0x7FC0;  // NaN in tile 1
  got.dx[3 * c.cols + 520] = 0x7F80;  // +Inf in tile 2
  const nv::CaseResult res = nv::validate_case(c.p, got, R.ref, R.ideal, nullptr, 2);

  nv::RatioStats y(Output::y), dx(Output::dx);
  for (int64_t rr = 0; rr < c.rows(); ++rr)
    for (int64_t j = 0; j < c.cols; ++j) {
      const int64_t k = rr * c.cols + j;
      const no::VB yv = R.ref.y(rr, j), dv = R.ref.dx(rr, j);
      y.add(k, bf16_to_float(got.y[k]), yv.v, yv.bound, nv::round_to_bf16(yv.v));
      dx.add(k, bf16_to_float(got.dx[k]), dv.v, dv.bound, nv::round_to_bf16(R.ideal.dx(rr, j).v));
    }
  {
    SCOPED_TRACE("y");
    expect_same(res.get(Output::y), y);
  }
  {
    SCOPED_TRACE("dx");
    expect_same(res.get(Output::dx), dx);
  }
  EXPECT_EQ(res.get(Output::y).worst.index, r * c.cols + ja);
  EXPECT_GT(res.get(Output::dx).nonfinite_fail, 0);
}
