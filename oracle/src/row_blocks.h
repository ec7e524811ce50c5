// oracle/src/row_blocks.h (internal): the block shape of the oracle's
// row-block passes (reference_pass.cpp's pass over x and dy, fp32_baseline.cpp).
// A pass takes R rows in blocks of row_block rows: first each row of the
// block alone (row sums, per-row values), then the block's part of every dw
// column, column blocks of col_block columns side by side, while the block's
// x and dy are still in cache. The shapes only schedule the work: every
// column still adds its rows r = 0..R-1 in order and every row is computed
// alone, so no result depends on them (or on the thread count).
#pragma once

#include <algorithm>
#include <cstdint>

namespace normgate::oracle::detail {

/// Rows per block for R rows of H columns (H >= 1): about 4 MiB of BF16 x
/// and dy (16..4096 rows), at least min_rows (e.g. a few per thread), rounded
/// up to a multiple of `multiple` (>= 1), at most R.
inline int64_t row_block(int64_t R, int64_t H, int64_t min_rows, int64_t multiple) {
  int64_t rb = std::clamp<int64_t>((int64_t{4} << 20) / (4 * H), 16, 4096);
  rb = std::max<int64_t>(rb, min_rows);
  rb = (rb + multiple - 1) / multiple * multiple;
  return std::min<int64_t>(rb, R);
}

/// Columns per column block for H columns on nt threads (nt >= 1): about one
/// block per thread, a multiple of 8 in 16..1024. Fewer, wider blocks than
/// the 4 per thread (at most 256 columns) before: on a 16-core Xeon at
/// H = 6144 they took the reference pair's column phase from 0.066-0.080 s
/// to 0.026-0.031 s at 16 threads and were no slower on 1 thread
/// (docs/perf/oracle-and-gate-throughput.md, D19).
inline int64_t col_block(int64_t H, int nt) {
  const int64_t cb = (H + nt - 1) / nt;
  return std::clamp<int64_t>((cb + 7) / 8 * 8, 16, 1024);
}

}  // namespace normgate::oracle::detail
