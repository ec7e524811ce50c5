// tests/oracle/reference_test.cpp: the FP64 reference against 200-bit MPFR,
// its compensated dw on cancellation columns, thread independence, edge cases
// and Problem validation.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "util/oracle_test_util.h"
#include "util/row_accessors.h"

namespace ngt {
namespace {

constexpr double u = 0x1p-53;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<float> f32_rstds(const Reference& ref) {
  std::vector<float> v(ref.rows());
  for (int64_t r = 0; r < ref.rows(); ++r) v[r] = ref.rstd_f32(r);
  return v;
}

// Worst ratios seen, printed for the record.
struct Worst {
  double err_over_bound = 0;   // max |v - exact| / bound  (<= 1 required)
  double bound_over_tol = 0;   // max bound / looseness tolerance (<= 1 required)
  void add(double err, double bound, double tol) {
    if (bound > 0) err_over_bound = std::max(err_over_bound, err / bound);
    bound_over_tol = std::max(bound_over_tol, bound / tol);
  }
};

struct MpCase {
  int64_t R, H;
  WDtype wd;
  Dist dx, ddy;
  uint64_t seed;
  int zero_rows = 0;  // rows set to x = 0
  double eps = 1e-6;
};

std::string name(const MpCase& m) {
  return "R=" + std::to_string(m.R) + " H=" + std::to_string(m.H) +
         " w=" + std::string(normgate::to_string(m.wd)) + " dist=" + std::to_string(int(m.dx)) +
         "/" + std::to_string(int(m.ddy)) + " seed=" + std::to_string(m.seed) +
         " eps=" + std::to_string(m.eps);
}

// Every element of every output against MPFR: rigorous (err <= bound) and
// not loose (bound <= a small multiple of u times the value's natural scale).
void check_against_mpfr(const Case& cs, RstdMode mode, const std::string& what) {
  SCOPED_TRACE(what + (mode == RstdMode::fp64 ? " mode=fp64" : " mode=fp32_rounded"));
  Reference ref = Reference::compute(cs.problem(), {0, mode});
  MpRef m(cs, mode, f32_rstds(ref));
  Worst wr, wy, wdx, wc, wdw;
  int bad = 0;
  auto expect = [&](bool ok, const char* o, int64_t a, int64_t b, const VB& vb, const mp& ex) {
    if (!ok && bad++ < 10)
      ADD_FAILURE() << o << "(" << a << "," << b << ") v=" << vb.v << " bound=" << vb.bound
                    << " exact=" << to_d(ex);
  };
  for (int64_t r = 0; r < cs.R; ++r) {
    double err;
    VB rs = ref.rstd(r);
    expect(within(rs, m.rs[r], to_d(m.rs[r]), &err), "rstd", r, 0, rs, m.rs[r]);
    wr.add(err, rs.bound, 5 * u * std::fabs(rs.v));
    // The FP32 rstd is RN(exact rstd), proven.
    EXPECT_TRUE(ref.rstd_f32_certain(r)) << "row " << r;
    EXPECT_EQ(ref.rstd_f32(r), rn32(m.rs[r])) << "row " << r;
    const double use = to_d(m.use[r]);
    VB c = ref.c(r);
    double cscale = use * m.pd_abs[r] / cs.H;
    expect(within(c, m.cc[r], cscale, &err), "c", r, 0, c, m.cc[r]);
    // (bounds carry an absolute floor of 2^-1060 that products scale by use)
    wc.add(err, c.bound, 8 * u * std::fabs(c.v) + 1e-20 * cscale + 1e-300 * (1 + use));
    for (int64_t j = 0; j < cs.H; ++j) {
      VB y = ref.y(r, j);
      mp ey = m.y(r, j);
      expect(within(y, ey, std::fabs(y.v), &err), "y", r, j, y, ey);
      wy.add(err, y.bound, 4 * u * std::fabs(y.v) + 1e-300);
      VB dx = ref.dx(r, j);
      mp edx = m.dx(r, j);
      double g = cs.dyv(r, j) * cs.w(j);
      double scale = use * (std::fabs(g) + std::fabs(cs.xv(r, j) * to_d(m.k[r])));
      expect(within(dx, edx, scale, &err), "dx", r, j, dx, edx);
      wdx.add(err, dx.bound, 16 * u * scale + 1e-300);
    }
  }
  for (int64_t j = 0; j < cs.H; ++j) {
    double err;
    VB dw = ref.dw(j);
    expect(within(dw, m.dw[j], ref.dw_abs(j), &err), "dw", j, 0, dw, m.dw[j]);
    wdw.add(err, dw.bound, 4 * u * std::fabs(dw.v) + 1e-20 * ref.dw_abs(j) + 1e-300);
  }
  for (auto [n, w] : {std::pair{"rstd", &wr}, {"y", &wy}, {"dx", &wdx}, {"c", &wc}, {"dw", &wdw}}) {
    EXPECT_LE(w->err_over_bound, 1.0) << n;
    EXPECT_LE(w->bound_over_tol, 1.0) << n << ": bound looser than expected";
  }
  std::printf("  %-60s %s: max err/bound rstd %.2f y %.2f dx %.2f c %.2f dw %.2f | "
              "max bound/tol rstd %.2f y %.2f dx %.2f c %.2f dw %.2f\n",
              what.c_str(), mode == RstdMode::fp64 ? "fp64" : "fp32", wr.err_over_bound,
              wy.err_over_bound, wdx.err_over_bound, wc.err_over_bound, wdw.err_over_bound,
              wr.bound_over_tol, wy.bound_over_tol, wdx.bound_over_tol, wc.bound_over_tol,
              wdw.bound_over_tol);
}

TEST(ReferenceMpfr, EveryElementWithinBoundAndBoundsTight) {
  const MpCase cases[] = {
      {1, 1, WDtype::bf16, Dist::normal, Dist::normal, 1},
      {3, 1, WDtype::fp32, Dist::normal, Dist::normal, 2},
      {1, 7, WDtype::fp32, Dist::normal, Dist::normal, 3},
      {7, 9, WDtype::bf16, Dist::wide, Dist::normal, 4},
      {33, 64, WDtype::fp32, Dist::normal, Dist::wide, 5},
      {64, 257, WDtype::bf16, Dist::llm, Dist::llm, 6},
      {300, 1000, WDtype::bf16, Dist::normal, Dist::normal, 7},
      {120, 1000, WDtype::fp32, Dist::llm, Dist::normal, 8},
      {50, 200, WDtype::fp32, Dist::wide, Dist::wide, 9},
      {40, 100, WDtype::bf16, Dist::tiny, Dist::tiny, 10},
      {40, 100, WDtype::fp32, Dist::huge, Dist::huge, 11},
      {20, 130, WDtype::bf16, Dist::tiny, Dist::huge, 12},
      {30, 999, WDtype::fp32, Dist::normal, Dist::normal, 13, 5},
      {9, 40, WDtype::bf16, Dist::tiny, Dist::normal, 14, 2, 1e-60},
      {5, 3, WDtype::bf16, Dist::huge, Dist::normal, 15, 0, 1e30},
  };
  for (const MpCase& mc : cases) {
    Case cs = make_case(mc.R, mc.H, mc.wd, mc.seed, mc.dx, mc.ddy, mc.eps);
    for (int z = 0; z < mc.zero_rows; ++z)
      std::fill_n(cs.x.begin() + (z * 5 % mc.R) * mc.H, mc.H, uint16_t{0});
    for (RstdMode mode : {RstdMode::fp64, RstdMode::fp32_rounded}) check_against_mpfr(cs, mode, name(mc));
  }
}

// ---- (2) cancellation columns ----------------------------------------------

// Rows of x are +-1 patterns with the same sum of squares, so every row has
// the same rstd and dy's huge +-terms cancel exactly in exact arithmetic.
Case cancel_case() {
  Case c;
  c.R = 3;
  c.H = 4;
  c.wd = WDtype::bf16;
  c.x = {bf16(1), bf16(-1), bf16(1), bf16(-1),    //
         bf16(-1), bf16(1), bf16(1), bf16(-1),    //
         bf16(1), bf16(1), bf16(-1), bf16(-1)};
  // column 0: +2^40, 2^-20, -2^40 (after x's signs); column 1: 2^60, 1, -2^60;
  // column 2: 3*2^61, -2^-10, -3*2^61; column 3: ordinary values.
  auto at = [&](int r, int j, float v) { c.dy[r * 4 + j] = bf16(v * float(c.xv(r, j))); };
  c.dy.assign(12, 0);
  at(0, 0, 0x1p40f), at(1, 0, 0x1p-20f), at(2, 0, -0x1p40f);
  at(0, 1, 0x1p60f), at(1, 1, 1.0f), at(2, 1, -0x1p60f);
  at(0, 2, 0x1.8p61f), at(1, 2, -0x1p-10f), at(2, 2, -0x1.8p61f);
  at(0, 3, 0.75f), at(1, 3, -1.5f), at(2, 3, 0.5f);
  c.wb = {bf16(1), bf16(0.5f), bf16(2), bf16(1)};
  return c;
}

TEST(ReferenceCancellation, CompensatedDwGetsSignalNaiveFp64LosesIt) {
  Case cs = cancel_case();
  for (RstdMode mode : {RstdMode::fp64, RstdMode::fp32_rounded}) {
    Reference ref = Reference::compute(cs.problem(), {0, mode});
    MpRef m(cs, mode, f32_rstds(ref));
    for (int64_t j = 0; j < 3; ++j) {
      VB dw = ref.dw(j);
      const double exact = to_d(m.dw[j]);
      // Naive FP64: xhat = fl(x * rstd), dw = ((0 + fl(dy xhat_0)) + fl(dy xhat_1)) + ...
      double naive = 0;
      for (int64_t r = 0; r < cs.R; ++r) {
        double use = mode == RstdMode::fp64 ? ref.rstd(r).v : double(ref.rstd_f32(r));
        naive += cs.dyv(r, j) * (cs.xv(r, j) * use);
      }
      double err;
      EXPECT_TRUE(within(dw, m.dw[j], ref.dw_abs(j), &err)) << "col " << j;
      // Condition numbers 2^61..2^73: the bound is ~2^-97 dw_abs (fp64 mode, rstd
      // carried to ~2^-97) or ~15 u^2 dw_abs (fp32 mode): far below the signal.
      EXPECT_LE(dw.bound, 1e-6 * std::fabs(exact)) << "col " << j;
      EXPECT_LE(dw.bound, 4 * u * std::fabs(exact) + 0x1p-90 * ref.dw_abs(j)) << "col " << j;
      EXPECT_GE(std::fabs(naive - exact), 0.5 * std::fabs(exact)) << "col " << j;
      EXPECT_GT(std::fabs(naive - exact), 1e4 * dw.bound) << "col " << j;
      std::printf("  mode %s col %lld: exact %.17g oracle %.17g (err %.2e, bound %.2e) naive "
                  "fp64 %.17g (err %.2e) dw_abs %.3e\n",
                  mode == RstdMode::fp64 ? "fp64" : "fp32", (long long)j, exact, dw.v, err,
                  dw.bound, naive, std::fabs(naive - exact), ref.dw_abs(j));
    }
  }
}

TEST(ReferenceCancellation, ManyRowsRandomPairs) {
  // 272 rows with the same rstd; in every column, rows i and i+128 (i < 128)
  // carry +-2^e (e in [20, 70]) that cancel, rows 256..271 an O(1) signal.
  const int64_t R = 272, H = 16;
  Case c;
  c.R = R;
  c.H = H;
  c.wd = WDtype::fp32;
  std::mt19937_64 g(99);
  c.x.resize(R * H);
  c.dy.assign(R * H, 0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < H; ++j) c.x[r * H + j] = bf16((g() & 1) ? 1.0f : -1.0f);
  for (int64_t j = 0; j < H; ++j) {
    for (int64_t i = 0; i < 128; ++i) {
      float big = std::ldexp(1.0f + float(g() % 128) / 128.0f, 20 + int(g() % 51));
      // dy * x must be +big on row i and -big on row i + 128
      c.dy[i * H + j] = bf16(big * float(c.xv(i, j)));
      c.dy[(i + 128) * H + j] = bf16(-big * float(c.xv(i + 128, j)));
    }
    for (int64_t r = 256; r < R; ++r)
      c.dy[r * H + j] = bf16(float(std::normal_distribution<double>(0, 1)(g)));
  }
  c.wf.assign(H, 1.25f);
  for (RstdMode mode : {RstdMode::fp64, RstdMode::fp32_rounded}) {
    Reference ref = Reference::compute(c.problem(), {0, mode});
    MpRef m(c, mode, f32_rstds(ref));
    int naive_bad = 0;
    for (int64_t j = 0; j < H; ++j) {
      VB dw = ref.dw(j);
      double err;
      EXPECT_TRUE(within(dw, m.dw[j], ref.dw_abs(j), &err)) << "col " << j;
      EXPECT_LE(dw.bound, 4 * u * std::fabs(dw.v) + 1e-20 * ref.dw_abs(j)) << "col " << j;
      double naive = 0;
      for (int64_t r = 0; r < R; ++r) {
        double use = mode == RstdMode::fp64 ? ref.rstd(r).v : double(ref.rstd_f32(r));
        naive += c.dyv(r, j) * (c.xv(r, j) * use);
      }
      double nerr = std::fabs(naive - to_d(m.dw[j]));
      if (nerr > 1e6 * dw.bound) ++naive_bad;
    }
    EXPECT_GE(naive_bad, H / 2) << "naive FP64 should be far off on most columns";
  }
}

// ---- (3) thread-count independence -------------------------------------------

void expect_bitwise_same(const Reference& a, const Reference& b) {
  ASSERT_EQ(a.rows(), b.rows());
  ASSERT_EQ(a.cols(), b.cols());
  auto same = [](double p, double q) { return std::memcmp(&p, &q, sizeof p) == 0; };
  std::vector<VB> ya(a.cols()), yb(a.cols());
  for (int64_t r = 0; r < a.rows(); ++r) {
    ASSERT_TRUE(same(a.rstd(r).v, b.rstd(r).v) && same(a.rstd(r).bound, b.rstd(r).bound)) << r;
    ASSERT_EQ(a.rstd_f32(r), b.rstd_f32(r));
    ASSERT_TRUE(same(a.c(r).v, b.c(r).v) && same(a.c(r).bound, b.c(r).bound)) << r;
    a.y_row(r, ya.data());
    b.y_row(r, yb.data());
    ASSERT_EQ(std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(VB)), 0) << "y row " << r;
    a.dx_row(r, ya.data());
    b.dx_row(r, yb.data());
    ASSERT_EQ(std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(VB)), 0) << "dx row " << r;
  }
  for (int64_t j = 0; j < a.cols(); ++j) {
    ASSERT_TRUE(same(a.dw(j).v, b.dw(j).v) && same(a.dw(j).bound, b.dw(j).bound)) << j;
    ASSERT_TRUE(same(a.dw_abs(j), b.dw_abs(j))) << j;
  }
}

