// normgate/kernels/pipeline.h: depth of the kernels' input pipelines.
//
// The forward stages each thread's columns of the rows it will work on into
// shared memory (device_blocks.cuh: input rings), up to `fwd` rows ahead of
// the row being computed, and may ask the L2 for a row `fwd_l2` rows beyond
// that. (The backward keeps its own register double buffer and L2 prefetch:
// a shared-memory ring measured slower there, docs/perf.md.) These change
// only when loads are issued, never what is computed: outputs are bitwise the
// same at every setting (tests/kernels check it on the GPU). So they are
// speed knobs outside the variants' numerics; routes are gated at the
// defaults, and bench/kernels_bench --depth sweeps them.
#pragma once

namespace normgate::kernels {

/// Rows in flight per thread team in the forward.
struct PipelineDepth {
  int fwd = 3;     ///< rows of x staged in shared memory (1 = load, then compute), 1..kMaxPipelineDepth
  int fwd_l2 = 0;  ///< L2 prefetch distance beyond the ring, in rows (0 = none), 0..kMaxPipelineDepth
};

inline constexpr int kMaxPipelineDepth = 8;

/// The depth the launchers use now (defaults above until set_pipeline_depth).
/// Thread-safe (atomics).
PipelineDepth pipeline_depth();

/// Set the depth for later launches (a process-wide setting; for benchmarks).
/// A launch lowers it where a CTA's shared memory would exceed the device's
/// opt-in limit (never below 1).
/// Throws std::invalid_argument naming the value unless 1 <= fwd <= kMaxPipelineDepth
/// and 0 <= fwd_l2 <= kMaxPipelineDepth.
void set_pipeline_depth(PipelineDepth d);

}  // namespace normgate::kernels
