// kernels/src/bwd_ctl_warp64.cu: the NEGATIVE CONTROL ctl_warp64_dw, the bug
// class of a hard-coded warp width (PyTorch PR 183864): a dw loop written
// for 64-wide warps running on 32-lane ones. registry.h marks it control =
// true; rmsnorm_bwd refuses it without ControlUse::allow.
//
// dx and the FP64 chunk partials are bwd_det_chunked's stage 1
// (bwd_det_chunked.h). dw is zeroed (cudaMemsetAsync), then the combine
// (bwd_det_chunked's arithmetic: per column 32 chunk lanes into Comp64s,
// lanes added in order, FP32_rn) runs with blocks of 32 column threads whose
// column index strides by kAssumedWarp = 64: block b computes columns
// b*64 + 0..31 only, so every column j with j mod 64 >= 32 keeps dw = 0.
// The CPU model: model_bwd.cpp (combine_fixed, then drop_warp64_columns).
#include "bwd_det_chunked.h"
#include "cuda_check.h"
#include "device_blocks.cuh"
#include "launch.h"

namespace normgate::kernels {
namespace dev {
namespace {

constexpr int kLanes = 32;        // column threads per block: the real warp width
constexpr int kAssumedWarp = 64;  // the width the faulty indexing assumes

__global__ void __launch_bounds__(kLanes * kCombineLanes)
    combine_warp64_kernel(const double* __restrict__ part, int64_t n, int64_t H, float* __restrict__ dw) {
  __shared__ double sh_s[kCombineLanes][kLanes + 1];
  __shared__ double sh_c[kCombineLanes][kLanes + 1];
  const int x = static_cast<int>(threadIdx.x);
  const int lane = static_cast<int>(threadIdx.y);
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kAssumedWarp + x;  // the fault: 64, not 32
  Comp64 acc;
  if (j < H) {
#pragma unroll 4
    for (int64_t c = lane; c < n; c += kCombineLanes) acc.add(part[c * H + j]);
  }
  sh_s[lane][x] = acc.s;
  sh_c[lane][x] = acc.comp;
  __syncthreads();
  if (lane == 0 && j < H) {
    Comp64 tot;
    for (int l = 0; l < kCombineLanes; ++l) {
      tot.add(sh_s[l][x]);
      tot.add(sh_c[l][x]);
    }
    dw[j] = __double2float_rn(tot.value());
  }
}

}  // namespace
}  // namespace dev

namespace detail {

void launch_ctl_warp64_dw(const BwdArgs& a, bool vec, Stream s) {
  enqueue_det_chunk_pass(a, vec, s);
  NG_CUDA(cudaMemsetAsync(a.dw, 0, static_cast<size_t>(a.H) * sizeof(float), s));
  const int64_t n = num_chunks(a.T * a.heads, a.H);
  const dim3 block(dev::kLanes, kCombineLanes);
  const dim3 grid(static_cast<unsigned>((a.H + dev::kAssumedWarp - 1) / dev::kAssumedWarp));
  dev::combine_warp64_kernel<<<grid, block, 0, s>>>(static_cast<const double*>(a.workspace), n, a.H, a.dw);
  NG_CUDA_LAUNCHED("combine_warp64_kernel");
}

}  // namespace detail
}  // namespace normgate::kernels
