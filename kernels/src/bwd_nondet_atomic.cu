// kernels/src/bwd_nondet_atomic.cu: variant bwd_nondet_atomic.
//
// The same chunk pass as bwd_det_chunked (bwd_chunk_pass.cuh), but each
// column's chunk partial is folded into an FP64 accumulator with
//   atomicAdd(&acc[c mod R][j], partial)
// (R = nondet_replicas.h kAtomicReplicas replicas, so that the chunks of one column do
// not all queue on one address) instead of being stored. The call zeroes acc
// (workspace, R x H doubles) first and finishes with dw[j] = FP32_rn(sum of
// acc[r][j] for r = 0..R-1, in order, FP64). The order of the atomics varies
// from run to run, so dw may differ in the last bits (FP64 reassociation of
// <= num_chunks terms, then one rounding to FP32); dx is deterministic. No
// [num_chunks, H] partials and no combine pass: at large T it does strictly
// less memory traffic than bwd_det_chunked. For short chunks
// (nondet_replicas.h nondet_uses_atomics false) the atomics cost more than
// they save, so the call runs bwd_det_chunked instead (same dx; dw then
// deterministic and equal to the det variant's).
#include "bwd_chunk_pass.cuh"
#include "bwd_det_chunked.h"
#include "nondet_replicas.h"
#include "cuda_check.h"
#include "launch.h"

namespace normgate::kernels {
namespace dev {
namespace {

struct AtomicSink {
  double* acc;
  int64_t H;
  __device__ __forceinline__ void operator()(int64_t chunk, int col0, const Acc64 (&a)[8]) const {
    double* rep = acc + (chunk % kAtomicReplicas) * H;
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (col0 + e < H)
        atomicAdd(rep + col0 + e, a[e].s);
  }
};

__global__ void finalize_dw_kernel(const double* __restrict__ acc, int64_t H, float* __restrict__ dw) {
  for (int64_t j = global_thread(); j < H; j += global_threads()) {
    double tot = 0.0;
#pragma unroll
    for (int r = 0; r < kAtomicReplicas; ++r) tot = dadd_rn(tot, acc[r * H + j]);
    dw[j] = __double2float_rn(tot);
  }
}

}  // namespace
}  // namespace dev

namespace detail {

void launch_bwd_nondet_atomic(const BwdArgs& a, bool vec, Stream s) {
  if (!nondet_uses_atomics(a.T * a.heads, a.H)) {  // short chunks: the det combine (nondet_replicas.h)
    launch_bwd_det_chunked(a, vec, s);
    return;
  }
  auto* acc = static_cast<double*>(a.workspace);
  NG_CUDA(cudaMemsetAsync(acc, 0, static_cast<size_t>(kAtomicReplicas) * static_cast<size_t>(a.H) * sizeof(double), s));
  NG_CUDA(dev::enqueue_chunk_pass(a, vec, dev::AtomicSink{acc, static_cast<int>(a.H)}, s));
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((a.H + threads - 1) / threads);
  dev::finalize_dw_kernel<<<blocks, threads, 0, s>>>(acc, a.H, a.dw);
  NG_CUDA_LAUNCHED("finalize_dw_kernel");
}

}  // namespace detail
}  // namespace normgate::kernels
