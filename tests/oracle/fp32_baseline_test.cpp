// tests/oracle/fp32_baseline_test.cpp: the FP32 eager yardstick against an
// independent scalar re-implementation (bitwise), thread independence, and
// its large dw error on a cancellation column.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "util/oracle_test_util.h"

namespace ngt {
namespace {

// Straightforward scalar FP32 RMSNorm training step (host compiled with
// -ffp-contract=off: every * and + below is one binary32 rounding).
normgate::Outputs scalar_fp32(const Case& c) {
  normgate::Outputs o;
  const int64_t R = c.R, H = c.H;
  o.y.resize(R * H);
  o.dx.resize(R * H);
  o.rstd.resize(R);
  o.dw.assign(H, 0.0f);
  auto X = [&](int64_t r, int64_t j) { return normgate::bf16_to_float(c.x[r * H + j]); };
  auto DY = [&](int64_t r, int64_t j) { return normgate::bf16_to_float(c.dy[r * H + j]); };
  auto W = [&](int64_t j) { return c.wd == WDtype::bf16 ? normgate::bf16_to_float(c.wb[j]) : c.wf[j]; };
  const float eps = (float)c.eps;
  for (int64_t r = 0; r < R; ++r) {
    float ss = 0;
    for (int64_t j = 0; j < H; ++j) ss += X(r, j) * X(r, j);
    float rstd = 1.0f / std::sqrt(ss / (float)H + eps);
    o.rstd[r] = rstd;
    float cs = 0;
    for (int64_t j = 0; j < H; ++j) {
      float xhat = X(r, j) * rstd;
      o.y[r * H + j] = bf16(xhat * W(j));
      cs += (DY(r, j) * W(j)) * xhat;
    }
    float cr = cs / (float)H;
    for (int64_t j = 0; j < H; ++j) {
      float xhat = X(r, j) * rstd;
      float g = DY(r, j) * W(j);
      o.dx[r * H + j] = bf16(rstd * (g - xhat * cr));
    }
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < H; ++j) o.dw[j] += DY(r, j) * (X(r, j) * o.rstd[r]);
  return o;
}

void expect_same(const normgate::Outputs& a, const normgate::Outputs& b) {
  ASSERT_EQ(a.y, b.y);
  ASSERT_EQ(a.dx, b.dx);
  ASSERT_EQ(a.rstd.size(), b.rstd.size());
  ASSERT_EQ(std::memcmp(a.rstd.data(), b.rstd.data(), a.rstd.size() * 4), 0);
  ASSERT_EQ(a.dw.size(), b.dw.size());
  ASSERT_EQ(std::memcmp(a.dw.data(), b.dw.data(), a.dw.size() * 4), 0);
  EXPECT_TRUE(a.h_new.empty());
}

TEST(Fp32Baseline, MatchesScalarReimplementationBitwise) {
  for (WDtype wd : {WDtype::bf16, WDtype::fp32})
    for (auto [R, H] : {std::pair<int64_t, int64_t>{37, 129}, {1, 1}, {5, 1000}, {64, 3}}) {
      Case c = make_case(R, H, wd, 100 + R, Dist::llm, Dist::normal);
      expect_same(oracle::fp32_baseline(c.problem()), scalar_fp32(c));
    }
}

// Without the row outputs: the same rstd and dw bits, y and dx never allocated.
TEST(Fp32Baseline, RstdAndDwOnlyAreTheSameBits) {
  for (WDtype wd : {WDtype::bf16, WDtype::fp32}) {
    Case c = make_case(53, 517, wd, 9, Dist::wide, Dist::llm);
    const auto full = oracle::fp32_baseline(c.problem(), 2);
    const auto part = oracle::fp32_baseline(c.problem(), 2, /*rows_outputs=*/false);
    EXPECT_TRUE(part.y.empty());
    EXPECT_TRUE(part.dx.empty());
    ASSERT_EQ(part.rstd.size(), full.rstd.size());
    ASSERT_EQ(part.dw.size(), full.dw.size());
    EXPECT_EQ(std::memcmp(part.rstd.data(), full.rstd.data(), full.rstd.size() * 4), 0);
    EXPECT_EQ(std::memcmp(part.dw.data(), full.dw.data(), full.dw.size() * 4), 0);
    EXPECT_FALSE(full.y.empty());
  }
}

TEST(Fp32Baseline, ThreadIndependent) {
  Case c = make_case(300, 1000, WDtype::fp32, 5, Dist::wide, Dist::llm);
  auto a = oracle::fp32_baseline(c.problem(), 1);
  expect_same(a, oracle::fp32_baseline(c.problem(), 2));
  expect_same(a, oracle::fp32_baseline(c.problem(), 16));
}

// Wide rows: the pass runs in row blocks (about 4 MiB of x and dy each: 256 rows at
// H = 4099, so three blocks here, the last partial) and column blocks; every
// dw column still adds its rows in order: the scalar re-implementation's bits,
// with and without the row outputs, for 1, 2 and 5 threads.
TEST(Fp32Baseline, RowBlocksGiveTheScalarBits) {
  Case c = make_case(531, 4099, WDtype::bf16, 77, Dist::wide, Dist::llm);
  const normgate::Outputs want = scalar_fp32(c);
  for (int t : {1, 2, 5}) {
    expect_same(oracle::fp32_baseline(c.problem(), t), want);
    const auto part = oracle::fp32_baseline(c.problem(), t, /*rows_outputs=*/false);
    ASSERT_EQ(std::memcmp(part.rstd.data(), want.rstd.data(), want.rstd.size() * 4), 0);
    ASSERT_EQ(std::memcmp(part.dw.data(), want.dw.data(), want.dw.size() * 4), 0);
  }
}

// Any row-block shape (NORMGATE_ORACLE_BLOCK_ROWS, row_blocks.h) gives the
// scalar re-implementation's bits.
TEST(Fp32Baseline, AnyRowBlockGivesTheScalarBits) {
  struct Restore {
    ~Restore() { unsetenv("NORMGATE_ORACLE_BLOCK_ROWS"); }
  } restore;
  Case c = make_case(45, 1003, WDtype::fp32, 31, Dist::wide, Dist::llm);
  const normgate::Outputs want = scalar_fp32(c);
  for (const char* rows : {"1", "9", "45", "100000"}) {
    SCOPED_TRACE(rows);
    setenv("NORMGATE_ORACLE_BLOCK_ROWS", rows, 1);
    expect_same(oracle::fp32_baseline(c.problem(), 3), want);
  }
}

TEST(Fp32Baseline, EmptyRows) {
  std::vector<float> wf(4, 1.0f);
  Problem p;
  p.x = plain_view(nullptr, 0, 4);
  p.dy = plain_view(nullptr, 0, 4);
  p.w = {WDtype::fp32, wf.data(), 4};
  auto o = oracle::fp32_baseline(p);
  EXPECT_TRUE(o.y.empty());
  EXPECT_TRUE(o.dx.empty());
  EXPECT_TRUE(o.rstd.empty());
  EXPECT_EQ(o.dw, std::vector<float>(4, 0.0f));
}

TEST(Fp32Baseline, CancellationColumnHasLargeDwError) {
  // x = +-1 rows (equal rstd); dy * x = +2^30, 0.0117, -2^30 in column 0: the
  // FP32 sum 2^30 rstd + 0.0117 rstd drops the signal (ulp of 2^30 is 2^6).
  Case c;
  c.R = 3;
  c.H = 2;
  c.wd = WDtype::bf16;
  c.x = {bf16(1), bf16(-1), bf16(-1), bf16(1), bf16(1), bf16(1)};
  c.dy = {bf16(0x1p30f), bf16(1), bf16(-0.01171875f), bf16(2), bf16(-0x1p30f), bf16(3)};
  c.wb = {bf16(1), bf16(1)};
  auto o = oracle::fp32_baseline(c.problem());
  Reference ref = Reference::compute(c.problem());
  MpRef m(c, RstdMode::fp64, {});
  double exact = to_d(m.dw[0]);
  double err_fp32 = std::fabs(o.dw[0] - exact);
  double err_oracle;
  EXPECT_TRUE(within(ref.dw(0), m.dw[0], ref.dw_abs(0), &err_oracle));
  std::printf("  exact dw %.10g  fp32 baseline %.10g (rel err %.2e)  oracle %.17g (bound %.2e)\n",
              exact, o.dw[0], err_fp32 / std::fabs(exact), ref.dw(0).v, ref.dw(0).bound);
  EXPECT_GT(err_fp32, 0.5 * std::fabs(exact));  // the signal is lost
  EXPECT_LT(ref.dw(0).bound, 1e-6 * std::fabs(exact));
  // The ordinary column is fine in FP32.
  EXPECT_LT(std::fabs(o.dw[1] - to_d(m.dw[1])), 1e-6 * std::fabs(to_d(m.dw[1])));
}

}  // namespace
}  // namespace ngt
