// tests/oracle/escalation_test.cpp: MPFR escalation of the oracle.
//  - FP64 with escalation (OracleMode::auto_) against the full-MPFR referee
//    (OracleMode::mpfr) on every element of small cases of every family, and
//    both against the independent 200-bit evaluation of oracle_test_util.h;
//  - hand-built columns (+-2^e terms that cancel exactly, plus a small signal)
//    and rows (dy = 2^100 x, eps = 1e-30) where the FP64 oracle is wrong beyond
//    the budget and says so through its bound, and the escalated oracle is right;
//  - the precision loop, the policy knobs, thread-count independence;
//  - Reference::compute_pair against the two compute() calls, bit for bit;
//  - Options::forward_only against the full pass: y, rstd, c the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"
#include "util/oracle_test_util.h"
#include "util/row_accessors.h"

namespace ngt {
namespace {

using oracle::EscalationPolicy;
using oracle::Escalations;
using oracle::OracleMode;
using oracle::Options;
using oracle::Tolerance;

constexpr double kInf = std::numeric_limits<double>::infinity();
const EscalationPolicy kPol{};  // the defaults = the validators' budgets

double tol(const Tolerance& t, double v) { return t.atol + t.rtol * std::fabs(v); }

Options opts(OracleMode m, RstdMode r = RstdMode::fp64, int threads = 0) {
  Options o;
  o.threads = threads;
  o.rstd = r;
  o.oracle = m;
  return o;
}

std::vector<float> f32_rstds(const Reference& ref) {
  std::vector<float> v(ref.rows());
  for (int64_t r = 0; r < ref.rows(); ++r) v[r] = ref.rstd_f32(r);
  return v;
}


// Columns j < ncancel: rows i and i + half (i < half) carry dy*x = +big and
// -big, big = (1 + k/128) 2^e with e uniform in [e_lo, e_hi]; x = +-1
// everywhere, so every row has the same rstd and each pair cancels exactly in
// exact arithmetic (and in the fp32_rounded mode). Rows >= 2 half carry a
// signal ~ 0.01 N(0,1). Columns >= ncancel are ordinary N(0,1) data.
Case cancel_columns(int64_t R, int64_t H, int64_t ncancel, int64_t half, int e_lo, int e_hi, uint64_t seed,
                    WDtype wd = WDtype::bf16) {
  Case c;
  c.R = R;
  c.H = H;
  c.wd = wd;
  std::mt19937_64 g(seed);
  std::normal_distribution<double> n01(0, 1);
  c.x.resize(R * H);
  c.dy.assign(R * H, 0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < H; ++j) c.x[r * H + j] = bf16((g() & 1) ? 1.0f : -1.0f);
  for (int64_t j = 0; j < H; ++j) {
    if (j < ncancel) {
      for (int64_t i = 0; i < half; ++i) {
        const float big = std::ldexp(1.0f + float(g() % 128) / 128.0f, e_lo + int(g() % (e_hi - e_lo + 1)));
        c.dy[i * H + j] = bf16(big * float(c.xv(i, j)));
        c.dy[(i + half) * H + j] = bf16(-big * float(c.xv(i + half, j)));
      }
      for (int64_t r = 2 * half; r < R; ++r) c.dy[r * H + j] = bf16(float(0.01 * n01(g)));
    } else {
      for (int64_t r = 0; r < R; ++r) c.dy[r * H + j] = bf16(float(n01(g)));
    }
  }
  c.wb.assign(H, bf16(1.0f));
  c.wf.assign(H, 1.0f);
  return c;
}

// Rows r < nhand: x_j in {+-0.5, +-1, +-2}, dy_j = 2^e x_j, w = 1, so
// g = 2^e x and the exact dx_j = rstd 2^e x_j eps / (mean(x^2) + eps): with
// eps = 1e-30 and e = 100 it is O(1) while g and x k are ~2^100 (FP64 keeps
// no digit of it). Other rows are N(0,1). Columns j < skip of the hand-built
// rows hold x = dy = 0 (they then add nothing to those columns' dw).
Case cancel_rows(int64_t R, int64_t H, int64_t nhand, int e, uint64_t seed, int64_t skip = 0) {
  Case c;
  c.R = R;
  c.H = H;
  c.wd = WDtype::bf16;
  c.eps = 1e-30;
  std::mt19937_64 g(seed);
  std::normal_distribution<double> n01(0, 1);
  c.x.resize(R * H);
  c.dy.resize(R * H);
  const float mags[] = {0.5f, 1.0f, 2.0f};
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < H; ++j) {
      if (r < nhand && j < skip) {
        c.x[r * H + j] = 0;
        c.dy[r * H + j] = 0;
      } else if (r < nhand) {
        const float xv = ((g() & 1) ? 1.0f : -1.0f) * mags[g() % 3];
        c.x[r * H + j] = bf16(xv);
        c.dy[r * H + j] = bf16(std::ldexp(xv, e));
      } else {
        c.x[r * H + j] = bf16(float(n01(g)));
        c.dy[r * H + j] = bf16(float(n01(g)));
      }
    }
  c.wb.assign(H, bf16(1.0f));
  return c;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
bool same_vb(const VB& a, const VB& b) { return same_bits(a.v, b.v) && same_bits(a.bound, b.bound); }

/// Every element of `a` (auto) against the referee `m` (mpfr) and the
/// independent 200-bit evaluation: enclosures intersect, the referee encloses
/// the 200-bit value, every finite auto bound is <= fraction * tol after
/// escalation, and escalated values are the referee's bit for bit.
void check_auto_vs_referee(const Case& cs, RstdMode mode, const std::string& what, int64_t* escalated = nullptr) {
  SCOPED_TRACE(what + (mode == RstdMode::fp64 ? " fp64-rstd" : " fp32-rstd"));
  const Reference a = Reference::compute(cs.problem(), opts(OracleMode::auto_, mode));
  const Reference m = Reference::compute(cs.problem(), opts(OracleMode::mpfr, mode));
  const Reference f = Reference::compute(cs.problem(), opts(OracleMode::fp64, mode));
  MpRef hp(cs, mode, f32_rstds(m));
  int fails = 0;
  int64_t n = 0;
  auto check = [&](const char* t, int64_t r, int64_t j, const VB& av, const VB& mv, const VB& fv, const mp& ex,
                   double scale, const Tolerance* tl, bool esc) {
    ++n;
    // Non-finite inputs: all three agree that there is no real result.
    if (!std::isfinite(fv.bound)) {
      if (!std::isfinite(av.bound) || !std::isfinite(mv.bound)) return;
    }
    bool ok = true;
    ok = ok && std::isfinite(mv.bound) && std::isfinite(av.bound);
    ok = ok && std::fabs(av.v - mv.v) <= av.bound + mv.bound;  // both rigorous: enclosures intersect
    ok = ok && within(mv, ex, scale);                         // the referee encloses the 200-bit value
    ok = ok && within(av, ex, scale);
    if (tl) ok = ok && av.bound <= kPol.fraction * tol(*tl, av.v);  // the escalation invariant
    if (esc) ok = ok && same_vb(av, mv);                              // escalated = the referee's value
    if (!ok && fails++ < 8)
      ADD_FAILURE() << t << "(" << r << "," << j << ") auto " << av.v << " +- " << av.bound << " mpfr " << mv.v
                    << " +- " << mv.bound << " fp64 " << fv.v << " +- " << fv.bound << " exact(200 bits) "
                    << to_d(ex) << (esc ? " [escalated]" : "");
  };
  for (int64_t r = 0; r < cs.R; ++r) {
    const double rs = std::fabs(to_d(hp.rs[r]));
    check("rstd", r, 0, a.rstd(r), m.rstd(r), f.rstd(r), hp.rs[r], rs, &kPol.rstd, false);
    EXPECT_EQ(a.rstd_f32(r), m.rstd_f32(r)) << r;
    if (std::isfinite(f.rstd(r).bound)) {
      EXPECT_TRUE(m.rstd_f32_certain(r)) << r;
      EXPECT_EQ(m.rstd_f32(r), rn32(hp.rs[r])) << r;
    }
    const double use = std::fabs(to_d(hp.use[r]));
    check("c", r, 0, a.c(r), m.c(r), f.c(r), hp.cc[r], use * hp.pd_abs[r] / cs.H + 1e-300, nullptr,
          a.row_escalated(r));
    for (int64_t j = 0; j < cs.H; ++j) {
      const mp ey = hp.y(r, j), edx = hp.dx(r, j);
      check("y", r, j, a.y(r, j), m.y(r, j), f.y(r, j), ey, std::fabs(to_d(ey)) + 1e-300, &kPol.y,
            a.row_escalated(r));
      const double g = cs.dyv(r, j) * cs.w(j);
      const double scale = use * (std::fabs(g) + std::fabs(cs.xv(r, j) * to_d(hp.k[r]))) + 1e-300;
      check("dx", r, j, a.dx(r, j), m.dx(r, j), f.dx(r, j), edx, scale, &kPol.dx, a.row_escalated(r));
    }
  }
  for (int64_t j = 0; j < cs.H; ++j)
    check("dw", j, 0, a.dw(j), m.dw(j), f.dw(j), hp.dw[j], a.dw_abs(j) + 1e-300, &kPol.dw, a.dw_escalated(j));
  const Escalations& e = a.escalations();
  const Escalations& em = m.escalations();
  EXPECT_EQ(e.unmet, 0);
  EXPECT_EQ(em.unmet, 0);
  EXPECT_EQ(e.mode, OracleMode::auto_);
  EXPECT_EQ(em.mode, OracleMode::mpfr);
  EXPECT_FALSE(f.escalations().any());
  std::printf("  %-52s %s: %lld values; auto escalated rstd %lld, rows %lld (y %lld, dx %lld), dw %lld; "
              "referee rows %lld dw %lld, bits %d\n",
              what.c_str(), mode == RstdMode::fp64 ? "fp64" : "fp32", (long long)n, (long long)e.rstd,
              (long long)e.rows, (long long)e.y, (long long)e.dx, (long long)e.dw, (long long)em.rows,
              (long long)em.dw, std::max(e.max_bits, em.max_bits));
  if (escalated) *escalated += e.rstd + e.rows + e.dw;
}

// ---- auto vs the full-MPFR referee, every element ----------------------------------

TEST(EscalationReferee, EveryFamilyEveryElement) {
  const char* ids[] = {
      "H=96,T=24,w=bf16,family=normal,seed=1",      "H=80,T=20,w=fp32,family=llm,seed=2",
      "H=64,T=48,w=bf16,family=cancel,seed=3",      "H=48,T=64,w=fp32,family=cancel,seed=4,kappa=1e12",
      "H=64,T=20,w=bf16,family=zeros,seed=5",       "H=64,T=20,w=fp32,family=tiny,seed=6",
      "H=64,T=24,w=bf16,family=huge,seed=7",        "H=128,T=32,w=fp32,family=specials,seed=8",
  };
  for (const char* id : ids)
    for (RstdMode mode : {RstdMode::fp64, RstdMode::fp32_rounded}) check_auto_vs_referee(from_seeds(id), mode, id);
}

TEST(EscalationReferee, HandBuiltCasesThatEscalate) {
  int64_t esc = 0;
  for (RstdMode mode : {RstdMode::fp64, RstdMode::fp32_rounded}) {
    check_auto_vs_referee(cancel_columns(40, 12, 6, 16, 85, 100, 11), mode, "cancel columns 2^85..2^100", &esc);
    check_auto_vs_referee(cancel_columns(40, 8, 8, 16, 110, 125, 12, WDtype::fp32), mode,
                          "cancel columns 2^110..2^125, fp32 w", &esc);
    check_auto_vs_referee(cancel_rows(12, 24, 3, 100, 13), mode, "dy = 2^100 x rows, eps 1e-30", &esc);
  }
  EXPECT_GT(esc, 0) << "the hand-built cases must exercise escalation";
}

// ---- (2) hand-built columns: FP64 wrong beyond the budget, escalated right -------------

TEST(EscalationColumns, FixedByEscalationFp64WrongBeyondBudget) {
  // 64 rows: 24 pairs of +-2^(70..100) per column, 16 signal rows ~0.01;
  // conditioning sum|dy xhat| / |dw| ~ 1e32. Columns 6, 7 are ordinary data.
  const int64_t ncancel = 6;
  const Case cs = cancel_columns(64, 8, ncancel, 24, 70, 100, 21);
  for (RstdMode mode : {RstdMode::fp64, RstdMode::fp32_rounded}) {
    SCOPED_TRACE(mode == RstdMode::fp64 ? "fp64-rstd" : "fp32-rstd");
    const Reference f = Reference::compute(cs.problem(), opts(OracleMode::fp64, mode));
    const Reference a = Reference::compute(cs.problem(), opts(OracleMode::auto_, mode));
    MpRef hp(cs, mode, f32_rstds(a));
    EXPECT_EQ(f32_rstds(a), f32_rstds(f));
    int fp64_wrong = 0, naive_wrong = 0;
    for (int64_t j = 0; j < cs.H; ++j) {
      const double exact = to_d(hp.dw[j]), t = tol(kPol.dw, exact);
      const VB fv = f.dw(j), av = a.dw(j);
      double naive = 0;  // plain FP64: xhat = fl(x use), dw = ((0 + dy xhat_0) + dy xhat_1) + ...
      for (int64_t r = 0; r < cs.R; ++r) {
        const double use = mode == RstdMode::fp64 ? f.rstd(r).v : double(f.rstd_f32(r));
        naive += cs.dyv(r, j) * (cs.xv(r, j) * use);
      }
      // The FP64 oracle is rigorous even here: its bound covers its error.
      EXPECT_TRUE(within(fv, hp.dw[j], f.dw_abs(j))) << "col " << j;
      EXPECT_TRUE(within(av, hp.dw[j], a.dw_abs(j))) << "col " << j;
      if (j < ncancel) {
        // FP64 knows it cannot judge: bound far beyond the escalation threshold.
        EXPECT_GT(fv.bound, kPol.fraction * t) << "col " << j;
        EXPECT_TRUE(a.dw_escalated(j)) << "col " << j;
        fp64_wrong += std::fabs(fv.v - exact) > t;
        naive_wrong += std::fabs(naive - exact) > t;
        // Escalated: within the budget's target fraction, correct well inside tol.
        EXPECT_LE(av.bound, kPol.target * t) << "col " << j;
        EXPECT_LE(std::fabs(av.v - exact), kPol.target * t) << "col " << j;
      } else {
        EXPECT_FALSE(a.dw_escalated(j)) << "col " << j;
        EXPECT_TRUE(same_vb(av, fv)) << "col " << j;
      }
      std::printf("  %s col %lld: exact %+.17g | FP64 oracle %+.6g (err %.2e, bound %.2e) | naive FP64 %+.6g "
                  "(err %.2e) | escalated %+.17g (err %.2e, bound %.2e) | tol %.2e, cond %.1e\n",
                  mode == RstdMode::fp64 ? "fp64" : "fp32", (long long)j, exact, fv.v, std::fabs(fv.v - exact),
                  fv.bound, naive, std::fabs(naive - exact), av.v, std::fabs(av.v - exact), av.bound, t,
                  f.dw_abs(j) / std::fabs(exact));
    }
    // Unescalated FP64 (even compensated) misses the budget on most cancelling columns.
    EXPECT_GE(fp64_wrong, ncancel / 2);
    EXPECT_EQ(naive_wrong, ncancel);
    EXPECT_EQ(a.escalations().dw, ncancel);
    EXPECT_EQ(a.escalations().rows, 0);
    EXPECT_EQ(a.escalations().rstd, 0);
    // fp64 mode: the rstd's 4u relative error times sum|dy xhat| ~ 2^105 needs
    // 256 bits to get below target * tol; fp32 mode: exact products, one
    // rounding, 128 bits suffice.
    EXPECT_EQ(a.escalations().max_bits, mode == RstdMode::fp64 ? 256 : 128);
  }
}

TEST(EscalationColumns, PrecisionRaisedUntilTheStopRule) {
  // Terms up to 2^125 (sum|dy xhat| ~ 2^130): 128 bits give a bound ~2^-126 *
  // 2^130, above target * tol; the unit is redone at 256 bits.
  const Case cs = cancel_columns(40, 4, 4, 16, 115, 125, 31);
  const Reference a = Reference::compute(cs.problem(), opts(OracleMode::auto_));
  MpRef hp(cs, RstdMode::fp64, {});
  EXPECT_EQ(a.escalations().dw, 4);
  EXPECT_EQ(a.escalations().max_bits, 256);
  EXPECT_EQ(a.escalations().unmet, 0);
  for (int64_t j = 0; j < cs.H; ++j) {
    EXPECT_TRUE(within(a.dw(j), hp.dw[j], a.dw_abs(j))) << j;
    EXPECT_LE(a.dw(j).bound, kPol.target * tol(kPol.dw, a.dw(j).v)) << j;
  }
  // Capped at 128 bits: the stop rule is not met, the bound stays rigorous (and large).
  Options o = opts(OracleMode::auto_);
  o.escalation.max_bits = 128;
  const Reference c = Reference::compute(cs.problem(), o);
  EXPECT_EQ(c.escalations().unmet, 4);
  EXPECT_EQ(c.escalations().max_bits, 128);
  for (int64_t j = 0; j < cs.H; ++j) {
    EXPECT_TRUE(within(c.dw(j), hp.dw[j], c.dw_abs(j))) << j;
    EXPECT_GT(c.dw(j).bound, kPol.target * tol(kPol.dw, c.dw(j).v)) << j;
  }
}

// ---- hand-built rows: dx cancels g - x k at 2^100 ----------------------------------------

TEST(EscalationRows, DxRowsFixedByEscalation) {
  const int64_t nhand = 3;
  const Case cs = cancel_rows(10, 32, nhand, 100, 41);
  const Reference f = Reference::compute(cs.problem(), opts(OracleMode::fp64));
  const Reference a = Reference::compute(cs.problem(), opts(OracleMode::auto_));
  MpRef hp(cs, RstdMode::fp64, {});
  EXPECT_EQ(a.escalations().dx, nhand);
  EXPECT_EQ(a.escalations().rows, nhand);
  EXPECT_EQ(a.escalations().dw, 0);
  int64_t fp64_wrong = 0;
  for (int64_t r = 0; r < cs.R; ++r) {
    EXPECT_EQ(a.row_escalated(r), r < nhand) << r;
    const double use = to_d(hp.use[r]);
    for (int64_t j = 0; j < cs.H; ++j) {
      const double exact = to_d(hp.dx(r, j)), t = tol(kPol.dx, exact);
      const double scale = use * (std::fabs(cs.dyv(r, j)) + std::fabs(cs.xv(r, j) * to_d(hp.k[r])));
      EXPECT_TRUE(within(f.dx(r, j), hp.dx(r, j), scale)) << r << "," << j;
      EXPECT_TRUE(within(a.dx(r, j), hp.dx(r, j), scale)) << r << "," << j;
      if (r < nhand) {
        EXPECT_GT(f.dx(r, j).bound, kPol.fraction * t);
        fp64_wrong += std::fabs(f.dx(r, j).v - exact) > t;
        EXPECT_LE(a.dx(r, j).bound, kPol.target * t) << r << "," << j;
        EXPECT_LE(std::fabs(a.dx(r, j).v - exact), kPol.target * t) << r << "," << j;
        if (j < 2)
          std::printf("  row %lld col %lld: exact %+.17g | FP64 oracle %+.6g (bound %.2e) | escalated %+.17g "
                      "(err %.2e, bound %.2e) | tol %.2e\n",
                      (long long)r, (long long)j, exact, f.dx(r, j).v, f.dx(r, j).bound, a.dx(r, j).v,
                      std::fabs(a.dx(r, j).v - exact), a.dx(r, j).bound, t);
      } else {
        EXPECT_TRUE(same_vb(a.dx(r, j), f.dx(r, j))) << r << "," << j;
      }
    }
  }
  EXPECT_GE(fp64_wrong, nhand * cs.H / 2) << "FP64 should miss the budget on most hand-built dx elements";
  normgate::test::expect_split_rows_match(a);  // rows 0..nhand-1 from MPFR
}

// ---- policy knobs -------------------------------------------------------------------

TEST(EscalationPolicyKnobs, RstdEscalationFeedsTheBackward) {
  // rstd.rtol = 1e-22 puts every FP64 rstd bound (~2^-80 relative) above
  // fraction * tol: every row's rstd comes from MPFR, and y, dx, dw computed
  // from it stay rigorous (against the 200-bit values) with tighter bounds.
  const Case cs = make_case(30, 50, WDtype::fp32, 51, Dist::llm, Dist::normal);
  for (RstdMode mode : {RstdMode::fp64, RstdMode::fp32_rounded}) {
    Options o = opts(OracleMode::auto_, mode);
    o.escalation.rstd.rtol = 1e-22;
    const Reference a = Reference::compute(cs.problem(), o);
    const Reference f = Reference::compute(cs.problem(), opts(OracleMode::fp64, mode));
    MpRef hp(cs, mode, f32_rstds(a));
    EXPECT_EQ(a.escalations().rstd, cs.R);
    for (int64_t r = 0; r < cs.R; ++r) {
      EXPECT_TRUE(a.rstd_escalated(r));
      EXPECT_TRUE(within(a.rstd(r), hp.rs[r], to_d(hp.rs[r]))) << r;
      EXPECT_LE(a.rstd(r).bound, 0x1p-52 * a.rstd(r).v) << r;
      EXPECT_EQ(a.rstd_f32(r), rn32(hp.rs[r])) << r;
      EXPECT_TRUE(a.rstd_f32_certain(r)) << r;
      for (int64_t j = 0; j < cs.H; ++j) {
        EXPECT_TRUE(within(a.y(r, j), hp.y(r, j), std::fabs(a.y(r, j).v) + 1e-300)) << r << "," << j;
        EXPECT_TRUE(within(a.dx(r, j), hp.dx(r, j), std::fabs(a.dx(r, j).v) + 1)) << r << "," << j;
      }
    }
    for (int64_t j = 0; j < cs.H; ++j) EXPECT_TRUE(within(a.dw(j), hp.dw[j], a.dw_abs(j))) << j;
  }
}

TEST(EscalationPolicyKnobs, FractionZeroEscalatesEverythingLikeTheReferee) {
  const Case cs = make_case(12, 40, WDtype::bf16, 61, Dist::wide, Dist::normal);
  for (RstdMode mode : {RstdMode::fp64, RstdMode::fp32_rounded}) {
    Options o = opts(OracleMode::auto_, mode);
    o.escalation.fraction = 0;
    const Reference a = Reference::compute(cs.problem(), o);
    const Reference m = Reference::compute(cs.problem(), opts(OracleMode::mpfr, mode));
    EXPECT_EQ(a.escalations().rows, cs.R);
    EXPECT_EQ(a.escalations().rstd, cs.R);
    EXPECT_EQ(a.escalations().dw, cs.H);
    for (int64_t r = 0; r < cs.R; ++r) {
      EXPECT_TRUE(same_vb(a.rstd(r), m.rstd(r))) << r;
      EXPECT_TRUE(same_vb(a.c(r), m.c(r))) << r;
      for (int64_t j = 0; j < cs.H; ++j) {
        ASSERT_TRUE(same_vb(a.y(r, j), m.y(r, j))) << r << "," << j;
        ASSERT_TRUE(same_vb(a.dx(r, j), m.dx(r, j))) << r << "," << j;
      }
    }
    for (int64_t j = 0; j < cs.H; ++j) EXPECT_TRUE(same_vb(a.dw(j), m.dw(j))) << j;
  }
}

TEST(EscalationPolicyKnobs, BadPolicyAndMpfrSizeLimitThrow) {
  const Case cs = make_case(8, 16, WDtype::bf16, 71);
  auto expect_field = [&](Options o, const std::string& field) {
    try {
      (void)Reference::compute(cs.problem(), o);
      ADD_FAILURE() << "no throw for " << field;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("'" + field + "'"), std::string::npos) << e.what();
    }
  };
  Options o;
  o.escalation.fraction = -1;
  expect_field(o, "fraction");
  o = {};
  o.escalation.target = std::nan("");
  expect_field(o, "target");
  o = {};
  o.escalation.bits = 32;
  expect_field(o, "bits");
  o = {};
  o.escalation.max_bits = 100;
  expect_field(o, "max_bits");
  o = {};
  o.escalation.dw.rtol = -1e-4;
  expect_field(o, "dw.rtol");
  o = opts(OracleMode::mpfr);
  o.escalation.mpfr_max_elements = 100;  // 8*16 = 128 > 100
  try {
    (void)Reference::compute(cs.problem(), o);
    ADD_FAILURE() << "no throw for the mpfr size limit";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("auto"), std::string::npos) << e.what();
  }
  EXPECT_EQ(oracle::parse_oracle_mode("fp64"), OracleMode::fp64);
  EXPECT_EQ(oracle::parse_oracle_mode("auto"), OracleMode::auto_);
  EXPECT_EQ(oracle::parse_oracle_mode("mpfr"), OracleMode::mpfr);
  EXPECT_EQ(oracle::to_string(OracleMode::auto_), "auto");
  try {
    (void)oracle::parse_oracle_mode("fp128");
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fp128"), std::string::npos);
  }
  // auto is the default everywhere.
  EXPECT_EQ(Options{}.oracle, OracleMode::auto_);
}

