// normgate/bench/timing.h: pieces for benchmarks: a 16-byte copy kernel
// (the bandwidth ceiling to compare against), an L2 flush, and a CUDA-graph
// timer. Declared in every build; without CUDA they throw std::runtime_error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "normgate/kernels/rmsnorm.h"

namespace normgate::kernels {

/// Enqueue a device-to-device copy of `bytes` bytes with 16-byte loads and
/// stores (dst, src 16-byte aligned, bytes % 16 == 0, no overlap; else
/// std::invalid_argument). It reads and writes `bytes` each: bandwidth =
/// 2*bytes/time.
void copy_vec16(void* dst, const void* src, size_t bytes, Stream stream = nullptr);

/// Names of the streams that bound a memory-bound kernel from above
/// (bench/timing/src/ceiling.cu says what each is): copies by several
/// mechanisms ("vec16_grid4" = copy_vec16, "vec16_tile1" ... "vec16_tile16",
/// "memcpy" = cudaMemcpyAsync, "tma_bulk" = Hopper cp.async.bulk through
/// shared memory) and the one-direction streams "read_only" and
/// "write_only". The copy ceiling of a run is the fastest copy among them.
std::vector<std::string> ceiling_kinds();

/// True for a copy (it reads and writes `bytes`: bandwidth = 2*bytes/time),
/// false for read_only / write_only (bandwidth = bytes/time). Throws
/// std::invalid_argument for a name not in ceiling_kinds().
bool ceiling_kind_is_copy(const std::string& kind);

/// Enqueue stream `kind` over `bytes` bytes: a copy src -> dst, read_only
/// reads src (dst unused, may be null), write_only writes dst (src unused).
/// Same preconditions as copy_vec16 on the buffers it uses (16-byte aligned,
/// bytes % 16 == 0, copies without overlap), else std::invalid_argument;
/// tma_bulk needs sm_90 or newer. Without CUDA: std::runtime_error.
void run_ceiling_kind(const std::string& kind, void* dst, const void* src, size_t bytes, Stream stream = nullptr);

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

/// One execution of a CUDA graph as CUPTI's graph-level trace records it
/// (CUPTI_ACTIVITY_KIND_GRAPH_TRACE, CUpti_ActivityGraphTrace2): GPU
/// timestamps in ns of the graph's first node's start and last node's end,
/// so end_ns - start_ns is the graph's span without the launch latency in
/// front of it that CUDA events around the launch include. start_ns =
/// end_ns = 0 when CUPTI could not time that execution.
struct GraphSpan {
  uint32_t graph_id = 0;        ///< CUPTI's id of the launched graph
  uint32_t correlation_id = 0;  ///< the launch's correlation id (one per launch, increasing)
  uint64_t start_ns = 0, end_ns = 0;
};

/// Start recording the graph-level trace of every CUDA graph any runtime in
/// this process launches (torch's included) until graph_spans_stop().
/// START BEFORE CAPTURING THE GRAPHS TO BE TIMED: on the H200 machine (CUDA
/// 13.0, driver 580.159) a graph instantiated before the trace was enabled
/// crashed the process (SIGSEGV) at its first replay under the trace, while
/// a graph captured under it replayed and was recorded (docs/perf/peers.md,
/// D5). So a benchmark enables it once, before any capture, keeps it on, and
/// takes the records of each timed block with graph_spans_take().
/// CUPTI is loaded at the first call with dlopen ("libcupti.so.13", the
/// soname torch's own copy also has, then $CUDA_HOME/extras/CUPTI/lib64 and
/// /usr/local/cuda/extras/CUPTI/lib64, /usr/local/cuda/lib64), so nothing
/// links against it and a machine without CUPTI loses only this function.
/// CUPTI's buffer callbacks are process-wide and the last registration wins:
/// another CUPTI client (an active torch.profiler) loses its records while
/// this records, so do not record under one (normgate's Python refuses).
/// Records of graphs that finished before the start are discarded.
/// Throws std::runtime_error naming the cause when CUPTI cannot be loaded or
/// refuses the activity kind (no usable device, for one), or when recording
/// has already started; without CUDA, std::runtime_error ("built without
/// CUDA").
void graph_spans_start();

/// Flush CUPTI's buffers and return the executions recorded since
/// graph_spans_start() or the last take, in launch order, still recording.
/// Same errors as graph_spans_stop() (recording goes on).
std::vector<GraphSpan> graph_spans_take();

/// Flush CUPTI's buffers, stop recording, and return the executions
/// recorded since graph_spans_start(), in correlation-id (launch) order.
/// Synchronize the streams of the launches first: a graph still running is
/// not yet in CUPTI's buffers. Throws std::runtime_error if recording was not
/// started, if CUPTI dropped records (its buffers overflowed: the count is
/// named) or a buffer could not be read to its end, since a list with holes
/// cannot be matched to launches. Recording has ended either way.
std::vector<GraphSpan> graph_spans_stop();

}  // namespace normgate::kernels
