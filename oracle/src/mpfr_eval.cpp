// oracle/src/mpfr_eval.cpp: the RMSNorm math in MPFR with rigorous bounds
// (derivation (M0)-(M6) in mpfr_eval.h).
#include "mpfr_eval.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "eft.h"

namespace normgate::oracle::detail {

namespace {

constexpr mpfr_prec_t kBoundBits = 64;   // precision of the (upward-rounded) bounds
constexpr mpfr_prec_t kSumSqBits = 640;  // (M1): holds S exactly
constexpr mpfr_prec_t kDotBits = 1088;   // (M3): holds D exactly

/// RAII mpfr_t.
struct M {
  mpfr_t v;
  explicit M(mpfr_prec_t p = kBoundBits) { mpfr_init2(v, p); }
  ~M() { mpfr_clear(v); }
  M(const M&) = delete;
  M& operator=(const M&) = delete;
  operator mpfr_ptr() { return v; }
  operator mpfr_srcptr() const { return v; }
};

[[noreturn]] void inexact(const char* what) {
  throw std::logic_error(std::string("normgate::oracle (MPFR): an exact step was inexact: ") + what);
}

// e <- 2^-P |v|, rounded up (u |v| of a round-to-nearest result at precision P).
void half_ulp(mpfr_ptr e, mpfr_srcptr v, mpfr_prec_t P) {
  mpfr_abs(e, v, MPFR_RNDU);
  mpfr_div_2ui(e, e, static_cast<unsigned long>(P), MPFR_RNDU);
}

// e <- e + |a| * b (b >= 0), rounded up.
void add_abs_mul(mpfr_ptr e, mpfr_srcptr a, mpfr_srcptr b) {
  M t;
  mpfr_abs(t, a, MPFR_RNDU);
  mpfr_mul(t, t, b, MPFR_RNDU);
  mpfr_add(e, e, t, MPFR_RNDU);
}

// e <- e + a * b for a, b >= 0, rounded up.
void add_mul(mpfr_ptr e, mpfr_srcptr a, mpfr_srcptr b) {
  M t;
  mpfr_mul(t, a, b, MPFR_RNDU);
  mpfr_add(e, e, t, MPFR_RNDU);
}

// Error of a product v = RN_P(a b) of enclosures (a, ea), (b, eb) (M4):
// u|v| + |a| eb + |b| ea + ea eb.
void prod_err(mpfr_ptr e, mpfr_srcptr v, mpfr_prec_t P, mpfr_srcptr a, mpfr_srcptr ea, mpfr_srcptr b,
              mpfr_srcptr eb) {
  half_ulp(e, v, P);
  add_abs_mul(e, a, eb);
  add_abs_mul(e, b, ea);
  add_mul(e, ea, eb);
}

// (M6): binary64 value, rigorous bound, proven-RN flag.
Finished finish(mpfr_srcptr V, mpfr_srcptr E) {
  Finished f;
  const double v = mpfr_get_d(V, MPFR_RNDN);
  if (!std::isfinite(v) || !mpfr_number_p(E)) {
    f.vb = {v, INF};
    return f;
  }
  const mpfr_prec_t P = std::max<mpfr_prec_t>(mpfr_get_prec(V), 53);
  M d(2 * P);  // |V - v| < ulp_53(v), both multiples of ulp_P(V): exact in P bits (2P to spare)
  if (mpfr_sub_d(d, V, v, MPFR_RNDN) != 0) inexact("|V - RN53(V)|");
  M e;
  mpfr_abs(e, d, MPFR_RNDU);
  mpfr_add(e, e, E, MPFR_RNDU);
  f.vb = {v, mpfr_get_d(e, MPFR_RNDU)};
  M lo(P + kBoundBits), hi(P + kBoundBits);
  mpfr_sub(lo, V, E, MPFR_RNDD);  // lo <= V - E, hi >= V + E: a (possibly) wider enclosure
  mpfr_add(hi, V, E, MPFR_RNDU);
  f.rn = mpfr_get_d(lo, MPFR_RNDN) == mpfr_get_d(hi, MPFR_RNDN);
  return f;
}

// (M2): rs <- RN_P(rec_sqrt(RN_P(RN_P(S/H) + eps))) at rs's precision P, and
// e <- 4u|rs| (upward).
void rstd_at(mpfr_srcptr S, int64_t H, double eps, mpfr_ptr rs, mpfr_ptr e) {
  const mpfr_prec_t P = mpfr_get_prec(rs);
  M q(P);
  mpfr_div_ui(q, S, static_cast<unsigned long>(H), MPFR_RNDN);
  mpfr_add_d(q, q, eps, MPFR_RNDN);
  mpfr_rec_sqrt(rs, q, MPFR_RNDN);
  mpfr_abs(e, rs, MPFR_RNDU);
  mpfr_mul_2si(e, e, 2 - static_cast<long>(P), MPFR_RNDU);
}

double tol_of(const Tolerance& t, double v) { return t.atol + t.rtol * std::fabs(v); }

int next_bits(int bits) { return bits >= (1 << 20) ? bits : 2 * bits; }

}  // namespace

bool meets(const Finished& f, const Tolerance& t, double target) {
  if (f.rn || !std::isfinite(f.vb.v)) return true;
  return f.vb.bound <= target * tol_of(t, f.vb.v);
}

bool exact_sumsq(const uint16_t* x, int64_t n, mpfr_ptr out) {
  // Four bin sets break the dependency chain of repeated exponents.
  int64_t acc[4][256];
  std::memset(acc, 0, sizeof acc);
  uint32_t bad = 0;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    for (int l = 0; l < 4; ++l) {
      const uint32_t b = x[j + l] & 0x7FFFu, E = b >> 7;
      const uint32_t m = (b & 0x7Fu) | (E != 0 ? 0x80u : 0u);
      bad |= (E == 255u);
      acc[l][E] += static_cast<int64_t>(m * m);
    }
  }
  for (; j < n; ++j) {
    const uint32_t b = x[j] & 0x7FFFu, E = b >> 7;
    const uint32_t m = (b & 0x7Fu) | (E != 0 ? 0x80u : 0u);
    bad |= (E == 255u);
    acc[0][E] += static_cast<int64_t>(m * m);
  }
  if (bad) return false;
  mpfr_set_prec(out, kSumSqBits);
  mpfr_set_zero(out, 1);
  M t;
  for (int E = 0; E < 255; ++E) {
    const uint64_t a = static_cast<uint64_t>(acc[0][E] + acc[1][E] + acc[2][E] + acc[3][E]);
    if (a == 0) continue;
    // x = m 2^(max(E,1) - 134), so x^2 = m^2 2^(2 max(E,1) - 268).
    if (mpfr_set_ui_2exp(t, static_cast<unsigned long>(a), 2 * std::max(E, 1) - 268, MPFR_RNDN) != 0)
      inexact("bin value");
    if (mpfr_add(out, out, t, MPFR_RNDN) != 0) inexact("sum of squares");
  }
  return true;
}

