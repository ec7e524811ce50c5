// oracle/src/reference.cpp: the FP64 reference and its error bounds.
//
// ============================ DERIVATION ====================================
// Notation (see eft.h): u = 2^-53, gamma_k = k u/(1 - k u), UP >= u/(1-u),
// eta = 2^-1074; "exact" = the real-number value on the given inputs.
// Sources: [H] Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed.
// (2002): (2.4)/(2.5) rounding model, Lemma 3.1 (products of (1+d_i) and
// gamma_k), Sec. 4.2 (any summation order: each term is perturbed by at most
// as many (1+d) factors as additions on its path). [ORO] Ogita, Rump, Oishi,
// Accurate sum and dot product, SIAM J. Sci. Comput. 26(6), 2005: Alg. 3.1
// TwoSum, Alg. 3.5 TwoProduct (FMA form), Alg. 4.4 Sum2, Alg. 5.3 Dot2 and
// the error analysis of Prop. 4.5 / Prop. 5.5, which we re-derive below in
// the exact form we use (lanes, an extra rstd_lo term, pre-rounding bound).
//
// (0) Exact products. A BF16 value has an 8-bit significand and exponent in
//     [-133, 127]; binary32 w has 24 bits. Hence x^2 (16 bits), dy*x (16),
//     dy*x*w (<= 40), dy*w (<= 32), x*w (<= 32) are EXACT in binary64 and lie
//     in [2^-415, 2^384] when non-zero: no rounding, no underflow, no overflow.
//     So S_r = sum_j x^2 and D_r = sum_j dy*x*w are sums of exact binary64 terms.
//
// (1) Lane-split Sum2 (row sums S_r, D_r; K = 8 lanes, lane l takes the terms
//     j = l mod K in increasing j; then lanes 0..K-1 are merged in order):
//       lane:  pi_l <- TwoSum(pi_l, p_j) -> (pi_l, q);  sig_l <- fl(sig_l + q)
//       merge: (pi, q) = TwoSum(pi, pi_l); sig = fl(fl(sig + q) + sig_l)
//     TwoSum is error-free, so sum_j p_j = pi + Qtot with Qtot the exact sum of
//     all q's. Every q passes through at most m + 2K roundings on its way into
//     sig (m = ceil(n/K) lane terms), so [H, Sec. 4.2]
//       |sig - Qtot| <= gamma_{m+2K} sum|q|.
//     Each |q| <= u |partial sum after that TwoSum|. Lane l's partial sums are
//     <= (1+u)^m P_l (P_l = its sum|p_j|), the merge's <= (1+u)^{m+K} P
//     (P = sum_j |p_j|), so lane l contributes <= (m-1) u (1+u)^m P_l and the
//     merge <= (K-1) u (1+u)^{m+K} P; summing over lanes,
//       sum|q| <= (m+K) u (1+u)^{m+K} P <= gamma_{m+K} P   [(1+u)^k <= 1/(1-ku)].
//     Hence, with N = m + 2K:   |pi + sig - S| <= gamma_N^2 P.   (R1)
//     (ORO Prop. 4.5 is the K = 1 case, stated after the final rounding.)
//     The abs-sum P' (lanes, then merge, RN) satisfies P <= P'/(1 - gamma_N).
//     For S, P = S and (Sh, Sl) = TwoSum(pi, sig) keeps pi + sig exactly, so
//       |Sh + Sl - S| <= eS := gamma_N^2 (Sh + |Sl|) / (1 - gamma_N^2).
//     For D: Dh = fl(pi + sig), |Dh - D| <= UP|Dh| + gamma_N^2 P'_D/(1-gamma_N).
//
// (2) rstd as hi + lo. r = fl(1/fl(sqrt(fl(fl(Sh/H) + eps)))) is a binary64
//     approximation (relative error ~3u). With Q = S/H + eps the exact rstd is
//     RS = Q^{-1/2} = r (1 - E)^{-1/2}, E := 1 - r^2 Q (exact real), and
//       (1 - E)^{-1/2} = 1 + E/2 + (3/8) E^2 (1 - xi)^{-5/2}, |xi| <= |E|
//     (Taylor with Lagrange remainder). We evaluate H*E = H - r^2 (S + H eps)
//     almost exactly: r^2 = h + l and H*eps = e1 + e1l by TwoProduct,
//     Sh + e1 = z + zl by TwoSum, w2 = fl(zl + fl(Sl + e1l)), so
//       S + H eps = z + w2 + dW, |dW| <= eS + gamma_2 (|zl| + |Sl| + |e1l|);
//     h z = p1 + p1e by TwoProduct; f1 = H - p1 is exact (Sterbenz: checked
//     p1 in [H/2, 2H]); F = fl((((f1 - p1e) - h w2) - l z) - l w2) with the
//     three small products rounded:
//       |F - H E| <= gamma_5 (|f1| + |p1e| + |t1| + |t2| + |t3|) + 3 eta + (h+|l|) |dW|.
//     E_c = fl(F/H), eE = |F - H E|/H + UP|E_c| + eta, Emax = |E_c| + eE
//     (required <= 2^-20, so (3/8)(1-Emax)^{-5/2} <= 0.38), lo = fl(r fl(E_c/2)):
//       |RS - (r + lo)| <= r eE/2 + UP|lo| + eta + r eta + 0.38 r Emax^2 =: e2.
//     Typically e2 ~ (gamma_N^2 + 50 u^2) r, i.e. rstd to ~2^-80 relative.
//     When a precondition fails (eps < 2^-900, r outside (2^-300, 2^300), p1
//     outside [H/2, 2H], Emax > 2^-20: only for extreme eps) we fall back to
//     lo = 0 and e2 from the value/bound chain div/add/sqrt/div (eft.h) on
//     (Sh, |Sl| + eS): first-order-free rigorous propagation.
//     rstd(r) reports v = r, bound |lo| + e2.
//
// (3) FP32 rstd. cand = RN32(r); RN32(RS) is cand or a neighbour. With m_up,
//     m_dn the binary32 midpoints around cand (exact in binary64), r - m is
//     exact (Sterbenz), t = fl((r - m) + lo) is within UP|t| + eta of the real
//     (r - m) + lo, and RS - m = (r - m) + lo + d, |d| <= e2. If the sign of
//     RS - m_up and of RS - m_dn is decided by these bounds, RN32(RS) is known
//     ("certain"); otherwise we round r + lo and flag it. In fp32_rounded mode
//     this float is an exact input of the backward (use = f, bound 0).
//
// (4) c_r = use * D / H and k_r = use * c_r (so dx = use * (g - x k)), by the
//     value/bound helpers of eft.h (product, quotient with error terms).
//     use = r with bound |lo| + e2 (fp64 mode) or the float with bound 0.
//
// (5) dw_j = sum_r a_r (hi_r + lo_r) + sum_r a_r (RS_r - hi_r - lo_r),
//     a_r = dy_rj x_rj exact, (hi, lo) = (r, lo) in fp64 mode, (f, 0) in
//     fp32 mode. Dot2 with the extra term, rows in order r = 0..R-1:
//       (h, rr) = TwoProduct(a, hi) [exact: a hi >= 2^-400, no underflow]
//       (pi, q) = TwoSum(pi, h);  s = fl(s + fl(fl(q + rr) + fl(a lo)))
//       P' = fl(P' + |h|)
//     Exactly: sum a (hi+lo) = pi + sum (q + rr + a lo). Each of those terms
//     passes through <= R + 2 roundings, so the error of s is
//     <= gamma_{R+2} (sum|q| + sum|rr| + sum|a lo|); sum|q| + sum|rr| <= R u
//     (1+u)^R P <= gamma_R P with P = sum |a| hi (partial sums of pi grow by
//     (1+u) per step; |rr| <= u|a hi|), and sum|a lo| <= lambda P with
//     lambda = max_r |lo_r|/hi_r. The rstd remainder contributes
//     <= sum |a| e2_r <= rho P, rho = max_r e2_r/hi_r. P <= P'/(1 - gamma_R)
//     (P' is a recursive RN sum of R rounded products, [H, Sec. 3.1]). With
//     dw = fl(pi + s):
//       |dw - exact| <= UP|dw| + (gamma_{R+2} (gamma_R + lambda) + rho) P'/(1 - gamma_R).
//     (ORO Prop. 5.5 / Dot2: u|x^T y| + gamma_n^2 |x^T||y|, same structure.)
//
// (6) y = fl(x w hi + fl(x w lo)) (one FMA; x w exact) with
//       |y - x w RS| <= UP|y| + |x w| (UP|lo| + e2) + 2 eta.
//     dx: g = dy w exact; t = fma(-x, k, g): |t - (g - x K)| <= UP|t| + eta + |x| e_k;
//     v = fl(use t): |v - USE T| <= UP|v| + eta + use e_t + |t| e_use + e_use e_t.
//
// Every bound expression is evaluated in round-to-nearest and passed through
// inflate() (eft.h), which dominates the rounding of the bound's own evaluation.
// Non-finite inputs: see reference.h; non-finite values get bound +inf, a row
// with a non-finite x (or a non-finite fp32 rstd) makes every dw bound +inf, and
// a non-finite dw is recomputed as the plain FP64 sum over rows in order so its
// IEEE class (NaN vs +-Inf) matches plain propagation.
//
// (7) MPFR escalation (mode auto; mpfr mode escalates everything with finite
//     inputs; the MPFR side is derived in mpfr_eval.h). The decisions use only
//     per-row / per-column data, so they and the results are independent of
//     the thread count.
//     rstd, in the row pass before the backward reads it: when
//       inflate(|lo| + e2) > fraction * tol_rstd(r), or RN32 is not proven
//       while the FP64 candidate is a finite float,
//     (hi, lo, e2, rstd_f32, certain) are replaced by MPFR's (mpfr_rstd); the
//     rest of the pipeline then uses them as any rstd.
//     y, dx: a row-level filter bounds every element's FP64 bound from row
//       maxima: |x_j| <= Xm = sqrt(Sup) (Sup = Sh + |Sl| + eS >= S from (1)),
//       |dy_j w_j| <= Gm = DYm wmax (DYm from the largest magnitude of the
//       row's BF16 bit patterns), |t_j| <= Tm = (Gm + Xm|k|)(1 + 2^-48), so
//         y bound  <= By  = UP Xm wmax (hi + |lo|) + Xm wmax yb + 2 eta,
//         dx bound <= Bdx = UP use Tm + eta + use Et + Tm ub + ub Et,
//                           Et = UP Tm + eta + Xm kb
//       (the formulas of (6) with every |.| replaced by its maximum, each
//       padded by 1 + 2^-48). Only when 2 By > fraction * atol_y (2 Bdx >
//       fraction * atol_dx) are the row's elements evaluated and compared
//       with fraction * tol(v) one by one; tol >= atol, and the factor 2
//       covers the rounding of the filter's own arithmetic. A triggered row
//       is recomputed whole in MPFR (mpfr_row): its c, y, dx replace (4), (6).
//     dw: after (5), column j is recomputed (mpfr_dw) when its bound >
//       fraction * tol_dw(dw_j). fp64 mode needs the exact rstd of every row
//       (RstdTable, built once per precision, only when a column escalates).
//     Values with bound +inf from non-finite inputs (x, dy, w or the
//     backward's rstd) are not escalated.
//
// (8) compute_pair: the two RstdModes differ only in the rstd the backward
//     uses (use, its lo and bound). (1), (2), (3), the rstd escalation of (7)
//     and the y part of the row filter do not depend on the mode and are
//     computed once per row for both References; (4), the dx part of the
//     filter, (5)'s finalization and the MPFR rows and columns run per mode
//     on the same per-row data. (5)'s column pass reads x and dy once for both
//     sums (col_accum2). Every operation of either mode is the one its own
//     compute() performs, except two terms of the fp32 mode's dw step that are
//     zeros there (col_accum2 says why), so the results are the same bits.
// ===========================================================================
#include <omp.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "eft.h"
#include "row_blocks.h"
#include "mpfr_eval.h"
#include "normgate/oracle/reference.h"

