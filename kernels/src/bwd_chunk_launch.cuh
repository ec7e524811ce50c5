// kernels/src/bwd_chunk_launch.cuh (internal): the launch geometry of a
// backward chunk pass, for variants whose kernels are their own (a chunk pass
// followed by more work in the same kernel, or another accumulator) rather
// than bwd_chunk_pass.cuh's. The choice of kernel, grid, block and dynamic
// shared memory is bwd_chunk_pass.cuh enqueue_chunk_pass's, line for line:
//   per-head rows (heads > 1, H = 256): one 1-slot CTA per chunk (kHeads),
//   2-slot team (H > 8192): a 2-CTA cluster per chunk (team/2 threads each),
//   1-slot team of <= 512 threads: the narrow kernel (two CTAs per SM),
//   1-slot team of 544..1024 threads: the wide kernel (one CTA),
// with form res's dh_new ring (2 x team x 16 bytes) on the vector path.
// Used by bwd_det_onepass.cu and bwd_fp32_blocked.cu.
#pragma once

#include <type_traits>

#include "device_blocks.cuh"
#include "normgate/kernels/chunk_plan.h"
#include "normgate/kernels/rmsnorm.h"

namespace normgate::kernels::dev {

/// Which of the chunk-pass kernels a call takes (file comment).
enum class ChunkKernel { narrow, heads, wide, cluster };

/// One launch of a chunk-pass kernel, as chosen by dispatch_chunk_pass.
struct ChunkLaunch {
  dim3 grid, block;
  size_t smem;
};

/// Builds the kernel arguments for validated args (T > 0) and calls
///   launch(std::integral_constant<ChunkKernel, k>{}, std::bool_constant<kRes>{}, rows, cfg)
/// once, rows a BwdRows<WT, kHeads> (WT = __nv_bfloat16 or float by the
/// weight dtype; kHeads for ChunkKernel::heads), cfg a ChunkLaunch; the
/// callback enqueues its kernel (if constexpr on the two tags) and returns
/// nothing. Returns cudaErrorInvalidConfiguration for per-head rows whose team
/// does not fit one narrow CTA (cannot happen with H = 256), else
/// cudaGetLastError() after the callback.
template <class F>
inline cudaError_t dispatch_chunk_pass(const BwdArgs& a, bool vec, F&& launch) {
  const RowGeometry geo = bwd_row_geometry(a.H);
  const int64_t rows = a.T * a.heads;  // normalized rows
  const int64_t n = num_chunks(rows, a.H);
  auto go = [&](auto wtag) -> cudaError_t {
    using WT = decltype(wtag);
    auto make = [&](auto heads_tag) {
      constexpr bool kHeads = decltype(heads_tag)::value;
      return BwdRows<WT, kHeads>{{reinterpret_cast<const __nv_bfloat16*>(a.dy), a.dy_stride, a.heads, a.dy_stride_h},
                                 {reinterpret_cast<const __nv_bfloat16*>(a.x), a.x_stride, a.heads, a.x_stride_h},
                                 static_cast<const WT*>(a.w.p),
                                 a.rstd,
                                 {reinterpret_cast<__nv_bfloat16*>(a.dx), a.dx_stride, a.heads, a.dx_stride_h},
                                 rows,
                                 static_cast<int>(a.H),
                                 n,
                                 vec,
                                 {reinterpret_cast<const __nv_bfloat16*>(a.dh_new), a.dh_new_stride},
                                 a.msq};
    };
    if (a.heads > 1) {
      if (geo.slots != 1 || geo.team > kMaxCtaTeam) return cudaErrorInvalidConfiguration;
      launch(std::integral_constant<ChunkKernel, ChunkKernel::heads>{}, std::false_type{}, make(std::true_type{}),
             ChunkLaunch{dim3(static_cast<unsigned>(n)), dim3(static_cast<unsigned>(geo.team)), 0});
      return cudaGetLastError();
    }
    const BwdRows<WT> r = make(std::false_type{});
    const size_t ring = a.dh_new != nullptr && vec ? static_cast<size_t>(2 * geo.team) * sizeof(uint4) : 0;
    auto pick = [&](auto res_tag) {
      if (geo.slots == 2) {
        launch(std::integral_constant<ChunkKernel, ChunkKernel::cluster>{}, res_tag, r,
               ChunkLaunch{dim3(static_cast<unsigned>(2 * n)), dim3(static_cast<unsigned>(geo.team / 2)), ring});
      } else if (geo.team <= kMaxCtaTeam) {
        launch(std::integral_constant<ChunkKernel, ChunkKernel::narrow>{}, res_tag, r,
               ChunkLaunch{dim3(static_cast<unsigned>(n)), dim3(static_cast<unsigned>(geo.team)), ring});
      } else {
        launch(std::integral_constant<ChunkKernel, ChunkKernel::wide>{}, res_tag, r,
               ChunkLaunch{dim3(static_cast<unsigned>(n)), dim3(static_cast<unsigned>(geo.team)), ring});
      }
    };
    if (a.dh_new != nullptr) {
      pick(std::true_type{});
    } else {
      pick(std::false_type{});
    }
    return cudaGetLastError();
  };
  return a.w.dtype == WDtype::fp32 ? go(float{}) : go(__nv_bfloat16{});
}

}  // namespace normgate::kernels::dev
