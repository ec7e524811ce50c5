// kernels/src/bwd_det_wide.cu: variant bwd_det_wide (deterministic), rows of
// H = 4097..6144 (plain and form res).
//
// bwd_det_chunked's two stages, the same arithmetic in the same order, so dx
// and dw are bitwise bwd_det_chunked's (the CPU model is its model):
// Stage 1: bwd_chunk_pass.cuh's chunk pass, one CTA per chunk of rows
//   (plan.h), in a wide kernel of its own bounded for 768 threads
//   (__launch_bounds__(768, 1): 80 registers a thread) where
//   bwd_det_chunked's wide kernel is bounded for 1024 (64 registers). At
//   these H the team is 544..768 threads (plan.h bwd_row_geometry: one group
//   of 8 columns a thread), so one CTA per SM either way. With 80 registers
//   the FP32 weights of the thread's 8 columns stay in registers for the
//   whole chunk: FP32 w enters the pass as WregF32 (below), whose
//   kChunkCacheW is true, where at 64 registers the pass re-reads them from
//   L1 twice a row (bwd_chunk_pass.cuh kChunkCacheW).
// Stage 2: bwd_det_chunked's combine (bwd_det_chunked.h), unchanged.
// Why: the plain FP32-weight backward at H >= 5120 ran at 0.74-0.78x of
// torch.compile; with the 768-thread bound it is 1.25x faster there, BF16 w
// 1.07x (docs/perf/backward.md, D11).
#include <stdexcept>
#include <string>

#include "bwd_chunk_launch.cuh"
#include "bwd_chunk_pass.cuh"
#include "bwd_det_chunked.h"
#include "cuda_check.h"
#include "launch.h"

namespace normgate::kernels {
namespace dev {
namespace {

/// The thread bound of this variant's kernel; plan.h's team at H = 6144.
constexpr int kWideDetTeam = 768;

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
struct WidePartialSink {
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
__global__ void __launch_bounds__(kWideDetTeam, 1) bwd_det_wide_kernel(const BwdRows<WT> a, const WidePartialSink sink) {
  bwd_chunk_pass<1, 1, kRes>(a, sink);
}

}  // namespace
}  // namespace dev

namespace detail {

void launch_bwd_det_wide(const BwdArgs& a, bool vec, Stream s) {
  // The registry's H range and forms (validated by the launch API) give a
  // 1-slot team of 544..768 threads in one CTA: dispatch_chunk_pass's wide
  // kernel. Anything else is a registry or plan.h change this file missed.
  const RowGeometry geo = bwd_row_geometry(a.H);
  if (a.heads != 1 || geo.slots != 1 || geo.team <= kMaxCtaTeam || geo.team > dev::kWideDetTeam)
    throw std::logic_error("bwd_det_wide: H = " + std::to_string(a.H) + ", heads = " + std::to_string(a.heads) +
                           " is outside its kernel's geometry (teams of " + std::to_string(kMaxCtaTeam + 32) + ".." +
                           std::to_string(dev::kWideDetTeam) + " threads)");
  const dev::WidePartialSink sink{static_cast<double*>(a.workspace), static_cast<int>(a.H)};
  bool launched = false;
  NG_CUDA(dev::dispatch_chunk_pass(a, vec, [&](auto kind, auto res_tag, const auto& r, const dev::ChunkLaunch& cfg) {
    constexpr bool kRes = decltype(res_tag)::value;
    if constexpr (decltype(kind)::value == dev::ChunkKernel::wide) {
      launched = true;
      using WT = std::remove_cv_t<std::remove_pointer_t<decltype(r.w)>>;
      if constexpr (std::is_same_v<WT, float>) {
        const dev::BwdRows<dev::WregF32> rw{r.dy,    r.x, reinterpret_cast<const dev::WregF32*>(r.w),
                                            r.rstd,  r.dx, r.T, r.H, r.num_chunks, r.vec, r.add, r.msq};
        dev::bwd_det_wide_kernel<kRes, dev::WregF32><<<cfg.grid, cfg.block, cfg.smem, s>>>(rw, sink);
      } else {
        dev::bwd_det_wide_kernel<kRes, WT><<<cfg.grid, cfg.block, cfg.smem, s>>>(r, sink);
      }
    }
  }));
  if (!launched)  // dispatch_chunk_pass chose another kernel: stage 2 would read no partials
    throw std::logic_error("bwd_det_wide: H = " + std::to_string(a.H) + " did not get the wide chunk kernel");
  enqueue_combine_partials(a, s);
}

}  // namespace detail
}  // namespace normgate::kernels
