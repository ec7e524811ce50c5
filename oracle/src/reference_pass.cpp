// oracle/src/reference_pass.cpp: the pass over x and dy that fills a Reference
// (derivation in reference.cpp): row sums (1), rstd (2) and its FP32 rounding
// (3), c and k (4), the dw column accumulation (5), and the rstd escalation
// and y / dx row filter of (7); the end of each mode is reference_finish.cpp.
// Options::forward_only skips (5) (the column pass; the row pass is the same).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "eft.h"
#include "fp32_parts.h"
#include "mpfr_eval.h"
#include "reference_parts.h"
#include "row_blocks.h"
#include "normgate/core/bf16.h"
#include "normgate/oracle/reference.h"

namespace normgate::oracle {

using namespace detail;

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
// kBase: also the FP32 baseline's dw column terms (fp32_dw_step with the
// baseline's rstd rb32 of each row) into DW, rows in the same order as its
// own pass, so the same bits (fp32_parts.h); its x and dy are the ones just
// loaded (D22 of docs/perf/oracle-and-gate-throughput.md).
template <bool kBase>
__attribute__((always_inline)) inline void col_accum2_impl(
    const uint16_t* const* xr, const uint16_t* const* dyr, const double* hi0, const double* lo0,
    const double* hi1, const float* rb32, int64_t nr, int64_t j0, int64_t nc, double* __restrict P0,
    double* __restrict S0, double* __restrict A0, double* __restrict P1, double* __restrict S1,
    double* __restrict A1, float* __restrict DW) {
  // Rows in pairs, each column's six sums held in registers across both
  // (unroll and jam): every column still takes row i, then row i + 1, in
  // the same operations, so the bits are the same; the sums are loaded and
  // stored half as often (the pair's time -6% on one core of the dev
  // machine: docs/perf/oracle-and-gate-throughput.md, D21).
  const auto step = [](double a, double rh0, double rl0, double rh1, double& p0, double& s0, double& a0,
                       double& p1, double& s1, double& a1) {
    dot2_step(a, rh0, rl0, p0, s0, a0);
    const double h = a * rh1;  // exact
    double s, q;
    two_sum(p1, h, s, q);
    p1 = s;
    s1 = s1 + q;
    a1 = a1 + std::fabs(h);
  };
  int64_t i = 0;
  for (; i + 1 < nr; i += 2) {
    const uint16_t* __restrict xa = xr[i] + j0;
    const uint16_t* __restrict dya = dyr[i] + j0;
    const uint16_t* __restrict xb = xr[i + 1] + j0;
    const uint16_t* __restrict dyb = dyr[i + 1] + j0;
    const double rh0a = hi0[i], rl0a = lo0[i], rh1a = hi1[i];
    const double rh0b = hi0[i + 1], rl0b = lo0[i + 1], rh1b = hi1[i + 1];
    const float rba = kBase ? rb32[i] : 0.0f, rbb = kBase ? rb32[i + 1] : 0.0f;
    for (int64_t j = 0; j < nc; ++j) {
      double p0 = P0[j], s0 = S0[j], a0 = A0[j], p1 = P1[j], s1 = S1[j], a1 = A1[j];
      const float xfa = bf16_to_float(xa[j]), dfa = bf16_to_float(dya[j]);
      const float xfb = bf16_to_float(xb[j]), dfb = bf16_to_float(dyb[j]);
      step(static_cast<double>(dfa) * static_cast<double>(xfa), rh0a, rl0a, rh1a, p0, s0, a0, p1, s1, a1);
      step(static_cast<double>(dfb) * static_cast<double>(xfb), rh0b, rl0b, rh1b, p0, s0, a0, p1, s1, a1);
      P0[j] = p0;
      S0[j] = s0;
      A0[j] = a0;
      P1[j] = p1;
      S1[j] = s1;
      A1[j] = a1;
      if constexpr (kBase) DW[j] = fp32_dw_step(fp32_dw_step(DW[j], xfa, dfa, rba), xfb, dfb, rbb);
    }
  }
  if (i < nr) {  // an odd last row
    const uint16_t* __restrict x = xr[i] + j0;
    const uint16_t* __restrict dy = dyr[i] + j0;
    for (int64_t j = 0; j < nc; ++j) {
      step(bf(dy[j]) * bf(x[j]), hi0[i], lo0[i], hi1[i], P0[j], S0[j], A0[j], P1[j], S1[j], A1[j]);
      if constexpr (kBase) DW[j] = fp32_dw_step(DW[j], bf16_to_float(x[j]), bf16_to_float(dy[j]), rb32[i]);
    }
  }
}

NG_CLONES void col_accum2(const uint16_t* const* xr, const uint16_t* const* dyr, const double* hi0,
                          const double* lo0, const double* hi1, int64_t nr, int64_t j0, int64_t nc,
                          double* __restrict P0, double* __restrict S0, double* __restrict A0,
                          double* __restrict P1, double* __restrict S1, double* __restrict A1) {
  col_accum2_impl<false>(xr, dyr, hi0, lo0, hi1, nullptr, nr, j0, nc, P0, S0, A0, P1, S1, A1, nullptr);
}

// col_accum2 with the FP32 baseline's dw columns (kBase).
NG_CLONES void col_accum2_base(const uint16_t* const* xr, const uint16_t* const* dyr, const double* hi0,
                               const double* lo0, const double* hi1, const float* rb32, int64_t nr, int64_t j0,
                               int64_t nc, double* __restrict P0, double* __restrict S0, double* __restrict A0,
                               double* __restrict P1, double* __restrict S1, double* __restrict A1,
                               float* __restrict DW) {
  col_accum2_impl<true>(xr, dyr, hi0, lo0, hi1, rb32, nr, j0, nc, P0, S0, A0, P1, S1, A1, DW);
}

}  // namespace