TEST(EscalationPolicyKnobs, ElementBudgetKeepsFp64BeyondIt) {
  // 8 cancelling columns of 40 rows; a budget of 3 columns' worth of elements:
  // columns 0..2 are escalated, 3..7 keep their FP64 value and (large) bound.
  const Case cs = cancel_columns(40, 8, 8, 16, 90, 100, 101);
  Options o = opts(OracleMode::auto_);
  o.escalation.max_elements = 3 * 40 + 39;
  const Reference a = Reference::compute(cs.problem(), o);
  const Reference f = Reference::compute(cs.problem(), opts(OracleMode::fp64));
  MpRef hp(cs, RstdMode::fp64, {});
  EXPECT_EQ(a.escalations().dw, 3);
  EXPECT_EQ(a.escalations().skipped, 5);
  for (int64_t j = 0; j < cs.H; ++j) {
    EXPECT_EQ(a.dw_escalated(j), j < 3) << j;
    EXPECT_TRUE(within(a.dw(j), hp.dw[j], a.dw_abs(j))) << j;  // rigorous either way
    if (j >= 3) {
      EXPECT_TRUE(same_vb(a.dw(j), f.dw(j))) << j;
      EXPECT_GT(a.dw(j).bound, kPol.fraction * tol(kPol.dw, a.dw(j).v)) << j;
    }
  }
  o.escalation.max_elements = -1;
  EXPECT_THROW((void)Reference::compute(cs.problem(), o), std::invalid_argument);
}

