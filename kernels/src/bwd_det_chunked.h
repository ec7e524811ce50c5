// kernels/src/bwd_det_chunked.h (internal): the two stages of
// bwd_det_chunked, reused by the negative controls (bwd_controls.cu).
#pragma once

#include <cuda_runtime.h>

#include "normgate/kernels/chunk_plan.h"
#include "normgate/kernels/rmsnorm.h"

namespace normgate::kernels::detail {

/// Stage 1: the chunk pass; writes dx and the FP64 chunk partials, one double
/// per (chunk, column): [num_chunks, H] at a.workspace. Validated args, T > 0.
void enqueue_det_chunk_pass(const BwdArgs& a, bool vec, cudaStream_t s);

/// Stage 2: dw[j] from the partials at a.workspace, in the fixed order of
/// plan.h (32 chunk lanes, then lanes in order; accum.h Comp64).
void enqueue_combine_partials(const BwdArgs& a, cudaStream_t s);

}  // namespace normgate::kernels::detail
