// bench/bwd_wreg.cuh: a backward experiment for kernels_bench --bwd-wreg (not
// a variant; nothing routes it). bwd_det_chunked's chunk pass
// (kernels/src/bwd_chunk_pass.cuh, the same template, statement for
// statement) in a wide kernel bounded for 768 threads instead of 1024, for
// teams of 544..768 threads (H = 4353..6144): 80 registers a thread instead
// of 64. With FP32 w the weights of the thread's 8 columns then stay in
// registers for the whole chunk (the pass re-reads them from L1 twice a row
// when it has 64: bwd_chunk_pass.cuh kChunkCacheW); with BF16 w nothing is
// cached that was not, and the 16 registers more are the compiler's.
// Why: the plain FP32-weight backward at H >= 5120 runs at 0.74-0.78x of
// torch.compile while BF16 w at the same shape is 1.2x faster than FP32 w
// (docs/perf/backward.md, Open leads).
// FP32 w enters the template as WregF32, a float whose loads go through
// load_weights(const float*) (found by argument-dependent lookup), so the
// pass's kChunkCacheW<1, WregF32> is true. Then stage 2 is bwd_det_chunked's
// own combine (bwd_det_chunked.h), so dx and dw must be bitwise
// bwd_det_chunked's: kernels_bench counts the elements that differ
// (expected 0).
#pragma once

#include "bwd_chunk_pass.cuh"
#include "bwd_det_chunked.h"
#include "normgate/kernels/plan.h"

namespace normgate::kernels::dev {

/// An FP32 weight that the chunk pass keeps in registers (file comment).
struct WregF32 {
  float v;
};
__device__ __forceinline__ void load_weights(const WregF32* w, int col0, int H, bool vec, float (&out)[8]) {
  load_weights(reinterpret_cast<const float*>(w), col0, H, vec, out);
}

/// bwd_det_chunked.cu's PartialSink (anonymous there): a chunk's FP64
/// partials, 4 x 16-byte stores when H % 8 == 0 (the experiment's only case).
struct WregPartialSink {
  double* part;
  int H;
  __device__ __forceinline__ void operator()(int64_t chunk, int col0, const Acc64 (&acc)[8]) const {
    double2* q = reinterpret_cast<double2*>(part + chunk * H + col0);
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = make_double2(acc[2 * i].s, acc[2 * i + 1].s);
  }
};

inline constexpr int kWregTeam = 768;

template <bool kRes, class WT>
__global__ void __launch_bounds__(kWregTeam, 1) bwd_wreg_kernel(const BwdRows<WT> a, const WregPartialSink sink) {
  bwd_chunk_pass<1, 1, kRes>(a, sink);
}

}  // namespace normgate::kernels::dev

namespace bwdwreg {

/// Whether the experiment covers H: the vector path (H % 8 == 0) with a
/// 1-slot team of 544..768 threads.
inline bool covers(int64_t H) {
  const normgate::kernels::RowGeometry g = normgate::kernels::bwd_row_geometry(H);
  return H % 8 == 0 && g.slots == 1 && g.team > normgate::kernels::kMaxCtaTeam && g.team <= normgate::kernels::dev::kWregTeam;
}

/// Enqueues the experiment for plain or res rows (a.dh_new), a 16-byte
/// aligned vector path, a.workspace holding bwd_det_chunked's partials.
inline cudaError_t launch(const normgate::kernels::BwdArgs& a, cudaStream_t s) {
  namespace nk = normgate::kernels;
  namespace dev = normgate::kernels::dev;
  const nk::RowGeometry geo = nk::bwd_row_geometry(a.H);
  const int64_t n = nk::num_chunks(a.T, a.H);
  const dev::WregPartialSink sink{static_cast<double*>(a.workspace), static_cast<int>(a.H)};
  const size_t ring = a.dh_new != nullptr ? static_cast<size_t>(2 * geo.team) * sizeof(uint4) : 0;
  auto go = [&](auto wtag) {
    using WT = decltype(wtag);
    const dev::BwdRows<WT> r{{reinterpret_cast<const __nv_bfloat16*>(a.dy), a.dy_stride, 1, 0},
                             {reinterpret_cast<const __nv_bfloat16*>(a.x), a.x_stride, 1, 0},
                             static_cast<const WT*>(a.w.p),
                             a.rstd,
                             {reinterpret_cast<__nv_bfloat16*>(a.dx), a.dx_stride, 1, 0},
                             a.T,
                             static_cast<int>(a.H),
                             n,
                             true,
                             {reinterpret_cast<const __nv_bfloat16*>(a.dh_new), a.dh_new_stride},
                             a.msq};
    const dim3 grid(static_cast<unsigned>(n)), block(static_cast<unsigned>(geo.team));
    if (a.dh_new != nullptr)
      dev::bwd_wreg_kernel<true, WT><<<grid, block, ring, s>>>(r, sink);
    else
      dev::bwd_wreg_kernel<false, WT><<<grid, block, ring, s>>>(r, sink);
  };
  if (a.w.dtype == normgate::WDtype::fp32)
    go(dev::WregF32{});
  else
    go(__nv_bfloat16{});
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  nk::detail::enqueue_combine_partials(a, s);
  return cudaGetLastError();
}

}  // namespace bwdwreg
