// normgate/seeds/transforms.h: deterministic transforms from random 32-bit
// words to floating-point samples, host and device.
//
// Every function here uses only integer operations and the explicitly rounded
// binary32 operations of normgate/core/hd.h (mul_rn, add_rn, sub_rn, fma_rn,
// sqrt_rn, div_rn), each written out in a fixed order. No libm call (log, sin,
// cos, exp) is made: those differ between glibc and CUDA's libdevice. The
// result is therefore bitwise identical on the host (built with
// -ffp-contract=off) and on any CUDA device, which is what the generator needs;
// accuracy (about 1e-6 relative or better, measured in
// tests/seeds/transforms_test.cpp) is secondary.
//
// Scaling by powers of two (ldexp_rn) is done on the bit pattern, so results
// in the subnormal range do not depend on a flush-to-zero mode either.
// Inputs outside a function's documented domain give a deterministic but
// unspecified value (NaN where stated); none of these functions throws.
#pragma once

#include <cstdint>

#include "normgate/core/hd.h"

namespace normgate::seeds {

/// A (sin, cos) pair, binary32.
struct SinCos {
  float s, c;
};

/// Two standard normal samples, binary32.
struct Normal2 {
  float z0, z1;
};

/// Uniform in the open interval (0, 1) from a random uint32.
/// Uses the top 23 bits k = u >> 9 and returns (2k + 1) * 2^-24, i.e. the
/// midpoints of 2^23 equal cells: values in [2^-24, 1 - 2^-24], exactly
/// representable (2k+1 < 2^24), never 0 or 1, mean exactly 1/2.
/// (The 24-bit variant ((u>>8) + 0.5) * 2^-24 would need 25 significant bits
/// and round, so the 23-bit form is used.)
NG_HD float u01_open(uint32_t u) {
  const uint32_t k = ((u >> 9) << 1) | 1u;                   // odd, < 2^24: exact in binary32
  return mul_rn(static_cast<float>(k), 5.9604644775390625e-8f);  // * 2^-24, exact
}

/// m * 2^n for a normal binary32 m and any int n, computed on the bit pattern:
/// exact while the result is normal, rounded to nearest-even (once) when it is
/// subnormal, +-0 below half the smallest subnormal (2^-150), +-Inf at or above
/// 2^128. Signed zero, subnormal, Inf or NaN m is returned unchanged.
/// Source: IEEE-754-2019 scaleB semantics, implemented with integer ops so no
/// flush-to-zero mode can change the result.
NG_HD float ldexp_rn(float m, int n) {
  const uint32_t b = float_bits(m);
  const uint32_t sign = b & 0x80000000u;
  const int ex = static_cast<int>((b >> 23) & 0xFFu);
  if (ex == 0 || ex == 255) return m;
  if (n > 300) n = 300;
  if (n < -300) n = -300;
  const int ne = ex + n;
  if (ne >= 255) return bits_float(sign | 0x7F800000u);
  if (ne >= 1) return bits_float(sign | (static_cast<uint32_t>(ne) << 23) | (b & 0x007FFFFFu));
  const int shift = 1 - ne;  // >= 1: result is subnormal or zero
  if (shift > 24) return bits_float(sign);
  const uint32_t sig = (b & 0x007FFFFFu) | 0x00800000u;  // 24-bit significand
  uint32_t q = sig >> shift;
  const uint32_t rem = sig & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u) != 0u)) ++q;  // ties to even
  return bits_float(sign | q);  // q == 2^23 encodes the smallest normal, correctly
}

/// 2^e as binary32 for an integer e (exact for -149 <= e <= 127; 0 below,
/// +Inf above). Integer construction, no rounding.
NG_HD float pow2_int(int e) { return ldexp_rn(1.0f, e); }

namespace detail {
/// Splits a positive normal binary32 x into x = 2^e * m with m in
/// [sqrt(1/2), sqrt(2)] (exponent extraction on the bit pattern) and returns
/// ln(m) = 2 atanh(s), s = (m-1)/(m+1), by its series
/// 2s (1 + s^2/3 + s^4/5 + ... + s^10/11), |s| <= 0.1716 (truncation < 1e-9).
/// Source: the classical atanh form of log (e.g. Muller, "Elementary
/// Functions", 3rd ed., Sec. 11.3; fdlibm e_log.c uses the same reduction).
NG_HD float log_mantissa(float x, int* e) {
  const uint32_t b = float_bits(x);
  int ex = static_cast<int>((b >> 23) & 0xFFu) - 127;
  float m = bits_float((b & 0x007FFFFFu) | 0x3F800000u);  // [1, 2)
  if (m > 1.41421356f) {
    m = mul_rn(m, 0.5f);  // exact: [0.7071, 1)
    ex += 1;
  }
  *e = ex;
  const float f = sub_rn(m, 1.0f);  // exact (Sterbenz)
  const float s = div_rn(f, add_rn(2.0f, f));
  const float s2 = mul_rn(s, s);
  float p = fma_rn(s2, 0.0909090909090909f, 0.111111111111111f);  // 1/11, 1/9
  p = fma_rn(s2, p, 0.142857142857143f);                          // 1/7
  p = fma_rn(s2, p, 0.2f);                                        // 1/5
  p = fma_rn(s2, p, 0.333333333333333f);                          // 1/3
  p = fma_rn(s2, p, 1.0f);
  return mul_rn(add_rn(s, s), p);
}
}  // namespace detail