RstdMp mpfr_rstd(const uint16_t* x, int64_t n, double eps, const EscalationPolicy& pol) {
  M S(kSumSqBits);
  if (!exact_sumsq(x, n, S)) throw std::logic_error("normgate::oracle (MPFR): mpfr_rstd on a non-finite row");
  RstdMp out;
  for (int P = std::max(pol.bits, 64);; P = next_bits(P)) {
    M rs(P), e;
    rstd_at(S, n, eps, rs, e);
    const Finished fr = finish(rs, e);
    M lo(P + kBoundBits), hi(P + kBoundBits);
    mpfr_sub(lo, rs, e, MPFR_RNDD);
    mpfr_add(hi, rs, e, MPFR_RNDU);
    out.f = mpfr_get_flt(rs, MPFR_RNDN);
    out.f_certain = mpfr_get_flt(lo, MPFR_RNDN) == mpfr_get_flt(hi, MPFR_RNDN);
    // hi + lo: two binary64 numbers, and the rest of RS' exactly (2P bits).
    out.hi = mpfr_get_d(rs, MPFR_RNDN);
    M d(2 * P);
    if (mpfr_sub_d(d, rs, out.hi, MPFR_RNDN) != 0) inexact("RS' - hi");
    out.lo = mpfr_get_d(d, MPFR_RNDN);
    if (mpfr_sub_d(d, d, out.lo, MPFR_RNDN) != 0) inexact("RS' - hi - lo");
    M et;
    mpfr_abs(et, d, MPFR_RNDU);
    mpfr_add(et, et, e, MPFR_RNDU);
    out.e = mpfr_get_d(et, MPFR_RNDU);
    out.bits = P;
    out.met = out.f_certain && meets(fr, pol.rstd, pol.target);
    if (out.met || P >= pol.max_bits) return out;
  }
}