TEST(ReferenceThreads, BitwiseIdenticalFor1_2_16Threads) {
  for (WDtype wd : {WDtype::bf16, WDtype::fp32}) {
    Case cs = make_case(300, 1000, wd, 21, Dist::llm, Dist::wide);
    for (RstdMode mode : {RstdMode::fp64, RstdMode::fp32_rounded}) {
      Reference r1 = Reference::compute(cs.problem(), {1, mode});
      Reference r2 = Reference::compute(cs.problem(), {2, mode});
      Reference r16 = Reference::compute(cs.problem(), {16, mode});
      omp_set_num_threads(3);
      Reference rdef = Reference::compute(cs.problem(), {0, mode});
      omp_set_num_threads(omp_get_num_procs());
      expect_bitwise_same(r1, r2);
      expect_bitwise_same(r1, r16);
      expect_bitwise_same(r1, rdef);
    }
  }
}

// The row-block shape only schedules the work (row_blocks.h): blocks of 1,
// 7 and every row give the default's bits, for the pair as for one side.
TEST(ReferenceThreads, BitwiseIdenticalForAnyRowBlock) {
  struct Restore {
    ~Restore() { unsetenv("NORMGATE_ORACLE_BLOCK_ROWS"); }
  } restore;
  Case cs = make_case(61, 1000, WDtype::bf16, 23, Dist::llm, Dist::wide);
  const Reference base = Reference::compute(cs.problem(), {3, RstdMode::fp64});
  const Reference base32 = Reference::compute(cs.problem(), {3, RstdMode::fp32_rounded});
  for (const char* rows : {"1", "7", "61", "100000"}) {
    SCOPED_TRACE(rows);
    setenv("NORMGATE_ORACLE_BLOCK_ROWS", rows, 1);
    expect_bitwise_same(base, Reference::compute(cs.problem(), {3, RstdMode::fp64}));
    expect_bitwise_same(base32, Reference::compute(cs.problem(), {2, RstdMode::fp32_rounded}));
  }
}