/// Natural logarithm of a positive normal binary32 x.
/// ln x = e ln2 + ln m after exponent extraction (detail::log_mantissa).
/// Relative error below 3e-7 over (0,1) (measured: 2.1e-7,
/// tests/seeds/transforms_test.cpp); log_approx(1) == 0 exactly. x <= 0, subnormal, Inf or NaN: returns NaN.
NG_HD float log_approx(float x) {
  const uint32_t b = float_bits(x);
  const uint32_t ef = (b >> 23) & 0xFFu;
  if ((b & 0x80000000u) != 0u || ef == 0u || ef == 255u) return bits_float(0x7FC00000u);
  int e = 0;
  const float lnm = detail::log_mantissa(x, &e);
  return fma_rn(static_cast<float>(e), 0.693147180559945f, lnm);  // e*ln2 + ln m
}

/// Base-2 logarithm of a positive normal binary32 x: e + ln(m) * log2(e).
/// Exact for powers of two (log2_approx(2^k) == k). Domain as log_approx
/// (NaN outside it).
NG_HD float log2_approx(float x) {
  const uint32_t b = float_bits(x);
  const uint32_t ef = (b >> 23) & 0xFFu;
  if ((b & 0x80000000u) != 0u || ef == 0u || ef == 255u) return bits_float(0x7FC00000u);
  int e = 0;
  const float lnm = detail::log_mantissa(x, &e);
  return fma_rn(lnm, 1.44269504088896f, static_cast<float>(e));
}

/// 2^y for binary32 y. y = n + f with n = floor(y), f in [0,1);
/// 2^f = sum_{k<=9} (f ln2)^k / k! (Taylor, truncation < 1e-8 relative) by
/// Horner with fma_rn; then scaled by 2^n with ldexp_rn (integer, exact unless
/// subnormal). Exact for integer y. y >= 128: +Inf; y < -160: +0; NaN: NaN.
/// Relative error below 1e-7 over the normal range (measured: 6.5e-8).
NG_HD float exp2_approx(float y) {
  if (y != y) return y;
  if (!(y < 128.0f)) return bits_float(0x7F800000u);
  if (y < -160.0f) return 0.0f;
  int n = static_cast<int>(y);  // truncation toward zero
  if (static_cast<float>(n) > y) n -= 1;  // floor
  const float f = sub_rn(y, static_cast<float>(n));  // [0, 1] (exact except for tiny negative y)
  float p = fma_rn(f, 1.0178086009239696e-07f, 1.3215486790144305e-06f);
  p = fma_rn(f, p, 1.5252733804059838e-05f);
  p = fma_rn(f, p, 0.00015403530393381606f);
  p = fma_rn(f, p, 0.0013333558146428441f);
  p = fma_rn(f, p, 0.009618129107628477f);
  p = fma_rn(f, p, 0.055504108664821576f);
  p = fma_rn(f, p, 0.2402265069591007f);
  p = fma_rn(f, p, 0.6931471805599453f);
  p = fma_rn(f, p, 1.0f);
  return ldexp_rn(p, n);
}

namespace detail {
/// Quadrant reduction of the angle 2*pi*u: t = 4u (exact), q = nearest
/// integer to t (truncation of t + 1/2, t >= 0), returns f = t - q in
/// [-1/2, 1/2] (exact) and stores q.
NG_HD float quarter_turns(float u, int* q) {
  const float t = mul_rn(4.0f, u);
  *q = static_cast<int>(add_rn(t, 0.5f));
  return sub_rn(t, static_cast<float>(*q));
}
/// sin(f pi/2) = f * P(f^2), Taylor through f^11 (|f| <= 1/2, truncation < 1e-9).
NG_HD float sin_quarter(float f, float f2) {
  float sp = fma_rn(f2, -3.598843235212084e-06f, 0.00016044118478735975f);
  sp = fma_rn(f2, sp, -0.004681754135318687f);
  sp = fma_rn(f2, sp, 0.07969262624616703f);
  sp = fma_rn(f2, sp, -0.6459640975062462f);
  sp = fma_rn(f2, sp, 1.5707963267948966f);
  return mul_rn(f, sp);
}
/// cos(f pi/2) = Q(f^2), Taylor through f^12 (|f| <= 1/2, truncation < 1e-9).
NG_HD float cos_quarter(float f2) {
  float cp = fma_rn(f2, 4.710874778818169e-07f, -2.5202042373060596e-05f);
  cp = fma_rn(f2, cp, 0.0009192602748394263f);
  cp = fma_rn(f2, cp, -0.020863480763352957f);
  cp = fma_rn(f2, cp, 0.253669507901048f);
  cp = fma_rn(f2, cp, -1.2337005501361697f);
  return fma_rn(f2, cp, 1.0f);
}
}  // namespace detail