namespace normgate::oracle {

using namespace detail;

namespace {

[[noreturn]] void bad_field(const std::string& field, const std::string& why) {
  throw std::invalid_argument("normgate::oracle::Problem: field '" + field + "' " + why);
}

}  // namespace

std::string_view to_string(OracleMode m) {
  switch (m) {
    case OracleMode::fp64: return "fp64";
    case OracleMode::auto_: return "auto";
    case OracleMode::mpfr: return "mpfr";
  }
  return "?";
}

OracleMode parse_oracle_mode(std::string_view s) {
  for (OracleMode m : {OracleMode::fp64, OracleMode::auto_, OracleMode::mpfr})
    if (s == to_string(m)) return m;
  throw std::invalid_argument("bad oracle mode '" + std::string(s) + "' (expected fp64, auto or mpfr)");
}

namespace {

void validate_policy(const EscalationPolicy& e) {
  auto bad = [](const std::string& f, double v) {
    throw std::invalid_argument("normgate::oracle::EscalationPolicy: field '" + f + "' is invalid (" +
                                std::to_string(v) + ")");
  };
  if (!(e.fraction >= 0)) bad("fraction", e.fraction);
  if (!(e.target >= 0)) bad("target", e.target);
  if (e.bits < 64) bad("bits", e.bits);
  if (e.max_bits < e.bits) bad("max_bits", e.max_bits);
  if (e.max_elements < 0) bad("max_elements", static_cast<double>(e.max_elements));
  const std::pair<const char*, const Tolerance*> ts[] = {{"y", &e.y}, {"rstd", &e.rstd}, {"dx", &e.dx}, {"dw", &e.dw}};
  for (auto [n, t] : ts) {
    if (!(t->atol >= 0 && t->atol < INF)) bad(std::string(n) + ".atol", t->atol);
    if (!(t->rtol >= 0 && t->rtol < INF)) bad(std::string(n) + ".rtol", t->rtol);
  }
}

}  // namespace

void validate(const Problem& p) {
  if (p.x.heads < 1) bad_field("x.heads", "must be >= 1 (got " + std::to_string(p.x.heads) + ")");
  if (p.dy.heads < 1) bad_field("dy.heads", "must be >= 1 (got " + std::to_string(p.dy.heads) + ")");
  if (p.x.T_rows < 0) bad_field("x.T_rows", "must be >= 0 (got " + std::to_string(p.x.T_rows) + ")");
  if (p.dy.T_rows < 0) bad_field("dy.T_rows", "must be >= 0 (got " + std::to_string(p.dy.T_rows) + ")");
  if (p.x.cols < 1) bad_field("x.cols", "must be >= 1 (got " + std::to_string(p.x.cols) + ")");
  if (p.dy.cols != p.x.cols)
    bad_field("dy.cols", "must equal x.cols (" + std::to_string(p.dy.cols) + " vs " +
                             std::to_string(p.x.cols) + ")");
  if (p.dy.rows() != p.x.rows())
    bad_field("dy.rows", "dy.rows() must equal x.rows() (" + std::to_string(p.dy.rows()) + " vs " +
                             std::to_string(p.x.rows()) + ")");
  if (p.w.cols != p.x.cols)
    bad_field("w.cols", "must equal x.cols (" + std::to_string(p.w.cols) + " vs " +
                            std::to_string(p.x.cols) + ")");
  if (p.w.dtype != WDtype::bf16 && p.w.dtype != WDtype::fp32)
    bad_field("w.dtype", "is not bf16 or fp32");
  if (!(std::isfinite(p.eps) && p.eps > 0))
    bad_field("eps", "must be finite and > 0 (got " + std::to_string(p.eps) + ")");
  if (p.x.rows() > 0) {
    if (p.x.p == nullptr) bad_field("x.p", "is null with rows*cols > 0");
    if (p.dy.p == nullptr) bad_field("dy.p", "is null with rows*cols > 0");
    if (p.w.p == nullptr) bad_field("w.p", "is null with rows*cols > 0");
  }
  if (p.dx_add.p != nullptr && (p.dx_add.cols != p.x.cols || p.dx_add.rows() != p.x.rows()))
    bad_field("dx_add", "must be [rows, cols] like x (" + std::to_string(p.dx_add.rows()) + " x " +
                            std::to_string(p.dx_add.cols) + " vs " + std::to_string(p.x.rows()) + " x " +
                            std::to_string(p.x.cols) + ")");
  if (p.x.rows() > (int64_t{1} << 40) / p.x.cols)
    bad_field("x.T_rows", "rows*cols exceeds 2^40");
}

namespace {

constexpr int K = 8;  // lanes of the row sums (fixed: it is part of the arithmetic)

struct RowSums {
  double s_pi, s_sig;         // sum of squares: pi + sig
  double d_pi, d_sig, d_abs;  // D = sum dy*x*w, and sum |dy*x*w| (RN)
};

// (1): lane-split Sum2 of x^2 and dy*x*w over one row. The K = 8 lanes are
// two 4-wide GCC vectors (elementwise IEEE operations, so any vector width
// or a scalar loop gives the same bits).
typedef double v4d __attribute__((vector_size(32)));
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // v4d helpers are internal (inlined), no ABI concern
#endif

inline v4d load4(const uint16_t* p) {
  return v4d{bf(p[0]), bf(p[1]), bf(p[2]), bf(p[3])};
}
inline v4d vabs(v4d a) {
  return v4d{std::fabs(a[0]), std::fabs(a[1]), std::fabs(a[2]), std::fabs(a[3])};
}

NG_CLONES void row_sums(const uint16_t* __restrict x, const uint16_t* __restrict dy,
                        const double* __restrict w, int64_t n, RowSums* out) {
  v4d sp[2] = {}, ss[2] = {}, dp[2] = {}, ds[2] = {}, da[2] = {};
  int64_t j = 0;
  for (; j + K <= n; j += K) {
    for (int h = 0; h < 2; ++h) {
      v4d xv = load4(x + j + 4 * h), dv = load4(dy + j + 4 * h);
      v4d wv;
      std::memcpy(&wv, w + j + 4 * h, sizeof wv);
      v4d sq = xv * xv;
      v4d pd = (dv * xv) * wv;
      v4d s = sp[h] + sq, z = s - sp[h];
      ss[h] = ss[h] + ((sp[h] - (s - z)) + (sq - z));  // TwoSum error
      sp[h] = s;
      s = dp[h] + pd;
      z = s - dp[h];
      ds[h] = ds[h] + ((dp[h] - (s - z)) + (pd - z));
      dp[h] = s;
      da[h] = da[h] + vabs(pd);
    }
  }
  double spl[K], ssl[K], dpl[K], dsl[K], dal[K];
  for (int l = 0; l < K; ++l) {
    spl[l] = sp[l / 4][l % 4];
    ssl[l] = ss[l / 4][l % 4];
    dpl[l] = dp[l / 4][l % 4];
    dsl[l] = ds[l / 4][l % 4];
    dal[l] = da[l / 4][l % 4];
  }
  for (int l = 0; j < n; ++j, ++l) {  // tail: term j goes to lane j mod K
    double xv = bf(x[j]), dv = bf(dy[j]);
    double sq = xv * xv;
    double pd = (dv * xv) * w[j];
    double s, e;
    two_sum(spl[l], sq, s, e);
    spl[l] = s;
    ssl[l] = ssl[l] + e;
    two_sum(dpl[l], pd, s, e);
    dpl[l] = s;
    dsl[l] = dsl[l] + e;
    dal[l] = dal[l] + std::fabs(pd);
  }
  double spi = spl[0], ssig = ssl[0], dpi = dpl[0], dsig = dsl[0], dabs = dal[0];
  for (int l = 1; l < K; ++l) {
    double s, q;
    two_sum(spi, spl[l], s, q);
    spi = s;
    ssig = (ssig + q) + ssl[l];
    two_sum(dpi, dpl[l], s, q);
    dpi = s;
    dsig = (dsig + q) + dsl[l];
    dabs = dabs + dal[l];
  }
  *out = {spi, ssig, dpi, dsig, dabs};
}

// (5)'s step for one element: a = dy*x (exact), (P, S) += a*(rh + rl) by
// TwoProduct and TwoSum (Dot2), A += |a*rh| rounded.
inline void dot2_step(double a, double rh, double rl, double& P, double& S, double& A) {
  double h, rr, s, q;
  two_prod(a, rh, h, rr);
  two_sum(P, h, s, q);
  P = s;
  S = S + ((q + rr) + a * rl);
  A = A + std::fabs(h);
}

// (5): Dot2 accumulation of rows [0, nr) of a row block into columns
// [j0, j0 + nc). xr/dyr: row pointers; hi/lo: rstd fed to the backward.
NG_CLONES void col_accum(const uint16_t* const* xr, const uint16_t* const* dyr,
                         const double* hi, const double* lo, int64_t nr, int64_t j0, int64_t nc,
                         double* __restrict P, double* __restrict S, double* __restrict A) {
  for (int64_t i = 0; i < nr; ++i) {
    const uint16_t* __restrict x = xr[i] + j0;
    const uint16_t* __restrict dy = dyr[i] + j0;
    const double rh = hi[i], rl = lo[i];
    for (int64_t j = 0; j < nc; ++j) dot2_step(bf(dy[j]) * bf(x[j]), rh, rl, P[j], S[j], A[j]);
  }
}

// (2): Newton correction of r. Returns false when a precondition fails.
bool rstd_newton(double Sh, double Sl, double eS, double Hd, double eps, double r, double& lo,
                 double& e2) {
  if (!(eps >= 0x1p-900) || !(r > 0x1p-300 && r < 0x1p300)) return false;
  double h, l, e1, e1l, z, zl, p1, p1e;
  two_prod(r, r, h, l);
  two_prod(Hd, eps, e1, e1l);
  two_sum(Sh, e1, z, zl);
  double w2 = zl + (Sl + e1l);
  double eW = inflate(eS + gamma_up(2) * (std::fabs(zl) + std::fabs(Sl) + std::fabs(e1l)));
  two_prod(h, z, p1, p1e);
  if (!(p1 >= 0.5 * Hd && p1 <= 2 * Hd)) return false;
  double f1 = Hd - p1;  // exact (Sterbenz)
  double t1 = h * w2, t2 = l * z, t3 = l * w2;
  double F = (((f1 - p1e) - t1) - t2) - t3;
  double eF = inflate(gamma_up(5) * (std::fabs(f1) + std::fabs(p1e) + std::fabs(t1) +
                                     std::fabs(t2) + std::fabs(t3)) +
                      3 * ETA + (h + std::fabs(l)) * eW);
  double E = F / Hd;
  double eE = inflate(eF / Hd + UP * std::fabs(E) + ETA);
  double Emax = inflate(std::fabs(E) + eE);
  if (!(Emax <= 0x1p-20)) return false;
  lo = r * (0.5 * E);
  e2 = inflate(r * eE * 0.5 + UP * std::fabs(lo) + ETA + r * ETA + r * 0.38 * (Emax * Emax));
  return std::isfinite(lo) && std::isfinite(e2);
}

// (3): RN32 of the exact rstd, enclosed by r + lo +- e2 (r > 0 finite).
float round_rstd_f32(double r, double lo, double e2, bool& certain) {
  certain = false;
  float cand = static_cast<float>(r);
  if (!std::isfinite(cand) || !(cand > 0) || !(cand < 0x1p127f) || !std::isfinite(e2)) return cand;
  float up = std::nextafter(cand, std::numeric_limits<float>::infinity());
  float dn = std::nextafter(cand, 0.0f);
  double c = cand;
  double m_up = (c + static_cast<double>(up)) * 0.5;  // exact: 25-bit significands
  double m_dn = (c + static_cast<double>(dn)) * 0.5;
  double tu = (r - m_up) + lo;  // r - m exact (Sterbenz)
  double td = (r - m_dn) + lo;
  double eu = inflate(e2 + UP * std::fabs(tu) + ETA);
  double ed = inflate(e2 + UP * std::fabs(td) + ETA);
  if (tu > eu) {
    certain = true;
    return up;
  }
  if (td < -ed) {
    certain = true;
    return dn;
  }
  if (tu < -eu && td > ed) {
    certain = true;
    return cand;
  }
  // Undecided: round the estimate r + lo (ties to even).
  auto even = [](float a, float b) {
    uint32_t ua, ub;
    std::memcpy(&ua, &a, 4);
    std::memcpy(&ub, &b, 4);
    return (ua & 1u) == 0 ? a : b;
  };
  if (tu > 0) return up;
  if (tu == 0) return even(cand, up);
  if (td < 0) return dn;
  if (td == 0) return even(cand, dn);
  return cand;
}

// The value-or-inf choices of eval_y / eval_dx as bit selects rather than
// conditional expressions: GCC (with its default -ftrapping-math) will not
// turn a conditional whose arm it has sunk floating-point work into into a
// vector blend, so the row loops below stayed scalar. Same values as
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

NG_CLONES void y_row_impl(const uint16_t* __restrict x, const double* __restrict w, int64_t n,
                          double hi, double lo, double yb, VB* __restrict out) {
  for (int64_t j = 0; j < n; ++j) eval_y(bf(x[j]), w[j], hi, lo, yb, out[j]);
}

NG_CLONES void dx_row_impl(const uint16_t* __restrict x, const uint16_t* __restrict dy,
                           const double* __restrict w, int64_t n, double k, double kb, double use,
                           double ub, VB* __restrict out) {
  for (int64_t j = 0; j < n; ++j) eval_dx(bf(x[j]), bf(dy[j]), w[j], k, kb, use, ub, out[j]);
}

// y_row_impl and dx_row_impl with values and bounds in separate arrays (the
// same eval_y / eval_dx, so the same bits), and dx's values alone: eval_dx's
// value v = use * fma(-x, k, dy * w), without the bound arithmetic.
NG_CLONES void y_row_split(const uint16_t* __restrict x, const double* __restrict w, int64_t n, double hi,
                           double lo, double yb, double* __restrict v, double* __restrict b) {
  for (int64_t j = 0; j < n; ++j) {
    VB o;
    eval_y(bf(x[j]), w[j], hi, lo, yb, o);
    v[j] = o.v;
    b[j] = o.bound;
  }
}

NG_CLONES void dx_row_split(const uint16_t* __restrict x, const uint16_t* __restrict dy,
                            const double* __restrict w, int64_t n, double k, double kb, double use, double ub,
                            double* __restrict v, double* __restrict b) {
  for (int64_t j = 0; j < n; ++j) {
    VB o;
    eval_dx(bf(x[j]), bf(dy[j]), w[j], k, kb, use, ub, o);
    v[j] = o.v;
    b[j] = o.bound;
  }
}

NG_CLONES void dx_row_values_impl(const uint16_t* __restrict x, const uint16_t* __restrict dy,
                                  const double* __restrict w, int64_t n, double k, double use,
                                  double* __restrict v) {
  for (int64_t j = 0; j < n; ++j) v[j] = use * std::fma(-bf(x[j]), k, bf(dy[j]) * w[j]);  // as eval_dx
}

// (7): how many of n values are finite with bound > f (atol + rtol |v|) (a NaN bound counts).
NG_CLONES int64_t count_over(const VB* __restrict v, int64_t n, double f, double atol, double rtol) {
  int64_t c = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double m = std::fabs(v[j].v);
    c += (m <= std::numeric_limits<double>::max()) & !(v[j].bound <= f * (atol + rtol * m));
  }
  return c;
}

// Largest magnitude bit pattern of n BF16 values (>= 0x7F80: a NaN or Inf).
// Finite BF16 magnitudes are ordered like their bit patterns.
NG_CLONES uint16_t absmax_bits(const uint16_t* __restrict p, int64_t n) {
  uint16_t m = 0;
  for (int64_t j = 0; j < n; ++j) {
    const uint16_t b = static_cast<uint16_t>(p[j] & 0x7FFFu);
    m = b > m ? b : m;
  }
  return m;
}

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// (5) for compute_pair: col_accum of both modes over the same rows and
// columns (hi0/lo0: the fp64 reference's rstd, hi1: the ideal's, a binary32
// value; its lo is 0). The exact product a = dy*x is formed once. Side 0
// takes col_accum's steps. Side 1 takes them without the two terms that are
// zero there: a*hi1 is exact (16 + 24 significand bits, in [2^-415, 2^384]
// when non-zero, (0)), so TwoProduct's error rr is 0, and a*lo1 = a*0 is 0;
// adding them changes at most the sign of a zero term, which s cannot see (s
// starts at +0 and a round-to-nearest sum is -0 only when both addends are).
// When a or hi1 is not finite, h and with it pi are not finite either way, and
// that column is recomputed by the plain sum (finalization). So both sides'
// bits equal col_accum's (-ffp-contract=off: nothing is fused differently).
NG_CLONES void col_accum2(const uint16_t* const* xr, const uint16_t* const* dyr, const double* hi0,
                          const double* lo0, const double* hi1, int64_t nr, int64_t j0, int64_t nc,
                          double* __restrict P0, double* __restrict S0, double* __restrict A0,
                          double* __restrict P1, double* __restrict S1, double* __restrict A1) {
  for (int64_t i = 0; i < nr; ++i) {
    const uint16_t* __restrict x = xr[i] + j0;
    const uint16_t* __restrict dy = dyr[i] + j0;
    const double rh0 = hi0[i], rl0 = lo0[i], rh1 = hi1[i];
    for (int64_t j = 0; j < nc; ++j) {
      const double a = bf(dy[j]) * bf(x[j]);
      dot2_step(a, rh0, rl0, P0[j], S0[j], A0[j]);
      const double h = a * rh1;  // exact
      double s, q;
      two_sum(P1[j], h, s, q);
      P1[j] = s;
      S1[j] = S1[j] + q;
      A1[j] = A1[j] + std::fabs(h);
    }
  }
}

}  // namespace