TEST(ReferenceThreads, ElementAndRowAccessorsAgree) {
  Case cs = make_case(20, 77, WDtype::fp32, 5, Dist::wide, Dist::normal);
  Reference ref = Reference::compute(cs.problem());
  std::vector<VB> row(cs.H);
  for (int64_t r = 0; r < cs.R; ++r) {
    ref.y_row(r, row.data());
    for (int64_t j = 0; j < cs.H; ++j) {
      VB e = ref.y(r, j);
      ASSERT_EQ(std::memcmp(&e, &row[j], sizeof e), 0);
    }
    ref.dx_row(r, row.data());
    for (int64_t j = 0; j < cs.H; ++j) {
      VB e = ref.dx(r, j);
      ASSERT_EQ(std::memcmp(&e, &row[j], sizeof e), 0);
    }
  }
  normgate::test::expect_split_rows_match(ref);
  normgate::test::expect_split_rows_match(Reference::compute(cs.problem(), {0, RstdMode::fp32_rounded}));
}

// ---- (5) edge cases -------------------------------------------------------------

TEST(ReferenceEdge, EmptyRows) {
  std::vector<uint16_t> wb(5, bf16(1));
  Problem p;
  p.x = plain_view(nullptr, 0, 5);
  p.dy = plain_view(nullptr, 0, 5);
  p.w = {WDtype::bf16, wb.data(), 5};
  Reference ref = Reference::compute(p);
  EXPECT_EQ(ref.rows(), 0);
  EXPECT_EQ(ref.cols(), 5);
  for (int64_t j = 0; j < 5; ++j) {
    EXPECT_EQ(ref.dw(j).v, 0.0);
    EXPECT_EQ(ref.dw(j).bound, 0.0);
    EXPECT_EQ(ref.dw_abs(j), 0.0);
  }
  p.w.p = nullptr;  // allowed when there are no rows
  EXPECT_NO_THROW(Reference::compute(p));
}