void ReferenceBuilder::run(Reference* const* refs, const RstdMode* modes, int ns, const Problem& p,
                           const Options& o, Outputs* base) {
  const int64_t R = p.x.rows(), H = p.x.cols;
  const int nt = o.threads > 0 ? o.threads : omp_get_max_threads();
  if (base != nullptr && (ns != 2 || o.forward_only))
    throw std::logic_error("ReferenceBuilder: the FP32 baseline needs the pair's column pass");
  if (base != nullptr) {  // as fp32_baseline(p, threads, false): rstd and dw only
    *base = Outputs{};
    base->rstd.assign(static_cast<size_t>(R), 0.0f);
    base->dw.assign(static_cast<size_t>(H), 0.0f);
  }
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
    // forward_only: no column pass; dw stays empty (its accessors throw).
    const int64_t ncols_dw = o.forward_only ? 0 : H;
    ref.dw_.assign(ncols_dw, 0.0);
    ref.dw_b_.assign(ncols_dw, 0.0);
    ref.dw_abs_.assign(ncols_dw, 0.0);
    ref.dw_mp_.assign(ncols_dw, 0);
    ref.row_slot_.assign(R, -1);
    ref.rs_mp_.assign(R, 0);
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
    sd.Sacc.assign(o.forward_only ? 0 : H, 0.0);
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
  // sums, then column accumulation) while still in cache. forward_only: no
  // column accumulation, so one block of every row (each row is computed
  // alone: the same bits in any blocking).
  // With the FP32 baseline (base), blocks and row chunks are whole groups of
  // kFp32Rows rows: its sums of squares run that many rows side by side.
  const int64_t grp = base != nullptr ? kFp32Rows : 1;
  const int64_t RB = o.forward_only ? R : detail::row_block(R, H, 2 * nt, grp);
  // Column blocks start on cache lines of doubles and, with the baseline,
  // of its float dw accumulators too (16 columns).
  const int64_t CB = base != nullptr ? detail::whole_lines<float>(detail::col_block(H, nt)) : detail::col_block(H, nt);
  const int64_t ncb = o.forward_only ? 0 : (H + CB - 1) / CB;
  // Blocks run pipelined (detail::pipelined_row_blocks: no barrier between
  // them), up to L in flight, block b's row pointers in slot b % L.
  const int64_t L = detail::blocks_in_flight(RB, H, (R + RB - 1) / RB);
  std::vector<const uint16_t*> xr(o.forward_only ? 0 : L * RB), dyr(o.forward_only ? 0 : L * RB);
  Side& s0 = sides[0];
  Side& s1 = sides[ns - 1];  // == s0 when ns == 1
  // The column pass's accumulators (pi, sigma, |h| of each side) in one
  // zeroed buffer aligned to 64 bytes, each array padded to whole cache
  // lines: a column block starts at a multiple of 8 columns (row_blocks.h),
  // so no cache line of an accumulator is written by two threads. In the
  // sides' own vectors (16-byte aligned) the lines at the blocks' edges were
  // shared and written by two threads once per row (docs/perf/oracle-and-
  // gate-throughput.md, D19). Copied into
  // dw_ (pi, until finalization), Sacc and dw_abs_ after the pass.
  const int64_t Hp = o.forward_only ? 0 : detail::whole_lines<double>(H);
  const detail::LineArray<double> acc((ns == 2 ? 6 : 3) * Hp);
  double* const P0 = acc.get();
  double* const S0 = P0 + Hp;
  double* const A0 = S0 + Hp;
  double* const P1 = ns == 2 ? A0 + Hp : P0;
  double* const S1 = ns == 2 ? P1 + Hp : S0;
  double* const A1 = ns == 2 ? S1 + Hp : A0;
  const double *hi0 = s0.ref->use_.data(), *hi1 = s1.ref->use_.data();
  const double* lo0 = s0.use_lo.data();  // s1's lo is 0 (col_accum2)
  if (ns == 2 && (s0.fp32 || !s1.fp32)) throw std::logic_error("ReferenceBuilder: pair must be (fp64, fp32_rounded)");

  // Rows of a block in chunks of about 16384 elements, handed out as threads
  // come free: a thread that runs slower (an SMT sibling, another process
  // on its core) takes fewer rows, and no barrier waits for it. Every row is
  // computed alone (per-thread state: the filter's scratch row and MPFR
  // seconds only), so the assignment does not change a bit.
  const int64_t rchunk = (std::max<int64_t>(1, 16384 / H) + grp - 1) / grp * grp;
  // The FP32 baseline: its rstd of each row (written by the row items, read by
  // the block's column items after them) and its dw accumulators on cache
  // lines of their own, as the pair's.
  const float Hf = static_cast<float>(H), eps32 = static_cast<float>(p.eps);
  float* const rb32 = base != nullptr ? base->rstd.data() : nullptr;
  const detail::LineArray<float> dwb(base != nullptr ? detail::whole_lines<float>(H) : 0);
  detail::pipelined_row_blocks(
      nt, R, RB, rchunk, ncb, L,
      [&](int64_t r0, int64_t r1) {
        const int64_t slot = (r0 / RB) % L * RB - r0 / RB * RB;  // slot offset minus the block's first row
        for (int64_t r = r0; r < r1; ++r) {
          do_row(r);
          if (o.forward_only) continue;
          xr[slot + r] = p.x.row(r);
          dyr[slot + r] = p.dy.row(r);
        }
        for (int64_t g = r0; rb32 != nullptr && g < r1; g += kFp32Rows) {  // rows still in cache
          const int n = static_cast<int>(std::min<int64_t>(kFp32Rows, r1 - g));
          const uint16_t* xs[kFp32Rows];
          float ss[kFp32Rows];
          for (int i = 0; i < n; ++i) xs[i] = p.x.row(g + i);
          fp32_sum_squares(xs, n, H, ss);
          for (int i = 0; i < n; ++i) rb32[g + i] = fp32_canonical_nan(fp32_rstd(ss[i], Hf, eps32));
        }
      },
      [&](int64_t b, int64_t cb) {
        const int64_t rb = b * RB, nr = std::min(RB, R - rb);
        const uint16_t* const* bx = xr.data() + b % L * RB;
        const uint16_t* const* bdy = dyr.data() + b % L * RB;
        const int64_t j0 = cb * CB, nc = std::min(CB, H - j0);
        if (ns == 1)
          col_accum(bx, bdy, hi0 + rb, lo0 + rb, nr, j0, nc, P0 + j0, S0 + j0, A0 + j0);
        else if (rb32 != nullptr)
          col_accum2_base(bx, bdy, hi0 + rb, lo0 + rb, hi1 + rb, rb32 + rb, nr, j0, nc, P0 + j0, S0 + j0, A0 + j0,
                          P1 + j0, S1 + j0, A1 + j0, dwb.get() + j0);
        else
          col_accum2(bx, bdy, hi0 + rb, lo0 + rb, hi1 + rb, nr, j0, nc, P0 + j0, S0 + j0, A0 + j0, P1 + j0,
                     S1 + j0, A1 + j0);
      });
  if (Hp > 0) {
    std::copy_n(P0, H, s0.ref->dw_.begin());
    std::copy_n(S0, H, s0.Sacc.begin());
    std::copy_n(A0, H, s0.ref->dw_abs_.begin());
    if (ns == 2) {
      std::copy_n(P1, H, s1.ref->dw_.begin());
      std::copy_n(S1, H, s1.Sacc.begin());
      std::copy_n(A1, H, s1.ref->dw_abs_.begin());
    }
    for (int64_t j = 0; base != nullptr && j < H; ++j) base->dw[j] = fp32_canonical_nan(dwb.get()[j]);
  }
  double secs = 0;  // in-row rstd escalations (shared: reported by each side)
  for (double s : mp_secs) secs += s;
  secs /= nt;
  for (Side& sd : sides) finish(sd, p, o, secs, rs_bits, rs_unmet);
}

}  // namespace normgate::oracle
