// oracle/src/fp32_baseline.cpp: the "FP32 eager" yardstick (formulas in
// reference.h). Every operation is an explicitly rounded binary32 operation
// (core/hd.h: never contracted into an FMA), every sum sequential in index
// order, so the result is one well-defined function of the inputs: bitwise
// independent of threads and of vectorization (which only runs independent
// rows' or columns' identical operation sequences side by side).
#include <omp.h>

#include <algorithm>
#include <vector>

#include "eft.h"
#include "fp32_parts.h"
#include "row_blocks.h"
#include "normgate/core/bf16.h"
#include "normgate/core/hd.h"
#include "normgate/oracle/reference.h"

namespace normgate::oracle {

namespace {

// dw[j] for j in [j0, j1) += dy_rj*xhat_rj for rows r = r0..r1-1 in order
// (independent columns side by side: vector lanes); over the row blocks in
// order, ((0 + dy_0j*xhat_0j) + dy_1j*xhat_1j) + ..., r = 0..R-1. The
// reference pair's pass takes the same steps (fp32_parts.h, D22).
inline void dw_add_row(const uint16_t* __restrict x, const uint16_t* __restrict dy, float rs, int64_t n,
                       float* __restrict dw) {
  for (int64_t j = 0; j < n; ++j) {
    dw[j] = detail::fp32_dw_step(dw[j], bf16_to_float(x[j]), bf16_to_float(dy[j]), rs);
  }
}

NG_CLONES void dw_columns(const RowView<uint16_t>& xv, const RowView<uint16_t>& dyv, const float* rstd, int64_t r0,
                          int64_t r1, int64_t j0, int64_t j1, float* dw) {
  for (int64_t r = r0; r < r1; ++r) dw_add_row(xv.row(r) + j0, dyv.row(r) + j0, rstd[r], j1 - j0, dw + j0);
}

}  // namespace

namespace detail {

// Each row's sum is one sequential chain of dependent additions, so one row
// at a time runs at the adder's latency; kFp32Rows independent chains
// interleaved keep it busy. Every row gets the same operations in the same
// order, however many rows run beside it.
NG_CLONES void fp32_sum_squares(const uint16_t* const* x, int nr, int64_t H, float* ss) {
  float acc[kFp32Rows] = {};
  if (nr == kFp32Rows) {
    for (int64_t j = 0; j < H; ++j)
      for (int i = 0; i < kFp32Rows; ++i) {
        const float xv = bf16_to_float(x[i][j]);
        acc[i] = add_rn(acc[i], mul_rn(xv, xv));
      }
  } else {
    for (int i = 0; i < nr; ++i)
      for (int64_t j = 0; j < H; ++j) {
        const float xv = bf16_to_float(x[i][j]);
        acc[i] = add_rn(acc[i], mul_rn(xv, xv));
      }
  }
  for (int i = 0; i < nr; ++i) ss[i] = acc[i];
}

}  // namespace detail

Outputs fp32_baseline(const Problem& p, int threads, bool rows_outputs) {
  validate(p);
  const int64_t R = p.x.rows(), H = p.x.cols;
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  Outputs out;
  if (rows_outputs) {
    out.y.assign(static_cast<size_t>(R * H), 0);
    out.dx.assign(static_cast<size_t>(R * H), 0);
  }
  out.rstd.assign(static_cast<size_t>(R), 0.0f);
  out.dw.assign(static_cast<size_t>(H), 0.0f);
  if (R == 0) return out;

  std::vector<float> w(H);
  for (int64_t j = 0; j < H; ++j)  // R > 0 here, so w.p is non-null
    w[j] = p.w.dtype == WDtype::bf16 ? bf16_to_float(static_cast<const uint16_t*>(p.w.p)[j])
                                     : static_cast<const float*>(p.w.p)[j];
  const float eps32 = static_cast<float>(p.eps);
  const float Hf = static_cast<float>(H);

  // Row blocks, as the reference's pass (reference_pass.cpp): each block's rows
  // (sums of squares, rstd, and y, dx when asked for), then its part of every
  // dw column while the block's x and dy are still in cache. A dw column over
  // all R rows at once (the former layout) read x and dy from memory a second
  // time, strided: ~1.1 of its ~1.55 ns per element on one core of the dev box
  // was that read (docs/perf/oracle-and-gate-throughput.md, D6). Blocks
  // change only the schedule: every column still adds rows r = 0..R-1 in
  // order (blocks in order, rows in order within one), every row is computed
  // alone, so the bits are the same.
  // (row_blocks.h; whole groups of kFp32Rows rows per block, a group per thread at least)
  const int64_t RB = detail::row_block(R, H, static_cast<int64_t>(detail::kFp32Rows) * nt, detail::kFp32Rows);
  // Column blocks of whole cache lines of dw (16 floats), accumulated in a
  // 64-byte aligned copy of dw: no line of it is written by two threads (as
  // reference_pass.cpp's accumulators; the blocks only schedule the work).
  const int64_t CB = detail::whole_lines<float>(detail::col_block(H, nt));
  const int64_t ncb = (H + CB - 1) / CB;
  const detail::LineArray<float> dw_acc(detail::whole_lines<float>(H));

  // Blocks pipelined with no barrier between them (row_blocks.h,
  // pipelined_row_blocks): each block's groups of kFp32Rows rows as threads come
  // free, then its part of each dw column block, blocks in order for each
  // (rstd of the block's rows visible by then).
  detail::pipelined_row_blocks(
      nt, R, RB, detail::kFp32Rows, ncb, detail::blocks_in_flight(RB, H, (R + RB - 1) / RB),
      [&](int64_t r0, int64_t r1) {
        const int n8 = static_cast<int>(r1 - r0);  // kFp32Rows, fewer at a block's end
        const uint16_t* xs[detail::kFp32Rows];
        float ssq[detail::kFp32Rows];
        for (int i = 0; i < n8; ++i) xs[i] = p.x.row(r0 + i);
        detail::fp32_sum_squares(xs, n8, H, ssq);
        for (int64_t r = r0; r < r0 + n8; ++r) {
          const uint16_t* x = xs[r - r0];
          const uint16_t* dy = p.dy.row(r);
          const float ss = ssq[r - r0];
          const float rstd = detail::fp32_rstd(ss, Hf, eps32);
          out.rstd[r] = detail::fp32_canonical_nan(rstd);  // a NaN row's dw terms are NaN either way
          if (!rows_outputs) continue;
          uint16_t* y = out.y.data() + r * H;
          float cs = 0.0f;
          for (int64_t j = 0; j < H; ++j) {
            float xh = mul_rn(bf16_to_float(x[j]), rstd);
            y[j] = bf16_from_float(mul_rn(xh, w[j]));
            float g = mul_rn(bf16_to_float(dy[j]), w[j]);
            cs = add_rn(cs, mul_rn(g, xh));
          }
          const float c = div_rn(cs, Hf);
          uint16_t* dx = out.dx.data() + r * H;
          for (int64_t j = 0; j < H; ++j) {
            float xh = mul_rn(bf16_to_float(x[j]), rstd);
            float g = mul_rn(bf16_to_float(dy[j]), w[j]);
            const float d = mul_rn(rstd, sub_rn(g, mul_rn(xh, c)));
            dx[j] = bf16_from_float(p.dx_add.p != nullptr ? add_rn(d, bf16_to_float(p.dx_add.row(r)[j])) : d);
          }
        }
      },
      [&](int64_t b, int64_t cb) {
        const int64_t rb = b * RB, j0 = cb * CB, j1 = std::min(H, j0 + CB);
        dw_columns(p.x, p.dy, out.rstd.data(), rb, std::min(R, rb + RB), j0, j1, dw_acc.get());
      });
  for (int64_t j = 0; j < H; ++j) out.dw[j] = detail::fp32_canonical_nan(dw_acc.get()[j]);
  return out;
}

}  // namespace normgate::oracle
