// tests/oracle/bf16_sum_test.cpp: core/bf16.h bf16_sum_rn: BF16(a + b) with one rounding of the exact sum,
// checked against MPFR (exact sum at 400 bits, then one rounding to 8
// significant bits, ties to even) on random and adversarial pairs: exact BF16
// midpoints with a tiny addend of either sign, cancellation, subnormal
// results, overflow to Inf, and BF16 + BF16 (the h + u of the residual form).
#include <gtest/gtest.h>
#include <mpfr.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "util/xorshift64.h"
#include "normgate/core/bf16.h"

namespace {

using normgate::bf16_from_float;
using normgate::bf16_sum_rn;
using normgate::bf16_to_float;
using normgate::bits_float;
using normgate::float_bits;

// RN_bf16 of the exact a + b via MPFR (BF16: 8 significant bits, exponent
// range of binary32; subnormal BF16 quantum 2^-133; overflow past the largest
// BF16 to Inf).
uint16_t reference(float a, float b) {
  if (!std::isfinite(a) || !std::isfinite(b)) return bf16_from_float(a + b);
  mpfr_t x, y;
  mpfr_init2(x, 400);
  mpfr_init2(y, 400);
  mpfr_set_flt(x, a, MPFR_RNDN);
  mpfr_set_flt(y, b, MPFR_RNDN);
  mpfr_add(x, x, y, MPFR_RNDN);  // exact at 400 bits
  uint16_t out;
  if (mpfr_zero_p(x)) {
    out = bf16_from_float(a + b);  // the sign of an exact zero sum is IEEE's (+0 in RN)
  } else {
    // Quantum: 2^(e-8) for |v| in [2^(e-1), 2^e) (MPFR exponent e), at least 2^-133.
    const long e = mpfr_get_exp(x);
    const long q = std::max(e - 8, -133L);
    mpfr_mul_2si(y, x, -q, MPFR_RNDN);     // exact
    mpfr_rint(y, y, MPFR_RNDN);             // ties to even
    mpfr_mul_2si(y, y, q, MPFR_RNDN);      // exact
    const double d = mpfr_get_d(y, MPFR_RNDN);  // a BF16 value or >= 2^128
    out = std::fabs(d) > 0x1.fep+127 ? static_cast<uint16_t>(d > 0 ? 0x7F80 : 0xFF80)
                                     : bf16_from_float(static_cast<float>(d));
  }
  mpfr_clear(x);
  mpfr_clear(y);
  return out;
}

normgate::test::Xorshift64 next(0x9E3779B97F4A7C15ull);
// A random binary32 with binary exponent in [emin, emax] (emin >= -149):
// normal for e >= -126, subnormal below (leading bit at 2^e).
float random_float(int emin, int emax) {
  const int e = emin + static_cast<int>(next() % static_cast<uint64_t>(emax - emin + 1));
  const uint32_t frac = static_cast<uint32_t>(next()) & 0x7FFFFFu;
  const uint32_t sign = static_cast<uint32_t>(next() & 1u) << 31;
  if (e >= -126) return bits_float(sign | (static_cast<uint32_t>(e + 127) << 23) | frac);
  return bits_float(sign | ((0x800000u | frac) >> (-126 - e)));  // leading bit 2^e = 2^(e+149) ulps
}

TEST(Bf16SumRn, MidpointsWithATinyAddendRoundTowardTheExactSum) {
  // 1 + 2^-8 is the midpoint between the BF16 values 1 and 1 + 2^-7.
  const float mid = 1.0f + 0x1p-8f;
  EXPECT_EQ(bf16_sum_rn(mid, 0x1p-40f), bf16_from_float(1.0f + 0x1p-7f));  // above: up
  EXPECT_EQ(bf16_sum_rn(mid, -0x1p-40f), bf16_from_float(1.0f));           // below: down
  EXPECT_EQ(bf16_sum_rn(mid, 0.0f), bf16_from_float(1.0f));                // a true tie: even
  // The double rounding this avoids: RN_fp32 first makes it a tie, then even.
  EXPECT_EQ(bf16_from_float(mid + 0x1p-40f), bf16_from_float(1.0f));
  EXPECT_EQ(bf16_sum_rn(-mid, -0x1p-40f), bf16_from_float(-1.0f - 0x1p-7f));
  // Overflow: the midpoint above the largest BF16, pushed up, is Inf.
  const float top = bits_float(0x7F7F8000u);
  EXPECT_EQ(bf16_sum_rn(top, 0x1p80f), 0x7F80u);
  EXPECT_EQ(bf16_sum_rn(top, -0x1p80f), 0x7F7Fu);
  EXPECT_EQ(bf16_sum_rn(std::numeric_limits<float>::infinity(), 1.0f), 0x7F80u);
  EXPECT_EQ(bf16_sum_rn(NAN, 1.0f) & 0x7FC0u, 0x7FC0u);
}

TEST(Bf16SumRn, EqualsMpfrOnRandomAndAdversarialPairs) {
  int64_t checked = 0, differs_from_double_rounding = 0;
  for (int i = 0; i < 300000; ++i) {
    float a, b;
    switch (i % 6) {
      case 0:  // general
        a = random_float(-140, 127);
        b = random_float(-140, 127);
        break;
      case 1:  // close exponents, cancellation
        a = random_float(-20, 20);
        b = -a * (1.0f + static_cast<float>(next() % 1000) * 0x1p-20f);
        break;
      case 2: {  // a BF16 midpoint plus something small of either sign
        const uint32_t m = (float_bits(random_float(-120, 120)) & 0xFFFF0000u) | 0x8000u;
        a = bits_float(m);
        b = std::ldexp(random_float(-60, -10), std::ilogb(a));  // 2^-60 .. 2^-10 relative to a
        break;
      }
      case 3:  // BF16 + BF16 (h + u), exponents up to 40 apart
        a = bf16_to_float(static_cast<uint16_t>(next()));
        b = bf16_to_float(static_cast<uint16_t>(next()));
        if (!std::isfinite(a) || !std::isfinite(b) || std::abs(std::ilogb(a) - std::ilogb(b)) > 40) continue;
        break;
      case 4:  // subnormal results
        a = random_float(-149, -120);
        b = random_float(-149, -120);
        break;
      default:  // near overflow
        a = random_float(120, 127);
        b = random_float(100, 127);
        break;
    }
    if (!std::isfinite(a) || !std::isfinite(b)) continue;
    const uint16_t got = bf16_sum_rn(a, b), want = reference(a, b);
    ASSERT_EQ(got, want) << std::hexfloat << a << " + " << b;
    ++checked;
    differs_from_double_rounding += bf16_from_float(a + b) != want;
  }
  EXPECT_GT(checked, 250000);
  // The adversarial cases really exercise the difference from RN_bf16(RN_fp32(a + b)).
  EXPECT_GT(differs_from_double_rounding, 1000);
}

}  // namespace
