// kernels/src/bwd_fp32_blocked.cu: variant bwd_fp32_blocked (deterministic;
// trades dw accuracy for speed: routable only where the gate approves it).
//
// Stage 1 (bwd_chunk_pass_f32.cuh): one CTA per chunk of rows (plan.h chunk
//   plan, as bwd_det_chunked); dx per row, bitwise bwd_det_chunked's; per
//   column an uncompensated FP32 sum over the chunk's rows in order,
//     acc = fmaf(FP32_rn(dy*x), rstd, acc)   (FP32 rstd; one rounding a row),
//   stored to partials[chunk][j] as FP32 (workspace: half of the FP64
//   partials' bytes).
// Stage 2 (combine_f32_kernel): per column j, 32 lanes; lane L adds the
//   partials of chunks L, L+32, ... (increasing) in FP32 from 0; the lane
//   sums are added in order L = 0..31 in FP32 from 0; dw[j] = that sum.
//   No compensation anywhere: plan.h's fixed order, so dw is deterministic
//   and bitwise equal to the CPU model (models.h), but its error grows with
//   the chunk length and the column's cancellation (the `cancel` family):
//   the gate decides where it stays inside the dw budget.
// Every partial read in stage 2 was written in stage 1 of the same call, so
// the workspace's previous contents never matter.
#include "bwd_chunk_launch.cuh"
#include "bwd_chunk_pass_f32.cuh"
#include "cuda_check.h"
#include "launch.h"

namespace normgate::kernels {
namespace dev {
namespace {

/// Stores a chunk's FP32 partials: 2 x 16-byte stores when H % 8 == 0 (the
/// group is then 32-byte aligned in a 16-byte aligned workspace), else per
/// column.
struct F32PartialSink {
  float* part;
  int H;
  __device__ __forceinline__ void operator()(int64_t chunk, int col0, const float (&acc)[8]) const {
    float* p = part + chunk * H + col0;
    if ((H & 7) == 0) {
      float4* q = reinterpret_cast<float4*>(p);
      q[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      q[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
      return;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (col0 + e < H) p[e] = acc[e];
  }
};

constexpr int kColsPerBlock = 32;

/// Stage 2: block (32 columns, kCombineLanes lanes), as bwd_det_chunked's
/// combine_partials_kernel with plain FP32 additions.
__global__ void __launch_bounds__(kColsPerBlock * kCombineLanes)
    combine_f32_kernel(const float* __restrict__ part, int64_t n, int64_t H, float* __restrict__ dw) {
  __shared__ float sh[kCombineLanes][kColsPerBlock + 1];
  const int x = static_cast<int>(threadIdx.x);
  const int lane = static_cast<int>(threadIdx.y);
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColsPerBlock + x;
  float s = 0.0f;
  if (j < H) {
#pragma unroll 4
    for (int64_t c = lane; c < n; c += kCombineLanes) s = add_rn(s, part[c * H + j]);
  }
  sh[lane][x] = s;
  __syncthreads();
  if (lane == 0 && j < H) {
    float tot = 0.0f;
    for (int l = 0; l < kCombineLanes; ++l) tot = add_rn(tot, sh[l][x]);
    dw[j] = tot;
  }
}

}  // namespace
}  // namespace dev

namespace detail {

void launch_bwd_fp32_blocked(const BwdArgs& a, bool vec, Stream s) {
  auto* part = static_cast<float*>(a.workspace);
  const dev::F32PartialSink sink{part, static_cast<int>(a.H)};
  NG_CUDA(dev::dispatch_chunk_pass(a, vec, [&](auto kind, auto res_tag, const auto& r, const dev::ChunkLaunch& cfg) {
    constexpr dev::ChunkKernel k = decltype(kind)::value;
    constexpr bool kRes = decltype(res_tag)::value;
    using WT = std::remove_cv_t<std::remove_pointer_t<decltype(r.w)>>;
    using Sink = dev::F32PartialSink;
    if constexpr (k == dev::ChunkKernel::heads) {
      dev::bwd_chunk_f32_kernel<false, WT, Sink, true><<<cfg.grid, cfg.block, cfg.smem, s>>>(r, sink);
    } else if constexpr (k == dev::ChunkKernel::narrow) {
      dev::bwd_chunk_f32_kernel<kRes, WT, Sink><<<cfg.grid, cfg.block, cfg.smem, s>>>(r, sink);
    } else if constexpr (k == dev::ChunkKernel::wide) {
      dev::bwd_chunk_f32_wide_kernel<kRes, WT, Sink><<<cfg.grid, cfg.block, cfg.smem, s>>>(r, sink);
    } else {
      dev::bwd_chunk_f32_cluster_kernel<kRes, WT, Sink><<<cfg.grid, cfg.block, cfg.smem, s>>>(r, sink);
    }
  }));
  const int64_t n = num_chunks(a.T * a.heads, a.H);
  const dim3 block(dev::kColsPerBlock, kCombineLanes);
  const dim3 grid(static_cast<unsigned>((a.H + dev::kColsPerBlock - 1) / dev::kColsPerBlock));
  dev::combine_f32_kernel<<<grid, block, 0, s>>>(part, n, a.H, a.dw);
  NG_CUDA_LAUNCHED("combine_f32_kernel");
}

}  // namespace detail
}  // namespace normgate::kernels