RowMp mpfr_row(const uint16_t* x, const uint16_t* dy, const double* w, int64_t H, double eps, bool fp32,
               float use32, const EscalationPolicy& pol) {
  M S(kSumSqBits), D(kDotBits);
  if (!exact_sumsq(x, H, S)) throw std::logic_error("normgate::oracle (MPFR): mpfr_row on a non-finite row");
  mpfr_set_zero(D, 1);
  std::vector<double> xv(H), g(H), xw(H);
  for (int64_t j = 0; j < H; ++j) {
    xv[j] = bf(x[j]);
    const double d = bf(dy[j]);
    g[j] = d * w[j];    // exact (M0)
    xw[j] = xv[j] * w[j];  // exact
    if (mpfr_add_d(D, D, (d * xv[j]) * w[j], MPFR_RNDN) != 0) inexact("D");  // terms exact (M0)
  }
  RowMp out;
  out.y.resize(H);
  out.dx.resize(H);
  for (int P = std::max(pol.bits, 64);; P = next_bits(P)) {
    bool met = true;
    M rs(P), eRS;
    rstd_at(S, H, eps, rs, eRS);
    const Finished fr = finish(rs, eRS);
    out.rstd = fr.vb;
    met = met && meets(fr, pol.rstd, pol.target);
    M use(P), eUse;
    if (fp32) {
      mpfr_set_flt(use, use32, MPFR_RNDN);  // exact
      mpfr_set_zero(eUse, 1);
    } else {
      mpfr_set(use, rs, MPFR_RNDN);  // same precision: exact
      mpfr_set(eUse, eRS, MPFR_RNDU);
    }
    M Dp(P), eD;
    mpfr_set(Dp, D, MPFR_RNDN);
    half_ulp(eD, Dp, P);
    M c1(P), e1, c(P), ec, k(P), ek;
    mpfr_mul(c1, use, Dp, MPFR_RNDN);
    prod_err(e1, c1, P, use, eUse, Dp, eD);
    mpfr_div_ui(c, c1, static_cast<unsigned long>(H), MPFR_RNDN);
    half_ulp(ec, c, P);
    {
      M t;
      mpfr_div_ui(t, e1, static_cast<unsigned long>(H), MPFR_RNDU);
      mpfr_add(ec, ec, t, MPFR_RNDU);
    }
    mpfr_mul(k, use, c, MPFR_RNDN);
    prod_err(ek, k, P, use, eUse, c, ec);
    out.c = finish(c, ec).vb;
    M y(P), ey, xk(P + 8), t(P), et, dx(P), edx, xa;
    for (int64_t j = 0; j < H; ++j) {
      // y = RN(xw RS'): e = u|y| + |xw| eRS
      mpfr_mul_d(y, rs, xw[j], MPFR_RNDN);
      half_ulp(ey, y, P);
      mpfr_set_d(xa, std::fabs(xw[j]), MPFR_RNDU);
      add_mul(ey, xa, eRS);
      const Finished fy = finish(y, ey);
      out.y[j] = fy.vb;
      met = met && meets(fy, pol.y, pol.target);
      // t = RN(g - x k), x k exact; e_t = u|t| + |x| e_k
      if (mpfr_mul_d(xk, k, xv[j], MPFR_RNDN) != 0) inexact("x k");
      mpfr_d_sub(t, g[j], xk, MPFR_RNDN);
      half_ulp(et, t, P);
      mpfr_set_d(xa, std::fabs(xv[j]), MPFR_RNDU);
      add_mul(et, xa, ek);
      // dx = RN(use t)
      mpfr_mul(dx, use, t, MPFR_RNDN);
      prod_err(edx, dx, P, use, eUse, t, et);
      const Finished fd = finish(dx, edx);
      out.dx[j] = fd.vb;
      met = met && meets(fd, pol.dx, pol.target);
    }
    out.bits = P;
    out.met = met;
    if (met || P >= pol.max_bits) return out;
  }
}