class ReferenceBuilder {
 public:
  // Fill refs[0..n) (n = 1 or 2), refs[i] in RstdMode modes[i], from one pass
  // over the inputs. Everything but the backward's rstd (row sums, rstd and
  // its escalation, the y filter) does not depend on the mode and is
  // computed once; each Reference ends up bitwise what a run with n = 1 in
  // its mode gives. With n = 2, modes must be {fp64, fp32_rounded}.
  static void run(Reference* const* refs, const RstdMode* modes, int n, const Problem& p, const Options& o);

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

void ReferenceBuilder::run(Reference* const* refs, const RstdMode* modes, int ns, const Problem& p,
                           const Options& o) {
  const int64_t R = p.x.rows(), H = p.x.cols;
  const int nt = o.threads > 0 ? o.threads : omp_get_max_threads();
  const EscalationPolicy& pol = o.escalation;
  const bool esc_all = o.oracle == OracleMode::mpfr;
  const bool escalating = o.oracle != OracleMode::fp64;
  std::vector<Side> sides(ns);
  for (int s = 0; s < ns; ++s) {
    Reference& ref = *refs[s];
    sides[s].ref = &ref;
    sides[s].fp32 = modes[s] == RstdMode::fp32_rounded;
    ref.p_ = p;
    ref.o_ = o;
    ref.o_.rstd = modes[s];
    ref.rows_ = R;
    ref.cols_ = H;
    if (s == 0) {
      ref.w_.assign(H, 0.0);
      for (int64_t j = 0; j < H && p.w.p != nullptr; ++j)  // w.p may be null when R == 0
        ref.w_[j] = p.w.dtype == WDtype::bf16 ? bf(static_cast<const uint16_t*>(p.w.p)[j])
                                              : static_cast<double>(static_cast<const float*>(p.w.p)[j]);
    } else {
      ref.w_ = refs[0]->w_;
    }
    for (auto* v : {&ref.rs_hi_, &ref.rs_lo_, &ref.rs_e_, &ref.y_b_, &ref.use_, &ref.use_b_, &ref.c_,
                    &ref.c_b_, &ref.k_, &ref.k_b_})
      v->assign(R, 0.0);
    ref.rs32_.assign(R, 0.0f);
    ref.rs32_ok_.assign(R, 0);
    ref.dw_.assign(H, 0.0);
    ref.dw_b_.assign(H, 0.0);
    ref.dw_abs_.assign(H, 0.0);
    ref.row_slot_.assign(R, -1);
    ref.rs_mp_.assign(R, 0);
    ref.dw_mp_.assign(H, 0);
    ref.esc_y_.clear();
    ref.esc_dx_.clear();
    ref.esc_ = Escalations{};
    ref.esc_.mode = o.oracle;
  }
  if (R == 0) return;  // empty sums: dw = 0 exactly

  for (Side& sd : sides) {
    sd.use_lo.assign(R, 0.0);
    sd.use_e.assign(R, 0.0);
    sd.row_bad.assign(R, 0);
    sd.row_flag.assign(escalating ? R : 0, 0);
    sd.Sacc.assign(H, 0.0);
  }

  // Per-row constants of (1).
  const double Hd = static_cast<double>(H);
  const int64_t m = (H + K - 1) / K;
  const double gN = gamma_up(static_cast<double>(m + 2 * K));
  const double gN2 = inflate(gN * gN);
  const double eps = p.eps;
  const double* w = refs[0]->w_.data();

  // (7) escalation state: precision used by in-row rstd escalations (shared
  // by the sides: the rstd is), per-thread MPFR seconds.
  double wmax = 0;
  bool w_finite = true;
  for (int64_t j = 0; j < H; ++j) {
    if (!std::isfinite(w[j])) w_finite = false;
    else wmax = std::max(wmax, std::fabs(w[j]));
  }
  std::vector<int32_t> rs_bits(escalating ? R : 0, 0);
  std::vector<uint8_t> rs_unmet(escalating ? R : 0, 0);
  std::vector<double> mp_secs(nt, 0.0);
  std::vector<std::vector<VB>> scratch(nt);  // per-thread row of (6) values, filled only when a filter fails
  const auto over_fraction = [&pol](const VB* v, int64_t n, const Tolerance& t) {
    return count_over(v, n, pol.fraction, t.atol, t.rtol) > 0;
  };

  auto do_row = [&](int64_t r) {
    RowSums rs;
    row_sums(p.x.row(r), p.dy.row(r), w, H, &rs);
    double Sh, Sl;
    two_sum(rs.s_pi, rs.s_sig, Sh, Sl);
    double r0 = 1.0 / std::sqrt(Sh / Hd + eps);
    double lo = 0, e2 = INF;
    double Sup = INF;  // >= S = sum_j x_j^2 (so |x_j| <= sqrt(Sup)), for the filter of (7)
    bool ok = std::isfinite(Sh) && std::isfinite(Sl);
    if (!ok) {
      // Non-finite x: TwoSum turns inf into NaN; use the plain FP64 formula so
      // rstd has its IEEE value (1/sqrt(inf) = 0 for an Inf row, NaN for NaN).
      const uint16_t* xr = p.x.row(r);
      double s = 0;
      for (int64_t j = 0; j < H; ++j) s = s + bf(xr[j]) * bf(xr[j]);
      r0 = 1.0 / std::sqrt(s / Hd + eps);
    } else {
      double eS = inflate(gN2 * inflate(Sh + std::fabs(Sl)) / (1 - gN2));
      Sup = inflate(Sh + std::fabs(Sl) + eS);
      if (!rstd_newton(Sh, Sl, eS, Hd, eps, r0, lo, e2)) {
        lo = 0;
        VB s{Sh, inflate(std::fabs(Sl) + eS)};
        VB q = vb_sqrt(vb_add(vb_div(s, {Hd, 0}), {eps, 0}));
        VB rr = vb_div({1, 0}, q);  // rr.v == r0: the same operations
        e2 = rr.bound;
      }
    }
    bool certain = false;
    float f = ok ? round_rstd_f32(r0, lo, e2, certain) : static_cast<float>(r0);
    // (7) rstd escalation, before anything downstream reads rstd.
    bool rs_mp = false;
    if (escalating && ok) {
      bool go = esc_all;
      if (!go) {
        const double b = inflate(std::fabs(lo) + e2);  // rstd(r).bound
        const double tol = pol.rstd.atol + pol.rstd.rtol * std::fabs(r0);
        const float cand = static_cast<float>(r0);
        go = !(b <= pol.fraction * tol) || (!certain && std::isfinite(cand) && cand < 0x1p127f);
      }
      if (go) {
        const auto t0 = Clock::now();
        const RstdMp mr = mpfr_rstd(p.x.row(r), H, eps, pol);
        r0 = mr.hi;
        lo = mr.lo;
        e2 = mr.e;
        f = mr.f;
        certain = mr.f_certain;
        rs_mp = true;
        rs_bits[r] = mr.bits;
        rs_unmet[r] = mr.met ? 0 : 1;
        mp_secs[omp_get_thread_num()] += since(t0);
      }
    }
    const double yb = inflate(UP * std::fabs(lo) + e2);
    const uint16_t* xr = p.x.row(r);
    const uint16_t* dr = p.dy.row(r);
    // (7) the y part of the row filter depends on the rstd alone: evaluated
    // once for both sides, when the first side reaches it. -1: not yet.
    int yflag = -1;
    uint16_t dm = 0;
    double Xm = 0;
    for (Side& sd : sides) {
      Reference& ref = *sd.ref;
      ref.rs_hi_[r] = r0;
      ref.rs_lo_[r] = lo;
      ref.rs_e_[r] = e2;
      ref.y_b_[r] = yb;
      ref.rs32_[r] = f;
      ref.rs32_ok_[r] = certain ? 1 : 0;
      ref.rs_mp_[r] = rs_mp ? 1 : 0;
      double use, ulo, ue, ub;
      if (sd.fp32) {
        use = f;
        ulo = 0;
        ue = 0;
        ub = std::isfinite(f) && ok ? 0.0 : INF;
      } else {
        use = r0;
        ulo = lo;
        ue = e2;
        ub = inflate(std::fabs(lo) + e2);
      }
      ref.use_[r] = use;
      ref.use_b_[r] = ub;
      sd.use_lo[r] = ulo;
      sd.use_e[r] = ue;
      sd.row_bad[r] = (ok && std::isfinite(use) && use > 0) ? 0 : 1;
      // (4)
      double Dh = rs.d_pi + rs.d_sig;
      double eD = inflate(UP * std::fabs(Dh) + gN2 * (rs.d_abs / (1 - gN)));
      VB U{use, ub};
      VB c = vb_div(vb_mul(U, {Dh, eD}), {Hd, 0});
      VB k = vb_mul(U, c);
      ref.c_[r] = c.v;
      ref.c_b_[r] = c.bound;
      ref.k_[r] = k.v;
      ref.k_b_[r] = k.bound;
      // (7) y / dx row filter (finite inputs only).
      if (escalating && !sd.row_bad[r] && w_finite) {
        if (yflag < 0) dm = absmax_bits(dr, H);
        if (dm < 0x7F80u) {
          uint8_t flag = 0;
          if (esc_all) {
            flag = 3;
            yflag = 0;
          } else {
            std::vector<VB>& buf = scratch[omp_get_thread_num()];
            if (yflag < 0) {
              yflag = 0;
              Xm = std::sqrt(Sup) * (1 + 0x1p-48);  // >= max_j |x_j| (one scan saved)
              const double XW = Xm * wmax * (1 + 0x1p-48);
              const double By = UP * XW * (std::fabs(r0) + std::fabs(lo)) * (1 + 0x1p-48) + XW * yb + 2 * ETA;
              if (!(2 * By <= pol.fraction * pol.y.atol)) {
                buf.resize(H);
                y_row_impl(xr, w, H, r0, lo, yb, buf.data());  // the values y(r, j) will return
                if (over_fraction(buf.data(), H, pol.y)) yflag = 1;
              }
            }
            flag = static_cast<uint8_t>(yflag);
            const double Gm = bf(dm) * wmax * (1 + 0x1p-48);
            const double Tm = (Gm + Xm * std::fabs(k.v)) * (1 + 0x1p-48);
            const double Et = UP * Tm + ETA + Xm * k.bound;
            const double Bdx =
                UP * std::fabs(use) * Tm * (1 + 0x1p-48) + ETA + std::fabs(use) * Et + Tm * ub + ub * Et;
            if (!(2 * Bdx <= pol.fraction * pol.dx.atol)) {
              buf.resize(H);
              dx_row_impl(xr, dr, w, H, k.v, k.bound, use, ub, buf.data());  // the values dx(r, j) will return
              if (over_fraction(buf.data(), H, pol.dx)) flag |= 2;
            }
          }
          sd.row_flag[r] = flag;
        } else {
          yflag = 0;  // dm is known: a non-finite dy row is never filtered
        }
      }
    }
  };

  // Row blocks (row_blocks.h): the rows of a block are read twice (row
  // sums, then column accumulation) while still in cache.
  const int64_t RB = detail::row_block(R, H, 2 * nt, 1);
  const int64_t CB = detail::col_block(H, nt);
  const int64_t ncb = (H + CB - 1) / CB;
  std::vector<const uint16_t*> xr(RB), dyr(RB);
  Side& s0 = sides[0];
  Side& s1 = sides[ns - 1];  // == s0 when ns == 1
  // pi accumulators live in dw_ until finalization
  double *P0 = s0.ref->dw_.data(), *P1 = s1.ref->dw_.data();
  double *A0 = s0.ref->dw_abs_.data(), *A1 = s1.ref->dw_abs_.data();
  double *S0 = s0.Sacc.data(), *S1 = s1.Sacc.data();
  const double *hi0 = s0.ref->use_.data(), *hi1 = s1.ref->use_.data();
  const double* lo0 = s0.use_lo.data();  // s1's lo is 0 (col_accum2)
  if (ns == 2 && (s0.fp32 || !s1.fp32)) throw std::logic_error("ReferenceBuilder: pair must be (fp64, fp32_rounded)");

  // Rows of a block in dynamic chunks of about 16384 elements: a thread that
  // runs slower (an SMT sibling, another process on its core) takes fewer
  // rows rather than holding the block's barrier. Every row is computed alone
  // (per-thread state: the filter's scratch row and MPFR seconds only), so
  // the assignment does not change a bit.
  const int64_t rchunk = std::max<int64_t>(1, 16384 / H);

#pragma omp parallel num_threads(nt)
  {
    for (int64_t rb = 0; rb < R; rb += RB) {
      const int64_t nr = std::min(RB, R - rb);
#pragma omp for schedule(dynamic, rchunk)
      for (int64_t i = 0; i < nr; ++i) {
        do_row(rb + i);
        xr[i] = p.x.row(rb + i);
        dyr[i] = p.dy.row(rb + i);
      }
#pragma omp for schedule(dynamic, 1)
      for (int64_t cb = 0; cb < ncb; ++cb) {
        const int64_t j0 = cb * CB, nc = std::min(CB, H - j0);
        if (ns == 1)
          col_accum(xr.data(), dyr.data(), hi0 + rb, lo0 + rb, nr, j0, nc, P0 + j0, S0 + j0, A0 + j0);
        else
          col_accum2(xr.data(), dyr.data(), hi0 + rb, lo0 + rb, hi1 + rb, nr, j0, nc, P0 + j0, S0 + j0, A0 + j0,
                     P1 + j0, S1 + j0, A1 + j0);
      }
    }
  }
  double secs = 0;  // in-row rstd escalations (shared: reported by each side)
  for (double s : mp_secs) secs += s;
  secs /= nt;
  for (Side& sd : sides) finish(sd, p, o, secs, rs_bits, rs_unmet);
}

// (5) finalization and (7) escalation of rows and dw columns, for one side.
void ReferenceBuilder::finish(Side& sd, const Problem& p, const Options& o, double secs,
                              const std::vector<int32_t>& rs_bits, const std::vector<uint8_t>& rs_unmet) {
  Reference& ref = *sd.ref;
  const int64_t R = p.x.rows(), H = p.x.cols;
  const bool fp32 = sd.fp32;
  const int nt = o.threads > 0 ? o.threads : omp_get_max_threads();
  const EscalationPolicy& pol = o.escalation;
  const bool esc_all = o.oracle == OracleMode::mpfr;
  const bool escalating = o.oracle != OracleMode::fp64;
  const double eps = p.eps;
  const double* w = ref.w_.data();
  const std::vector<double>& use_lo = sd.use_lo;
  const std::vector<double>& use_e = sd.use_e;
  const std::vector<uint8_t>& row_bad = sd.row_bad;
  const std::vector<uint8_t>& row_flag = sd.row_flag;
  double* P = ref.dw_.data();
  const double* Sacc = sd.Sacc.data();
  double* A = ref.dw_abs_.data();
  const double* hi = ref.use_.data();

  // (5) finalization.
  bool any_bad = false;
  double lambda = 0, rho = 0;
  for (int64_t r = 0; r < R; ++r) {
    if (row_bad[r]) {
      any_bad = true;
      continue;
    }
    lambda = std::max(lambda, std::fabs(use_lo[r]) / ref.use_[r] * (1 + 0x1p-50));
    rho = std::max(rho, use_e[r] / ref.use_[r] * (1 + 0x1p-50));
  }
  const double Rd = static_cast<double>(R);
  const double gR = gamma_up(Rd), gR2 = gamma_up(Rd + 2);
  const double coef = inflate(inflate(gR2 * (gR + lambda) + rho) / (1 - gR));
  std::vector<int64_t> bad_cols;
  for (int64_t j = 0; j < H; ++j) {
    double v = P[j] + Sacc[j];
    P[j] = v;
    if (!std::isfinite(v)) {
      bad_cols.push_back(j);
      ref.dw_b_[j] = INF;
    } else {
      ref.dw_b_[j] = any_bad ? INF : inflate(UP * std::fabs(v) + ETA + coef * A[j]);
    }
  }
  if (!bad_cols.empty()) {
    // Plain FP64 recomputation (IEEE propagation) for non-finite columns.
    const int64_t nbad = static_cast<int64_t>(bad_cols.size());
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < nbad; ++b) {
      const int64_t j = bad_cols[b];
      double s = 0;
      for (int64_t r = 0; r < R; ++r) s = s + (bf(p.dy.row(r)[j]) * bf(p.x.row(r)[j])) * hi[r];
      P[j] = s;
    }
  }
  if (!escalating) return;

