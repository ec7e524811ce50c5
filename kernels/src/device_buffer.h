// kernels/src/device_buffer.h (internal): an owning cudaMalloc buffer, so
// device memory is freed when an exception unwinds.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "cuda_check.h"

namespace normgate::kernels::detail {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) NG_CUDA(cudaMalloc(&p_, bytes));
  }
  ~DeviceBuffer() {
    if (p_ != nullptr) cudaFree(p_);  // never throws; errors here are sticky and surface later
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return p_; }
  template <class T>
  T* as(size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(p_) + byte_offset);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace normgate::kernels::detail
