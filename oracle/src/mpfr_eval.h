// oracle/src/mpfr_eval.h (internal): the RMSNorm math in MPFR, every value
// with a rigorous bound, for the oracle's escalation (reference.cpp (7):
// reference_pass.cpp, reference_finish.cpp).
//
// ============================ DERIVATION ====================================
// MPFR (Fousse, Hanrot, Lefevre, Pelissier, Zimmermann, "MPFR: A multiple-
// precision binary floating-point library with correct rounding", ACM TOMS
// 33(2), 2007) rounds every operation correctly in the requested mode. With
// precision P and u = 2^-P, a round-to-nearest result z' of a real z satisfies
//   |z' - z| <= u |z|  and  |z' - z| <= u |z'|   (half an ulp; no underflow:
// MPFR's exponent range is +-2^30, far beyond any value built from BF16/FP32
// inputs and eps >= 2^-1074). Bounds are carried in 64-bit MPFR numbers
// computed with rounding upward (RNDU) on non-negative quantities, so every
// bound expression is an upper bound of its real value with no further
// argument (no absolute floor as in eft.h's inflate()).
//
// (M0) Exact inputs. BF16 values are multiples of 2^-133 below 2^128, FP32
//      values multiples of 2^-149 below 2^128 with 24-bit significands. Hence
//      x^2 and dy*x (16-bit significands), dy*w, x*w (<= 32 bits) and dy*x*w
//      (<= 40 bits) are exact binary64 numbers (reference.cpp (0)).
// (M1) S = sum_j x_j^2 EXACTLY: x = m 2^(max(E,1) - 134) with m the 8-bit
//      significand (E the exponent field), so x^2 = m^2 2^(2 max(E,1) - 268);
//      the m^2 (< 2^16) are added per exponent field in 64-bit integers
//      (exact for H < 2^47) and the 254 bins combined in a 640-bit MPFR
//      number: S < 2^256 H is a multiple of 2^-266, so 640 bits hold it
//      exactly (mpfr_add's ternary value is checked to be 0).
// (M2) rstd. Q' = RN_P(RN_P(S/H) + eps), RS' = RN_P(rec_sqrt(Q')) (MPFR's
//      correctly rounded 1/sqrt). Both summands of Q are >= 0, so
//      Q' = Q (1 + t), (1-u)^2 <= 1 + t <= (1+u)^2, and
//      RS'/RS = (1+t)^(-1/2) (1 + d) lies in [(1-u)/(1+u), (1+u)/(1-u)]:
//      |RS' - RS| <= 2u/(1-u) RS <= 3u RS <= 3u/(1-3u) |RS'| <= 4u |RS'|.
//      eRS := 4u |RS'|  (u <= 2^-64 here).
// (M3) D = sum_j dy_j x_j w_j exactly: terms exact (M0), multiples of 2^-415
//      below 2^384, so a 1088-bit accumulator adds them exactly (H < 2^47);
//      D' = RN_P(D): eD = u |D'|.
// (M4) Row values with use = RS' (eUse = eRS; fp64 mode) or the exact FP32
//      rstd (eUse = 0; fp32_rounded mode), by the value/bound rules of eft.h
//      (product: u|v| + |a| eb + |b| ea + ea eb; quotient by the exact H:
//      u|v| + ea/H; difference: u|v| + ea + eb):
//        c1 = RN(use D'), c = RN(c1 / H), k = RN(use c),
//        xk = x_j k EXACT at precision P + 8 (x has 8 significant bits),
//        t = RN(g_j - xk) (g = dy w exact), dx = RN(use t):
//        e_t = u|t| + |x_j| e_k, e_dx = u|dx| + use e_t + |t| eUse + eUse e_t.
//      y_j = RN(xw_j RS') (xw exact): e_y = u|y| + |xw_j| eRS.
// (M5) dw_j = sum_r a_r use_r, a_r = dy_rj x_rj exact (16 bits): the terms
//      a_r use'_r are formed EXACTLY at precision P + 16 (fp64 mode) or are
//      exact binary64 numbers (fp32 mode: 16 + 24 bits); mpfr_sum (correctly
//      rounded sum of any number of terms, MPFR >= 4 algorithm) gives
//      dw' = RN_P(sum_r a_r use'_r), so
//        |dw' - dw| <= u |dw'| + sum_r |a_r| eUse_r = u|dw'| + 4u A,
//      A = sum_r |a_r use'_r| accumulated with RNDU (an upper bound).
//      One rounding for the whole column: no gamma_R growth with R.
// (M6) To binary64: v = RN_53(V'); |v - exact| <= |v - V'| + e, where
//      |v - V'| is computed exactly (both are multiples of ulp_P(V')) and
//      rounded up. v is PROVEN correctly rounded when RN_53(V' - e) ==
//      RN_53(V' + e) (RN is monotone, so every real in the enclosure rounds
//      to the same double); likewise RN_24 for the FP32 rstd.
//
// PRECISION. The first precision is EscalationPolicy::bits, default 128.
// Why 128: a dw column escalates when the FP64 Dot2 bound, about
// gamma_R^2 A (A = sum_r |dy xhat|; (R u)^2 = 2^-72 at R = 2^17), exceeds
// 1e-3 tol >= 1e-7, i.e. from A ~ 5e14 (R = 2^17) or ~1e21 (R = 64) on.
// At P = 128 the bound of (M5) is u|dw| + 4u A = 2^-128 |dw| + 2^-126 A: it
// meets the stop rule (<= target * tol = 2^-20 * 1e-4) up to A ~ 2^92.7 ~ 7e27,
// 13 decades of conditioning beyond where FP64 gives up at R = 2^17; rows
// (dx) likewise (the cancellation in g - x k costs log2(|g| / tol) bits).
// A unit (a row: rstd, c, y, dx; or a dw column)
// is recomputed at twice the precision until each of its elements is either
// proven correctly rounded (M6) or has a bound <= target * tol
// (EscalationPolicy::target, default 2^-20: 1000x below the escalation
// threshold, so an escalated comparison is uncertified only within
// ~1e-6 (1 + rtol) of err/tol = 1), up to max_bits (default 4096). From ~1100
// bits on the sums of (M1), (M3), (M5) are exact and only (M2)'s 4u relative
// error remains, so the loop ends (tol > 0 always: atol > 0, or rtol |v| > 0
// for rstd). In fp32_rounded mode dw needs no rstd at all (exact products) and
// 128 bits always suffice. An element whose binary64 value overflows gets
// bound +inf (never better with more bits) and does not hold the loop.
// ===========================================================================
#pragma once

