// kernels/src/bwd_det_chunked.cu: variant bwd_det_chunked (deterministic).
//
// Stage 1 (bwd_chunk_pass.cuh): one CTA per chunk of rows (plan.h); dx per
//   row; per column an Acc64 (FP64 sum of exact products) over the chunk's
//   rows in order, stored to partials[chunk][j] (double, workspace).
// Stage 2 (combine_partials_kernel): per column j, 32 lanes; lane L adds
//   the partials of chunks L, L+32, ... (increasing) into a Comp64; lane
//   results are added in order L = 0..31 (s then comp) into one Comp64;
//   dw[j] = FP32_rn(value()).
// Every partial read in stage 2 was written in stage 1 of the same call, so
// the workspace's previous contents never matter; no atomics, no
// device-dependent decomposition: dx and dw are bitwise reproducible and
// equal to model_bwd().
#include "bwd_chunk_pass.cuh"
#include "bwd_det_chunked.h"
#include "cuda_check.h"
#include "launch.h"

namespace normgate::kernels {
namespace dev {
namespace {

/// Stores a chunk's partials: 4 x 16-byte stores when H % 8 == 0 (the group
/// is then 64-byte aligned in a 16-byte aligned workspace), else per column.
struct PartialSink {
  double* part;
  int H;
  __device__ __forceinline__ void operator()(int64_t chunk, int col0, const Acc64 (&acc)[8]) const {
    double* p = part + chunk * H + col0;
    if ((H & 7) == 0) {
      double2* q = reinterpret_cast<double2*>(p);
#pragma unroll
      for (int i = 0; i < 4; ++i) q[i] = make_double2(acc[2 * i].s, acc[2 * i + 1].s);
      return;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (col0 + e < H) p[e] = acc[e].s;
  }
};

constexpr int kColsPerBlock = 32;

/// Stage 2: block (32 columns, kCombineLanes lanes).
__global__ void __launch_bounds__(kColsPerBlock * kCombineLanes)
    combine_partials_kernel(const double* __restrict__ part, int64_t n, int64_t H, float* __restrict__ dw) {
  __shared__ double sh_s[kCombineLanes][kColsPerBlock + 1];
  __shared__ double sh_c[kCombineLanes][kColsPerBlock + 1];
  const int x = static_cast<int>(threadIdx.x);
  const int lane = static_cast<int>(threadIdx.y);
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColsPerBlock + x;
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

void enqueue_det_chunk_pass(const BwdArgs& a, bool vec, cudaStream_t s) {
  const dev::PartialSink sink{static_cast<double*>(a.workspace), static_cast<int>(a.H)};
  NG_CUDA(dev::enqueue_chunk_pass(a, vec, sink, s));
}

void enqueue_combine_partials(const BwdArgs& a, cudaStream_t s) {
  const int64_t n = num_chunks(a.T * a.heads, a.H);
  const dim3 block(dev::kColsPerBlock, kCombineLanes);
  const dim3 grid(static_cast<unsigned>((a.H + dev::kColsPerBlock - 1) / dev::kColsPerBlock));
  dev::combine_partials_kernel<<<grid, block, 0, s>>>(static_cast<const double*>(a.workspace), n, a.H, a.dw);
  NG_CUDA_LAUNCHED("combine_partials_kernel");
}

void launch_bwd_det_chunked(const BwdArgs& a, bool vec, Stream s) {
  enqueue_det_chunk_pass(a, vec, s);
  enqueue_combine_partials(a, s);
}

}  // namespace detail
}  // namespace normgate::kernels