TEST(EscalationPolicyKnobs, NonFiniteInputsAreNeverEscalated) {
  Case cs = cancel_columns(40, 8, 8, 16, 90, 100, 81);
  cs.dy[5 * 8 + 2] = 0x7F80;  // +Inf in dy: column 2 and row 5 have no real result
  const Reference a = Reference::compute(cs.problem(), opts(OracleMode::auto_));
  EXPECT_EQ(a.dw(2).bound, kInf);
  EXPECT_FALSE(a.dw_escalated(2));
  EXPECT_FALSE(a.row_escalated(5));
  EXPECT_EQ(a.escalations().dw, 7);  // the other cancelling columns are escalated
  cs.x[3 * 8 + 1] = 0x7FC0;          // NaN in x: every dw bound is +inf, nothing to escalate
  const Reference b = Reference::compute(cs.problem(), opts(OracleMode::mpfr));
  EXPECT_EQ(b.escalations().dw, 0);
  EXPECT_FALSE(b.rstd_escalated(3));
  for (int64_t j = 0; j < cs.H; ++j) EXPECT_EQ(b.dw(j).bound, kInf) << j;
}

// ---- (3) thread-count independence with escalation ------------------------------------

// Every accessor of `a` against `b`, escalation state and counts included
// (seconds excepted: not deterministic).
void expect_identical(const Reference& a, const Reference& b) {
  ASSERT_EQ(a.rows(), b.rows());
  ASSERT_EQ(a.cols(), b.cols());
  ASSERT_EQ(a.options().rstd, b.options().rstd);
  ASSERT_EQ(a.options().oracle, b.options().oracle);
  const int64_t H = a.cols();
  std::vector<VB> ra(H), rb(H);
  std::vector<double> va(H), vb(H), ba(H), bb(H);
  auto same_arr = [](const std::vector<double>& p, const std::vector<double>& q) {
    return std::memcmp(p.data(), q.data(), p.size() * sizeof(double)) == 0;
  };
  for (int64_t r = 0; r < a.rows(); ++r) {
    ASSERT_TRUE(same_vb(a.rstd(r), b.rstd(r))) << r;
    ASSERT_EQ(std::bit_cast<uint32_t>(a.rstd_f32(r)), std::bit_cast<uint32_t>(b.rstd_f32(r))) << r;
    ASSERT_EQ(a.rstd_f32_certain(r), b.rstd_f32_certain(r)) << r;
    ASSERT_TRUE(same_vb(a.c(r), b.c(r))) << r;
    ASSERT_EQ(a.row_escalated(r), b.row_escalated(r)) << r;
    ASSERT_EQ(a.rstd_escalated(r), b.rstd_escalated(r)) << r;
    a.y_row(r, ra.data());
    b.y_row(r, rb.data());
    ASSERT_EQ(std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(VB)), 0) << "y row " << r;
    a.dx_row(r, ra.data());
    b.dx_row(r, rb.data());
    ASSERT_EQ(std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(VB)), 0) << "dx row " << r;
    a.dx_row(r, 0, H, va.data(), ba.data());
    b.dx_row(r, 0, H, vb.data(), bb.data());
    ASSERT_TRUE(same_arr(va, vb) && same_arr(ba, bb)) << "dx split row " << r;
    a.dx_row_values(r, 0, H, va.data());
    b.dx_row_values(r, 0, H, vb.data());
    ASSERT_TRUE(same_arr(va, vb)) << "dx values row " << r;
  }
  for (int64_t j = 0; j < H; ++j) {
    ASSERT_TRUE(same_vb(a.dw(j), b.dw(j))) << j;
    ASSERT_TRUE(same_bits(a.dw_abs(j), b.dw_abs(j))) << j;
    ASSERT_EQ(a.dw_escalated(j), b.dw_escalated(j)) << j;
  }
  const Escalations &ea = a.escalations(), &eb = b.escalations();
  EXPECT_EQ(ea.mode, eb.mode);
  EXPECT_EQ(ea.rstd, eb.rstd);
  EXPECT_EQ(ea.y, eb.y);
  EXPECT_EQ(ea.dx, eb.dx);
  EXPECT_EQ(ea.rows, eb.rows);
  EXPECT_EQ(ea.dw, eb.dw);
  EXPECT_EQ(ea.unmet, eb.unmet);
  EXPECT_EQ(ea.skipped, eb.skipped);
  EXPECT_EQ(ea.max_bits, eb.max_bits);
}

