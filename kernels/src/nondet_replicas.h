// kernels/src/nondet_replicas.h (internal): the accumulator layout of
// bwd_nondet_atomic, shared by its kernel, its CPU model and the workspace
// rule (api.cpp). Listed only in that variant's source manifest, so changing
// it re-hashes bwd_nondet_atomic alone.
#pragma once

namespace normgate::kernels {

/// FP64 accumulators per column: chunk c adds into replica c mod
/// kAtomicReplicas (at H=4096, T=131072, 792 chunks would otherwise all queue
/// on each column's one address); the finalize adds the replicas in order
/// 0..kAtomicReplicas-1, starting from +0.
inline constexpr int kAtomicReplicas = 8;

}  // namespace normgate::kernels
