// normgate/kernels/rstd.h: the forward's rstd of a row from its FP64 sum of
// squares, shared by the kernel (fwd_rowwise.cu) and its CPU model
// (model_fwd_rowwise.cpp), so both give the same bits; and the backward's
// binary64 refinement of it for dw (rstd_refined: bwd_chunk_pass.cuh and
// model_bwd.cpp), from the m the forward hands over (FwdArgs::msq).
//
// rstd = the FP32 value nearest to 1/sqrt(m), m = fma(ss, 1/H, eps) in
// binary64 (ss the row's sum of x^2 in binary64, 1/H rounded once). Why not
// FP32 arithmetic: an FP32 sum of squares over H columns is off by a few ulps
// of rstd, and the backward's dw = sum over rows of dy*x*rstd collects those
// errors over every row: at [T, 24, 256] per-head views (24 T rows per
// column) the gate measured dw err/tol up to 2.15 on the H200 (2026-11-30,
// docs/perf/numerics.md, D1), 3.6x the most a correctly rounded rstd forces
// there (0.60: numerics.md, D7). In binary64 the sum of up to 2^24 squares
// of BF16 values cannot overflow and is off by at most H*2^-53 relative
// (typically ~sqrt(H)*2^-53), so the FP32 result is the correctly rounded
// rstd of the exact mean + eps except for rows
// whose exact rstd lies that close to a rounding boundary: about one row in
// 10^7 at H = 4096 (relative error 2^-47 against FP32's 2^-24 spacing).
// Rows whose FP32 sum of squares overflowed (|x| > ~1e19) get their true
// rstd instead of 0.
#pragma once

#include <cmath>
#include <cstdint>

#include "normgate/core/hd.h"

