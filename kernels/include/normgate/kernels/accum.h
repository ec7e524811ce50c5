// normgate/kernels/accum.h: the compensated accumulators of the dw reduction,
// host and device (one definition, so a CPU model and a kernel that call the
// same member functions in the same order produce the same bits).
//
// All roundings are spelled out (core/hd.h, binary32 and binary64): nothing
// here can be contracted into an FMA or reassociated.
#pragma once

#include <cstdint>

#include "normgate/core/hd.h"

namespace normgate::kernels {

/// True when f is neither Inf nor NaN (bit test: host and device agree).
NG_HD bool finite_f32(float f) { return (float_bits(f) & 0x7F800000u) != 0x7F800000u; }

/// FP32 running sum with a TwoSum error term: the per-column, per-chunk dw
/// accumulator. After adding terms v_1..v_n, s + comp approximates the sum
/// with an error of about (n*u)^2 * sum|v| (the Sum2 bound of Ogita, Rump and
/// Oishi 2005, before the final rounding) instead of the n*u*sum|v| of a
/// plain FP32 sum (u = 2^-24).
struct Comp32 {
  float s = 0.0f;     ///< running sum (what a plain FP32 sum would hold, nearly)
  float comp = 0.0f;  ///< accumulated rounding errors of the steps

  /// Add the exact product p*r (p = dy*x is exact in FP32 for BF16 inputs):
  ///   hi = p*r;  lo = fma(p, r, -hi)                 (TwoProduct: hi+lo == p*r)
  ///   t = s + hi; bp = t - s; ap = t - bp;
  ///   err = (s - ap) + (hi - bp)                      (TwoSum: t+err == s+hi)
  ///   s = t;  comp = comp + (err + lo)
  /// Exactness of TwoProduct needs p*r away from the FP32 underflow range.
  NG_HD void add_product(float p, float r) {
    const float hi = mul_rn(p, r);
    const float lo = fma_rn(p, r, -hi);
    const float t = add_rn(s, hi);
    const float bp = sub_rn(t, s);
    const float ap = sub_rn(t, bp);
    const float err = add_rn(sub_rn(s, ap), sub_rn(hi, bp));
    s = t;
    comp = add_rn(comp, add_rn(err, lo));
  }

  /// The error term as it leaves the chunk: 0 when s is not finite (an Inf
  /// sum makes TwoSum's err NaN; the sum itself is then the answer).
  NG_HD float comp_out() const { return finite_f32(s) ? comp : 0.0f; }
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
