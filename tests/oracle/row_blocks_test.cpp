// The oracle's block shapes (oracle/src/row_blocks.h). Results do not depend
// on them (ReferenceThreads.* and the fp32 baseline's thread tests check the
// bits); these tests pin the shapes the pass's cache-line layout relies on:
// column blocks start at multiples of 8 columns (whole 64-byte lines of the
// double accumulators), about one block per thread.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>

#include "row_blocks.h"

namespace {
using normgate::oracle::detail::col_block;
using normgate::oracle::detail::LineArray;
using normgate::oracle::detail::whole_lines;
using normgate::oracle::detail::row_block;

TEST(ColBlock, AboutOneBlockPerThreadInWholeCacheLines) {
  EXPECT_EQ(col_block(6144, 16), 384);   // 16 blocks
  EXPECT_EQ(col_block(6144, 14), 440);   // 14 blocks, the last 424 columns
  EXPECT_EQ(col_block(6144, 8), 768);
  EXPECT_EQ(col_block(6144, 1), 1024);   // capped: 6 blocks on one thread
  EXPECT_EQ(col_block(1000, 16), 64);    // 63 rounded up to whole lines
  EXPECT_EQ(col_block(8, 4), 16);        // at least 16
  EXPECT_EQ(col_block(1, 1), 16);
  for (int64_t H : {1, 7, 8, 255, 256, 1000, 4096, 5120, 6144, 65536, 1000003})
    for (int nt : {1, 2, 3, 14, 16, 64}) {
      const int64_t cb = col_block(H, nt);
      EXPECT_EQ(cb % 8, 0) << H << " " << nt;
      EXPECT_GE(cb, 16);
      EXPECT_LE(cb, 1024);
      const int64_t blocks = (H + cb - 1) / cb;
      if (cb < 1024) {
        EXPECT_LE(blocks, nt) << H << " " << nt;  // no more blocks than threads unless capped
      }
    }
}

TEST(RowBlock, AboutFourMiBOfXAndDyAtLeastMinRowsAtMostR) {
  EXPECT_EQ(row_block(131072, 6144, 1, 1), 170);  // 4 MiB / (4 * 6144) rows of x and dy
  EXPECT_EQ(row_block(131072, 6144, 32, 1), 170);
  EXPECT_EQ(row_block(131072, 6144, 200, 8), 200);
  EXPECT_EQ(row_block(100, 6144, 1, 1), 100);     // at most R
  EXPECT_EQ(row_block(131072, 64, 1, 1), 4096);   // at most 4096
  EXPECT_EQ(row_block(131072, 1 << 20, 1, 1), 16);  // at least 16
}
// NORMGATE_ORACLE_BLOCK_ROWS replaces the 4 MiB rule (tools/oracle_scaling.sh);
// min_rows, multiple and R still bound it; a bad value is ignored.
TEST(RowBlock, EnvironmentOverrideKeepsTheBounds) {
  struct Restore {
    ~Restore() { unsetenv("NORMGATE_ORACLE_BLOCK_ROWS"); }
  } restore;
  setenv("NORMGATE_ORACLE_BLOCK_ROWS", "5", 1);
  EXPECT_EQ(row_block(131072, 6144, 1, 1), 5);
  EXPECT_EQ(row_block(131072, 6144, 32, 1), 32);   // at least min_rows
  EXPECT_EQ(row_block(131072, 6144, 1, 8), 8);     // a multiple of 8
  EXPECT_EQ(row_block(3, 6144, 1, 1), 3);          // at most R
  setenv("NORMGATE_ORACLE_BLOCK_ROWS", "1000000", 1);
  EXPECT_EQ(row_block(131072, 64, 1, 1), 131072);  // past the 4096 cap: every row in one block
  for (const char* bad : {"0", "-3", "12x", " 7", "3000000000"}) {
    setenv("NORMGATE_ORACLE_BLOCK_ROWS", bad, 1);
    EXPECT_EQ(row_block(131072, 6144, 1, 1), 170) << bad;  // the 4 MiB rule
  }
  setenv("NORMGATE_ORACLE_BLOCK_ROWS", "", 1);
  EXPECT_EQ(row_block(131072, 6144, 1, 1), 170);
}

TEST(LineArray, ZeroedOnACacheLineInWholeLines) {
  EXPECT_EQ(whole_lines<double>(1), 8);
  EXPECT_EQ(whole_lines<double>(8), 8);
  EXPECT_EQ(whole_lines<double>(6145), 6152);
  EXPECT_EQ(whole_lines<float>(1000), 1008);
  EXPECT_EQ(whole_lines<float>(0), 0);
  const LineArray<double> a(3 * whole_lines<double>(1000));
  ASSERT_NE(a.get(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % 64, 0u);
  for (int64_t i = 0; i < 3 * whole_lines<double>(1000); ++i) ASSERT_EQ(a.get()[i], 0.0) << i;
  EXPECT_EQ(LineArray<float>(0).get(), nullptr);
}
}  // namespace
