// oracle/src/eft.h (internal): error-free transformations and rigorous
// value/bound arithmetic in binary64, used by reference.cpp and the files it
// is split into (reference_parts.h).
//
// Notation. u = 2^-53 (unit roundoff of binary64, round to nearest),
// eta = 2^-1074 (smallest subnormal), gamma_k = k u / (1 - k u) (Higham,
// Accuracy and Stability of Numerical Algorithms, 2nd ed., Sec. 3.1, Lemma 3.1).
// For a real z whose rounding fl(z) is finite:
//   |fl(z) - z| <= u |fl(z)|  (Higham eq. (2.5), fl(z) = z / (1 + d), |d| <= u)
// when fl(z) is normal, and |fl(z) - z| <= eta/2 when it is subnormal
// (gradual underflow). We therefore charge every rounded operation
//   UP * |fl(z)| + ETA,  UP = 2^-53 (1 + 2^-52) >= u / (1 - u),
// except additions/subtractions, which are exact when the result is subnormal
// (Higham Sec. 2.1, Theorem 2.2 remark; IEEE 754 gradual underflow), so they
// are charged UP * |fl(z)| only.
//
// Bounds are themselves computed in round-to-nearest. Every bound expression
// below is a sum of products of non-negative numbers with at most 12 rounded
// operations, each of which can lose a relative factor (1 - u) and, on
// underflow, eta/2 absolute. inflate() then returns a number >= the exact
// value of the expression:
//   fl(fl(b (1 + 2^-48)) + 2^-1060) >= (1-u)^2 (1 + 32u) (1-u)^12 b_exact
//                                      + (1-u) (2^-1060 - 13 eta) >= b_exact.
// (32u = 2^-48; (1-u)^14 (1+32u) > 1; 2^-1060 = 2^14 eta.) So every bound has
// an absolute floor of 2^-1060 ~ 8e-320, and a NaN or infinite bound becomes +inf.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "normgate/core/bf16.h"
#include "normgate/oracle/reference.h"

// Hot loops are compiled three times (x86-64-v4: AVX-512; x86-64-v3: AVX2+FMA;
// the build's baseline) and the best one the CPU runs is picked at load time
// through an ifunc (GCC target_clones). Every clone performs the same IEEE-754
// operations in the same order (no contraction: -ffp-contract=off; std::fma
// is one correctly rounded operation in each; no reciprocal approximations
// without -ffast-math), only on wider registers, so results are bitwise equal
// (tests/oracle/clone_bits_test.cpp pins digests taken before the AVX-512
// clone existed).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(NORMGATE_NO_AVX512_CLONES)
#define NG_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define NG_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))  // NORMGATE_HOST_AVX512=OFF
#else
#define NG_CLONES
#endif

namespace normgate::oracle::detail {

inline constexpr double U = 0x1p-53;                    // unit roundoff
inline constexpr double UP = 0x1.0000000000001p-53;     // >= u/(1-u)
inline constexpr double ETA = 0x1p-1074;                // smallest subnormal
inline constexpr double INF = std::numeric_limits<double>::infinity();

/// Upper bound of a non-negative bound expression evaluated in RN (see file comment).
inline double inflate(double b) {
  double up = b * (1 + 0x1p-48) + 0x1p-1060;
  return b <= std::numeric_limits<double>::max() ? up : INF;  // NaN or inf -> inf (branch-free)
}

/// gamma_k = k u / (1 - k u), rounded upward (k u exact for k < 2^53;
/// 1 - k u exact for k u <= 1/2; one rounded division, covered by 1 + 2^-50).
inline double gamma_up(double k) {
  double ku = k * U;
  if (!(ku < 0.5)) return INF;
  return ku / (1 - ku) * (1 + 0x1p-50);
}

/// TwoSum (Knuth, TAOCP vol. 2, 4.2.2 Thm B; Moller 1965): s + e == a + b
/// exactly, s = fl(a + b), for any finite a, b (also under underflow).
inline void two_sum(double a, double b, double& s, double& e) {
  s = a + b;
  double z = s - a;
  e = (a - (s - z)) + (b - z);
}

/// TwoProduct with FMA (ORO 2005 Alg. 3.5 remark; Muller et al., Handbook of
/// Floating-Point Arithmetic, 2nd ed., Sec. 4.4.2): p + e == a * b exactly when
/// e_a + e_b >= e_min + p - 1 (no underflow of the error term).
inline void two_prod(double a, double b, double& p, double& e) {
  p = a * b;
  e = std::fma(a, b, -p);
}

inline double bf(uint16_t b) { return static_cast<double>(bf16_to_float(b)); }

// ---- value/bound arithmetic: |v - V| <= bound, V the exact real ------------
// Every result with a non-finite value gets bound +inf.
inline VB fin(double v, double b) { return {v, std::isfinite(v) ? inflate(b) : INF}; }

/// Product: V_a V_b - ab = a (V_b - b) + b (V_a - a) + (V_a - a)(V_b - b).
inline VB vb_mul(VB a, VB b) {
  double v = a.v * b.v;
  double e = UP * std::fabs(v) + ETA + std::fabs(a.v) * b.bound + std::fabs(b.v) * a.bound +
             a.bound * b.bound;
  return fin(v, e);
}

/// Sum: errors add.
inline VB vb_add(VB a, VB b) {
  double v = a.v + b.v;
  return fin(v, UP * std::fabs(v) + a.bound + b.bound);
}

/// Quotient: |A/B - a/b| = |(A-a) b - a (B-b)| / |b B| <= (ea + |a/b| eb) / (|b| - eb)
/// for eb < |b| (Higham-style first-order-free form, exact inequality).
inline VB vb_div(VB a, VB b) {
  double v = a.v / b.v;
  double den = (std::fabs(b.v) - b.bound) * (1 - 0x1p-50);  // lower bound of |b| - eb
  if (!(den > 0)) return {v, INF};
  double q = std::fabs(v) * (1 + 0x1p-51) + ETA;  // >= |a/b| (real quotient)
  double e = UP * std::fabs(v) + ETA + (a.bound + q * b.bound) / den;
  return fin(v, e);
}

/// Square root: |sqrt(a) - sqrt(A)| = |a - A| / (sqrt(a) + sqrt(A)) <= ea / sqrt(a).
inline VB vb_sqrt(VB a) {
  double v = std::sqrt(a.v);
  if (!(a.v > 0)) return fin(v, std::sqrt(a.bound) * (1 + 0x1p-50));  // |sqrt(A)| <= sqrt(ea)
  double lo = v * (1 - 0x1p-51);  // <= sqrt(a.v): |v - sqrt(a)| <= u sqrt(a)
  return fin(v, UP * v + a.bound / lo);
}

}  // namespace normgate::oracle::detail