  // (7) MPFR rows: c, y, dx of every flagged row. Slots in row order.
  Escalations& es = ref.esc_;
  for (int64_t r = 0; r < R; ++r) {
    if (!ref.rs_mp_[r]) continue;
    ++es.rstd;
    es.max_bits = std::max(es.max_bits, static_cast<int>(rs_bits[r]));
    es.unmet += rs_unmet[r];
  }
  // Budget of MPFR elements (auto mode): rows first, in row order, then columns.
  int64_t budget = esc_all ? std::numeric_limits<int64_t>::max() : pol.max_elements;
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < R; ++r) {
    if (!row_flag[r]) continue;
    es.y += (row_flag[r] & 1) ? 1 : 0;
    es.dx += (row_flag[r] & 2) ? 1 : 0;
    if (budget < H) {
      ++es.skipped;
      continue;
    }
    budget -= H;
    ref.row_slot_[r] = static_cast<int32_t>(rows.size());
    rows.push_back(r);
  }
  es.rows = static_cast<int64_t>(rows.size());
  auto t0 = Clock::now();
  if (!rows.empty()) {
    const int64_t nrows = es.rows;
    ref.esc_y_.assign(static_cast<size_t>(nrows * H), VB{});
    ref.esc_dx_.assign(static_cast<size_t>(nrows * H), VB{});
    std::vector<int32_t> bits(nrows, 0);
    std::vector<uint8_t> met(nrows, 0);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int64_t i = 0; i < nrows; ++i) {
      const int64_t r = rows[i];
      const RowMp mr = mpfr_row(p.x.row(r), p.dy.row(r), w, H, eps, fp32, ref.rs32_[r], pol);
      std::copy(mr.y.begin(), mr.y.end(), ref.esc_y_.begin() + i * H);
      std::copy(mr.dx.begin(), mr.dx.end(), ref.esc_dx_.begin() + i * H);
      ref.c_[r] = mr.c.v;
      ref.c_b_[r] = mr.c.bound;
      bits[i] = mr.bits;
      met[i] = mr.met ? 1 : 0;
    }
    for (int64_t i = 0; i < nrows; ++i) {
      es.max_bits = std::max(es.max_bits, static_cast<int>(bits[i]));
      es.unmet += met[i] ? 0 : 1;
    }
  }

  // (7) MPFR dw columns.
  if (!any_bad) {
    std::vector<int64_t> todo;
    for (int64_t j = 0; j < H; ++j) {
      const double v = P[j];
      if (!std::isfinite(v)) continue;
      if (esc_all || !(ref.dw_b_[j] <= pol.fraction * (pol.dw.atol + pol.dw.rtol * std::fabs(v)))) {
        if (budget < R) {
          ++es.skipped;
          continue;
        }
        budget -= R;
        todo.push_back(j);
        ref.dw_mp_[j] = 1;
      }
    }
    es.dw = static_cast<int64_t>(todo.size());
    RstdTable table;
    for (int bits = pol.bits; !todo.empty(); bits = 2 * bits) {
      if (!fp32) table.build(p.x, eps, bits, nt);
      const int64_t n = static_cast<int64_t>(todo.size());
      std::vector<uint8_t> met(n, 0);
#pragma omp parallel num_threads(nt)
      {
        ColScratch sc;
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < n; ++i) {
          const int64_t j = todo[i];
          const Finished f = mpfr_dw(p.x, p.dy, j, fp32, ref.rs32_.data(), fp32 ? nullptr : &table, bits, sc);
          P[j] = f.vb.v;
          ref.dw_b_[j] = f.vb.bound;
          met[i] = meets(f, pol.dw, pol.target) ? 1 : 0;
        }
      }
      es.max_bits = std::max(es.max_bits, bits);
      std::vector<int64_t> next;
      for (int64_t i = 0; i < n; ++i)
        if (!met[i]) next.push_back(todo[i]);
      if (bits * 2 > pol.max_bits) {
        es.unmet += static_cast<int64_t>(next.size());
        break;
      }
      todo.swap(next);
    }
  }
  es.seconds = secs + since(t0);
}

