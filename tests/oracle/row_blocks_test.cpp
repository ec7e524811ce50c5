// The oracle's block shapes (oracle/src/row_blocks.h). Results do not depend
// on them (ReferenceThreads.* and the fp32 baseline's thread tests check the
// bits); these tests pin the shapes the pass's cache-line layout relies on:
// column blocks start at multiples of 8 columns (whole 64-byte lines of the
// double accumulators), about one block per thread.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <vector>

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

// pipelined_row_blocks' guarantees, checked inside the callbacks on more
// threads than the machine has cores (so threads are descheduled mid-pass):
// every row once; cols(b, cb) only after every row of block b, blocks in
// order for each cb, each (b, cb) once; a block's rows only once every column
// block is past block b - lookahead. Shapes where RB is not a multiple of the
// chunk and R not a multiple of RB, one block, rows only (ncb = 0), and
// arguments out of range (a huge lookahead, RB > R) that are clamped.
TEST(PipelinedRowBlocks, OrderGuaranteesHoldOnAnySchedule) {
  using normgate::oracle::detail::pipelined_row_blocks;
  struct Shape {
    int nt;
    int64_t R, RB, chunk, ncb, lookahead;
  };
  for (const Shape s : {Shape{16, 1000, 7, 3, 5, 2}, Shape{16, 1000, 1, 1, 3, 8}, Shape{3, 64, 64, 5, 4, 1},
                        Shape{8, 37, 10, 10, 1, 3}, Shape{8, 500, 16, 4, 0, 2}, Shape{5, 1, 16, 4, 2, 8},
                        // a lookahead past any block count (low + lookahead must not overflow) and
                        // blocks far longer than R (no empty chunks handed out one by one)
                        Shape{4, 100, 9, 2, 3, INT64_MAX}, Shape{4, 10, int64_t{1} << 40, 3, 2, 4}}) {
    SCOPED_TRACE(::testing::Message() << "nt " << s.nt << " R " << s.R << " RB " << s.RB << " chunk "
                                      << s.chunk << " ncb " << s.ncb << " lookahead " << s.lookahead);
    const int64_t nb = (s.R + s.RB - 1) / s.RB;
    std::vector<std::atomic<int>> row_runs(s.R);
    std::vector<std::atomic<int64_t>> block_rows(nb);    // rows of each block done
    std::vector<std::atomic<int64_t>> col_done(s.ncb);   // blocks each column block has done
    std::atomic<int64_t> faults{0}, col_items{0};
    pipelined_row_blocks(
        s.nt, s.R, s.RB, s.chunk, s.ncb, s.lookahead,
        [&](int64_t r0, int64_t r1) {
          const int64_t b = r0 / s.RB;
          if (r0 >= r1 || (r1 - 1) / s.RB != b || r1 - r0 > s.chunk || (r0 - b * s.RB) % s.chunk != 0) ++faults;
          for (int64_t cb = 0; cb < s.ncb; ++cb)
            if (col_done[cb].load() < b - s.lookahead + 1) ++faults;  // beyond the lookahead
          for (int64_t r = r0; r < r1; ++r) row_runs[r].fetch_add(1);
          volatile double sink = 0;  // some work, so that threads overlap
          for (int i = 0; i < 2000; ++i) sink = sink + i;
          block_rows[b].fetch_add(r1 - r0);
        },
        [&](int64_t b, int64_t cb) {
          const int64_t rows_in_b = std::min(s.RB, s.R - b * s.RB);
          if (block_rows[b].load() != rows_in_b) ++faults;  // a row of the block not done
          if (col_done[cb].load() != b) ++faults;           // out of order or twice
          ++col_items;
          col_done[cb].store(b + 1);
        });
    EXPECT_EQ(faults.load(), 0);
    EXPECT_EQ(col_items.load(), nb * s.ncb);
    for (int64_t r = 0; r < s.R; ++r) ASSERT_EQ(row_runs[r].load(), 1) << "row " << r;
    for (int64_t cb = 0; cb < s.ncb; ++cb) EXPECT_EQ(col_done[cb].load(), nb);
  }
}

TEST(PipelinedRowBlocks, NoRowsCallsNothing) {
  int calls = 0;
  normgate::oracle::detail::pipelined_row_blocks(
      4, 0, 16, 4, 3, 2, [&](int64_t, int64_t) { ++calls; }, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(BlocksInFlight, AboutThirtyTwoMiBTwoToEightAtMostTheBlocks) {
  using normgate::oracle::detail::blocks_in_flight;
  EXPECT_EQ(blocks_in_flight(170, 6144, 97), 8);      // 4 MiB blocks: 8
  EXPECT_EQ(blocks_in_flight(16384, 6144, 1), 1);     // one block
  EXPECT_EQ(blocks_in_flight(4096, 4096, 100), 2);    // 64 MiB blocks: at least 2
  EXPECT_EQ(blocks_in_flight(1024, 2048, 100), 4);    // 8 MiB blocks
  EXPECT_EQ(blocks_in_flight(16, 1, 3), 3);
}
}  // namespace
