// Tests of seeds/transforms.h: exactness where promised, accuracy against
// libm in double, distribution checks (moments, Kolmogorov-Smirnov), and
// pinned bit patterns.
#include "normgate/seeds/transforms.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "normgate/seeds/philox.h"

namespace normgate::seeds {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Kolmogorov-Smirnov statistic sqrt(n) * sup|F_n - F| of samples v against cdf.
template <class Cdf>
double ks_stat(std::vector<double> v, Cdf cdf) {
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  double d = 0.0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double f = cdf(v[i]);
    d = std::max({d, f - static_cast<double>(i) / n, static_cast<double>(i + 1) / n - f});
  }
  return std::sqrt(n) * d;
}
// sqrt(n) D above this rejects at the 0.1% level (Kolmogorov distribution: 1.9495).
constexpr double kKsCrit = 1.95;

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
// Student-t(3): F(t) = 1/2 + (1/pi) (a/(1+a^2) + atan a), a = t/sqrt(3).
double t3_cdf(double t) {
  const double a = t / std::sqrt(3.0);
  return 0.5 + (a / (1.0 + a * a) + std::atan(a)) / kPi;
}

// Standard normals 4 per Philox block (two Box-Muller pairs), counter i.
std::vector<double> philox_normals(size_t n, uint32_t seed) {
  std::vector<double> z;
  z.reserve(n + 3);
  for (uint32_t i = 0; z.size() < n; ++i) {
    const Philox4 o = philox4x32_10(Philox4{{i, 0u, 0u, 0u}}, Key2{{seed, 0u}});
    const Normal2 a = box_muller(o.v[0], o.v[1]);
    const Normal2 b = box_muller(o.v[2], o.v[3]);
    z.insert(z.end(), {a.z0, a.z1, b.z0, b.z1});
  }
  z.resize(n);
  return z;
}

TEST(Transforms, U01OpenIsStrictlyInsideAndExact) {
  EXPECT_EQ(u01_open(0u), 0x1p-24f);
  EXPECT_EQ(u01_open(0x1FFu), 0x1p-24f);  // low 9 bits ignored
  EXPECT_EQ(u01_open(0xFFFFFFFFu), 1.0f - 0x1p-24f);
  EXPECT_EQ(u01_open(0x80000000u), 0.5f + 0x1p-24f);
  for (uint32_t k = 0; k < (1u << 23); k += 4099u) {
    const float u = u01_open(k << 9);
    EXPECT_EQ(static_cast<double>(u), (2.0 * k + 1.0) / 16777216.0);  // exact
    EXPECT_GT(u, 0.0f);
    EXPECT_LT(u, 1.0f);
  }
}

