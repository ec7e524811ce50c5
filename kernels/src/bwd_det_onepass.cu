// kernels/src/bwd_det_onepass.cu: variant bwd_det_onepass (deterministic,
// one kernel launch).
//
// bwd_det_chunked's arithmetic in one kernel: each chunk CTA runs the shared
// chunk pass (bwd_chunk_pass.cuh: dx, and per column the Acc64 over the
// chunk's rows) and stores its FP64 partials to partials[chunk][j]
// (workspace), exactly as bwd_det_chunked's stage 1. Then it takes a ticket:
//   every thread: __threadfence() (its partial stores before the ticket);
//   __syncthreads(); thread 0: old = atomicAdd(counter, 1)
// and the CTA whose ticket is the last (old == gridDim.x - 1: every CTA,
// both CTAs of each 2-CTA cluster included, has stored its partials) combines
// them: thread i takes columns i, i + blockDim.x, ...; per column, chunk lane
// L (0..31) sums chunks L, L+32, ... in increasing order into a Comp64, and
// the lanes are added in order L = 0..31 (s then comp) into one Comp64, dw[j]
// = FP32_rn(value()): plan.h's fixed order and bwd_det_chunked's
// combine_partials_kernel's operations one for one (less the adds of empty
// lanes, which change no bit: ticket_and_combine), so dx and dw are bitwise
// those of bwd_det_chunked (and its CPU model). Lanes run two at a time for
// instruction-level parallelism (four at a time spilled 36 bytes in the res
// kernels' 64-register budget); partials are read with ld.global.cg (L2,
// where the other SMs' stores are) after an acquire fence.
//
// The ticket counter lives in the workspace after the partials
// (bwd_det_onepass.h). The workspace's contents on entry do not matter
// (rmsnorm.h): the launcher zeroes the counter with cudaMemsetAsync (4
// bytes: a memset node in a CUDA graph, not a kernel) before the kernel, so
// a garbage counter is harmless. The last CTA also sets the counter back to 0
// after its ticket; nothing relies on that.
//
// Cost: the combine of num_chunks x H partials runs in ONE CTA, so this
// variant wins where the launch dominates (small T: one launch instead of
// two) and loses at large T (bwd_det_chunked's combine spreads over
// ceil(H/32) CTAs); the route derivation finds the crossover.
#include "bwd_chunk_launch.cuh"
#include "bwd_chunk_pass.cuh"
#include "bwd_det_onepass.h"
#include "cuda_check.h"
#include "launch.h"

