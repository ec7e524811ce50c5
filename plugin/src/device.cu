// plugin/src/device.cu: the device side of a plugin run (staging.h): upload
// the staged tensors (inputs, NaN-filled outputs), fill the workspace with
// 0xFF bytes, call fwd then bwd on a fresh stream, synchronize, download,
// free. Every CUDA call is checked; device memory is freed on every path.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "normgate/kernels/device.h"
#include "staging.h"

namespace normgate::plugin::detail {

namespace {

// Throw std::runtime_error "<who>: CUDA error in <what>: <name>: <text>".
void check(const PluginVariant& pv, cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(pv.who() + ": CUDA error in " + what + ": " + cudaGetErrorName(e) + ": " +
                             cudaGetErrorString(e));
}

// The device copies of one run, freed (and the stream destroyed) on every path.
struct DeviceRun {
  const PluginVariant& pv;
  cudaStream_t stream = nullptr;
  std::vector<void*> allocs;

  explicit DeviceRun(const PluginVariant& p) : pv(p) {
    check(pv, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~DeviceRun() {
    if (stream != nullptr) cudaStreamSynchronize(stream);  // nothing may still use the buffers
    for (void* p : allocs) cudaFree(p);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  DeviceRun(const DeviceRun&) = delete;
  DeviceRun& operator=(const DeviceRun&) = delete;

  void* alloc(size_t bytes, const char* what) {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    check(pv, cudaMalloc(&p, bytes), what);
    allocs.push_back(p);
    return p;
  }
  // A device copy of a host vector (nullptr when empty).
  template <class T>
  T* upload(const std::vector<T>& v, const char* what) {
    T* d = static_cast<T*>(alloc(v.size() * sizeof(T), what));
    if (d != nullptr) check(pv, cudaMemcpyAsync(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream), what);
    return d;
  }
  template <class T>
  void download(std::vector<T>& v, const T* d, const char* what) {
    if (d != nullptr) check(pv, cudaMemcpyAsync(v.data(), d, v.size() * sizeof(T), cudaMemcpyDeviceToHost, stream), what);
  }
};

}  // namespace

bool device_runs_possible(std::string* why) {
  if (kernels::gpu_available()) return true;
  *why = "this process has no usable CUDA device (cudaGetDeviceCount found none)";
  return false;
}

std::string device_name() { return "gpu " + kernels::device_info().name; }

void run_device(const PluginVariant& pv, Staging& s) {
  const uint64_t ws_bytes = workspace_bytes(pv, s);
  DeviceRun d(pv);
  Ptrs p;
  p.x = d.upload(s.x, "upload of x");
  p.dy = d.upload(s.dy, "upload of dy");
  p.u = d.upload(s.u, "upload of u");
  p.dh_new = d.upload(s.dh_new, "upload of dh_new");
  {
    void* w = d.alloc(s.w_bytes, "cudaMalloc of w");
    if (w != nullptr) check(pv, cudaMemcpyAsync(w, s.w, s.w_bytes, cudaMemcpyHostToDevice, d.stream), "upload of w");
    p.w = w;
  }
  p.y = d.upload(s.y, "upload of y (NaN)");
  p.dx = d.upload(s.dx, "upload of dx (NaN)");
  p.h_new = d.upload(s.h_new, "upload of h_new (NaN)");
  p.rstd = d.upload(s.rstd, "upload of rstd (NaN)");
  p.dw = d.upload(s.dw, "upload of dw (NaN)");
  p.workspace = d.alloc(ws_bytes, "cudaMalloc of the workspace");  // cudaMalloc: 256-byte aligned
  p.workspace_bytes = ws_bytes;
  if (ws_bytes > 0) check(pv, cudaMemsetAsync(p.workspace, 0xFF, ws_bytes, d.stream), "cudaMemsetAsync of the workspace");
  p.stream = d.stream;
  char err[NG_PLUGIN_ERR_BYTES] = {};
  const ng_plugin_fwd_args fa = fwd_args(s, p);
  check_rc(pv, "fwd", pv.v->fwd(&fa, err, sizeof err), err);
  check(pv, cudaGetLastError(), "the forward (cudaGetLastError after fwd returned)");
  if (s.bwd) {
    const ng_plugin_bwd_args ba = bwd_args(s, p);
    check_rc(pv, "bwd", pv.v->bwd(&ba, err, sizeof err), err);
    check(pv, cudaGetLastError(), "the backward (cudaGetLastError after bwd returned)");
  }
  check(pv, cudaStreamSynchronize(d.stream), "cudaStreamSynchronize after the plugin's calls");
  d.download(s.y, p.y, "download of y");
  d.download(s.rstd, p.rstd, "download of rstd");
  d.download(s.h_new, p.h_new, "download of h_new");
  d.download(s.dx, p.dx, "download of dx");
  d.download(s.dw, p.dw, "download of dw");
  check(pv, cudaStreamSynchronize(d.stream), "cudaStreamSynchronize after the downloads");
}

}  // namespace normgate::plugin::detail