TEST(Transforms, LdexpMatchesCorrectlyRoundedScaling) {
  // std::ldexp is exact/correctly rounded (IEEE-754 scaleB) in round-to-nearest.
  const float ms[] = {1.0f, 1.5f, 1.99999988f, 1.00000012f, 1.25000012f, 1.75f, 1.3333334f, 1.0000006f};
  for (float m0 : ms)
    for (float sgn : {1.0f, -1.0f})
      for (int n = -175; n <= 135; ++n) {
        const float m = sgn * m0;
        const float want = std::ldexp(m, n);
        const float got = ldexp_rn(m, n);
        EXPECT_EQ(float_bits(got), float_bits(want)) << "m=" << m << " n=" << n;
      }
  EXPECT_EQ(pow2_int(-149), std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(pow2_int(-126), std::numeric_limits<float>::min());
  EXPECT_EQ(pow2_int(127), 0x1p127f);
  EXPECT_TRUE(std::isinf(pow2_int(128)));
  EXPECT_EQ(pow2_int(-150), 0.0f);  // half of denorm_min: tie to even (0)
  EXPECT_EQ(ldexp_rn(0.0f, 5), 0.0f);
  EXPECT_TRUE(std::isnan(ldexp_rn(std::numeric_limits<float>::quiet_NaN(), 3)));
}

TEST(Transforms, LogAndLog2AccuracyAndExactCases) {
  double worst = 0.0, worst2 = 0.0;
  for (uint32_t k = 0; k < (1u << 23); k += 7u) {
    const float u = u01_open(k << 9);
    worst = std::max(worst, std::fabs(log_approx(u) - std::log(double{u})) / std::fabs(std::log(double{u})));
    worst2 = std::max(worst2, std::fabs(log2_approx(u) - std::log2(double{u})) / std::fabs(std::log2(double{u})));
  }
  for (float x : {1.5f, 3.0f, 50.0f, 2000.0f, 1e19f, 3e38f, 0.05f, 1e-30f}) {
    worst = std::max(worst, std::fabs(log_approx(x) - std::log(double{x})) / std::fabs(std::log(double{x})));
    worst2 = std::max(worst2, std::fabs(log2_approx(x) - std::log2(double{x})) / std::fabs(std::log2(double{x})));
  }
  EXPECT_LT(worst, 1e-6);
  EXPECT_LT(worst2, 1e-6);
  EXPECT_EQ(log_approx(1.0f), 0.0f);
  for (int k = -126; k <= 127; ++k) EXPECT_EQ(log2_approx(std::ldexp(1.0f, k)), static_cast<float>(k)) << k;
  EXPECT_TRUE(std::isnan(log_approx(0.0f)));
  EXPECT_TRUE(std::isnan(log_approx(-1.0f)));
  EXPECT_TRUE(std::isnan(log2_approx(std::numeric_limits<float>::infinity())));
  EXPECT_TRUE(std::isnan(log2_approx(std::numeric_limits<float>::denorm_min())));
}

TEST(Transforms, Exp2AccuracyAndExactCases) {
  double worst = 0.0;
  for (float y = -125.9f; y < 127.9f; y += 0.0123f)
    worst = std::max(worst, std::fabs(exp2_approx(y) - std::exp2(double{y})) / std::exp2(double{y}));
  EXPECT_LT(worst, 1e-6);
  for (int k = -149; k <= 127; ++k) EXPECT_EQ(exp2_approx(static_cast<float>(k)), std::ldexp(1.0f, k)) << k;
  EXPECT_TRUE(std::isinf(exp2_approx(128.0f)));
  EXPECT_EQ(exp2_approx(-200.0f), 0.0f);
  EXPECT_TRUE(std::isnan(exp2_approx(std::numeric_limits<float>::quiet_NaN())));
  // Subnormal results are correctly scaled: 2^-140.5 within one subnormal ulp.
  EXPECT_NEAR(exp2_approx(-140.5f), std::exp2(-140.5), std::ldexp(1.0, -149));
}

TEST(Transforms, SinCos2PiAccuracyAndQuadrants) {
  double ws = 0.0, wc = 0.0;
  for (uint32_t k = 0; k < (1u << 23); k += 5u) {
    const float u = u01_open(k << 9);
    const SinCos sc = sincos_2pi(u);
    ws = std::max(ws, std::fabs(sc.s - std::sin(2.0 * kPi * u)));
    wc = std::max(wc, std::fabs(sc.c - std::cos(2.0 * kPi * u)));
  }
  EXPECT_LT(ws, 3e-7);
  EXPECT_LT(wc, 3e-7);
  const float us[] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f};
  const float ss[] = {0.0f, 1.0f, 0.0f, -1.0f, 0.0f};
  const float cs[] = {1.0f, 0.0f, -1.0f, 0.0f, 1.0f};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(sincos_2pi(us[i]).s, ss[i]) << us[i];
    EXPECT_EQ(sincos_2pi(us[i]).c, cs[i]) << us[i];
  }
}