// Escalating columns (0..9), escalating rows (66..68: dy = 2^100 x) and
// ordinary data in one case: both kinds of MPFR unit run in parallel.
Case escalating_mix() {
  Case cs = cancel_columns(72, 24, 10, 24, 86, 102, 91);
  const Case rows = cancel_rows(3, 24, 3, 100, 92, 10);
  std::copy(rows.x.begin(), rows.x.end(), cs.x.begin() + 66 * 24);
  std::copy(rows.dy.begin(), rows.dy.end(), cs.dy.begin() + 66 * 24);
  cs.eps = 1e-30;
  return cs;
}

TEST(EscalationThreads, BitwiseIdenticalFor1_2_5Threads) {
  const Case cs = escalating_mix();
  for (RstdMode mode : {RstdMode::fp64, RstdMode::fp32_rounded}) {
    SCOPED_TRACE(mode == RstdMode::fp64 ? "fp64-rstd" : "fp32-rstd");
    const Reference r1 = Reference::compute(cs.problem(), opts(OracleMode::auto_, mode, 1));
    const Reference r2 = Reference::compute(cs.problem(), opts(OracleMode::auto_, mode, 2));
    const Reference r5 = Reference::compute(cs.problem(), opts(OracleMode::auto_, mode, 5));
    EXPECT_GE(r1.escalations().dw, 10);
    if (mode == RstdMode::fp64) {
      EXPECT_EQ(r1.escalations().rows, 3);
    }
    expect_identical(r1, r2);
    expect_identical(r1, r5);
    const Reference m1 = Reference::compute(cs.problem(), opts(OracleMode::mpfr, mode, 1));
    const Reference m3 = Reference::compute(cs.problem(), opts(OracleMode::mpfr, mode, 3));
    expect_identical(m1, m3);
  }
}


