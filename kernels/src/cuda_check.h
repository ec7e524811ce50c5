// kernels/src/cuda_check.h (internal): turn CUDA errors into exceptions.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace normgate::kernels::detail {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error: ") + what + " at " + file + ":" + std::to_string(line) +
                           ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

}  // namespace normgate::kernels::detail

/// Evaluate a CUDA runtime call; throw std::runtime_error naming it on failure.
#define NG_CUDA(call)                                                               \
  do {                                                                              \
    const cudaError_t ng_cuda_err_ = (call);                                        \
    if (ng_cuda_err_ != cudaSuccess)                                                \
      ::normgate::kernels::detail::throw_cuda(ng_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

/// Check the launch that was just enqueued (configuration errors surface here).
#define NG_CUDA_LAUNCHED(name)                                                       \
  do {                                                                               \
    const cudaError_t ng_cuda_err_ = cudaGetLastError();                             \
    if (ng_cuda_err_ != cudaSuccess)                                                 \
      ::normgate::kernels::detail::throw_cuda(ng_cuda_err_, "launch of " name, __FILE__, __LINE__); \
  } while (0)
