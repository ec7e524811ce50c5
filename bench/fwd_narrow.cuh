// bench/fwd_narrow.cuh: a forward experiment for rows of 256 (the per-head
// views and plain H = 256) behind kernels_bench --fwd-narrow L:R (not a
// variant; nothing routes it). fwd_rowwise gives a row of 256 a whole warp
// (plan.h: team 32, one 8-column group a lane) and, for the per-head views,
// stages rows through its shared-memory ring; per row every lane then runs
// the 5-step binary64 butterfly and the whole binary64 rstd (rstd.h), work
// that does not shrink with the row. Here a row has L lanes (8, 16 or 32),
// so a warp holds 32/L rows side by side and each lane's binary64 rstd
// serves one of them; each lane keeps 32/L groups of its row (columns
// (k*L + l)*8, so the L lanes of a row read adjacent 16-byte pieces) and R
// rows at once, every load of the R rows issued before the first sum, loads
// straight into registers (short CTAs of 256 threads, no ring).
// Per row: ss = the lane's groups' squares in binary64 (dfma, k ascending,
// column ascending), then the butterfly over the row's L lanes (xor offsets
// L/2 .. 1), rstd = row_rstd_fp64, m = row_m, y = BF16((x*rstd)*w) as
// fwd_rowwise. With L = 32 the order of every sum is fwd_rowwise's (same
// bits); with L < 32 the sums associate differently, so y, rstd and msq may
// differ in the last bit of ss, which moves the correctly rounded FP32 rstd
// only for rows within 2^-47 of a rounding boundary: kernels_bench counts
// the rows that differ from the routed forward. Row r of a per-head view is
// token r / heads, head r % heads (Rows::row with the magic divisor).
// Vector path only (16-byte aligned rows and w).
//
// Stores and cache hints (kHint, `--fwd-narrow 16:2:256:K`; 16:2 at 256
// threads only, the shape of the variant `fwd_narrow`), the arithmetic
// unchanged: K as bench/cache_hints.cuh defines it (K = 0 the variant's
// code, where NVVM emits two of a lane's four 16-byte y stores on the
// per-head views as four 32-bit stores each). The question, whether a hint
// is the 2-3% of DRAM throughput between fwd_narrow and TC's forward at
// equal bytes, is answered no (docs/perf/forward.md, Tried and rejected,
// "Cache hints on the loads and y stores").
#pragma once

#include <type_traits>

#include "cache_hints.cuh"
#include "device_blocks.cuh"
#include "normgate/kernels/plan.h"
#include "normgate/kernels/rstd.h"

