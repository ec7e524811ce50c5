// oracle/src/reference_parts.h (internal): what the FP64 reference's sources
// (reference.cpp, reference_pass.cpp, reference_finish.cpp) share: the
// builder class that fills a Reference, the (6) element evaluation kept inline
// here for the hot row loops, and the timer of the MPFR work.
#pragma once

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "eft.h"
#include "normgate/oracle/reference.h"

namespace normgate::oracle {

namespace detail {

// The value-or-inf choices of eval_y / eval_dx as bit selects rather than
// conditional expressions: GCC (with its default -ftrapping-math) will not
// turn a conditional whose arm it has sunk floating-point work into into a
// vector blend, so the row loops (reference.cpp) stayed scalar. Same values as
// `keep ? a : INF` and as inflate(): only the form of the choice differs.
inline double keep_or_inf(bool keep, double a) {
  const uint64_t m = 0 - static_cast<uint64_t>(keep);
  return std::bit_cast<double>((std::bit_cast<uint64_t>(a) & m) | (std::bit_cast<uint64_t>(INF) & ~m));
}
inline double inflate_sel(double b) {  // inflate(b)
  const double up = b * (1 + 0x1p-48) + 0x1p-1060;
  return keep_or_inf(b <= std::numeric_limits<double>::max(), up);
}

inline void eval_y(double xv, double w, double hi, double lo, double yb, VB& out) {
  double xw = xv * w;  // exact
  double v = std::fma(xw, hi, xw * lo);
  double b = inflate_sel(UP * std::fabs(v) + std::fabs(xw) * yb + 2 * ETA);
  out.v = v;
  out.bound = keep_or_inf(std::fabs(v) <= std::numeric_limits<double>::max(), b);  // non-finite v -> inf
}

inline void eval_dx(double xv, double dv, double w, double k, double kb, double use, double ub,
                    VB& out) {
  double g = dv * w;  // exact
  double t = std::fma(-xv, k, g);
  double et = inflate_sel(UP * std::fabs(t) + ETA + std::fabs(xv) * kb);
  double v = use * t;
  double b = inflate_sel(UP * std::fabs(v) + ETA + std::fabs(use) * et + std::fabs(t) * ub + ub * et);
  out.v = v;
  out.bound = keep_or_inf(std::fabs(v) <= std::numeric_limits<double>::max(), b);  // non-finite v -> inf
}

// (6) over one row: y and dx of elements [0, n) (defined in reference.cpp).
void y_row_impl(const uint16_t* __restrict x, const double* __restrict w, int64_t n, double hi, double lo,
                double yb, VB* __restrict out);
void dx_row_impl(const uint16_t* __restrict x, const uint16_t* __restrict dy, const double* __restrict w,
                 int64_t n, double k, double kb, double use, double ub, VB* __restrict out);

using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace detail

class ReferenceBuilder {
 public:
  // Fill refs[0..n) (n = 1 or 2), refs[i] in RstdMode modes[i], from one pass
  // over the inputs. Everything but the backward's rstd (row sums, rstd and
  // its escalation, the y filter) does not depend on the mode and is
  // computed once; each Reference ends up bitwise what a run with n = 1 in
  // its mode gives. With n = 2, modes must be {fp64, fp32_rounded}.
  // base (n = 2 only, not forward_only; else null): receives the FP32
  // baseline's rstd and dw, bitwise fp32_baseline(p, o.threads, false),
  // from the same pass over x and dy.
  static void run(Reference* const* refs, const RstdMode* modes, int n, const Problem& p, const Options& o,
                  Outputs* base = nullptr);

 private:
  // One RstdMode's state while run fills its Reference.
  struct Side {
    Reference* ref = nullptr;
    bool fp32 = false;
    std::vector<double> use_lo, use_e;  // [rows] lo and e2 of the rstd fed to the backward
    std::vector<uint8_t> row_bad;       // [rows] x non-finite, or the backward's rstd non-finite
    std::vector<uint8_t> row_flag;      // [rows] (7) 1: y triggered, 2: dx triggered (escalating only)
    std::vector<double> Sacc;           // [cols] s of (5)
  };
  static void finish(Side& sd, const Problem& p, const Options& o, double secs, const std::vector<int32_t>& rs_bits,
                     const std::vector<uint8_t>& rs_unmet);
};

}  // namespace normgate::oracle