TEST(ReferenceEdge, SingleElement) {
  Case c;
  c.R = 1;
  c.H = 1;
  c.x = {bf16(3)};
  c.dy = {bf16(2)};
  c.wb = {bf16(0.5f)};
  Reference ref = Reference::compute(c.problem());
  MpRef m(c, RstdMode::fp64, {});
  // H = 1: rstd = 1/sqrt(9 + eps), dx = rstd (g - xhat * g xhat) = g rstd eps/(9+eps)
  EXPECT_TRUE(within(ref.rstd(0), m.rs[0], 1));
  EXPECT_TRUE(within(ref.dx(0, 0), m.dx(0, 0), 1));
  EXPECT_TRUE(within(ref.dw(0), m.dw[0], 1));
  EXPECT_TRUE(within(ref.y(0, 0), m.y(0, 0), 1));
  const double rs = 1 / std::sqrt(9 + 1e-6);
  // g - xhat c cancels 7 digits here; the oracle's dx is good to a few ulps
  // of the terms (~1e-8 relative), and its bound says so.
  EXPECT_NEAR(ref.dx(0, 0).v, rs * 1e-6 / (9 + 1e-6), 1e-7 * ref.dx(0, 0).v);
  EXPECT_LE(ref.dx(0, 0).bound, 1e-7 * ref.dx(0, 0).v);
}