namespace fwdnarrow {

using normgate::kernels::dev::Group8;

constexpr int kCols = 256;

using benchhints::hint_load;
using benchhints::hint_store_y;

template <int kL, int kR, int kThreads, class WT, bool kHeads, int kHint = 0>
__global__ void __launch_bounds__(kThreads)
    fwd_narrow_kernel(normgate::kernels::dev::Rows<const __nv_bfloat16, kHeads> x, const WT* __restrict__ w,
                      normgate::kernels::dev::Rows<__nv_bfloat16, kHeads> y, float* __restrict__ rstd,
                      double* __restrict__ msq, int64_t rows, uint64_t magic, double inv_h, double eps) {
  namespace dv = normgate::kernels::dev;
  constexpr int kG = kCols / 8 / kL;  // groups a lane holds per row
  constexpr int kPerWarp = 32 / kL;   // rows side by side in a warp
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int sub = lane / kL, l = lane % kL;
  // The warp's kR * kPerWarp rows: row (q, sub) = base + q*kPerWarp + sub, so
  // for each q the warp reads kPerWarp adjacent rows.
  const int64_t base = (static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + warp) * kPerWarp * kR;
  Group8 g[kR][kG];
#pragma unroll
  for (int q = 0; q < kR; ++q) {
    const int64_t r = base + q * kPerWarp + sub;
#pragma unroll
    for (int k = 0; k < kG; ++k) {
      g[q][k].u = make_uint4(0u, 0u, 0u, 0u);
      if (r < rows) {
        if constexpr (kHint == 0)
          g[q][k] = dv::load_group(x.row(r, magic), (k * kL + l) * 8, kCols, true);
        else
          g[q][k] = hint_load<kHint>(x.row(r, magic) + (k * kL + l) * 8);
      }
    }
  }
  float rs[kR];
#pragma unroll
  for (int q = 0; q < kR; ++q) {
    double ss = 0.0;
#pragma unroll
    for (int k = 0; k < kG; ++k) ss = dv::add_squares(g[q][k], ss);
#pragma unroll
    for (int off = kL / 2; off > 0; off >>= 1) ss = normgate::sum_rn(ss, __shfl_xor_sync(0xFFFFFFFFu, ss, off));
    const int64_t r = base + q * kPerWarp + sub;
    if (l == 0 && r < rows) {
      if (msq != nullptr) msq[r] = normgate::kernels::row_m(ss, inv_h, eps);
    }
    rs[q] = normgate::kernels::row_rstd_fp64(ss, inv_h, eps);
    if (l == 0 && r < rows) rstd[r] = rs[q];
  }
#pragma unroll
  for (int k = 0; k < kG; ++k) {
    float wv[8];
    dv::load_weights(w, (k * kL + l) * 8, kCols, true, wv);
#pragma unroll
    for (int q = 0; q < kR; ++q) {
      const int64_t r = base + q * kPerWarp + sub;
      if (r < rows) hint_store_y<kHint>(y.row(r, magic) + (k * kL + l) * 8, g[q][k], rs[q], wv);
    }
  }
}

/// Launch on stream s over `rows` rows of 256 (row r at token r / heads,
/// head r % heads: x + t*x_stride + h*x_stride_h, likewise y; plain rows:
/// heads 1). lanes:rows_per_lane one of 8:1, 8:2, 16:1, 16:2, 32:2, 32:4; hint 0
/// (the variant's loads and stores), or 1-4 (file comment) with 16:2 at 256
/// threads. Returns false (nothing launched) for a setting it does not cover.
template <class WT>
bool launch_fwd_narrow(int lanes, int rows_per_lane, const uint16_t* x, int64_t x_stride, int64_t x_stride_h,
                       const void* w, uint16_t* y, int64_t y_stride, int64_t y_stride_h, float* rstd, double* msq,
                       int64_t rows, int heads, float eps, cudaStream_t s, int threads = 256, int hint = 0) {
  namespace dv = normgate::kernels::dev;
  if (threads != 128 && threads != 256) return false;
  if (hint < 0 || hint > 4 || (hint != 0 && (lanes != 16 || rows_per_lane != 2 || threads != 256))) return false;
  const int64_t per_cta = static_cast<int64_t>(threads / 32) * (32 / lanes) * rows_per_lane;
  const int64_t ctas = (rows + per_cta - 1) / per_cta;
  if (ctas == 0) return true;
  if (ctas > 0x7FFFFFFF || rows > (int64_t{1} << 32)) return false;
  const uint64_t magic = heads > 1 ? normgate::kernels::heads_magic(heads) : 0;
  const double inv_h = 1.0 / kCols, e64 = static_cast<double>(eps);
  const auto* wt = static_cast<const WT*>(w);
  const unsigned g = static_cast<unsigned>(ctas);
  auto go = [&](auto heads_tag, auto l_tag, auto r_tag) {
    constexpr bool kH = decltype(heads_tag)::value;
    dv::Rows<const __nv_bfloat16, kH> xr{reinterpret_cast<const __nv_bfloat16*>(x), x_stride, heads, x_stride_h};
    dv::Rows<__nv_bfloat16, kH> yr{reinterpret_cast<__nv_bfloat16*>(y), y_stride, heads, y_stride_h};
    constexpr int kL = decltype(l_tag)::value, kR = decltype(r_tag)::value;
    if constexpr (kL == 16 && kR == 2) {
      if (hint != 0) {
        auto k = hint == 1   ? fwd_narrow_kernel<16, 2, 256, WT, kH, 1>
                 : hint == 2 ? fwd_narrow_kernel<16, 2, 256, WT, kH, 2>
                 : hint == 3 ? fwd_narrow_kernel<16, 2, 256, WT, kH, 3>
                             : fwd_narrow_kernel<16, 2, 256, WT, kH, 4>;
        k<<<g, 256, 0, s>>>(xr, wt, yr, rstd, msq, rows, magic, inv_h, e64);
        return;
      }
    }
    if (threads == 128)
      fwd_narrow_kernel<decltype(l_tag)::value, decltype(r_tag)::value, 128, WT, kH>
          <<<g, 128, 0, s>>>(xr, wt, yr, rstd, msq, rows, magic, inv_h, e64);
    else
      fwd_narrow_kernel<decltype(l_tag)::value, decltype(r_tag)::value, 256, WT, kH>
          <<<g, 256, 0, s>>>(xr, wt, yr, rstd, msq, rows, magic, inv_h, e64);
  };
  auto pick = [&](auto l_tag, auto r_tag) {
    if (heads > 1)
      go(std::true_type{}, l_tag, r_tag);
    else
      go(std::false_type{}, l_tag, r_tag);
    return true;
  };
  using std::integral_constant;
  if (lanes == 8 && rows_per_lane == 1) return pick(integral_constant<int, 8>{}, integral_constant<int, 1>{});
  if (lanes == 8 && rows_per_lane == 2) return pick(integral_constant<int, 8>{}, integral_constant<int, 2>{});
  if (lanes == 16 && rows_per_lane == 1) return pick(integral_constant<int, 16>{}, integral_constant<int, 1>{});
  if (lanes == 16 && rows_per_lane == 2) return pick(integral_constant<int, 16>{}, integral_constant<int, 2>{});
  if (lanes == 32 && rows_per_lane == 2) return pick(integral_constant<int, 32>{}, integral_constant<int, 2>{});
  if (lanes == 32 && rows_per_lane == 4) return pick(integral_constant<int, 32>{}, integral_constant<int, 4>{});
  return false;
}

}  // namespace fwdnarrow
