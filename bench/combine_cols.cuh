// bench/combine_cols.cuh: a backward experiment for kernels_bench
// --combine-cols C (not a variant; nothing routes it). The deterministic
// backward's second stage (kernels/src/bwd_det_chunked.cu,
// combine_partials_kernel: dw[j] from the [n, H] FP64 chunk partials) with C
// columns a CTA instead of 32, so that a short T's few partial rows spread
// over more SMs: at [4097, 1536] the library's stage runs 48 CTAs of 1024
// threads, 5.4 of the backward's 23 us (docs/perf/backward.md, Current
// numbers, the H100 profile). Each column's arithmetic is the library's,
// which depends on the chunk lane (threadIdx.y) only: lane L adds partials
// L, L+32, ... into a Comp64, then lane 0 adds the 32 lanes' s and comp in
// order. So dw must be bitwise the library's; kernels_bench counts the
// columns that differ (expected 0).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "normgate/kernels/accum.h"
#include "normgate/kernels/chunk_plan.h"

namespace combinecols {

template <int kCols>
__global__ void __launch_bounds__(kCols * normgate::kernels::kCombineLanes)
    combine_cols_kernel(const double* __restrict__ part, int64_t n, int64_t H, float* __restrict__ dw) {
  constexpr int kLanes = normgate::kernels::kCombineLanes;
  __shared__ double sh_s[kLanes][kCols + 1];
  __shared__ double sh_c[kLanes][kCols + 1];
  const int x = static_cast<int>(threadIdx.x);
  const int lane = static_cast<int>(threadIdx.y);
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kCols + x;
  normgate::kernels::Comp64 acc;
  if (j < H) {
#pragma unroll 4
    for (int64_t c = lane; c < n; c += kLanes) acc.add(part[c * H + j]);
  }
  sh_s[lane][x] = acc.s;
  sh_c[lane][x] = acc.comp;
  __syncthreads();
  if (lane == 0 && j < H) {
    normgate::kernels::Comp64 tot;
    for (int l = 0; l < kLanes; ++l) {
      tot.add(sh_s[l][x]);
      tot.add(sh_c[l][x]);
    }
    dw[j] = __double2float_rn(tot.value());
  }
}

/// The column counts this file instantiates (kernels_bench checks
/// --combine-cols against them).
inline constexpr int kCombineCols[] = {4, 8, 16};

/// Launch on stream s: dw[H] from part[n, H]. False (nothing launched) for a
/// column count not in kCombineCols.
inline bool launch_combine_cols(int cols, const double* part, int64_t n, int64_t H, float* dw, cudaStream_t s) {
  const unsigned grid = static_cast<unsigned>((H + cols - 1) / cols);
  switch (cols) {
    case 4:
      combine_cols_kernel<4><<<grid, dim3(4, normgate::kernels::kCombineLanes), 0, s>>>(part, n, H, dw);
      return true;
    case 8:
      combine_cols_kernel<8><<<grid, dim3(8, normgate::kernels::kCombineLanes), 0, s>>>(part, n, H, dw);
      return true;
    case 16:
      combine_cols_kernel<16><<<grid, dim3(16, normgate::kernels::kCombineLanes), 0, s>>>(part, n, H, dw);
      return true;
    default:
      return false;
  }
}

}  // namespace combinecols
