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
/// = +-Inf or NaN although dy*x*rstd may be finite: inputs whose products
/// exceed 3.4e38, left as an open item in docs/perf.md session 6). After n terms the error is at most about n*2^-53*sum|p*r|
/// (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 4.2),
/// below the (n*2^-24)^2*sum|v| of the FP32 TwoSum pair it replaced (Comp32,
/// 10 FP32 operations per term where this is one conversion and one fma: the
/// backward was issue-bound, docs/perf.md session 6).
struct Acc64 {
  double s = 0.0;  ///< the running sum
  NG_HD void add_product(float p, float r) { s = dfma_rn(static_cast<double>(p), static_cast<double>(r), s); }
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