TEST(ReferenceEdge, ZeroRowsHaveRstdOneOverSqrtEps) {
  Case c = make_case(4, 33, WDtype::bf16, 3);
  std::fill_n(c.x.begin() + 33, 33, uint16_t{0});       // row 1 +0
  std::fill_n(c.x.begin() + 66, 33, uint16_t{0x8000});  // row 2 -0
  for (RstdMode mode : {RstdMode::fp64, RstdMode::fp32_rounded}) {
    Reference ref = Reference::compute(c.problem(), {0, mode});
    MpRef m(c, mode, f32_rstds(ref));
    for (int r : {1, 2}) {
      EXPECT_TRUE(within(ref.rstd(r), m.rs[r], 1e3));
      EXPECT_NEAR(ref.rstd(r).v, 1000.0, 1e-9);
      EXPECT_EQ(ref.c(r).v, 0.0);
      for (int64_t j = 0; j < c.H; ++j) {
        EXPECT_EQ(ref.y(r, j).v, 0.0);
        EXPECT_TRUE(within(ref.dx(r, j), m.dx(r, j), 1e3));
      }
    }
    for (int64_t j = 0; j < c.H; ++j) EXPECT_TRUE(within(ref.dw(j), m.dw[j], ref.dw_abs(j)));
  }
}