#include <mpfr.h>

#include <cstdint>
#include <vector>

#include "normgate/oracle/reference.h"

namespace normgate::oracle::detail {

/// The stop rule's verdict on one element (M6).
struct Finished {
  VB vb;            ///< binary64 value and rigorous bound
  bool rn = false;  ///< vb.v proven to be RN_53(exact)
};

/// True when f meets the stop rule: proven correctly rounded, or bound <=
/// target * (t.atol + t.rtol |v|), or non-finite v (cannot improve).
bool meets(const Finished& f, const Tolerance& t, double target);

/// Exact sum of squares of n BF16 values (M1) into `out` (its precision is
/// set to 640). Returns false (out undefined) when a value is NaN or Inf.
bool exact_sumsq(const uint16_t* x, int64_t n, mpfr_ptr out);

/// One row's rstd in MPFR (M1, M2) at increasing precision until the rstd is
/// correctly rounded to binary64 or within target * tol, and its FP32 rounding
/// is proven (or the precision cap is reached).
struct RstdMp {
  double hi = 0, lo = 0, e = 0;  ///< |hi + lo - RS| <= e (hi = RN_53(RS'), lo = RN_53(RS' - hi))
  float f = 0;                   ///< RN_24(RS') (proven RN_24(RS) when f_certain)
  bool f_certain = false;
  int bits = 0;                  ///< precision used
  bool met = false;              ///< the stop rule was met at `bits`
};
/// Precondition: x has no NaN/Inf (the caller checked), n >= 1, eps finite > 0.
RstdMp mpfr_rstd(const uint16_t* x, int64_t n, double eps, const EscalationPolicy& pol);

/// One row in MPFR (M1-M4, M6): rstd (y's rstd), c, y_j, dx_j (j < H).
/// fp32: the backward's rstd is the exact float use32 (RstdMode::fp32_rounded),
/// else the exact rstd. Precondition: x, dy, w finite; use32 finite > 0 when fp32.
struct RowMp {
  VB rstd, c;
  std::vector<VB> y, dx;  ///< [H]
  int bits = 0;
  bool met = false;
};
RowMp mpfr_row(const uint16_t* x, const uint16_t* dy, const double* w, int64_t H, double eps, bool fp32,
               float use32, const EscalationPolicy& pol);

/// The exact rstd of every row at one precision (fp64-mode dw columns, M5).
/// Rows with a non-finite x get NaN (callers never use them).
class RstdTable {
 public:
  RstdTable() = default;
  RstdTable(const RstdTable&) = delete;
  RstdTable& operator=(const RstdTable&) = delete;
  ~RstdTable();
  /// (Re)compute at precision `bits` for rows [0, x.rows()), `threads` OpenMP threads.
  void build(const RowView<uint16_t>& x, double eps, int bits, int threads);
  mpfr_srcptr operator[](int64_t r) const { return &rs_[static_cast<size_t>(r)]; }
  int bits() const { return bits_; }

 private:
  void clear();
  std::vector<__mpfr_struct> rs_;
  int bits_ = 0;
};

/// Scratch for one thread's column sums (R terms at up to bits + 16 bits).
class ColScratch {
 public:
  ColScratch() = default;
  ColScratch(const ColScratch&) = delete;
  ColScratch& operator=(const ColScratch&) = delete;
  ~ColScratch();
  /// Make room for n terms of precision p.
  void reserve(int64_t n, mpfr_prec_t p);
  std::vector<__mpfr_struct> t;
  std::vector<mpfr_ptr> ptr;
  mpfr_prec_t prec = 0;
};

/// dw_j in MPFR (M5, M6) at precision `bits`. fp32: use_r = use32[r] (exact
/// floats); else use_r = table[r] (table.bits() == bits). Precondition: every
/// row's x and use finite, column j's dy finite.
Finished mpfr_dw(const RowView<uint16_t>& x, const RowView<uint16_t>& dy, int64_t j, bool fp32,
                 const float* use32, const RstdTable* table, int bits, ColScratch& scratch);

}  // namespace normgate::oracle::detail