/// sin and cos of the angle 2*pi*u (u in turns), for u in [0, 1].
/// Range reduction by quadrant: t = 4u (exact), q = nearest integer to t,
/// f = t - q in [-1/2, 1/2] (exact), angle = q*pi/2 + f*pi/2. Then
/// sin(f pi/2) = f * P(f^2) (Taylor through f^11) and cos(f pi/2) = Q(f^2)
/// (through f^12), |f pi/2| <= pi/4, truncation < 1e-9; the quadrant q mod 4
/// rotates (s, c). Absolute error below 1e-7 (measured: 8.5e-8); exact
/// 0/+-1 at multiples of a quarter turn. Source: Cody & Waite style
/// reduction (Muller, "Elementary Functions", Ch. 11); Taylor coefficients
/// (-1)^k (pi/2)^n / n!.
NG_HD SinCos sincos_2pi(float u) {
  int q = 0;
  const float f = detail::quarter_turns(u, &q);
  const float f2 = mul_rn(f, f);
  const float s = detail::sin_quarter(f, f2);
  const float c = detail::cos_quarter(f2);
  switch (q & 3) {
    case 0: return SinCos{s, c};
    case 1: return SinCos{c, -s};
    case 2: return SinCos{-s, -c};
    default: return SinCos{-c, s};
  }
}

/// cos(2 pi u) alone, bitwise equal to sincos_2pi(u).c (evaluates only the
/// polynomial the quadrant needs).
NG_HD float cos_2pi(float u) {
  int q = 0;
  const float f = detail::quarter_turns(u, &q);
  const float f2 = mul_rn(f, f);
  switch (q & 3) {
    case 0: return detail::cos_quarter(f2);
    case 1: return -detail::sin_quarter(f, f2);
    case 2: return -detail::cos_quarter(f2);
    default: return detail::sin_quarter(f, f2);
  }
}

/// Box-Muller transform (Box & Muller, Ann. Math. Stat. 29(2), 1958): two
/// independent standard normal binary32 samples from two random uint32 words:
/// r = sqrt(-2 ln u1), z0 = r cos(2 pi u2), z1 = r sin(2 pi u2), with
/// u1 = u01_open(a), u2 = u01_open(b). |z| <= sqrt(-2 ln 2^-24) = 5.77.
NG_HD Normal2 box_muller(uint32_t a, uint32_t b) {
  const float r = sqrt_rn(mul_rn(-2.0f, log_approx(u01_open(a))));
  const SinCos sc = sincos_2pi(u01_open(b));
  return Normal2{mul_rn(r, sc.c), mul_rn(r, sc.s)};
}

/// First output of box_muller(a, b) alone: r cos(2 pi u2). Bitwise equal to
/// box_muller(a, b).z0, cheaper (one polynomial instead of two).
NG_HD float box_muller_z0(uint32_t a, uint32_t b) {
  const float r = sqrt_rn(mul_rn(-2.0f, log_approx(u01_open(a))));
  return mul_rn(r, cos_2pi(u01_open(b)));
}

/// Student-t with 3 degrees of freedom at unit scale, from four independent
/// standard normals: t = z / sqrt((z1^2 + z2^2 + z3^2) / 3) (definition of
/// Student's t: normal over sqrt(chi^2_3 / 3)). Evaluated as
/// s = fma(z1, z1, fma(z2, z2, z3*z3)), d = sqrt(s / 3), t = z / d.
/// Heavy tails: variance 3, finite; kurtosis infinite.
NG_HD float student_t3(float z, float z1, float z2, float z3) {
  const float s = fma_rn(z1, z1, fma_rn(z2, z2, mul_rn(z3, z3)));
  const float d = sqrt_rn(div_rn(s, 3.0f));
  return div_rn(z, d);
}

/// Log-uniform sample in [a, b] (0 < a <= b, normal binary32) from a uniform u
/// in (0, 1): 2^(log2 a + u (log2 b - log2 a)), with log2_approx/exp2_approx,
/// then clamped to [a, b] so rounding never leaves the interval.
/// log2 of the result is uniform on [log2 a, log2 b] (up to ~1e-6 relative).
NG_HD float log_uniform(float u, float a, float b) {
  const float la = log2_approx(a);
  const float lb = log2_approx(b);
  const float v = exp2_approx(fma_rn(u, sub_rn(lb, la), la));
  return v < a ? a : (v > b ? b : v);
}

/// Flip the sign of x when `negative` is true, on the bit pattern (exact, also
/// for subnormals, zeros, Inf and NaN).
NG_HD float with_sign(float x, bool negative) {
  return negative ? bits_float(float_bits(x) ^ 0x80000000u) : x;
}

}  // namespace normgate::seeds
