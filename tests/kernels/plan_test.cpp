// Tests of kernels/include/normgate/kernels/plan.h, chunk_plan.h and accum.h
// (CPU; always run).
#include "normgate/kernels/plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "normgate/kernels/accum.h"
#include "normgate/kernels/chunk_plan.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/rstd.h"

namespace normgate::kernels {
namespace {

TEST(ChunkPlan, FormulaValues) {
  EXPECT_EQ(num_chunks(0, 4096), 0);
  EXPECT_EQ(num_chunks(1, 1), 1);
  EXPECT_EQ(num_chunks(16, 4096), 1);
  EXPECT_EQ(num_chunks(17, 4096), 2);
  EXPECT_EQ(num_chunks(65537, 4096), 792);     // 264 * floor(2^22 / (264 * 4096)) = 264 * 3
  EXPECT_EQ(num_chunks(65537, 5120), 792);
  EXPECT_EQ(num_chunks(65537, 64), 2112);      // 8 waves at most
  EXPECT_EQ(num_chunks(1 << 20, 16384), 264);  // 1 wave at least
  EXPECT_EQ(num_chunks(1 << 20, 8192), 264);
  EXPECT_EQ(num_chunks(1 << 20, 2049), 1848);  // team 288: 3 CTAs, cap0 stands (7 x 264)
  EXPECT_EQ(num_chunks(int64_t{1} << 32, 1), 2112);
  EXPECT_EQ(num_chunks(1000, 4096), 63);       // ceil(1000 / 16)
  // One wave of the narrow kernel's CTAs where an SM holds 4 or more
  // (teams of <= 256 threads at 64 registers): 132 * floor(1024 / team).
  EXPECT_EQ(num_chunks(65537, 1536), 660);     // team 192: 5 CTAs an SM
  EXPECT_EQ(num_chunks(131072, 1536), 660);
  EXPECT_EQ(num_chunks(65537, 1024), 1056);    // team 128: 8
  EXPECT_EQ(num_chunks(65537, 768), 1320);     // team 96: 10
  EXPECT_EQ(num_chunks(65537, 520), 1320);     // 65 groups of 8: team 96, 10
  EXPECT_EQ(num_chunks(65537, 512), 2112);     // team 64: 16 CTAs, one wave is cap0 (2112) itself
  EXPECT_EQ(num_chunks(65537, 256), 2112);     // team 32: 32 CTAs, 4224 > cap0
  EXPECT_EQ(num_chunks(65537, 1537), 528);     // team 224: 4 (cap0 would be 2112)
  EXPECT_EQ(num_chunks(1 << 20, 2048), 528);   // team 256: 4 (cap0 would be 1848)
  EXPECT_EQ(num_chunks(65537, 2056), 1848);    // 257 groups: team 288, 3 CTAs, cap0 stands
  EXPECT_EQ(num_chunks(8448, 2048), 528);      // ceil(8448 / 16) = 528: the cap just binds
  EXPECT_EQ(num_chunks(8432, 2048), 527);
  EXPECT_EQ(num_chunks(10560, 1536), 660);     // ceil(10560 / 16) = 660: the cap just binds
  EXPECT_EQ(num_chunks(10559, 1536), 660);
  EXPECT_EQ(num_chunks(10544, 1536), 659);     // below it, ceil(T / 16)
  EXPECT_EQ(chunk_ctas_per_sm(1536), 5);
  EXPECT_EQ(chunk_ctas_per_sm(2048), 4);
  EXPECT_EQ(chunk_ctas_per_sm(2049), 3);
  EXPECT_EQ(chunk_ctas_per_sm(1), 32);
}

TEST(ChunkPlan, ChunksPartitionTheRowsAndAreNonEmpty) {
  for (int64_t H : {1, 64, 4096, 5000, 16384})
    for (int64_t T : {1, 2, 15, 16, 17, 1000, 65537, 1 << 20}) {
      const int64_t n = num_chunks(T, H);
      ASSERT_GE(n, 1);
      EXPECT_EQ(chunk_begin(T, n, 0), 0);
      EXPECT_EQ(chunk_begin(T, n, n), T);
      for (int64_t c = 0; c < n; ++c) ASSERT_LT(chunk_begin(T, n, c), chunk_begin(T, n, c + 1)) << T << " " << H;
    }
}

TEST(RowGeometry, Values) {
  auto g = [](int64_t H) { return row_geometry(H); };
  EXPECT_EQ(g(1).team, 32);
  EXPECT_EQ(g(1).slots, 1);
  EXPECT_EQ(g(2048).team, 256);
  EXPECT_EQ(g(2048).slots, 1);
  EXPECT_EQ(g(2056).slots, 2);  // nvec 257
  EXPECT_EQ(g(2056).team, 160);  // per 129 -> multiple of 32
  EXPECT_EQ(g(4096).team, 256);
  EXPECT_EQ(g(4096).slots, 2);
  EXPECT_EQ(g(4104).slots, 2);  // nvec 513
  EXPECT_EQ(g(4104).team, 288);
  EXPECT_EQ(g(6144).team, 384);
  EXPECT_EQ(g(8192).team, 512);
  EXPECT_EQ(g(8200).team, 576);  // per 513 -> multiple of 64
  EXPECT_EQ(g(12288).team, 768);
  EXPECT_EQ(g(16384).team, 1024);
  EXPECT_EQ(g(16384).slots, 2);
}

// Whether every column 0..H-1 has exactly one (thread, slot) owner in geo
// (owners: scratch); reports the first column that does not.
::testing::AssertionResult every_column_owned_once(const RowGeometry& geo, int64_t H, std::vector<int>& owners) {
  owners.assign(static_cast<size_t>(H), 0);
  for (int t = 0; t < geo.team; ++t)
    for (int k = 0; k < geo.slots; ++k)
      for (int e = 0; e < kGroup; ++e) {
        const int64_t j = group_col0(geo.team, k, t) + e;
        if (j < H) ++owners[static_cast<size_t>(j)];
      }
  for (int64_t j = 0; j < H; ++j)
    if (owners[static_cast<size_t>(j)] != 1)
      return ::testing::AssertionFailure() << "column " << j << " has " << owners[static_cast<size_t>(j)] << " owners";
  return ::testing::AssertionSuccess();
}

TEST(BwdRowGeometry, Values) {
  auto g = [](int64_t H) { return bwd_row_geometry(H); };
  EXPECT_EQ(g(1).team, 32);
  EXPECT_EQ(g(1).slots, 1);
  EXPECT_EQ(g(4096).team, 512);
  EXPECT_EQ(g(4104).slots, 1);  // nvec 513: one slot, where the forward takes two
  EXPECT_EQ(g(4104).team, 544);
  EXPECT_EQ(g(6144).team, 768);
  EXPECT_EQ(g(6144).slots, 1);
  EXPECT_EQ(g(8192).team, 1024);
  EXPECT_EQ(g(8192).slots, 1);
  EXPECT_EQ(g(8200).slots, 2);   // nvec 1025
  EXPECT_EQ(g(8200).team, 576);  // per 513 -> multiple of 64 (a 2-CTA cluster), as the forward's
  EXPECT_EQ(g(16384).team, 1024);
  EXPECT_EQ(g(16384).slots, 2);
}

TEST(BwdRowGeometry, EveryColumnOwnedOnceForEveryH) {
  std::vector<int> owners;
  for (int64_t H = 1; H <= kMaxH; ++H) {
    const RowGeometry geo = bwd_row_geometry(H);
    ASSERT_EQ(geo.team % (geo.slots == 2 ? 64 : 32), 0) << H;
    ASSERT_LE(geo.team, kMaxTeam) << H;
    ASSERT_TRUE(every_column_owned_once(geo, H, owners)) << H;
    // No idle warp: the last warp (the last 32 threads of each cluster half) owns a column.
    ASSERT_LT(group_col0(geo.team, 0, geo.team - 32), H) << H;
  }
}

// Every column 0..H-1 is owned by exactly one (thread, slot) of the team, and
// every team is a multiple of 32 (of 64 when it is split over two CTAs).
TEST(RowGeometry, EveryColumnOwnedOnceForEveryH) {
  std::vector<int> owners;
  for (int64_t H = 1; H <= kMaxH; ++H) {
    const RowGeometry geo = row_geometry(H);
    ASSERT_EQ(geo.team % 32, 0) << H;
    ASSERT_LE(geo.team, kMaxTeam) << H;
    if (geo.team > kMaxCtaTeam) {
      ASSERT_EQ(geo.team % 64, 0) << H;
    }
    ASSERT_TRUE(every_column_owned_once(geo, H, owners)) << H;
    // No team larger than needed: the last warp owns at least one column.
    ASSERT_LT(group_col0(geo.team, 0, geo.team - (geo.team > kMaxCtaTeam ? 64 : 32)), H) << H;
  }
}

TEST(TeamSum, ButterflyOrder) {
  std::vector<float> p(64, 1.0f);
  EXPECT_EQ(model_team_sum(p.data(), 64), 64.0f);
  // 2^24 + 1 + 1: a left-to-right sum would lose both ones; the butterfly pairs
  // lane 0 with lane 16 first, so the two ones (lanes 1 and 17) meet first.
  std::vector<float> q(32, 0.0f);
  q[0] = 16777216.0f;
  q[1] = 1.0f;
  q[17] = 1.0f;
  EXPECT_EQ(model_team_sum(q.data(), 32), 16777218.0f);
}

TEST(Acc64, RecoversWhatPlainFp32Loses) {
  Acc64 a;
  float plain = 0.0f;
  a.add_product(16777216.0f, 1.0f);
  plain += 16777216.0f;
  for (int i = 0; i < 1000; ++i) {
    a.add_product(1.0f, 0.25f);
    plain += 0.25f;
  }
  EXPECT_EQ(plain, 16777216.0f);
  EXPECT_EQ(a.s, 16777216.0 + 250.0);
}

// A BF16 x BF16 product (16 bits) times an FP32 rstd (24 bits) is exact in
// FP64: 40 bits. (The FP32 product would lose the low bits.)
TEST(Acc64, ProductOfBf16PairAndFp32IsExact) {
  Acc64 a;
  const float p = (1.0f + 0x1p-7f) * (1.0f + 0x1p-7f);  // exact: 1 + 2^-6 + 2^-14
  const float r = 1.0f + 0x1p-23f;
  a.add_product(p, r);
  const double want = (1.0 + 0x1p-6 + 0x1p-14) * (1.0 + 0x1p-23);
  EXPECT_EQ(a.s, want);
  EXPECT_NE(static_cast<double>(p * r), want);
}

TEST(Acc64, InfinityAndNanPropagate) {
  Acc64 a;
  a.add_product(std::numeric_limits<float>::max(), 2.0f);  // finite in FP64
  EXPECT_EQ(a.s, 2.0 * std::numeric_limits<float>::max());
  a.add_product(std::numeric_limits<float>::infinity(), 1.0f);
  EXPECT_TRUE(std::isinf(a.s));
  a.add_product(std::numeric_limits<float>::quiet_NaN(), 1.0f);
  EXPECT_TRUE(std::isnan(a.s));
}

TEST(Comp64, ValueOfInfiniteSumIsTheSum) {
  Comp64 c;
  c.add(1.0);
  c.add(std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isinf(c.value()));
  Comp64 d;
  d.add(1e100);
  d.add(1.0);
  d.add(-1e100);
  EXPECT_EQ(d.value(), 1.0);
}


// add_triple: dy*(x*rstd) exact in binary64 where FP32 dy*x overflows (the
// `huge` family) or underflows (`tiny`), and the same bits as add_product
// where dy*x is exact in FP32.
TEST(Acc64, TripleStaysExactWhereTheFp32ProductDoesNot) {
  const float big = 0x1.8p127f;  // BF16-representable, big*big overflows FP32
  Acc64 a;
  a.add_triple(big, big, 0x1p-140f);  // dy*x*rstd = 2.25 * 2^114: finite
  EXPECT_EQ(a.s, 2.25 * 0x1p114);
  Acc64 old;
  old.add_product(big * big, 0x1p-140f);
  EXPECT_TRUE(std::isinf(old.s));  // what the FP32 product gave
  const float tiny = 0x1.8p-120f;    // tiny*tiny underflows FP32 to 0
  Acc64 t;
  t.add_triple(tiny, tiny, 0x1p100f);
  EXPECT_EQ(t.s, 2.25 * 0x1p-140);
  // Ordinary BF16 values: bit for bit what add_product(FP32 dy*x, r) gives.
  Acc64 p, q;
  const float dys[] = {1.5f, -0.0078125f, 3.0f, -257.0f}, xs[] = {0.75f, 96.0f, -1.25f, 0.5f};
  for (int i = 0; i < 4; ++i) {
    const float r = 1.0f + 0x1p-23f * static_cast<float>(i + 1);
    p.add_triple(dys[i], xs[i], r);
    q.add_product(dys[i] * xs[i], r);
  }
  EXPECT_EQ(p.s, q.s);
  EXPECT_NE(p.s, 0.0);
}

// An independent reference for rstd.h: the FP32 value nearest to 1/sqrt(m)
// by long double arithmetic, the side of each candidate midpoint decided by
// fmal(h*h, m, -1) (h*h exact in long double's 64 bits, one rounding); +inf
// when 1/sqrt(m) passes IEEE's overflow threshold 2^128 - 2^103.
float nearest_ld(double m) {
  const long double x = 1.0L / std::sqrt(static_cast<long double>(m));
  float f = static_cast<float>(x);
  auto above = [&](long double h) { return std::fmal(h * h, static_cast<long double>(m), -1.0L) < 0; };
  auto val = [](float v) { return std::isinf(v) ? 0x1p128L : static_cast<long double>(v); };
  if (std::isinf(f)) f = std::numeric_limits<float>::max();
  const float up = std::nextafter(f, std::numeric_limits<float>::infinity());
  const float dn = std::nextafter(f, 0.0f);
  if (above((val(f) + val(up)) / 2)) return up;
  if (f > 0.0f && !above((val(f) + val(dn)) / 2)) return dn;
  return f;
}

// rstd.h: the nearest FP32 value whatever the start, on edge values.
TEST(Rstd, NearestFromAnyStartAndEdgeValues) {
  const double ms[] = {1.0, 2.0, 3.0, 0.1, 1e-6, 12345.678, 0x1.fffffffffffffp-1, 1e30, 1e-30, 7.0e76, 3e-70};
  for (double m : ms) {
    const float want = nearest_ld(m);
    for (int off = -16; off <= 16; ++off) {
      const float r0 = bits_float(static_cast<uint32_t>(static_cast<int64_t>(float_bits(want)) + off));
      EXPECT_EQ(rstd_nearest(m, r0), want) << "m = " << m << ", start off by " << off;
      if (off >= -8 && off <= 8) {
        EXPECT_EQ(rstd_nearest_fast(m, r0), want) << "m = " << m << ", start off by " << off;
      }
    }
    EXPECT_EQ(row_rstd_fp64(m, 1.0, 0.0), want) << m;
  }
  // m = ss/H + eps: H = 3, eps = 1e-6 as the forward takes them.
  EXPECT_EQ(row_rstd_fp64(7.0, 1.0 / 3.0, 1e-6), nearest_ld(std::fma(7.0, 1.0 / 3.0, 1e-6)));
  // Zero, Inf, NaN: IEEE 1/sqrt(m). A row of tiny subnormals with eps = 0:
  // beyond FP32's range, +Inf.
  EXPECT_EQ(row_rstd_fp64(0.0, 1.0, 0.0), std::numeric_limits<float>::infinity());
  EXPECT_EQ(row_rstd_fp64(std::numeric_limits<double>::infinity(), 1.0, 0.0), 0.0f);
  EXPECT_TRUE(std::isnan(row_rstd_fp64(std::numeric_limits<double>::quiet_NaN(), 1.0, 0.0)));
  EXPECT_EQ(row_rstd_fp64(0x1p-266, 1.0, 0.0), std::numeric_limits<float>::infinity());
  // The overflow boundary (found in review; commit 579c61c): 1/sqrt(m) just
  // below 2^128 - 2^103 is FLT_MAX, although its binary64 value rounds to
  // +inf in FP32.
  EXPECT_EQ(row_rstd_fp64(0x1.000001000000dp-256, 1.0, 0.0), std::numeric_limits<float>::max());
  EXPECT_EQ(nearest_ld(0x1.000001000000dp-256), std::numeric_limits<float>::max());
  // Rows whose FP32 sum of squares overflows: a subnormal rstd, not 0.
  const float r = row_rstd_fp64(64.0 * 0x1.8p127 * 0x1.8p127, 1.0 / 64.0, 1e-6);
  EXPECT_GT(r, 0.0f);
  EXPECT_LT(r, std::numeric_limits<float>::min());
  EXPECT_EQ(r, nearest_ld(0x1.8p127 * 0x1.8p127 + 1e-6));
}

// rstd.h rstd_refined: the backward's binary64 rstd for dw, from the
// forward's FP32 rstd and m. It lands within 1.5*2^-48 + 2^-52 (~5.6e-15)
// relative of 1/sqrt(m) (long double reference), where the FP32 value is up
// to 2^-24 off; an m that is not this rstd's (another eps at m ~ 1; a start
// 16 ulps off) and non-finite or zero cases keep the FP32 value.
TEST(Rstd, RefinedIsNearExactAndKeepsAForeignRstd) {
  std::mt19937_64 g(20261130);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  double worst_fp32 = 0, worst_refined = 0;
  for (int i = 0; i < 100000; ++i) {
    const double ss = std::ldexp(mant(g), static_cast<int>(g() % 60) - 20);  // a row's sum of squares
    const double inv_h = 1.0 / static_cast<double>(1 + g() % 8192), eps = 1e-6;
    const double m = std::fma(ss, inv_h, eps);
    const float r32 = row_rstd_fp64(ss, inv_h, eps);
    const long double exact = 1.0L / std::sqrt(static_cast<long double>(m));
    const double r = rstd_refined(m, r32);
    worst_fp32 = std::max(worst_fp32, static_cast<double>(std::fabs((r32 - exact) / exact)));
    worst_refined = std::max(worst_refined, static_cast<double>(std::fabs((r - exact) / exact)));
  }
  EXPECT_LT(worst_refined, 1.5 * 0x1p-48 + 0x1p-52);
  EXPECT_GT(worst_fp32, 0x1p-26);  // what the refinement removes
  const double m6 = std::fma(64.0, 1.0 / 64.0, 1e-6), m5 = std::fma(64.0, 1.0 / 64.0, 1e-5);
  const float own = row_rstd_fp64(64.0, 1.0 / 64.0, 1e-6);
  EXPECT_NE(rstd_refined(m6, own), static_cast<double>(own));
  EXPECT_EQ(rstd_refined(m5, own), static_cast<double>(own));  // m of another eps
  const float off16 = bits_float(float_bits(own) + 16u);
  EXPECT_EQ(rstd_refined(m6, off16), static_cast<double>(off16));
  // No m (0: the backward without msq), rows with Inf/NaN, a zero row with eps = 0.
  EXPECT_EQ(rstd_refined(0.0, own), static_cast<double>(own));
  EXPECT_EQ(rstd_refined(std::numeric_limits<double>::infinity(), 0.0f), 0.0);
  EXPECT_TRUE(std::isnan(rstd_refined(std::nan(""), std::nanf(""))));
  EXPECT_TRUE(std::isinf(rstd_refined(0.0, std::numeric_limits<float>::infinity())));
  // A negative rstd (never written by a forward) is kept although its square
  // matches m: the r32 > 0 test, not the |e| test, refuses it.
  EXPECT_EQ(rstd_refined(m6, -own), -static_cast<double>(own));
}

// Every path of row_rstd_fp64 (the loop below 2^-250 up to +inf, the
// one-step rounding above), rstd_nearest from starts 16 ulps off and
// rstd_nearest_fast from starts 8 ulps (1e-6) off, against nearest_ld on
// 200000 log-uniform m over [2^-266, 2^271) and 4000 m around the overflow
// boundary.
TEST(Rstd, EveryPathEqualsTheLongDoubleReference) {
  std::mt19937_64 g(20261130);
  std::uniform_real_distribution<double> ex(-266.0, 271.0), mant(1.0, 2.0);
  std::vector<double> ms;
  for (int i = 0; i < 200000; ++i) ms.push_back(std::ldexp(mant(g), static_cast<int>(std::floor(ex(g)))));
  double b = 0x1.000001p-256;  // 1/sqrt(b) = 2^128 - 2^103, the overflow threshold
  for (int i = 0; i < 2000; ++i) {
    ms.push_back(b);
    ms.push_back(std::nextafter(b, 0.0) - static_cast<double>(i) * 0x1p-300);
    b = std::nextafter(b, 1.0);
  }
  int at_max = 0, at_inf = 0;
  for (double m : ms) {
    const float want = nearest_ld(m);
    ASSERT_EQ(row_rstd_fp64(m, 1.0, 0.0), want) << "m = " << m;
    at_max += want == std::numeric_limits<float>::max();
    at_inf += std::isinf(want);
    if (std::isinf(want)) continue;
    const int off = static_cast<int>(g() % 33) - 16;
    const float r0 = bits_float(static_cast<uint32_t>(static_cast<int64_t>(float_bits(want)) + off));
    if (std::isinf(r0) || std::isnan(r0)) continue;
    ASSERT_EQ(rstd_nearest(m, r0), want) << "m = " << m << ", start off by " << off;
    if (m >= 0x1p-250 && off >= -8 && off <= 8) {
      ASSERT_EQ(rstd_nearest_fast(m, r0), want) << "m = " << m << ", start off by " << off;
    }
  }
  EXPECT_GT(at_max, 100);  // both sides of the boundary were reached
  EXPECT_GT(at_inf, 100);
}

// m whose 1/sqrt(m) lies within ~1e-16 relative of an FP32 midpoint (m =
// binary64 1/mid^2 and its two neighbours), where only the exact test can
// decide: the side comes from fmal(mid^2, m, -1) in long double (mid^2 exact
// there, one rounding), independent of rstd.h's binary64 arithmetic. lo runs
// over random normal and subnormal FP32 values below 2^126 and every power
// of two and its predecessor.
TEST(Rstd, NearMidpointsTheExactTestDecides) {
  std::mt19937_64 g(7);
  std::vector<uint32_t> los;
  for (int i = 0; i < 3000; ++i) los.push_back(0x00800000u + static_cast<uint32_t>(g() % 0x7E000000u));
  for (int i = 0; i < 1000; ++i) los.push_back(1u + static_cast<uint32_t>(g() % 0x007FFFFEu));  // subnormal
  for (uint32_t e = 1; e < 253; ++e) {
    los.push_back(e << 23);         // 2^(e-127)
    los.push_back((e << 23) - 1u);  // its predecessor (hi = the power of two)
  }
  int ups = 0, downs = 0;
  for (uint32_t lo_bits : los) {
    const float lo = bits_float(lo_bits), hi = bits_float(lo_bits + 1u);
    const long double mid = (static_cast<long double>(lo) + static_cast<long double>(hi)) / 2;
    const double m0 = static_cast<double>(1.0L / (mid * mid));
    for (double m : {std::nextafter(m0, 0.0), m0, std::nextafter(m0, 1e300)}) {
      const long double side = std::fmal(mid * mid, static_cast<long double>(m), -1.0L);
      ASSERT_NE(side, 0.0L);
      const float want = side < 0 ? hi : lo;  // mid below 1/sqrt(m): round up
      (side < 0 ? ups : downs) += 1;
      for (int off = -8; off <= 8; ++off) {
        const uint32_t sb = static_cast<uint32_t>(static_cast<int64_t>(lo_bits) + off);
        if (sb == 0u || sb > 0x7F7FFFFFu) continue;
        ASSERT_EQ(rstd_nearest_fast(m, bits_float(sb)), want) << "m = " << m << ", start " << off;
        ASSERT_EQ(rstd_nearest(m, bits_float(sb)), want) << "m = " << m << ", start " << off;
      }
    }
  }
  EXPECT_GT(ups, 2000);  // both sides are exercised
  EXPECT_GT(downs, 2000);
}

// add_triple equals add_product(FP32_rn(dy*x), r) bit for bit wherever dy*x
// is exact in FP32 (including FP32-subnormal but exact products), on random
// BF16 dy, x over the whole exponent range and random FP32 r (subnormal r
// included); where dy*x is not exact, add_triple is the exact product.
TEST(Acc64, TripleEqualsProductWhereFp32IsExact) {
  std::mt19937_64 g(3);
  auto bf16 = [&](int emin, int emax) {
    const int e = emin + static_cast<int>(g() % static_cast<uint64_t>(emax - emin + 1));
    const float mant = 1.0f + static_cast<float>(g() % 128) / 128.0f;  // 7 fraction bits: BF16
    return std::ldexp((g() & 1) ? -mant : mant, e);
  };
  int exact = 0, inexact = 0;
  for (int i = 0; i < 100000; ++i) {
    const float dy = bf16(-133, 127), x = bf16(-133, 127);
    const float r = (i % 10 == 0) ? std::ldexp(1.0f + static_cast<float>(g() % 1024) / 1024.0f, -140)
                                  : bf16(-60, 60) * (1.0f + 0x1p-20f * static_cast<float>(g() % 8));
    Acc64 t, p;
    t.add_triple(dy, x, r);
    const float prod = dy * x;
    const long double exact_prod = static_cast<long double>(dy) * static_cast<long double>(x);
    if (static_cast<long double>(prod) == exact_prod) {
      p.add_product(prod, r);
      ASSERT_EQ(t.s, p.s) << dy << " * " << x << " * " << r;
      ++exact;
    } else {
      ASSERT_EQ(static_cast<long double>(t.s), static_cast<long double>(static_cast<double>(exact_prod * r)))
          << dy << " * " << x << " * " << r;
      ++inexact;
    }
  }
  EXPECT_GT(exact, 1000);
  EXPECT_GT(inexact, 1000);
}

TEST(Plan, TeamSumInBinary64FollowsTheButterfly) {
  // Lane values whose binary64 sum depends on the order: 2^53 absorbs a 1
  // added alone, but two 1s added to each other first survive.
  std::vector<double> p(64, 0.0);
  p[0] = 0x1p53;
  p[1] = 1.0;   // partner of lane 0 at offset 1: absorbed
  p[32] = 1.0;  // second warp: 1 + 1 = 2, then added to the first warp's total
  p[33] = 1.0;
  EXPECT_EQ(model_team_sum(p.data(), 64), 0x1p53 + 2.0);
  EXPECT_EQ(model_team_sum(p.data(), 32), 0x1p53);
}

// plan.h div_by_magic: the per-head views' r / heads without a division,
// exact for every row index (r < 2^32) and divisor; checked against the
// division at the edges (0, around multiples of d, 2^32 - 1) and 200000
// random r for the head counts the forms use and a spread of others.
TEST(Plan, DivByMagicEqualsDivisionForEveryRowIndex) {
  std::mt19937_64 g(4242);
  std::vector<uint64_t> ds = {2, 3, 4, 5, 6, 7, 8, 24, 40, 64, 96, 1000, 65535, 65536, 65537,
                              (uint64_t{1} << 31) - 1, uint64_t{1} << 31, (uint64_t{1} << 32) - 1, uint64_t{1} << 32};
  for (int i = 0; i < 50; ++i) ds.push_back(2 + g() % ((uint64_t{1} << 32) - 1));
  const uint64_t top = (uint64_t{1} << 32) - 1;
  for (const uint64_t d : ds) {
    const uint64_t m = heads_magic(static_cast<int64_t>(d));
    std::vector<uint64_t> rs = {0, 1, d - 1, d, d + 1, top, top - 1, top - top % d, top - top % d - 1};
    for (uint64_t k = top / d; k + 3 > top / d && k > 0; --k) rs.insert(rs.end(), {k * d - 1, k * d});
    for (int i = 0; i < 4000; ++i) rs.push_back(g() & top);
    for (const uint64_t r : rs) {
      if (r <= top) {
        ASSERT_EQ(div_by_magic(r, m), r / d) << "r " << r << " d " << d;
      }
    }
  }
}

}  // namespace
}  // namespace normgate::kernels