namespace {
void check_compute_args(const Problem& p, const Options& o) {
  validate(p);
  validate_policy(o.escalation);
  if (o.oracle == OracleMode::mpfr && p.x.rows() * p.x.cols > o.escalation.mpfr_max_elements)
    throw std::invalid_argument("normgate::oracle: OracleMode::mpfr is for small cases: rows*cols = " +
                                std::to_string(p.x.rows() * p.x.cols) + " exceeds " +
                                std::to_string(o.escalation.mpfr_max_elements) +
                                " (EscalationPolicy::mpfr_max_elements); use OracleMode::auto_ (--oracle auto)");
}
}  // namespace

Reference Reference::compute(const Problem& p, const Options& o) {
  check_compute_args(p, o);
  Reference ref;
  Reference* refs[1] = {&ref};
  const RstdMode modes[1] = {o.rstd};
  ReferenceBuilder::run(refs, modes, 1, p, o);
  return ref;
}

ReferencePair Reference::compute_pair(const Problem& p, const Options& o) {
  check_compute_args(p, o);
  ReferencePair out;
  Reference* refs[2] = {&out.ref, &out.ideal};
  const RstdMode modes[2] = {RstdMode::fp64, RstdMode::fp32_rounded};
  ReferenceBuilder::run(refs, modes, 2, p, o);
  return out;
}

