// kernels/src/bwd_controls.cu: the two NEGATIVE CONTROLS. They exist so the
// gate can prove it rejects the bug classes they imitate; registry.h marks
// them control = true and rmsnorm_bwd refuses them without ControlUse::allow.
// Both reuse bwd_det_chunked's stages (dx is the real kernel's, bitwise).
//
// ctl_fp32_seq: dw_j = plain FP32 sum over t = 0..T-1 in order of
//   dy * (x * rstd)   (each product and each addition rounded to FP32),
//   one thread per column (dw_j's error grows like T*u*sum|dy*xhat|).
//   The chunk pass runs for dx; its partials are ignored.
// ctl_bf16_partials: the chunk pass, then each FP64 chunk partial is
//   rounded to FP32, then to BF16 (RNE, both) and stored back before
//   bwd_det_chunked's combine: the "dw partials reduced in 16 bits" bug class.
#include <cuda_bf16.h>

#include "bwd_det_chunked.h"
#include "cuda_check.h"
#include "device_blocks.cuh"
#include "launch.h"

namespace normgate::kernels {
namespace dev {
namespace {

__global__ void column_sum_fp32_kernel(Rows<const __nv_bfloat16, true> dy, Rows<const __nv_bfloat16, true> x,
                                       const float* __restrict__ rstd, int64_t T, int64_t H,
                                       float* __restrict__ dw) {
  const int64_t j = global_thread();
  if (j >= H) return;
  float s = 0.0f;
#pragma unroll 8
  for (int64_t t = 0; t < T; ++t) {
    const float xhat = mul_rn(__bfloat162float(x.row(t)[j]), __ldg(rstd + t));
    s = add_rn(s, mul_rn(__bfloat162float(dy.row(t)[j]), xhat));
  }
  dw[j] = s;
}

__global__ void partials_to_bf16_kernel(double* part, int64_t count) {
  for (int64_t i = global_thread(); i < count; i += global_threads())
    part[i] = static_cast<double>(__bfloat162float(__float2bfloat16_rn(__double2float_rn(part[i]))));
}

}  // namespace
}  // namespace dev

namespace detail {

void launch_ctl_fp32_seq(const BwdArgs& a, bool vec, Stream s) {
  enqueue_det_chunk_pass(a, vec, s);
  const int threads = 128;
  const unsigned blocks = static_cast<unsigned>((a.H + threads - 1) / threads);
  dev::column_sum_fp32_kernel<<<blocks, threads, 0, s>>>(
      {reinterpret_cast<const __nv_bfloat16*>(a.dy), a.dy_stride, a.heads, a.dy_stride_h},
      {reinterpret_cast<const __nv_bfloat16*>(a.x), a.x_stride, a.heads, a.x_stride_h}, a.rstd, a.T * a.heads, a.H,
      a.dw);
  NG_CUDA_LAUNCHED("column_sum_fp32_kernel");
}

void launch_ctl_bf16_partials(const BwdArgs& a, bool vec, Stream s) {
  enqueue_det_chunk_pass(a, vec, s);
  const int64_t count = num_chunks(a.T * a.heads, a.H) * a.H;
  const int threads = 256;
  const int64_t want = (count + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(want < 4096 ? want : 4096);
  dev::partials_to_bf16_kernel<<<blocks, threads, 0, s>>>(static_cast<double*>(a.workspace), count);
  NG_CUDA_LAUNCHED("partials_to_bf16_kernel");
  enqueue_combine_partials(a, s);
}

}  // namespace detail
}  // namespace normgate::kernels