// ---- (4) compute_pair: both references from one pass, bitwise the two computes ----------


// compute_pair(p, o) against compute(p, o) in each mode; returns the pair's
// escalation units (to check that the cases exercise escalation).
int64_t expect_pair_matches(const Problem& p, Options o, const std::string& what) {
  SCOPED_TRACE(what);
  o.rstd = RstdMode::fp32_rounded;  // ignored by compute_pair
  const oracle::ReferencePair pr = Reference::compute_pair(p, o);
  EXPECT_EQ(pr.ref.options().rstd, RstdMode::fp64);
  EXPECT_EQ(pr.ideal.options().rstd, RstdMode::fp32_rounded);
  Options o64 = o, o32 = o;
  o64.rstd = RstdMode::fp64;
  {
    SCOPED_TRACE("ref (fp64 rstd)");
    expect_identical(pr.ref, Reference::compute(p, o64));
  }
  {
    SCOPED_TRACE("ideal (fp32 rstd)");
    expect_identical(pr.ideal, Reference::compute(p, o32));
  }
  // With the FP32 baseline in the same pass: both references unchanged, and
  // the baseline's rstd and dw bitwise fp32_baseline's (y, dx, h_new empty).
  if (!o.forward_only) {
    SCOPED_TRACE("with the FP32 baseline");
    normgate::Outputs base;
    base.y.assign(3, 1);  // replaced, not appended to
    base.rstd.assign(2, 1.0f);
    const oracle::ReferencePair pb = Reference::compute_pair(p, o, &base);
    expect_identical(pb.ref, pr.ref);
    expect_identical(pb.ideal, pr.ideal);
    const normgate::Outputs want = oracle::fp32_baseline(p, o.threads, false);
    EXPECT_TRUE(base.y.empty() && base.dx.empty() && base.h_new.empty());
    EXPECT_EQ(base.rstd.size(), want.rstd.size());
    EXPECT_EQ(base.dw.size(), want.dw.size());
    if (base.rstd.size() == want.rstd.size()) {
      EXPECT_EQ(std::memcmp(base.rstd.data(), want.rstd.data(), want.rstd.size() * sizeof(float)), 0) << "rstd";
    }
    if (base.dw.size() == want.dw.size()) {
      EXPECT_EQ(std::memcmp(base.dw.data(), want.dw.data(), want.dw.size() * sizeof(float)), 0) << "dw";
    }
  } else {
    normgate::Outputs base;
    EXPECT_THROW((void)Reference::compute_pair(p, o, &base), std::invalid_argument);
  }
  const Escalations &a = pr.ref.escalations(), &b = pr.ideal.escalations();
  return a.rstd + a.rows + a.dw + a.skipped + b.rstd + b.rows + b.dw + b.skipped;
}