VB Reference::rstd(int64_t r) const {
  return {rs_hi_[r], std::isfinite(rs_hi_[r]) ? inflate(std::fabs(rs_lo_[r]) + rs_e_[r]) : INF};
}

VB Reference::y(int64_t r, int64_t j) const {
  if (const int32_t s = row_slot_[r]; s >= 0) return esc_y_[static_cast<size_t>(s) * cols_ + j];
  VB out;
  eval_y(bf(p_.x.row(r)[j]), w_[j], rs_hi_[r], rs_lo_[r], y_b_[r], out);
  return out;
}

namespace {
// dh = dx + a (Problem::dx_add): one FP64 rounding, bound grows by 2^-52 |result|.
inline void add_addend(VB& v, double a) {
  const double s = v.v + a;
  v.bound = v.bound + 0x1p-52 * std::fabs(s);
  v.v = s;
}

// An escalated row's stored (value, bound) pairs into the split arrays.
inline void split_escalated(const VB* e, int64_t n, double* v, double* bound) {
  for (int64_t j = 0; j < n; ++j) {
    v[j] = e[j].v;
    bound[j] = e[j].bound;
  }
}
}  // namespace

VB Reference::dx(int64_t r, int64_t j) const {
  VB out;
  if (const int32_t s = row_slot_[r]; s >= 0) {
    out = esc_dx_[static_cast<size_t>(s) * cols_ + j];
  } else {
    eval_dx(bf(p_.x.row(r)[j]), bf(p_.dy.row(r)[j]), w_[j], k_[r], k_b_[r], use_[r], use_b_[r], out);
  }
  if (p_.dx_add.p != nullptr) add_addend(out, bf(p_.dx_add.row(r)[j]));
  return out;
}

