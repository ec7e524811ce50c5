// kernels/src/nondet_replicas.h (internal): the accumulator layout of
// bwd_nondet_atomic, shared by its kernel, its CPU model and the workspace
// rule (api.cpp). Listed only in that variant's source manifest, so changing
// it re-hashes bwd_nondet_atomic alone.
#pragma once

#include <cstdint>

#include "normgate/kernels/chunk_plan.h"
#include "normgate/kernels/plan.h"

namespace normgate::kernels {

/// FP64 accumulators per column: chunk c adds into replica c mod
/// kAtomicReplicas (at H=4096, T=131072, 792 chunks would otherwise all queue
/// on each column's one address); the finalize adds the replicas in order
/// 0..kAtomicReplicas-1, starting from +0.
inline constexpr int kAtomicReplicas = 8;

/// Shortest chunk, in rows (rows >= kAtomicMinRowsPerChunk * num_chunks), at
/// which bwd_nondet_atomic folds its chunk partials with FP64 atomics. With
/// shorter chunks it stores the partials and runs bwd_det_chunked's fixed
/// combine instead (its dw is then deterministic, bitwise the det variant's):
/// on the H200 the atomics measured 3.8% slower than the combine at [65537,
/// 2048] (35 rows per chunk), within 1% at [65537, 4096] (83) and [65537,
/// 6144] (124), and equal at [131072, 4096] (165) (docs/perf/backward.md, D8).
inline constexpr int64_t kAtomicMinRowsPerChunk = 128;

/// Whether bwd_nondet_atomic uses its atomics for `rows` normalized rows of
/// H columns (rows >= 1).
inline bool nondet_uses_atomics(int64_t rows, int64_t H) {
  return rows >= kAtomicMinRowsPerChunk * num_chunks(rows, H);
}

}  // namespace normgate::kernels