TEST(ReferencePair, BitwiseTheTwoComputesEveryFamily) {
  struct Id {
    const char* id;
    double eps = 0;  // > 0: the oracle's eps instead of the case's (below a case id's range: the
                     // normal float32 numbers; zeros and normal do not depend on eps)
  };
  const Id ids[] = {
      {"H=96,T=24,w=bf16,family=normal,seed=1"},      {"H=80,T=20,w=fp32,family=llm,seed=2"},
      {"H=64,T=48,w=bf16,family=cancel,seed=3"},      {"H=48,T=64,w=fp32,family=cancel,seed=4,kappa=1e12"},
      {"H=64,T=20,w=bf16,family=zeros,seed=5"},       {"H=64,T=20,w=fp32,family=tiny,seed=6"},
      {"H=64,T=24,w=bf16,family=huge,seed=7"},        {"H=128,T=32,w=fp32,family=specials,seed=8"},
      {"H=1001,T=37,w=bf16,family=cancel,seed=9"},    {"H=7,T=300,w=bf16,family=llm,seed=10"},
      {"H=64,T=20,w=bf16,family=zeros,seed=11", 1e-80},  // rstd 1e40: no FP32 rstd (ideal rows bad, ref rows not)
      {"H=64,T=20,w=bf16,family=normal,seed=12", 1e-300},  // eps < 2^-900: no Newton step
  };
  for (const Id& it : ids) {
    Case cs = from_seeds(it.id);
    if (it.eps > 0) cs.eps = it.eps;
    for (OracleMode m : {OracleMode::auto_, OracleMode::fp64, OracleMode::mpfr})
      for (int threads : {1, 3})
        expect_pair_matches(cs.problem(), opts(m, RstdMode::fp64, threads),
                            std::string(it.id) + " eps " + std::to_string(cs.eps) + " " +
                                std::string(oracle::to_string(m)) + " threads " + std::to_string(threads));
  }
}

TEST(ReferencePair, BitwiseTheTwoComputesWhenEscalating) {
  Case cs = escalating_mix();  // made non-finite below
  int64_t esc = 0;
  for (int threads : {1, 2, 5}) {
    esc += expect_pair_matches(cs.problem(), opts(OracleMode::auto_, RstdMode::fp64, threads), "auto");
    esc += expect_pair_matches(cs.problem(), opts(OracleMode::mpfr, RstdMode::fp64, threads), "mpfr");
  }
  EXPECT_GT(esc, 0);
  // The element budget: some units escalated, the rest skipped (counts per mode).
  Options o = opts(OracleMode::auto_, RstdMode::fp64, 2);
  o.escalation.max_elements = 2 * 24 + 3 * 72 + 5;
  expect_pair_matches(cs.problem(), o, "budget");
  // Non-finite inputs: an Inf in dy, then a NaN in x.
  cs.dy[5 * 24 + 2] = 0x7F80;
  expect_pair_matches(cs.problem(), opts(OracleMode::auto_, RstdMode::fp64, 2), "inf dy");
  cs.x[3 * 24 + 1] = 0x7FC0;
  expect_pair_matches(cs.problem(), opts(OracleMode::auto_, RstdMode::fp64, 2), "nan x");
}

