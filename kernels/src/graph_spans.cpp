// kernels/src/graph_spans.cpp: CUPTI's graph-level trace of CUDA-graph
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
#include <vector>

#include "normgate/kernels/timing.h"

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
      h = dlopen(p.c_str(), RTLD_NOW | RTLD_GLOBAL);
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
bool g_registered = false;  // the buffer callbacks: registered once per process
size_t g_dropped = 0;

constexpr size_t kBufferBytes = 8u << 20;  // ~170k graph records a buffer
constexpr size_t kAlign = 8;               // CUPTI's buffer alignment

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  const Cupti& c = cupti();
  std::vector<GraphSpan> got;
  CUpti_Activity* rec = nullptr;
  while (c.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_GRAPH_TRACE) continue;
    const auto* g = reinterpret_cast<const CUpti_ActivityGraphTrace2*>(rec);
    got.push_back(GraphSpan{g->graphId, g->correlationId, g->start, g->end});
  }
  size_t dropped = 0;
  c.dropped(ctx, stream, &dropped);
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  g_spans.insert(g_spans.end(), got.begin(), got.end());
  g_dropped += dropped;
}

}  // namespace

void graph_spans_start() {
  const Cupti& c = cupti();
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_recording) throw std::runtime_error("graph_spans_start: already recording (call graph_spans_stop first)");
    g_spans.clear();
    g_dropped = 0;
    g_recording = true;
  }
  try {
    if (!g_registered) {
      check(c, c.register_callbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
      g_registered = true;
    }
    check(c, c.enable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE), "cuptiActivityEnable(GRAPH_TRACE)");
  } catch (...) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_recording = false;
    throw;
  }
}

std::vector<GraphSpan> graph_spans_stop() {
  const Cupti& c = cupti();
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_recording) throw std::runtime_error("graph_spans_stop: not recording (call graph_spans_start first)");
  }
  // Flush with the kind still enabled (records of finished graphs are all
  // delivered), then disable.
  const CUptiResult fr = c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  const CUptiResult dr = c.disable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
  std::vector<GraphSpan> out;
  size_t dropped = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_recording = false;
    out.swap(g_spans);
    dropped = g_dropped;
  }
  check(c, fr, "cuptiActivityFlushAll");
  check(c, dr, "cuptiActivityDisable(GRAPH_TRACE)");
  if (dropped > 0)
    throw std::runtime_error("graph_spans_stop: CUPTI dropped " + std::to_string(dropped) +
                             " records (buffers full); the spans cannot be matched to launches");
  std::sort(out.begin(), out.end(),
            [](const GraphSpan& a, const GraphSpan& b) { return a.correlation_id < b.correlation_id; });
  return out;
}

}  // namespace normgate::kernels