namespace normgate::kernels {

/// The value a bit pattern of a positive FP32 number stands for in the
/// midpoint tests: +inf (0x7F800000) counts as 2^128, so that the midpoint
/// between FLT_MAX and +inf is 2^128 - 2^103, IEEE's overflow threshold for
/// round to nearest.
NG_HD double rstd_bits_value(uint32_t b) {
  return b == 0x7F800000u ? 0x1p128 : static_cast<double>(bits_float(b));
}

/// Whether 1/sqrt(m) lies above the midpoint of the FP32 values with bits b
/// and b + 1 (b finite, >= 0): the sign of fma(h*h, m, -1), h the midpoint.
/// Exact: h has at most 25 significant bits and h >= 2^-150, so h*h is exact
/// in binary64 (normal range), and a single rounding never changes a sign;
/// h*h*m == 1 cannot hold, since 1/h^2 is not dyadic unless h is a power of
/// two, and the only midpoint that is one, 2^-150 (between 0 and the
/// smallest subnormal), lies below every rstd this header produces (>=
/// ~2.9e-39): there are no ties.
NG_HD bool rstd_above_midpoint(uint32_t b, double m) {
  const double h = dmul_rn(0.5, dadd_rn(rstd_bits_value(b), rstd_bits_value(b + 1u)));
  return dfma_rn(dmul_rn(h, h), m, -1.0) < 0.0;
}

/// Rounds a start value r0 (FP32, finite, > 0, within a few ulps of
/// 1/sqrt(m)) to the FP32 value nearest to 1/sqrt(m) (IEEE round to
/// nearest: +inf beyond 2^128 - 2^103), for binary64 m > 0: steps one ulp
/// while the midpoint to the next FP32 value on that side is on the wrong
/// side of 1/sqrt(m) (rstd_above_midpoint: exact, no ties), so the result
/// does not depend on r0. At most 16 steps (a start off by more is a caller
/// bug: the result is then r0 moved by 16 ulps).
NG_HD float rstd_nearest(double m, float r0) {
  uint32_t b = float_bits(r0);
  for (int i = 0; i < 16 && b != 0x7F800000u; ++i) {
    if (rstd_above_midpoint(b, m)) {
      ++b;  // up (to +inf when b was FLT_MAX: nothing lies beyond)
    } else if (b > 0u && !rstd_above_midpoint(b - 1u, m)) {
      --b;
    } else {
      break;
    }
  }
  return bits_float(b);
}

/// rstd_nearest in one step, branch-free (what row_rstd_fp64 uses; same
/// result, tested against rstd_nearest and against long-double midpoint
/// tests): one Newton step from r0 in binary64, r1 = r0 - r0*e/2 with e =
/// fma(r0*r0, m, -1) (r0*r0 exact). For a start with relative error d, r1's
/// relative error is at most ~1.5 d^2 + 2^-52: below 2e-12 for d <= 1e-6, far
/// inside FP32's half-ulp (>= 2^-25 relative). So f = FP32_rn(r1) is the
/// nearest FP32 value unless 1/sqrt(m) lies beyond the midpoint between f
/// and its neighbour on r1's side (the only midpoint within reach), which one
/// exact test decides. Arguments as rstd_nearest; r0 within 1e-6 relative
/// of 1/sqrt(m), and 1/sqrt(m) <= 2^125 (f and its neighbours finite: m >=
/// 2^-250).
NG_HD float rstd_nearest_fast(double m, float r0) {
  const double r0d = static_cast<double>(r0);
  const double e = dfma_rn(dmul_rn(r0d, r0d), m, -1.0);
  const double r1 = dfma_rn(dmul_rn(-0.5, e), r0d, r0d);
#if defined(__CUDA_ARCH__)
  const float f = __double2float_rn(r1);
#else
  const float f = static_cast<float>(r1);
#endif
  const bool up = r1 >= static_cast<double>(f);  // the midpoint to test lies on r1's side of f
  const uint32_t fb = float_bits(f);
  const uint32_t lower = up ? fb : fb - 1u;  // the midpoint between lower and lower + 1
  const bool above = rstd_above_midpoint(lower, m);
  return bits_float(up ? (above ? fb + 1u : fb) : (above ? fb : fb - 1u));
}

/// The backward's rstd of a row for dw, in binary64: r32 (the forward's
/// FP32 rstd of the row) refined by one Newton step against m (the row's
/// binary64 mean of squares plus eps, FwdArgs::msq: rstd = FP32_rn(1/sqrt(m))),
/// r2 = r32 - r32*e/2, e = fma(r32*r32, m, -1): within 1.5 d^2 + 2^-52
/// relative of 1/sqrt(m) for r32 off by d (d <= 2^-24: below 5.6e-15), where
/// r32 alone is up to 2^-24 off. Why: dw = sum over rows of dy*x*rstd
/// collects each row's rstd error; with the FP32 rstd taken as exact a long
/// llm-family column reached 2.43x its budget on the H200
/// (docs/perf/numerics.md, D2). Returns r32 (widened) where m or r32 is not
/// finite and positive (rows holding Inf/NaN, a zero row with eps = 0) or
/// where the step would move r32 by more than 2^-23 relative (m is not this
/// rstd's: a caller's mistake; then dw is what it was without m).
/// Branch-free (one select; the backward's first warp computes it for 32
/// rows at a time, bwd_chunk_pass.cuh): the |e| test alone rejects every
/// non-finite or non-positive m and an r32 of 0 or +Inf (e is then <= -1,
/// +-Inf or NaN; r32*r32*m cannot overflow to a small e), and r0 > 0 (in
/// binary64, so a flush-to-zero build cannot treat a subnormal r32 as 0)
/// rejects a negative or NaN r32. A subnormal r32 (rows whose squares
/// overflow FP32) is usually kept: its rounding error exceeds 2^-23.
NG_HD double rstd_refined(double m, float r32) {
  const double r0 = static_cast<double>(r32);
  const double e = dfma_rn(dmul_rn(r0, r0), m, -1.0);
  const double r = dfma_rn(dmul_rn(-0.5, e), r0, r0);
  return fabs(e) <= 0x1p-22 && r0 > 0.0 ? r : r0;  // |e| ~ 2|d|: |d| > 2^-23 is refused
}

/// A row's m = fma(ss, inv_h, eps) in binary64 (ss its binary64 sum of
/// squares, inv_h = binary64 1/H, eps >= 0): what row_rstd_fp64 rounds
/// 1/sqrt of, and what the forward hands the backward (FwdArgs::msq).
NG_HD double row_m(double ss, double inv_h, double eps) { return dfma_rn(ss, inv_h, eps); }

/// The row's rstd (see file comment) from ss (binary64 sum of its squares),
/// inv_h = binary64 1/H (correctly rounded) and eps (>= 0, as binary64).
/// Non-finite or zero m gives IEEE 1/sqrt(m): +inf for m = 0 (eps = 0 and a
/// zero row), 0 for m = +inf, NaN for NaN (rows holding Inf or NaN).
/// Start value: on the device rsqrtf of m rounded to FP32 (MUFU, <= 2 ulp)
/// when m is well inside the FP32 normal range, else binary64 1/sqrt(m)
/// rounded to FP32 (clamped to FLT_MAX); on the host always the latter.
/// rstd_nearest_fast (m >= 2^-250) or rstd_nearest (below: only with eps = 0
/// and rows of tiny values, where the start is the same on both) make the
/// result independent of the start.
NG_HD float row_rstd_fp64(double ss, double inv_h, double eps) {
  const double m = row_m(ss, inv_h, eps);
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
  if (m < 0x1p-250) {  // rstd above 2^125, up to beyond FP32's range (+inf)
    if (!(r0 <= 3.4028234663852886e38f)) r0 = 3.4028234663852886e38f;
    return rstd_nearest(m, r0);
  }
  return rstd_nearest_fast(m, r0);
}

}  // namespace normgate::kernels
