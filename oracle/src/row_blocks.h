// oracle/src/row_blocks.h (internal): the block shape of the oracle's
// row-block passes (reference_pass.cpp's pass over x and dy, fp32_baseline.cpp).
// A pass takes R rows in blocks of row_block rows: first each row of the
// block alone (row sums, per-row values), then the block's part of every dw
// column, column blocks of col_block columns side by side, while the block's
// x and dy are still in cache. The shapes only schedule the work: every
// column still adds its rows r = 0..R-1 in order and every row is computed
// alone, so no result depends on them (or on the thread count, or on
// NORMGATE_ORACLE_BLOCK_ROWS). pipelined_row_blocks runs such a pass with no
// barrier between blocks.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

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

/// Blocks a pass keeps in flight (pipelined_row_blocks' `lookahead`): about
/// 32 MiB of BF16 x and dy (blocks of RB rows of H columns), 2..8 blocks, at
/// most nb (the pass's block count, >= 1).
inline int64_t blocks_in_flight(int64_t RB, int64_t H, int64_t nb) {
  const int64_t block_bytes = std::max<int64_t>(1, 4 * RB * H);
  return std::min<int64_t>(nb, std::clamp<int64_t>((int64_t{32} << 20) / block_bytes, 2, 8));
}

/// Runs a row-block pass over R rows (blocks of RB rows, block b = rows
/// [b*RB, min(R, (b+1)*RB))) on nt threads (an OpenMP team), with no barrier
/// between blocks. Work items, taken by whichever thread is free:
///  - rows(r0, r1): rows [r0, r1) of one block, chunks of `chunk` rows (from
///    the block's first row); every row once, any thread, any order;
///  - cols(b, cb): block b's rows into column block cb (0 <= cb < ncb); for
///    each cb the blocks run in order b = 0, 1, ..., each only after every
///    row of block b has returned (its writes are visible: acquire/release).
/// A block's rows start only once every column block is past block
/// b - lookahead, so at most `lookahead` blocks are in flight: a caller may
/// keep per-block state in slot b % lookahead. RB is taken in 1..R, chunk in
/// 1..RB and lookahead in 1..(the block count): a caller's slots must then
/// use the same clamped values (blocks_in_flight's are).
/// Column items go first (they retire blocks); a thread holding a column
/// block takes its following blocks while they are ready. A thread with
/// nothing ready sleeps until an item completes (std::atomic::wait, a futex),
/// so the pass has no barrier for a thread that another process has
/// descheduled to hold up. With the two OpenMP barriers a block that this
/// replaces, 16 threads beside two busy processes spun at 97 blocks' barriers
/// and took 30x as long (docs/perf/oracle-and-gate-throughput.md, D20).
/// Results depend only on the order guarantees above, never on the
/// schedule. rows and cols must not throw (an exception inside the OpenMP
/// region terminates, as in any OpenMP loop). ncb == 0: rows only.
template <class Rows, class Cols>
void pipelined_row_blocks(int nt, int64_t R, int64_t RB, int64_t chunk, int64_t ncb, int64_t lookahead,
                          Rows&& rows, Cols&& cols) {
  if (R <= 0) return;
  RB = std::clamp<int64_t>(RB, 1, R);  // no empty chunks handed out one by one past R
  chunk = std::clamp<int64_t>(chunk, 1, RB);
  struct alignas(64) Slot {
    std::atomic<int64_t> v{0};
  };
  const int64_t nb = (R + RB - 1) / RB;
  const int64_t cpb = (RB + chunk - 1) / chunk;  // chunks a block (the last block's tail ones are empty)
  const int64_t nchunks = nb * cpb;
  lookahead = std::clamp<int64_t>(lookahead, 1, nb);  // low + lookahead cannot overflow
  std::vector<Slot> rows_done(static_cast<size_t>(nb));   // chunks done, each block
  std::vector<Slot> col_next(static_cast<size_t>(ncb));   // the next block of each column block
  std::vector<Slot> col_busy(static_cast<size_t>(ncb));   // 1 while a thread holds the column block
  Slot next_chunk;                                         // chunks handed out, all blocks in order
  alignas(64) std::atomic<uint32_t> progress{0};           // bumped when an item may enable another
  const auto bump = [&progress] {
    progress.fetch_add(1, std::memory_order_release);
    progress.notify_all();
  };

#pragma omp parallel num_threads(nt)
  {
    const int64_t first = ncb > 0 ? omp_get_thread_num() % ncb : 0;
    for (;;) {
      // Read before looking for work: an item completed after this load
      // changes it, so the wait below cannot miss it.
      const uint32_t seen = progress.load(std::memory_order_acquire);
      bool did = false;
      int64_t low = nb;  // the lowest column block's next block (a stale read is lower: safe)
      for (int64_t i = 0; i < ncb; ++i) {
        const int64_t cb = (first + i) % ncb;
        int64_t b = col_next[cb].v.load(std::memory_order_acquire);
        low = std::min(low, b);
        if (b >= nb || col_busy[cb].v.load(std::memory_order_relaxed) != 0) continue;
        if (rows_done[b].v.load(std::memory_order_acquire) != cpb) continue;
        int64_t free_ = 0;
        if (!col_busy[cb].v.compare_exchange_strong(free_, 1, std::memory_order_acquire)) continue;
        b = col_next[cb].v.load(std::memory_order_acquire);  // as its last holder left it
        const int64_t b0 = b;
        while (b < nb && rows_done[b].v.load(std::memory_order_acquire) == cpb) {
          cols(b, cb);
          col_next[cb].v.store(++b, std::memory_order_release);
        }
        col_busy[cb].v.store(0, std::memory_order_release);
        if (b > b0) {
          did = true;
          bump();  // the lookahead moved; the column block is free again
        }
      }
      if (!did) {
        int64_t g = next_chunk.v.load(std::memory_order_relaxed);
        while (g < nchunks && (ncb == 0 || g / cpb < low + lookahead)) {
          if (!next_chunk.v.compare_exchange_weak(g, g + 1, std::memory_order_relaxed)) continue;
          const int64_t b = g / cpb;
          const int64_t r0 = b * RB + (g % cpb) * chunk;
          const int64_t r1 = std::min({r0 + chunk, (b + 1) * RB, R});
          if (r0 < r1) rows(r0, r1);
          if (rows_done[b].v.fetch_add(1, std::memory_order_acq_rel) == cpb - 1 && ncb > 0) bump();
          did = true;
          break;
        }
      }
      if (did) continue;
      // Nothing was ready. Done when every row is handed out and every
      // column block is past the last block (rows still running belong to
      // their threads; the region's end waits for them).
      if (next_chunk.v.load(std::memory_order_relaxed) >= nchunks && low >= nb) break;
      progress.wait(seen, std::memory_order_acquire);
    }
  }
}

}  // namespace normgate::oracle::detail
