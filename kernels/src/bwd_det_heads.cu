// kernels/src/bwd_det_heads.cu: variant bwd_det_heads (deterministic), the
// per-head views (heads4, heads24: rows of H = 256 sharing one w[256]).
//
// bwd_det_chunked's two stages, the same arithmetic in the same order, so dx
// and dw are bitwise bwd_det_chunked's (the CPU model is its model):
// Stage 1: bwd_chunk_pass.cuh's chunk pass over per-head rows, one 32-thread
//   CTA (plan.h's team at H = 256: one 8-column group a lane) per chunk of
//   rows, in a kernel of its own. bwd_det_chunked runs these rows in its
//   narrow kernel template, where FP32 w is re-read from L1 twice a row
//   (bwd_chunk_pass.cuh kChunkCacheW: one group a thread at 64 registers);
//   here FP32 w enters the pass as HeadsWregF32 (below), whose kChunkCacheW is
//   true, so the lane's 8 weights stay in registers for the whole chunk, as
//   BF16 w already does.
// Stage 2: bwd_det_chunked's combine (bwd_det_chunked.h), unchanged.
// Why: the per-head backward with FP32 w ran 1.16x the time of BF16 w and
// 0.85x torch.compile's speed (docs/perf/backward.md, D12).
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

/// The CTA of a per-head chunk: plan.h's team at H = 256.
constexpr int kHeadsTeam = 32;
/// CTAs an SM must be able to hold: the kernel's register bound, 65536 / (32
/// x 16) = 128 a thread (ptxas: 108 with BF16 w, 111 with FP32 w, no spill).
/// Bounds for 24 and 32 CTAs (80 and 64 registers, no spill either) ran
/// slower: FP32 w 2-3% and 4%, BF16 w 0.1-0.6% and 3-3.5% (docs/perf/backward.md, D12).
constexpr int kHeadsMinCtas = 16;

/// An FP32 weight the chunk pass keeps in registers: kChunkCacheW<1,
/// HeadsWregF32> is true, and load_weights below (found by argument-dependent
/// lookup from the pass) reads it as the float it is.
struct HeadsWregF32 {
  float v;
};
static_assert(sizeof(HeadsWregF32) == sizeof(float) && alignof(HeadsWregF32) == alignof(float));
static_assert(kChunkCacheW<1, HeadsWregF32> && !kChunkCacheW<1, float>,
              "the point of this variant: FP32 w cached at one group a thread");
__device__ __forceinline__ void load_weights(const HeadsWregF32* w, int col0, int H, bool vec, float (&out)[8]) {
  dev::load_weights(reinterpret_cast<const float*>(w), col0, H, vec, out);
}

/// A chunk's FP64 partials as bwd_det_chunked.cu stores them (H = 256: the
/// group is 64-byte aligned in the 16-byte aligned workspace).
struct HeadsPartialSink {
  double* part;
  __device__ __forceinline__ void operator()(int64_t chunk, int col0, const Acc64 (&acc)[8]) const {
    double2* q = reinterpret_cast<double2*>(part + chunk * 256 + col0);
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = make_double2(acc[2 * i].s, acc[2 * i + 1].s);
  }
};

template <class WT>
__global__ void __launch_bounds__(kHeadsTeam, kHeadsMinCtas)
    bwd_det_heads_kernel(const BwdRows<WT, true> a, const HeadsPartialSink sink) {
  bwd_chunk_pass<1, 1, false>(a, sink);
}

}  // namespace
}  // namespace dev

namespace detail {

void launch_bwd_det_heads(const BwdArgs& a, bool vec, Stream s) {
  // The registry's H and forms (validated by the launch API) give per-head
  // rows of 256 in one 32-thread CTA a chunk: dispatch_chunk_pass's heads
  // kernel. Anything else is a registry or plan.h change this file missed.
  const RowGeometry geo = bwd_row_geometry(a.H);
  if (a.H != 256 || a.heads <= 1 || geo.slots != 1 || geo.team != dev::kHeadsTeam)
    throw std::logic_error("bwd_det_heads: H = " + std::to_string(a.H) + ", heads = " + std::to_string(a.heads) +
                           " is outside its kernel's geometry (per-head rows of 256, 32-thread teams)");
  const dev::HeadsPartialSink sink{static_cast<double*>(a.workspace)};
  bool launched = false;
  NG_CUDA(dev::dispatch_chunk_pass(a, vec, [&](auto kind, auto, const auto& r, const dev::ChunkLaunch& cfg) {
    if constexpr (decltype(kind)::value == dev::ChunkKernel::heads) {
      launched = true;
      using WT = std::remove_cv_t<std::remove_pointer_t<decltype(r.w)>>;
      if constexpr (std::is_same_v<WT, float>) {
        const dev::BwdRows<dev::HeadsWregF32, true> rw{
            r.dy, r.x, reinterpret_cast<const dev::HeadsWregF32*>(r.w), r.rstd, r.dx, r.T, r.H, r.num_chunks,
            r.vec, r.add, r.msq};
        dev::bwd_det_heads_kernel<dev::HeadsWregF32><<<cfg.grid, cfg.block, cfg.smem, s>>>(rw, sink);
      } else {
        dev::bwd_det_heads_kernel<WT><<<cfg.grid, cfg.block, cfg.smem, s>>>(r, sink);
      }
    }
  }));
  if (!launched)  // dispatch_chunk_pass chose another kernel: stage 2 would read no partials
    throw std::logic_error("bwd_det_heads: heads = " + std::to_string(a.heads) + " did not get the heads chunk kernel");
  enqueue_combine_partials(a, s);
}

}  // namespace detail
}  // namespace normgate::kernels
