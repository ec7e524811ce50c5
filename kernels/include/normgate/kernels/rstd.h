// normgate/kernels/rstd.h: the forward's rstd of a row from its FP64 sum of
// squares, shared by the kernel (fwd_rowwise.cu) and its CPU model
// (model_fwd_rowwise.cpp), so both give the same bits.
//
// rstd = the FP32 value nearest to 1/sqrt(m), m = fma(ss, 1/H, eps) in
// binary64 (ss the row's sum of x^2 in binary64, 1/H rounded once). Why not
// FP32 arithmetic: an FP32 sum of squares over H columns is off by a few ulps
// of rstd, and the backward's dw = sum over rows of dy*x*rstd collects those
// errors over every row: at [T, 24, 256] per-head views (24 T rows per
// column) the gate measured dw err/tol up to 2.15 on the H200 (2026-11-30,
// docs/perf.md session 7), 3.6x what a correctly rounded rstd forces. In
// binary64 the sum of up to 2^24 squares of BF16 values cannot overflow and
// is off by at most H*2^-53 relative (typically ~sqrt(H)*2^-53), so the FP32
// result is the correctly rounded rstd of the exact mean + eps except for rows
// whose exact rstd lies that close to a rounding boundary: about one row in
// 10^7 at H = 4096 (relative error 2^-47 against FP32's 2^-24 spacing).
// Rows whose FP32 sum of squares overflowed (|x| > ~1e19) get their true
// rstd instead of 0.
#pragma once

#include <cmath>
#include <cstdint>

#include "normgate/core/hd.h"

namespace normgate::kernels {

/// Rounds a start value r0 (FP32, finite, > 0, within a few ulps of
/// 1/sqrt(m)) to the FP32 value nearest to 1/sqrt(m), for binary64 m > 0:
/// steps one ulp while the midpoint to the next FP32 value on that side is
/// still on the wrong side of 1/sqrt(m). The test is exact: a midpoint h of
/// two FP32 values has at most 25 significant bits, so h*h is exact in
/// binary64 and fma(h*h, m, -1) has the sign of h - 1/sqrt(m) (a single
/// rounding never changes a sign, and h*h*m == 1 cannot hold: 1/h^2 is not
/// dyadic for a non-power-of-two h). Since no tie exists, the result does not
/// depend on r0. At most 8 steps (a start off by more is a caller bug: the
/// result is then r0 moved by 8 ulps). Arguments: m in (0, +inf), r0 FP32.
NG_HD float rstd_nearest(double m, float r0) {
  uint32_t b = float_bits(r0);
  for (int i = 0; i < 8; ++i) {
    const double r = static_cast<double>(bits_float(b));
    const double hi = dmul_rn(0.5, dadd_rn(r, static_cast<double>(bits_float(b + 1u))));
    if (dfma_rn(dmul_rn(hi, hi), m, -1.0) < 0.0) {  // hi < 1/sqrt(m): round up
      ++b;
      continue;
    }
    const double lo = dmul_rn(0.5, dadd_rn(r, static_cast<double>(bits_float(b - 1u))));
    if (dfma_rn(dmul_rn(lo, lo), m, -1.0) > 0.0) {  // lo > 1/sqrt(m): round down
      --b;
      continue;
    }
    break;
  }
  return bits_float(b);
}

/// rstd_nearest in one step, branch-free (what row_rstd_fp64 uses; same
/// result, tested against rstd_nearest): one Newton step from r0 in binary64,
/// r1 = r0 - r0*e/2 with e = fma(r0*r0, m, -1) (r0*r0 exact), is within
/// ~e^2 < 1e-12 relative of 1/sqrt(m) for any r0 within 1e-6 of it; f =
/// FP32_rn(r1) is then the nearest FP32 value unless 1/sqrt(m) lies beyond
/// the midpoint between f and its neighbour on r1's side, which one exact
/// midpoint test (as in rstd_nearest) decides. Arguments as rstd_nearest,
/// r0 within 1e-6 relative of 1/sqrt(m) and f's neighbours finite.
NG_HD float rstd_nearest_fast(double m, float r0) {
  const double r0d = static_cast<double>(r0);
  const double e = dfma_rn(dmul_rn(r0d, r0d), m, -1.0);
  const double r1 = dfma_rn(dmul_rn(-0.5, e), r0d, r0d);
#if defined(__CUDA_ARCH__)
  const float f = __double2float_rn(r1);
#else
  const float f = static_cast<float>(r1);
#endif
  const double fd = static_cast<double>(f);
  const bool up = r1 >= fd;  // the midpoint to test lies on r1's side of f
  const uint32_t nb = up ? float_bits(f) + 1u : float_bits(f) - 1u;
  const double mid = dmul_rn(0.5, dadd_rn(fd, static_cast<double>(bits_float(nb))));
  const double t = dfma_rn(dmul_rn(mid, mid), m, -1.0);  // sign of mid - 1/sqrt(m), exact
  return (up ? t < 0.0 : t > 0.0) ? bits_float(nb) : f;
}

/// The row's rstd (see file comment) from ss (binary64 sum of its squares),
/// inv_h = binary64 1/H (correctly rounded) and eps (>= 0, as binary64).
/// Non-finite or zero m gives IEEE 1/sqrt(m): +inf for m = 0, 0 for
/// m = +inf, NaN for NaN (rows holding Inf or NaN).
/// Start value: on the device rsqrtf of m rounded to FP32 (MUFU, <= 2 ulp)
/// when m is well inside the FP32 normal range, else binary64 1/sqrt(m)
/// rounded to FP32; on the host always the latter. rstd_nearest makes both
/// the same.
NG_HD float row_rstd_fp64(double ss, double inv_h, double eps) {
  const double m = dfma_rn(ss, inv_h, eps);
  if (!(m > 0.0 && m <= 1.7976931348623157e308)) return static_cast<float>(1.0 / sqrt(m));  // 0, Inf, NaN
  float r0;
#if defined(__CUDA_ARCH__)
  if (m > 0x1p-120 && m < 0x1p120)
    r0 = rsqrtf(__double2float_rn(m));
  else
    r0 = __double2float_rn(1.0 / sqrt(m));
#else
  r0 = static_cast<float>(1.0 / std::sqrt(m));
#endif
  // 1/sqrt(m) beyond FP32's range (eps = 0 and a row of tiny subnormals):
  // +inf is the nearest FP32 value, and rstd_nearest needs a finite start.
  if (!(r0 <= 3.4028234663852886e38f)) return r0;
  // rstd_nearest_fast needs f's neighbours finite: below FLT_MAX's midpoint
  // to infinity (rstd near 3.4e38 needs m < 1e-77: eps = 0 and tiny rows).
  if (m < 0x1p-250) return rstd_nearest(m, r0);
  return rstd_nearest_fast(m, r0);
}

}  // namespace normgate::kernels
