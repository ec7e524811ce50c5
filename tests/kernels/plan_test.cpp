// Tests of kernels/include/normgate/kernels/plan.h and accum.h (CPU; always run).
#include "normgate/kernels/plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "normgate/kernels/accum.h"
#include "normgate/kernels/models.h"

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
  EXPECT_EQ(num_chunks(1 << 20, 2048), 1848);
  EXPECT_EQ(num_chunks(int64_t{1} << 32, 1), 2112);
  EXPECT_EQ(num_chunks(1000, 4096), 63);       // ceil(1000 / 16)
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
  EXPECT_EQ(g(4096).team, 512);
  EXPECT_EQ(g(4096).slots, 1);
  EXPECT_EQ(g(4104).slots, 2);  // nvec 513
  EXPECT_EQ(g(4104).team, 288);
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

}  // namespace
}  // namespace normgate::kernels