TEST(ReferenceEdge, TinyEpsFallbackPathStillRigorous) {
  // eps < 2^-900 disables the Newton correction: plain propagation bounds.
  // With a subnormal eps the bounds' absolute floor (2^-1060) is not small
  // next to eps, so only rigour is checked there.
  for (double eps : {1e-280, 1e-310}) {
    SCOPED_TRACE(eps);
    Case c = make_case(6, 20, WDtype::fp32, 8, Dist::normal, Dist::normal, eps);
    std::fill_n(c.x.begin(), 20, uint16_t{0});  // rstd = 1/sqrt(eps): 1e140 / 1e155
    for (RstdMode mode : {RstdMode::fp64, RstdMode::fp32_rounded}) {
      Reference ref = Reference::compute(c.problem(), {0, mode});
      MpRef m(c, mode, f32_rstds(ref));
      for (int64_t r = 0; r < c.R; ++r) {
        EXPECT_TRUE(within(ref.rstd(r), m.rs[r], to_d(m.rs[r]))) << r;
        if (eps > 1e-300) {
          EXPECT_LE(ref.rstd(r).bound, 8 * u * ref.rstd(r).v) << r;
        }
        for (int64_t j = 0; j < c.H; ++j)
          EXPECT_TRUE(within(ref.y(r, j), m.y(r, j), std::fabs(to_d(m.y(r, j))))) << r << "," << j;
      }
      EXPECT_FALSE(std::isfinite(ref.rstd_f32(0)));  // 1e140 overflows binary32
      EXPECT_FALSE(ref.rstd_f32_certain(0));
      if (mode == RstdMode::fp64) {
        for (int64_t j = 0; j < c.H; ++j) EXPECT_TRUE(within(ref.dw(j), m.dw[j], ref.dw_abs(j))) << j;
      } else {
        // The backward's rstd of row 0 is +inf: dw and row 0's c are non-finite
        // or unbounded (bound +inf), never a wrong finite claim.
        for (int64_t j = 0; j < c.H; ++j) EXPECT_EQ(ref.dw(j).bound, kInf) << j;
        EXPECT_EQ(ref.c(0).bound, kInf);
      }
    }
  }
}

