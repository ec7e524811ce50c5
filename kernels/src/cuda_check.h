// kernels/src/cuda_check.h (internal): turn CUDA errors into exceptions.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace normgate::kernels::detail {

/// The call as the message names it: its text, or for a long one (a call
/// taking a lambda, hundreds of characters of source) the callee and "(...)".
inline std::string cuda_call_text(const char* what) {
  std::string s(what);
  constexpr size_t kLong = 72;
  if (s.size() <= kLong) return s;
  const size_t paren = s.find('(');
  return (paren != std::string::npos && paren <= kLong ? s.substr(0, paren) : s.substr(0, kLong)) + "(...)";
}

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error: ") + cuda_call_text(what) + " at " + file + ":" +
                           std::to_string(line) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
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