TEST(ReferencePair, BitwiseTheTwoComputesWithAddendAndHeads) {
  // dx_add (form res) and a strided heads view ([T=6, heads=3, 40] in rows of 200).
  const int64_t T = 6, NH = 3, C = 40, RowLen = 200;
  const Case flat = from_seeds("H=40,T=18,w=bf16,family=cancel,seed=13");
  const HeadsLayout hv = strided_heads(flat, T, NH, C, RowLen, 50);
  Problem ps = flat.problem();
  ps.x = {hv.x.data(), T, NH, C, RowLen, 50};
  ps.dy = {hv.dy.data(), T, NH, C, RowLen, 50};
  expect_pair_matches(ps, opts(OracleMode::auto_, RstdMode::fp64, 2), "heads");
  std::vector<uint16_t> add(flat.x.size());
  std::mt19937_64 g(14);
  std::normal_distribution<float> n01(0, 1);
  for (auto& a : add) a = bf16(n01(g));
  Problem pa = flat.problem();
  pa.dx_add = plain_view(add.data(), flat.R, flat.H);
  expect_pair_matches(pa, opts(OracleMode::auto_, RstdMode::fp64, 2), "dx_add");
  // No rows, and the errors of compute().
  Problem p0 = flat.problem();
  p0.x.T_rows = 0;
  p0.dy.T_rows = 0;
  expect_pair_matches(p0, opts(OracleMode::auto_, RstdMode::fp64, 2), "T = 0");
  Problem bad = flat.problem();
  bad.eps = 0;
  EXPECT_THROW((void)Reference::compute_pair(bad), std::invalid_argument);
  Options big = opts(OracleMode::mpfr);
  big.escalation.mpfr_max_elements = 10;
  EXPECT_THROW((void)Reference::compute_pair(flat.problem(), big), std::invalid_argument);
}

// The FP32 baseline from the pair's pass (D22 of docs/perf/oracle-and-gate-
// throughput.md): whole groups of 8 rows per block and chunk, any forced
// block shape, several pipelined blocks (531 rows of 4099: 256-row blocks),
// rows not a multiple of 8; the same bits as fp32_baseline (expect_pair_matches).
TEST(ReferencePair, Fp32BaselineInThePassAnyBlockShape) {
  struct Restore {  // the environment's value as it was before the test
    const char* e = std::getenv("NORMGATE_ORACLE_BLOCK_ROWS");
    std::string v = e ? e : "";
    bool had = e != nullptr;
    ~Restore() { had ? (void)setenv("NORMGATE_ORACLE_BLOCK_ROWS", v.c_str(), 1) : (void)unsetenv("NORMGATE_ORACLE_BLOCK_ROWS"); }
  } restore;
  const Case small = make_case(45, 1003, WDtype::fp32, 31, Dist::wide, Dist::llm);
  for (const char* rows : {"1", "9", "45", "100000"}) {
    setenv("NORMGATE_ORACLE_BLOCK_ROWS", rows, 1);
    expect_pair_matches(small.problem(), opts(OracleMode::auto_, RstdMode::fp64, 3),
                        std::string("block rows ") + rows);
  }
  unsetenv("NORMGATE_ORACLE_BLOCK_ROWS");
  const Case wide = make_case(531, 4099, WDtype::bf16, 77, Dist::wide, Dist::llm);
  for (int threads : {1, 4}) expect_pair_matches(wide.problem(), opts(OracleMode::auto_, RstdMode::fp64, threads), "wide");
  for (int64_t R : {1, 7, 9}) {
    const Case c = make_case(R, 300, WDtype::bf16, 80 + R, Dist::llm, Dist::normal);
    expect_pair_matches(c.problem(), opts(OracleMode::auto_, RstdMode::fp64, 2), "rows " + std::to_string(R));
  }
  // forward_only has no column pass: asking for the baseline is an error.
  Options fo = opts(OracleMode::auto_, RstdMode::fp64, 2);
  fo.forward_only = true;
  normgate::Outputs base;
  try {
    (void)Reference::compute_pair(small.problem(), fo, &base);
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("forward_only"), std::string::npos) << e.what();
  }
}

// NaNs of several signs and payloads meet in one dw column (NaN and Inf in
// dy, zeros in x: Inf * 0 makes the default NaN): the two passes' loops may
// pass on different operands' NaNs, so both return the one canonical NaN
// (fp32_parts.h, fp32_canonical_nan); the bits then agree, and every NaN of
// rstd and dw is +NaN. From a review's reproducer.
TEST(ReferencePair, Fp32BaselineNanPayloadsAndSigns) {
  const uint16_t specials[] = {0x7FC0, 0xFFC0, 0x7FC5, 0xFFE3, 0x7F81, 0xFF91, 0x7F80, 0xFF80};
  int64_t nan_cols = 0, cols = 0;
  for (bool nan_row : {false, true})
    for (uint64_t seed : {1u, 2u, 3u}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + (nan_row ? ", a -NaN x row" : ""));
      Case c = make_case(37, 333, WDtype::bf16, 500 + seed, Dist::normal, Dist::wide);
      std::mt19937_64 g(seed);
      for (size_t k = 0; k < c.x.size(); ++k) {
        if (g() % 7 == 0) c.x[k] = (g() & 1) ? 0x8000 : 0;
        if (g() % 23 == 0) c.dy[k] = specials[g() % 8];
      }
      if (nan_row) c.x[5 * 333 + 17] = 0xFFC1;  // row 5's rstd is NaN, and then every dw column
      for (int th : {1, 2, 3}) {
        normgate::Outputs base;
        (void)Reference::compute_pair(c.problem(), opts(OracleMode::auto_, RstdMode::fp64, th), &base);
        const normgate::Outputs want = oracle::fp32_baseline(c.problem(), th, false);
        const normgate::Outputs full = oracle::fp32_baseline(c.problem(), th, true);
        ASSERT_EQ(base.rstd.size(), want.rstd.size());
        ASSERT_EQ(base.dw.size(), want.dw.size());
        EXPECT_EQ(0, std::memcmp(base.rstd.data(), want.rstd.data(), want.rstd.size() * 4));
        EXPECT_EQ(0, std::memcmp(base.dw.data(), want.dw.data(), want.dw.size() * 4));
        EXPECT_EQ(0, std::memcmp(full.rstd.data(), want.rstd.data(), want.rstd.size() * 4));
        EXPECT_EQ(0, std::memcmp(full.dw.data(), want.dw.data(), want.dw.size() * 4));
        for (const std::vector<float>* v : {&want.rstd, &want.dw})
          for (float f : *v) {
            if (std::isnan(f)) {
              EXPECT_EQ(std::bit_cast<uint32_t>(f), 0x7FC00000u);
            }
          }
        EXPECT_EQ(std::isnan(want.rstd[5]), nan_row);
        if (nan_row) continue;
        for (float f : want.dw) nan_cols += std::isnan(f) ? 1 : 0;
        cols += static_cast<int64_t>(want.dw.size());
      }
    }
  EXPECT_GT(nan_cols, 0);
  EXPECT_LT(nan_cols, cols);  // not every column: the finite ones are compared too
}