TEST(ReferenceEdge, NaNRowPropagates) {
  Case c = make_case(4, 10, WDtype::bf16, 4);
  c.x[1 * 10 + 3] = 0x7FC0;  // NaN in x row 1
  Reference ref = Reference::compute(c.problem());
  EXPECT_TRUE(std::isnan(ref.rstd(1).v));
  EXPECT_EQ(ref.rstd(1).bound, kInf);
  EXPECT_FALSE(ref.rstd_f32_certain(1));
  EXPECT_TRUE(std::isnan(ref.c(1).v));
  EXPECT_EQ(ref.c(1).bound, kInf);
  for (int64_t j = 0; j < 10; ++j) {
    EXPECT_TRUE(std::isnan(ref.y(1, j).v));
    EXPECT_EQ(ref.y(1, j).bound, kInf);
    EXPECT_TRUE(std::isnan(ref.dx(1, j).v));
    EXPECT_EQ(ref.dx(1, j).bound, kInf);
    EXPECT_TRUE(std::isnan(ref.dw(j).v)) << j;  // NaN rstd enters every column
    EXPECT_EQ(ref.dw(j).bound, kInf);
  }
  // Other rows are unaffected.
  MpRef m(c, RstdMode::fp64, {});
  for (int r : {0, 2, 3}) {
    EXPECT_TRUE(within(ref.rstd(r), m.rs[r], 1)) << r;
    EXPECT_TRUE(std::isfinite(ref.c(r).bound)) << r;
    for (int64_t j = 0; j < 10; ++j) EXPECT_TRUE(within(ref.dx(r, j), m.dx(r, j), 10)) << r;
  }
}

TEST(ReferenceEdge, InfInputs) {
  Case c = make_case(4, 10, WDtype::fp32, 6);
  c.x[2 * 10 + 5] = 0x7F80;   // +Inf in x row 2
  c.dy[0 * 10 + 7] = 0xFF80;  // -Inf in dy (0, 7)
  c.x[0 * 10 + 7] = bf16(2);  // x != 0 there: dy*xhat = -Inf
  Reference ref = Reference::compute(c.problem());
  EXPECT_EQ(ref.rstd(2).v, 0.0);  // IEEE: 1/sqrt(inf)
  EXPECT_EQ(ref.rstd(2).bound, kInf);
  EXPECT_TRUE(std::isnan(ref.y(2, 5).v));  // inf * 0
  EXPECT_EQ(ref.y(2, 4).bound, kInf);
  EXPECT_EQ(ref.c(0).bound, kInf);
  EXPECT_FALSE(std::isfinite(ref.dx(0, 1).v));
  EXPECT_TRUE(std::isnan(ref.dw(5).v));  // inf x * 0 rstd
  // Column 7: -Inf plus finite terms -> -Inf as in plain IEEE summation.
  EXPECT_EQ(ref.dw(7).v, -kInf);
  for (int64_t j = 0; j < 10; ++j) EXPECT_EQ(ref.dw(j).bound, kInf) << j;
  // Rows 1, 3 (finite) keep finite bounds for y and rstd.
  EXPECT_TRUE(std::isfinite(ref.rstd(1).bound));
  EXPECT_TRUE(std::isfinite(ref.y(3, 2).bound));
  EXPECT_TRUE(std::isfinite(ref.c(1).bound));
}