void Reference::y_row(int64_t r, VB* out) const {
  if (const int32_t s = row_slot_[r]; s >= 0) {
    std::copy_n(esc_y_.begin() + static_cast<size_t>(s) * cols_, cols_, out);
    return;
  }
  y_row_impl(p_.x.row(r), w_.data(), cols_, rs_hi_[r], rs_lo_[r], y_b_[r], out);
}

void Reference::dx_row(int64_t r, VB* out) const {
  if (const int32_t s = row_slot_[r]; s >= 0) {
    std::copy_n(esc_dx_.begin() + static_cast<size_t>(s) * cols_, cols_, out);
  } else {
    dx_row_impl(p_.x.row(r), p_.dy.row(r), w_.data(), cols_, k_[r], k_b_[r], use_[r], use_b_[r], out);
  }
  if (p_.dx_add.p != nullptr) {
    const uint16_t* a = p_.dx_add.row(r);
    for (int64_t j = 0; j < cols_; ++j) add_addend(out[j], bf(a[j]));
  }
}

void Reference::y_row(int64_t r, int64_t j0, int64_t n, double* v, double* bound) const {
  if (const int32_t s = row_slot_[r]; s >= 0) {
    split_escalated(esc_y_.data() + static_cast<size_t>(s) * cols_ + j0, n, v, bound);
    return;
  }
  y_row_split(p_.x.row(r) + j0, w_.data() + j0, n, rs_hi_[r], rs_lo_[r], y_b_[r], v, bound);
}