// ---- RstdTable ---------------------------------------------------------------

void RstdTable::clear() {
  for (auto& m : rs_) mpfr_clear(&m);
  rs_.clear();
  bits_ = 0;
}

RstdTable::~RstdTable() { clear(); }

void RstdTable::build(const RowView<uint16_t>& x, double eps, int bits, int threads) {
  const int64_t R = x.rows();
  if (static_cast<int64_t>(rs_.size()) != R) {
    clear();
    rs_.resize(static_cast<size_t>(R));
    for (auto& m : rs_) mpfr_init2(&m, bits);
  } else {
    for (auto& m : rs_) mpfr_set_prec(&m, bits);
  }
  bits_ = bits;
  const int64_t H = x.cols;
#pragma omp parallel num_threads(threads)
  {
    M S(kSumSqBits), e;
#pragma omp for schedule(dynamic, 64)
    for (int64_t r = 0; r < R; ++r) {
      if (!exact_sumsq(x.row(r), H, S)) {
        mpfr_set_nan(&rs_[static_cast<size_t>(r)]);
        continue;
      }
      rstd_at(S, H, eps, &rs_[static_cast<size_t>(r)], e);
    }
  }
}

// ---- dw columns ----------------------------------------------------------------

ColScratch::~ColScratch() {
  for (auto& m : t) mpfr_clear(&m);
}

void ColScratch::reserve(int64_t n, mpfr_prec_t p) {
  if (p != prec)
    for (auto& m : t) mpfr_set_prec(&m, p);
  prec = p;
  while (static_cast<int64_t>(t.size()) < n) {
    t.emplace_back();
    mpfr_init2(&t.back(), p);
  }
  ptr.resize(t.size());
  for (size_t i = 0; i < t.size(); ++i) ptr[i] = &t[i];
}

Finished mpfr_dw(const RowView<uint16_t>& x, const RowView<uint16_t>& dy, int64_t j, bool fp32,
                 const float* use32, const RstdTable* table, int bits, ColScratch& sc) {
  const int64_t R = x.rows();
  const mpfr_prec_t tp = std::max<mpfr_prec_t>(bits + 16, 64);
  sc.reserve(R, tp);
  M A, ta;  // A >= sum_r |a_r use'_r| (fp64 mode)
  mpfr_set_zero(A, 1);
  int64_t n = 0;
  for (int64_t r = 0; r < R; ++r) {
    const double a = bf(dy.row(r)[j]) * bf(x.row(r)[j]);  // exact (M0)
    if (a == 0) continue;
    mpfr_ptr t = &sc.t[static_cast<size_t>(n)];
    if (fp32) {
      // a (16 bits) * float (24 bits): an exact binary64 number.
      if (mpfr_set_d(t, a * static_cast<double>(use32[r]), MPFR_RNDN) != 0) inexact("a f");
    } else {
      if (mpfr_mul_d(t, (*table)[r], a, MPFR_RNDN) != 0) inexact("a RS'");  // P + 16 bits
      mpfr_abs(ta, t, MPFR_RNDU);
      mpfr_add(A, A, ta, MPFR_RNDU);
    }
    ++n;
  }
  M dw(bits), e;
  if (n == 0) {
    mpfr_set_zero(dw, 1);
  } else {
    mpfr_sum(dw, sc.ptr.data(), static_cast<unsigned long>(n), MPFR_RNDN);
  }
  half_ulp(e, dw, bits);
  if (!fp32) {
    mpfr_mul_2si(A, A, 2 - bits, MPFR_RNDU);  // 4u A
    mpfr_add(e, e, A, MPFR_RNDU);
  }
  return finish(dw, e);
}

}  // namespace normgate::oracle::detail