TEST(ReferenceEdge, InfInDyOnlyAffectsItsColumnAndRow) {
  Case c = make_case(5, 8, WDtype::bf16, 7);
  c.dy[3 * 8 + 2] = 0x7F80;  // +Inf
  c.x[3 * 8 + 2] = bf16(-0.5f);
  Reference ref = Reference::compute(c.problem());
  EXPECT_EQ(ref.dw(2).v, -kInf);
  EXPECT_EQ(ref.dw(2).bound, kInf);
  EXPECT_EQ(ref.c(3).bound, kInf);
  MpRef m(c, RstdMode::fp64, {});
  for (int64_t j = 0; j < 8; ++j) {
    if (j != 2) {
      EXPECT_TRUE(within(ref.dw(j), m.dw[j], ref.dw_abs(j))) << j;
    }
  }
  for (int r : {0, 1, 2, 4}) EXPECT_TRUE(within(ref.c(r), m.cc[r], 1)) << r;
}

TEST(ReferenceEdge, Fp32WeightsWithNonBf16Values) {
  Case c = make_case(6, 12, WDtype::fp32, 9);
  c.wf = {1.0f + 0x1p-23f, -0.1f, 3.14159265f, 1e-30f, 7e20f, 0x1p-149f,
          -2.5f, 1.0f / 3, 0.999999f, -1234.5678f, 0x1.fffffep127f, 0.0f};
  for (RstdMode mode : {RstdMode::fp64, RstdMode::fp32_rounded}) check_against_mpfr(c, mode, "fp32 w");
}

TEST(ReferenceEdge, StridedHeadsViewMatchesContiguous) {
  // x as [T=6, heads=3, 40] inside rows of 200 elements (heads at stride 50).
  const int64_t T = 6, NH = 3, C = 40, RowLen = 200;
  Case flat = make_case(T * NH, C, WDtype::bf16, 11, Dist::llm, Dist::normal);
  const HeadsLayout hv = strided_heads(flat, T, NH, C, RowLen, 50);
  Problem ps = flat.problem();
  ps.x = {hv.x.data(), T, NH, C, RowLen, 50};
  ps.dy = {hv.dy.data(), T, NH, C, RowLen, 50};
  Reference a = Reference::compute(flat.problem()), b = Reference::compute(ps);
  expect_bitwise_same(a, b);
}

// ---- (6) invalid problems ---------------------------------------------------------

TEST(ReferenceValidate, InvalidProblemNamesTheField) {
  Case c = make_case(2, 4, WDtype::bf16, 1);
  auto expect_field = [](Problem p, const std::string& field) {
    for (int which = 0; which < 2; ++which) {
      try {
        if (which == 0)
          (void)Reference::compute(p);
        else
          (void)oracle::fp32_baseline(p);
        ADD_FAILURE() << "no throw for " << field;
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("'" + field + "'"), std::string::npos)
            << field << ": " << e.what();
      }
    }
  };
  Problem p;
  p = c.problem(), p.x.cols = 0, p.dy.cols = 0, p.w.cols = 0;
  expect_field(p, "x.cols");
  p = c.problem(), p.dy.cols = 3;
  expect_field(p, "dy.cols");
  p = c.problem(), p.dy.T_rows = 1;
  expect_field(p, "dy.rows");
  p = c.problem(), p.w.cols = 5;
  expect_field(p, "w.cols");
  p = c.problem(), p.eps = 0;
  expect_field(p, "eps");
  p = c.problem(), p.eps = -1e-6;
  expect_field(p, "eps");
  p = c.problem(), p.eps = std::numeric_limits<double>::quiet_NaN();
  expect_field(p, "eps");
  p = c.problem(), p.eps = kInf;
  expect_field(p, "eps");
  p = c.problem(), p.x.p = nullptr;
  expect_field(p, "x.p");
  p = c.problem(), p.dy.p = nullptr;
  expect_field(p, "dy.p");
  p = c.problem(), p.w.p = nullptr;
  expect_field(p, "w.p");
  p = c.problem(), p.x.heads = 0;
  expect_field(p, "x.heads");
  p = c.problem(), p.x.T_rows = -1, p.dy.T_rows = -1;
  expect_field(p, "x.T_rows");
  p = c.problem(), p.w.dtype = static_cast<WDtype>(7);
  expect_field(p, "w.dtype");
}

}  // namespace
}  // namespace ngt