// Pinned bit patterns. They pin the arithmetic of the generator: a change
// here changes every generated case (and every stored digest/approval).
TEST(Transforms, PinnedValues) {
  struct Bm {
    uint32_t a, b, z0, z1;
  };
  const Bm bms[] = {{0x00000000u, 0x00000000u, 0x40b89456u, 0x3610f7e6u},
                    {0x12345678u, 0x9abcdef0u, 0xbfe92f37u, 0xbfb39380u},
                    {0xffffffffu, 0x40000000u, 0xaf0e2c19u, 0x39b504f3u},
                    {0xdeadbeefu, 0xcafef00du, 0x3e102e11u, 0xbf024d21u}};
  for (const Bm& t : bms) {
    const Normal2 z = box_muller(t.a, t.b);
    EXPECT_EQ(float_bits(z.z0), t.z0) << std::hex << t.a << " " << t.b;
    EXPECT_EQ(float_bits(z.z1), t.z1) << std::hex << t.a << " " << t.b;
    EXPECT_EQ(float_bits(box_muller_z0(t.a, t.b)), t.z0);
  }
  EXPECT_EQ(float_bits(student_t3(0.5f, 1.0f, -2.0f, 0.25f)), 0x3ec511a3u);
  EXPECT_EQ(float_bits(log_uniform(0.3f, 0.05f, 3.0f)), 0x3e2edeb9u);
  EXPECT_EQ(float_bits(log_approx(0.1f)), 0xc0135d8eu);
  EXPECT_EQ(float_bits(exp2_approx(-3.3f)), 0x3dcfefc7u);
}

TEST(Transforms, NormalMomentsAndKs) {
  const size_t n = 1000000;
  const std::vector<double> z = philox_normals(n, 1234u);
  double s1 = 0, s2 = 0, s4 = 0;
  for (double v : z) {
    s1 += v;
    s2 += v * v;
    s4 += v * v * v * v;
  }
  const double mean = s1 / n, var = s2 / n - mean * mean, kurt = (s4 / n) / (var * var);
  // 5-sigma bounds: sd(mean) = 1e-3, sd(var) = sqrt(2/n) = 1.4e-3, sd(kurt) ~ sqrt(96/n) = 1e-2.
  EXPECT_LT(std::fabs(mean), 5e-3);
  EXPECT_LT(std::fabs(var - 1.0), 7.1e-3);
  EXPECT_LT(std::fabs(kurt - 3.0), 5e-2);
  EXPECT_LT(ks_stat(z, normal_cdf), kKsCrit);
  // The two outputs of one Box-Muller pair are uncorrelated.
  double c = 0;
  for (size_t i = 0; i + 1 < n; i += 2) c += z[i] * z[i + 1];
  EXPECT_LT(std::fabs(c / (n / 2)), 5.0 * std::sqrt(2.0 / n));
}

TEST(Transforms, StudentT3Distribution) {
  const size_t n = 250000;
  const std::vector<double> z = philox_normals(4 * n, 99u);
  std::vector<double> t(n);
  for (size_t i = 0; i < n; ++i)
    t[i] = student_t3(static_cast<float>(z[4 * i]), static_cast<float>(z[4 * i + 1]), static_cast<float>(z[4 * i + 2]),
                      static_cast<float>(z[4 * i + 3]));
  EXPECT_LT(ks_stat(t, t3_cdf), kKsCrit);
  // Quantile check: P(|t| > 3.182) = 0.05 for 3 dof (t_{0.975,3} = 3.182446).
  size_t tail = 0;
  for (double v : t) tail += std::fabs(v) > 3.182446;
  EXPECT_NEAR(static_cast<double>(tail) / n, 0.05, 5.0 * std::sqrt(0.05 * 0.95 / n));
}

TEST(Transforms, LogUniformRangeAndShape) {
  const float a = 0.05f, b = 3.0f;
  std::vector<double> l;
  for (uint32_t i = 0; i < 100000u; ++i) {
    const float v = log_uniform(u01_open(philox4x32_10(Philox4{{i, 1u, 0u, 0u}}, Key2{{5u, 0u}}).v[0]), a, b);
    ASSERT_GE(v, a);
    ASSERT_LE(v, b);
    l.push_back(std::log(double{v}));
  }
  const double la = std::log(double{a}), lb = std::log(double{b});
  EXPECT_LT(ks_stat(l, [&](double x) { return std::clamp((x - la) / (lb - la), 0.0, 1.0); }), kKsCrit);
  EXPECT_EQ(log_uniform(0.0f, 0.5f, 8.0f), 0.5f);  // u = 0 -> a (exact via log2/exp2 of powers of 2)
  EXPECT_EQ(log_uniform(1.0f, 0.5f, 8.0f), 8.0f);
}

}  // namespace
}  // namespace normgate::seeds