namespace normgate::kernels {
namespace dev {
namespace {

/// Stores a chunk's partials as bwd_det_chunked's PartialSink does (4 x
/// 16-byte stores when H % 8 == 0, else per column).
struct OnepassSink {
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

/// Chunk lanes combined side by side per thread (independent Comp64 chains).
constexpr int kLanesAtOnce = 2;
static_assert(kCombineLanes % kLanesAtOnce == 0);

/// After the chunk pass (file comment): the ticket, and in the last CTA the
/// fixed-order combine of the partials into dw.
__device__ __forceinline__ void ticket_and_combine(const OnepassSink& sink, int64_t n, float* __restrict__ dw,
                                                   unsigned* counter) {
  __shared__ unsigned last;
  __threadfence();  // release: this thread's partial stores before the ticket
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned old = atomicAdd(counter, 1u);
    last = old == gridDim.x - 1 ? 1u : 0u;
    if (last) *counter = 0u;  // every ticket is taken (not relied on: the launcher zeroes it)
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // acquire: the other CTAs' partials after their tickets
  const double* part = sink.part;
  const int H = sink.H;
  // Lanes L >= n hold no chunk: combine_partials_kernel adds their (0, 0)
  // into tot, which changes no bit (Comp64::add(+-0) leaves a finite s and
  // its comp as they are, and value() of a non-finite s is s; no partial or
  // lane sum is ever -0), so they are skipped: at small T (n << 32) the
  // combine is then n lane steps and 2n tot steps a column instead of 64+.
  const int lanes = n < kCombineLanes ? static_cast<int>(n) : kCombineLanes;
  for (int j = static_cast<int>(threadIdx.x); j < H; j += static_cast<int>(blockDim.x)) {
    Comp64 tot;
    for (int L0 = 0; L0 < lanes; L0 += kLanesAtOnce) {
      Comp64 lane[kLanesAtOnce];
      for (int64_t c = L0; c < n; c += kCombineLanes) {  // lane L0+i takes chunk c+i
#pragma unroll
        for (int i = 0; i < kLanesAtOnce; ++i)
          if (c + i < n) lane[i].add(__ldcg(part + (c + i) * H + j));
      }
#pragma unroll
      for (int i = 0; i < kLanesAtOnce; ++i) {
        if (L0 + i < lanes) {
          tot.add(lane[i].s);
          tot.add(lane[i].comp);
        }
      }
    }
    dw[j] = __double2float_rn(tot.value());
  }
}

// The chunk-pass kernels of bwd_chunk_pass.cuh (same launch bounds), each
// followed by the ticket and the last CTA's combine.
template <bool kRes, class WT, bool kHeads = false>
__global__ void __launch_bounds__(kMaxCtaTeam, kHeads ? 1 : 2)
    onepass_kernel(const BwdRows<WT, kHeads> a, const OnepassSink sink, float* dw, unsigned* counter) {
  bwd_chunk_pass<1, 1, kRes>(a, sink);
  ticket_and_combine(sink, a.num_chunks, dw, counter);
}
template <bool kRes, class WT>
__global__ void __launch_bounds__(kMaxTeam, 1)
    onepass_wide_kernel(const BwdRows<WT> a, const OnepassSink sink, float* dw, unsigned* counter) {
  bwd_chunk_pass<1, 1, kRes>(a, sink);
  ticket_and_combine(sink, a.num_chunks, dw, counter);
}
template <bool kRes, class WT>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kMaxCtaTeam, 1)
    onepass_cluster_kernel(const BwdRows<WT> a, const OnepassSink sink, float* dw, unsigned* counter) {
  bwd_chunk_pass<2, 2, kRes>(a, sink);
  ticket_and_combine(sink, a.num_chunks, dw, counter);
}

}  // namespace
}  // namespace dev

namespace detail {

void launch_bwd_det_onepass(const BwdArgs& a, bool vec, Stream s) {
  const int64_t rows = a.T * a.heads;
  auto* ws = static_cast<char*>(a.workspace);
  auto* counter = reinterpret_cast<unsigned*>(ws + onepass_ticket_offset(rows, a.H));
  NG_CUDA(cudaMemsetAsync(counter, 0, sizeof(unsigned), s));
  const dev::OnepassSink sink{reinterpret_cast<double*>(ws), static_cast<int>(a.H)};
  float* dw = a.dw;
  NG_CUDA(dev::dispatch_chunk_pass(a, vec, [&](auto kind, auto res_tag, const auto& r, const dev::ChunkLaunch& cfg) {
    constexpr dev::ChunkKernel k = decltype(kind)::value;
    constexpr bool kRes = decltype(res_tag)::value;
    using WT = std::remove_cv_t<std::remove_pointer_t<decltype(r.w)>>;
    if constexpr (k == dev::ChunkKernel::heads) {
      dev::onepass_kernel<false, WT, true><<<cfg.grid, cfg.block, cfg.smem, s>>>(r, sink, dw, counter);
    } else if constexpr (k == dev::ChunkKernel::narrow) {
      dev::onepass_kernel<kRes, WT><<<cfg.grid, cfg.block, cfg.smem, s>>>(r, sink, dw, counter);
    } else if constexpr (k == dev::ChunkKernel::wide) {
      dev::onepass_wide_kernel<kRes, WT><<<cfg.grid, cfg.block, cfg.smem, s>>>(r, sink, dw, counter);
    } else {
      dev::onepass_cluster_kernel<kRes, WT><<<cfg.grid, cfg.block, cfg.smem, s>>>(r, sink, dw, counter);
    }
  }));
}

}  // namespace detail
}  // namespace normgate::kernels