// ---- (5) forward_only: the forward's values the same bits as the full pass ----------


// Every forward value of `fo` (Options::forward_only) against `full`: rstd,
// rstd_f32 (and its certainty), y (VB and split accessors), c, which rows
// and rstds come from MPFR, and the escalation counts but dw; dx and dw of
// `fo` throw std::logic_error. Returns the MPFR units of `full`.
int64_t expect_forward_same(const Reference& full, const Reference& fo) {
  EXPECT_FALSE(full.forward_only());
  EXPECT_TRUE(fo.forward_only());
  EXPECT_EQ(full.options().rstd, fo.options().rstd);
  EXPECT_EQ(full.rows(), fo.rows());
  EXPECT_EQ(full.cols(), fo.cols());
  const int64_t R = full.rows(), H = full.cols();
  std::vector<double> v1(H), b1(H), v2(H), b2(H);
  int64_t bad = 0;
  for (int64_t r = 0; r < R; ++r) {
    bad += !same_vb(full.rstd(r), fo.rstd(r));
    bad += !same_vb(full.c(r), fo.c(r));
    bad += std::bit_cast<uint32_t>(full.rstd_f32(r)) != std::bit_cast<uint32_t>(fo.rstd_f32(r));
    bad += full.rstd_f32_certain(r) != fo.rstd_f32_certain(r);
    bad += full.row_escalated(r) != fo.row_escalated(r);
    bad += full.rstd_escalated(r) != fo.rstd_escalated(r);
    full.y_row(r, 0, H, v1.data(), b1.data());
    fo.y_row(r, 0, H, v2.data(), b2.data());
    for (int64_t j = 0; j < H; ++j) {
      bad += !same_bits(v1[j], v2[j]) || !same_bits(b1[j], b2[j]);
      bad += !same_vb(full.y(r, j), fo.y(r, j));
    }
  }
  EXPECT_EQ(bad, 0) << "forward values differ between forward_only and the full pass";
  const Escalations &a = full.escalations(), &b = fo.escalations();
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.rstd, b.rstd);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.dx, b.dx);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(b.dw, 0);
  if (R > 0) {
    VB buf[1];
    double d = 0;
    EXPECT_THROW((void)fo.dx(0, 0), std::logic_error);
    EXPECT_THROW(fo.dx_row(0, buf), std::logic_error);
    EXPECT_THROW(fo.dx_row(0, 0, 1, &d, &d), std::logic_error);
    EXPECT_THROW(fo.dx_row_values(0, 0, 1, &d), std::logic_error);
  }
  EXPECT_THROW((void)fo.dw(0), std::logic_error);
  EXPECT_THROW((void)fo.dw_abs(0), std::logic_error);
  return a.rstd + a.rows + a.dw;
}

int64_t expect_pair_forward_same(const Problem& p, Options o, const std::string& what) {
  SCOPED_TRACE(what);
  const oracle::ReferencePair full = Reference::compute_pair(p, o);
  o.forward_only = true;
  const oracle::ReferencePair fo = Reference::compute_pair(p, o);
  int64_t esc = 0;
  {
    SCOPED_TRACE("ref");
    esc += expect_forward_same(full.ref, fo.ref);
  }
  {
    SCOPED_TRACE("ideal");
    esc += expect_forward_same(full.ideal, fo.ideal);
  }
  Options c = o;  // compute() too, in the ideal's mode
  c.rstd = RstdMode::fp32_rounded;
  c.forward_only = false;
  Options f = c;
  f.forward_only = true;
  expect_forward_same(Reference::compute(p, c), Reference::compute(p, f));
  return esc;
}

TEST(ForwardOnly, SameForwardBitsEveryGateFamily) {
  const char* ids[] = {
      "H=96,T=24,w=bf16,family=normal,seed=1",       "H=80,T=20,w=fp32,family=llm,seed=2",
      "H=64,T=48,w=bf16,family=cancel,seed=3",       "H=48,T=64,w=fp32,family=cancel,seed=4,kappa=1e12",
      "H=72,T=40,w=bf16,family=epsnear,seed=5",      "H=100,T=30,w=fp32,family=epsnear,seed=6,eps=1e-5",
      "H=1001,T=37,w=bf16,family=cancel,seed=9",     "H=64,T=1,w=bf16,family=cancel,seed=10",
      "H=64,T=1,w=fp32,family=epsnear,seed=11",      "H=64,T=0,w=bf16,family=normal,seed=12",
      "H=128,T=32,w=fp32,family=specials,seed=8",
  };
  for (const char* id : ids)
    for (OracleMode m : {OracleMode::auto_, OracleMode::fp64})
      for (int threads : {1, 3})
        expect_pair_forward_same(from_seeds(id).problem(), opts(m, RstdMode::fp64, threads),
                                 std::string(id) + " " + std::string(oracle::to_string(m)) + " threads " +
                                     std::to_string(threads));
}

// Rows escalated for their dx alone take y from MPFR too: forward_only must
// still run the dx part of the row filter, or those rows' y would differ.
TEST(ForwardOnly, SameForwardBitsWhenRowsEscalateForDx) {
  const Case rows = cancel_rows(6, 24, 3, 100, 92, 10);
  const Reference full = Reference::compute(rows.problem(), opts(OracleMode::auto_));
  ASSERT_GT(full.escalations().dx, 0);
  ASSERT_GT(full.escalations().dx, full.escalations().y);  // some rows escalate for dx only
  EXPECT_GT(expect_pair_forward_same(rows.problem(), opts(OracleMode::auto_, RstdMode::fp64, 2), "dx rows"), 0);
  Case cs = escalating_mix();
  for (int threads : {1, 2})
    EXPECT_GT(expect_pair_forward_same(cs.problem(), opts(OracleMode::auto_, RstdMode::fp64, threads), "mix"), 0);
  expect_pair_forward_same(cs.problem(), opts(OracleMode::mpfr, RstdMode::fp64, 2), "mix mpfr");
  cs.x[3 * 24 + 1] = 0x7FC0;  // a NaN row
  expect_pair_forward_same(cs.problem(), opts(OracleMode::auto_, RstdMode::fp64, 2), "nan x");
}

}  // namespace
}  // namespace ngt