void Reference::dx_row(int64_t r, int64_t j0, int64_t n, double* v, double* bound) const {
  if (const int32_t s = row_slot_[r]; s >= 0) {
    split_escalated(esc_dx_.data() + static_cast<size_t>(s) * cols_ + j0, n, v, bound);
  } else {
    dx_row_split(p_.x.row(r) + j0, p_.dy.row(r) + j0, w_.data() + j0, n, k_[r], k_b_[r], use_[r], use_b_[r], v,
                 bound);
  }
  if (p_.dx_add.p != nullptr) {
    const uint16_t* a = p_.dx_add.row(r) + j0;
    for (int64_t j = 0; j < n; ++j) {
      VB o{v[j], bound[j]};
      add_addend(o, bf(a[j]));
      v[j] = o.v;
      bound[j] = o.bound;
    }
  }
}

void Reference::dx_row_values(int64_t r, int64_t j0, int64_t n, double* v) const {
  if (const int32_t s = row_slot_[r]; s >= 0) {
    const VB* e = esc_dx_.data() + static_cast<size_t>(s) * cols_ + j0;
    for (int64_t j = 0; j < n; ++j) v[j] = e[j].v;
  } else {
    dx_row_values_impl(p_.x.row(r) + j0, p_.dy.row(r) + j0, w_.data() + j0, n, k_[r], use_[r], v);
  }
  if (p_.dx_add.p != nullptr) {
    const uint16_t* a = p_.dx_add.row(r) + j0;
    for (int64_t j = 0; j < n; ++j) v[j] = v[j] + bf(a[j]);  // add_addend's value
  }
}

}  // namespace normgate::oracle
