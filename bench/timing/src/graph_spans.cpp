// bench/timing/src/graph_spans.cpp: CUPTI's graph-level trace of CUDA-graph
// launches (timing.h graph_spans_start / graph_spans_stop), for benchmarks
// that time each implementation's graph replay by GPU timestamps instead of
// CUDA events around the launch (the preferred span; events are the
// fallback).
//
// CUPTI is opened with dlopen and its few entry points looked up by name:
// only its headers are needed to build, and a process without libcupti loses
// this file's functions, nothing else (the C ABI's library still loads).
// CUPTI's activity API is process-wide; one recording at a time.
#include <cupti.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "normgate/bench/timing.h"

namespace normgate::kernels {

namespace {

struct Cupti {
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  std::string path;
};

// The library, loaded once; throws with every path tried.
const Cupti& cupti() {
  static std::once_flag once;
  static Cupti c;
  static std::string error;
  std::call_once(once, [] {
    std::vector<std::string> paths = {"libcupti.so.13", "libcupti.so"};
    if (const char* home = std::getenv("CUDA_HOME"))
      paths.push_back(std::string(home) + "/extras/CUPTI/lib64/libcupti.so");
    paths.push_back("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so");
    paths.push_back("/usr/local/cuda/lib64/libcupti.so");
    void* h = nullptr;
    std::string tried;
    for (const auto& p : paths) {
      h = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h != nullptr) {
        c.path = p;
        break;
      }
      const char* e = dlerror();
      tried += "\n  " + p + ": " + (e ? e : "not found");
    }
    if (h == nullptr) {
      error = "CUPTI could not be loaded; tried:" + tried;
      return;
    }
    auto sym = [&](const char* name) {
      void* f = dlsym(h, name);
      if (f == nullptr && error.empty()) error = "CUPTI (" + c.path + ") has no symbol " + name;
      return f;
    };
    c.enable = reinterpret_cast<decltype(c.enable)>(sym("cuptiActivityEnable"));
    c.disable = reinterpret_cast<decltype(c.disable)>(sym("cuptiActivityDisable"));
    c.register_callbacks = reinterpret_cast<decltype(c.register_callbacks)>(sym("cuptiActivityRegisterCallbacks"));
    c.flush_all = reinterpret_cast<decltype(c.flush_all)>(sym("cuptiActivityFlushAll"));
    c.next_record = reinterpret_cast<decltype(c.next_record)>(sym("cuptiActivityGetNextRecord"));
    c.dropped = reinterpret_cast<decltype(c.dropped)>(sym("cuptiActivityGetNumDroppedRecords"));
    c.result_string = reinterpret_cast<decltype(c.result_string)>(sym("cuptiGetResultString"));
  });
  if (!error.empty()) throw std::runtime_error(error);
  return c;
}

void check(const Cupti& c, CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* s = nullptr;
  if (c.result_string != nullptr) c.result_string(r, &s);
  throw std::runtime_error(std::string(what) + " failed: " + (s ? s : "CUPTI error") + " (" +
                           std::to_string(static_cast<int>(r)) + ")");
}

// Records land here from CUPTI's buffer-completed callback (CUPTI's own
// thread, or the caller's during cuptiActivityFlushAll).
std::mutex g_mu;
std::vector<GraphSpan> g_spans;
bool g_recording = false;
size_t g_dropped = 0;
size_t g_bad_buffers = 0;                // buffers whose records could not all be read
std::unordered_set<uint8_t*> g_buffers;  // the buffers we handed CUPTI (only those are freed here)

constexpr size_t kBufferBytes = 8u << 20;  // ~170k graph records a buffer
constexpr size_t kAlign = 8;               // CUPTI's buffer alignment

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
  if (*buffer != nullptr) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_buffers.insert(*buffer);
  }
}

// Reads a completed buffer's graph records into g_spans while recording
// (records that arrive otherwise are stale: dropped). A buffer this file did
// not allocate (another CUPTI client's, whose callbacks ours replaced) is
// neither read nor freed.
void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_buffers.erase(buffer) == 0) return;
  }
  const Cupti& c = cupti();
  std::vector<GraphSpan> got;
  CUpti_Activity* rec = nullptr;
  CUptiResult r;
  while ((r = c.next_record(buffer, valid, &rec)) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_GRAPH_TRACE) continue;
    const auto* g = reinterpret_cast<const CUpti_ActivityGraphTrace2*>(rec);
    got.push_back(GraphSpan{g->graphId, g->correlationId, g->start, g->end});
  }
  size_t dropped = 0;
  c.dropped(ctx, stream, &dropped);
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_recording) return;
  g_spans.insert(g_spans.end(), got.begin(), got.end());
  g_dropped += dropped;
  if (r != CUPTI_ERROR_MAX_LIMIT_REACHED) ++g_bad_buffers;  // stopped before the buffer's end
}

}  // namespace

void graph_spans_start() {
  const Cupti& c = cupti();
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_recording) throw std::runtime_error("graph_spans_start: already recording (call graph_spans_stop first)");
  }
  // Records still in CUPTI's buffers from before (a graph that ended after
  // the last stop) are delivered now, while not recording: dropped.
  c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_spans.clear();
    g_dropped = 0;
    g_bad_buffers = 0;
    g_recording = true;
  }
  try {
    // Every start: the last registration wins in CUPTI, and another client
    // (e.g. torch.profiler) may have registered since our last recording.
    check(c, c.register_callbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    check(c, c.enable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE), "cuptiActivityEnable(GRAPH_TRACE)");
  } catch (...) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_recording = false;
    throw;
  }
}

namespace {

// The records delivered so far (after a forced flush), in launch order;
// throws if CUPTI dropped records or a buffer could not be read to its end.
std::vector<GraphSpan> take_records(const Cupti& c, bool stop) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_recording)
      throw std::runtime_error(std::string(stop ? "graph_spans_stop" : "graph_spans_take") +
                               ": not recording (call graph_spans_start first)");
  }
  // Stop: disable first (no new record after this point, as Kineto stops),
  // then deliver every buffer while still recording.
  const CUptiResult dr = stop ? c.disable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE) : CUPTI_SUCCESS;
  const CUptiResult fr = c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::vector<GraphSpan> out;
  size_t dropped = 0, bad = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (stop) g_recording = false;
    out.swap(g_spans);
    dropped = g_dropped;
    bad = g_bad_buffers;
    g_dropped = g_bad_buffers = 0;
  }
  check(c, dr, "cuptiActivityDisable(GRAPH_TRACE)");
  check(c, fr, "cuptiActivityFlushAll");
  if (dropped > 0)
    throw std::runtime_error("graph spans: CUPTI dropped " + std::to_string(dropped) +
                             " records (buffers full); the spans cannot be matched to launches");
  if (bad > 0)
    throw std::runtime_error("graph spans: " + std::to_string(bad) +
                             " CUPTI buffers could not be read to their end (an incomplete record)");
  std::sort(out.begin(), out.end(),
            [](const GraphSpan& a, const GraphSpan& b) { return a.correlation_id < b.correlation_id; });
  return out;
}

}  // namespace

std::vector<GraphSpan> graph_spans_take() { return take_records(cupti(), false); }

std::vector<GraphSpan> graph_spans_stop() { return take_records(cupti(), true); }

}  // namespace normgate::kernels
