// kernels/src/device_buffer.h (internal): an owning cudaMalloc buffer, so
// device memory is freed when an exception unwinds.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "cuda_check.h"

namespace normgate::kernels::detail {

/// A byte range of device memory that a run uses: `bytes` is what it asked
/// for (the buffer under it may be larger); null when bytes == 0.
class Region {
 public:
  Region() = default;
  Region(void* p, size_t bytes) : p_(bytes > 0 ? p : nullptr), bytes_(bytes) {}
  void* get() const { return p_; }
  template <class T>
  T* as(size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(p_) + byte_offset);
  }
  size_t bytes() const { return bytes_; }

 protected:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

/// An owning cudaMalloc buffer (a Region that frees itself).
class DeviceBuffer : public Region {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) {
    if (bytes == 0) return;
    const cudaError_t e = cudaMalloc(&p_, bytes);
    if (e != cudaSuccess) {
      // An out-of-memory is not sticky, but it stays the thread's last error:
      // cleared, so the next launch check does not report it against
      // whatever runs next (found in review; commit 0e31608).
      (void)cudaGetLastError();
      p_ = nullptr;
      NG_CUDA(e);
    }
    bytes_ = bytes;
  }
  ~DeviceBuffer() {
    if (p_ != nullptr) cudaFree(p_);  // never throws; errors here are sticky and surface later
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept {
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

/// The device memory of one run_gpu call (runner.cu), on the calling
/// thread's current device. Inside a ReuseGpuBuffers scope (runner.h) it
/// holds a kept set of that device's buffers that no other run holds (a new
/// set when every one is in use): get(i-th call) returns the set's buffer of
/// slot i, grown (freed and reallocated) when too small, and the buffers stay
/// allocated when the run ends; outside a scope every get() is a fresh
/// cudaMalloc freed with this object. Contents are
/// whatever the slot held before: callers poison or write before reading.
/// Not thread-safe (one run, one thread); throws std::runtime_error when
/// cudaMalloc fails.
class RunMemory {
 public:
  RunMemory();
  ~RunMemory();
  RunMemory(const RunMemory&) = delete;
  RunMemory& operator=(const RunMemory&) = delete;
  Region get(size_t bytes);

 private:
  bool pooled_ = false;
  void* set_ = nullptr;  // the kept set (runner.cu) when pooled_
  size_t next_ = 0;
  std::vector<DeviceBuffer> own_;  // not pooled
};

}  // namespace normgate::kernels::detail
