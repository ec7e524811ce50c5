// kernels/src/bwd_det_wreg.cu: variant bwd_det_wreg (deterministic), rows of
// H = 1..4096 (plain and form res).
//
// bwd_det_chunked's two stages, the same arithmetic in the same order, so dx
// and dw are bitwise bwd_det_chunked's (the CPU model is its model):
// Stage 1: bwd_chunk_pass.cuh's chunk pass, one CTA per chunk of rows
//   (plan.h: a one-slot team of at most 512 threads at these H), in a kernel
//   of its own with bwd_det_chunked's narrow bound (__launch_bounds__(512,
//   2): 64 registers a thread). There bwd_det_chunked re-reads FP32 w from
//   L1 twice a row (bwd_chunk_pass.cuh kChunkCacheW, set for one group a
//   thread at 64 registers); here FP32 w enters the pass as WregF32 (below),
//   whose kChunkCacheW is true, so the thread's 8 weights stay in registers
//   for the whole chunk. ptxas (nvcc 13.0) fits that in 64 registers without
//   spilling, plain and res.
// Stage 2: bwd_det_chunked's combine (bwd_det_chunked.h), unchanged.
// Why: FP32 w cost 2.5-8.1% over BF16 w at H = 1536-4096 on bwd_det_chunked
// (docs/perf/backward.md, D13).
#include <stdexcept>
#include <string>
#include <type_traits>

#include "bwd_chunk_launch.cuh"
#include "bwd_chunk_pass.cuh"
#include "bwd_det_chunked.h"
#include "cuda_check.h"
#include "launch.h"

namespace normgate::kernels {
namespace dev {
namespace {

/// An FP32 weight the chunk pass keeps in registers: kChunkCacheW<1,
/// WregF32> is true, and load_weights below (found by argument-dependent
/// lookup from the pass) reads it as the float it is.
struct WregF32 {
  float v;
};
static_assert(sizeof(WregF32) == sizeof(float) && alignof(WregF32) == alignof(float));
static_assert(kChunkCacheW<1, WregF32> && !kChunkCacheW<1, float>,
              "the point of this variant: FP32 w cached at one group a thread");
__device__ __forceinline__ void load_weights(const WregF32* w, int col0, int H, bool vec, float (&out)[8]) {
  dev::load_weights(reinterpret_cast<const float*>(w), col0, H, vec, out);
}

/// bwd_det_chunked.cu's sink: a chunk's FP64 partials, 4 x 16-byte stores
/// when H % 8 == 0 (the group is then 64-byte aligned in a 16-byte aligned
/// workspace), else per column.
struct WregPartialSink {
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

template <bool kRes, class WT>
__global__ void __launch_bounds__(kMaxCtaTeam, 2) bwd_det_wreg_kernel(const BwdRows<WT> a, const WregPartialSink sink) {
  bwd_chunk_pass<1, 1, kRes>(a, sink);
}

}  // namespace
}  // namespace dev

namespace detail {

void launch_bwd_det_wreg(const BwdArgs& a, bool vec, Stream s) {
  // The registry's H range and forms (validated by the launch API) give a
  // 1-slot team of at most 512 threads in one CTA: dispatch_chunk_pass's
  // narrow kernel. Anything else is a registry or plan.h change this file missed.
  const RowGeometry geo = bwd_row_geometry(a.H);
  if (a.heads != 1 || geo.slots != 1 || geo.team > kMaxCtaTeam)
    throw std::logic_error("bwd_det_wreg: H = " + std::to_string(a.H) + ", heads = " + std::to_string(a.heads) +
                           " is outside its kernel's geometry (one-slot teams of at most " +
                           std::to_string(kMaxCtaTeam) + " threads, plain rows)");
  const dev::WregPartialSink sink{static_cast<double*>(a.workspace), static_cast<int>(a.H)};
  bool launched = false;
  NG_CUDA(dev::dispatch_chunk_pass(a, vec, [&](auto kind, auto res_tag, const auto& r, const dev::ChunkLaunch& cfg) {
    constexpr bool kRes = decltype(res_tag)::value;
    if constexpr (decltype(kind)::value == dev::ChunkKernel::narrow) {
      launched = true;
      using WT = std::remove_cv_t<std::remove_pointer_t<decltype(r.w)>>;
      if constexpr (std::is_same_v<WT, float>) {
        const dev::BwdRows<dev::WregF32> rw{r.dy,    r.x, reinterpret_cast<const dev::WregF32*>(r.w),
                                            r.rstd,  r.dx, r.T, r.H, r.num_chunks, r.vec, r.add, r.msq};
        dev::bwd_det_wreg_kernel<kRes, dev::WregF32><<<cfg.grid, cfg.block, cfg.smem, s>>>(rw, sink);
      } else {
        dev::bwd_det_wreg_kernel<kRes, WT><<<cfg.grid, cfg.block, cfg.smem, s>>>(r, sink);
      }
    }
  }));
  if (!launched)  // dispatch_chunk_pass chose another kernel: stage 2 would read no partials
    throw std::logic_error("bwd_det_wreg: H = " + std::to_string(a.H) + " did not get the narrow chunk kernel");
  enqueue_combine_partials(a, s);
}

}  // namespace detail
}  // namespace normgate::kernels
