// oracle/src/reference.cpp: the FP64 reference and its error bounds.
// The pass that fills a Reference is reference_pass.cpp ((1)-(5) and the
// rstd escalation and row filter of (7)); its per-mode end, (5)'s
// finalization and the MPFR rows and dw columns of (7), is reference_finish.cpp;
// reference_parts.h is what the three files share. This file: input checks,
// the entry points and the (6) y, dx evaluation behind the accessors.
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
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "eft.h"
#include "reference_parts.h"
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

// (6): the row loops of eval_y / eval_dx (reference_parts.h); y_row_impl and
// dx_row_impl are also reference_pass.cpp's row filter of (7).
namespace detail {

NG_CLONES void y_row_impl(const uint16_t* __restrict x, const double* __restrict w, int64_t n,
                          double hi, double lo, double yb, VB* __restrict out) {
  for (int64_t j = 0; j < n; ++j) eval_y(bf(x[j]), w[j], hi, lo, yb, out[j]);
}

NG_CLONES void dx_row_impl(const uint16_t* __restrict x, const uint16_t* __restrict dy,
                           const double* __restrict w, int64_t n, double k, double kb, double use,
                           double ub, VB* __restrict out) {
  for (int64_t j = 0; j < n; ++j) eval_dx(bf(x[j]), bf(dy[j]), w[j], k, kb, use, ub, out[j]);
}

}  // namespace detail

namespace {

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

}  // namespace

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

ReferencePair Reference::compute_pair(const Problem& p, const Options& o, Outputs* baseline) {
  check_compute_args(p, o);
  if (baseline != nullptr && o.forward_only)
    throw std::invalid_argument(
        "normgate::oracle: compute_pair computes the FP32 baseline's dw in its column pass, which "
        "Options::forward_only skips; call fp32_baseline() for a forward-only reference");
  ReferencePair out;
  Reference* refs[2] = {&out.ref, &out.ideal};
  const RstdMode modes[2] = {RstdMode::fp64, RstdMode::fp32_rounded};
  ReferenceBuilder::run(refs, modes, 2, p, o, baseline);
  return out;
}

void Reference::not_computed(const char* what) {
  throw std::logic_error(std::string("normgate::oracle::Reference: ") + what +
                         " is not computed: this reference was computed with Options::forward_only (y and rstd "
                         "only)");
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
  if (o_.forward_only) not_computed("dx");
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
  if (o_.forward_only) not_computed("dx_row");
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
  if (o_.forward_only) not_computed("dx_row");
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
  if (o_.forward_only) not_computed("dx_row_values");
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
