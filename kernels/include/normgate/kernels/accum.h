// normgate/kernels/accum.h: the accumulators of the dw reduction,
// host and device (one definition, so a CPU model and a kernel that call the
// same member functions in the same order produce the same bits).
//
// All roundings are spelled out (core/hd.h, binary32 and binary64): nothing
// here can be contracted into an FMA or reassociated.
#pragma once

#include <cstdint>

#include "normgate/core/hd.h"

namespace normgate::kernels {

/// FP64 running sum of exact products: the per-column, per-chunk dw
/// accumulator. add_product(p, r) with p = FP32_rn(dy*x) and r = rstd: for
/// any finite FP32 p and r the product p*r (at most 48 significant bits,
/// magnitude within binary64's normal range) is exact inside the fma, so s =
/// FP64_rn(s + p*r) is the only rounding of the step. p itself is exact (a
/// BF16 x BF16 product has at most 16 significant bits) unless dy*x falls
/// into FP32's subnormal range (rounded) or overflows it (p = +-Inf, so dw
/// = +-Inf or NaN although dy*x*rstd may be finite: add_triple below avoids
/// it). After n terms the error is at most about n*2^-53*sum|p*r|
/// (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 4.2),
/// below the (n*2^-24)^2*sum|v| of the FP32 TwoSum pair it replaced (Comp32,
/// 10 FP32 operations per term where this is one conversion and one fma: the
/// backward was issue-bound, docs/perf/backward.md, D2 and D4).
///
/// add_triple(dy, x, r) with an FP32 r (docs/perf/numerics.md, D4): s =
/// fma(dy, x*r, s) in binary64, where x*r (BF16 x FP32: at most 32
/// significant bits) and dy*(x*r) (at most 40) are exact for every finite
/// BF16 dy, x and FP32 r (binary64's exponent range holds them all), so it is
/// add_product(FP32_rn(dy*x), r) bit for bit wherever dy*x is exact in FP32,
/// and stays exact where dy*x overflows or underflows FP32 (the `huge` and
/// `tiny` families). Per term it costs two conversions (dy and x; r once per
/// row) and an FP64 multiply where add_product took an FP32 multiply and one
/// conversion: one more instruction in the issue-bound backward.
struct Acc64 {
  double s = 0.0;  ///< the running sum
  NG_HD void add_product(float p, float r) { s = dfma_rn(static_cast<double>(p), static_cast<double>(r), s); }
  NG_HD void add_triple(float dy, float x, float r) { add_triple(dy, x, static_cast<double>(r)); }
  /// The step the backward takes with msq (docs/perf/backward.md, D3), with
  /// the binary64 r of rstd.h rstd_refined: x*r rounds once in binary64 (2^-53
  /// relative; no longer exact), dy*(x*r) is exact inside the fma. With r =
  /// (double)r32 (no msq) it is the FP32-r step above, bit for bit.
  NG_HD void add_triple(float dy, float x, double r) {
    s = dfma_rn(static_cast<double>(dy), dmul_rn(static_cast<double>(x), r), s);
  }
};

/// FP64 TwoSum accumulator (Knuth's branch-free TwoSum; the errors are summed
/// in `comp`): combines the FP32 chunk partials of dw.
struct Comp64 {
  double s = 0.0;
  double comp = 0.0;

  ///   t = s + v; bp = t - s; ap = t - bp; comp += (s - ap) + (v - bp); s = t
  NG_HD void add(double v) {
    const double t = dadd_rn(s, v);
    const double bp = dsub_rn(t, s);
    const double ap = dsub_rn(t, bp);
    comp = dadd_rn(comp, dadd_rn(dsub_rn(s, ap), dsub_rn(v, bp)));
    s = t;
  }
  /// s + comp; just s when s is not finite (comp is NaN then).
  NG_HD double value() const {
    const bool fin = dsub_rn(s, s) == 0.0;  // false for Inf and NaN
    return fin ? dadd_rn(s, comp) : s;
  }
};

}  // namespace normgate::kernels
