// normgate/kernels/timing.h: pieces for benchmarks: a 16-byte copy kernel
// (the bandwidth ceiling to compare against), an L2 flush, and a CUDA-graph
// timer. Declared in every build; without CUDA they throw std::runtime_error.
#pragma once

#include <cstddef>
#include <functional>

#include "normgate/kernels/rmsnorm.h"

namespace normgate::kernels {

/// Enqueue a device-to-device copy of `bytes` bytes with 16-byte loads and
/// stores (dst, src 16-byte aligned, bytes % 16 == 0, no overlap; else
/// std::invalid_argument). It reads and writes `bytes` each: bandwidth =
/// 2*bytes/time.
void copy_vec16(void* dst, const void* src, size_t bytes, Stream stream = nullptr);

/// Timing statistics in milliseconds over `reps` replays.
struct TimingStats {
  double median_ms = 0, min_ms = 0, max_ms = 0, mean_ms = 0;
  int reps = 0;
};

/// Time `enqueue`: capture one call of enqueue(stream) into a CUDA graph
/// (it must only enqueue capturable work on the stream it is given), replay
/// it `warmup` times, then `reps` times (reps >= 1; 50 or more recommended),
/// each replay preceded by an L2 flush and timed by CUDA events around the
/// graph launch alone. The flush READS a buffer of max(2 x L2 size, 64 MiB)
/// through the L2, outside the timed interval: reading (not writing) leaves
/// only clean lines behind, so no write-back of the flush lands inside the
/// timed interval, and the previous replay's dirty lines are written back
/// during the flush. Synchronizes the device.
TimingStats time_graph(const std::function<void(Stream)>& enqueue, int reps = 50, int warmup = 3);

}  // namespace normgate::kernels
