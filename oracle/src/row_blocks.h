// oracle/src/row_blocks.h (internal): the block shape of the oracle's
// row-block passes (reference_pass.cpp's pass over x and dy, fp32_baseline.cpp).
// A pass takes R rows in blocks of row_block rows: first each row of the
// block alone (row sums, per-row values), then the block's part of every dw
// column, column blocks of col_block columns side by side, while the block's
// x and dy are still in cache. The shapes only schedule the work: every
// column still adds its rows r = 0..R-1 in order and every row is computed
// alone, so no result depends on them (or on the thread count, or on
// NORMGATE_ORACLE_BLOCK_ROWS).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>

namespace normgate::oracle::detail {

/// The environment's NORMGATE_ORACLE_BLOCK_ROWS (decimal, 1..2^31), for
/// measuring the block shape (tools/oracle_scaling.sh): 0 when unset or
/// empty. Read at every call, so a benchmark may change it between runs; a
/// bad value is said once on stderr and ignored (it is read mid-run, where
/// failing would lose work).
inline int64_t block_rows_override() {
  const char* e = std::getenv("NORMGATE_ORACLE_BLOCK_ROWS");
  if (e == nullptr || *e == '\0') return 0;
  char* end = nullptr;
  const long long v = std::strtoll(e, &end, 10);
  const bool digits = *e >= '0' && *e <= '9';  // no sign, no blanks (strtoll skips them)
  if (digits && end != nullptr && *end == '\0' && v >= 1 && v <= (int64_t{1} << 31)) return v;
  static std::once_flag said;
  std::call_once(said, [e] {
    std::fprintf(stderr, "normgate: NORMGATE_ORACLE_BLOCK_ROWS='%s' is not a row count in 1..2^31; ignored\n", e);
  });
  return 0;
}

/// Rows per block for R rows of H columns (H >= 1): about 4 MiB of BF16 x
/// and dy (16..4096 rows), or NORMGATE_ORACLE_BLOCK_ROWS rows where set
/// (block_rows_override); at least min_rows (e.g. a few per thread), rounded
/// up to a multiple of `multiple` (>= 1), at most R.
inline int64_t row_block(int64_t R, int64_t H, int64_t min_rows, int64_t multiple) {
  const int64_t forced = block_rows_override();
  int64_t rb = forced > 0 ? forced : std::clamp<int64_t>((int64_t{4} << 20) / (4 * H), 16, 4096);
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

/// n rounded up to whole 64-byte cache lines of T (8 doubles, 16 floats).
template <class T>
constexpr int64_t whole_lines(int64_t n) {
  constexpr int64_t k = 64 / static_cast<int64_t>(sizeof(T));
  return (n + k - 1) / k * k;
}

/// A zeroed array of n elements of T starting on a cache line, for the
/// column accumulators of a pass: with arrays of whole_lines<T> elements and
/// column blocks starting at multiples of whole_lines<T>(1) columns, no line
/// is written by two threads (D19 of docs/perf/oracle-and-gate-throughput.md).
/// n must be a multiple of whole_lines<T>(1); n == 0 holds nothing (get() is
/// null). Throws std::bad_alloc.
template <class T>
class LineArray {
 public:
  explicit LineArray(int64_t n) {
    if (n <= 0) return;
    p_ = static_cast<T*>(std::aligned_alloc(64, static_cast<size_t>(n) * sizeof(T)));
    if (p_ == nullptr) throw std::bad_alloc();
    std::fill_n(p_, static_cast<size_t>(n), T{});
  }
  ~LineArray() { std::free(p_); }
  LineArray(const LineArray&) = delete;
  LineArray& operator=(const LineArray&) = delete;
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
};

}  // namespace normgate::oracle::detail
