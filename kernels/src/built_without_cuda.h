// kernels/src/built_without_cuda.h (internal): the one error every GPU entry
// point of a build without CUDA throws (kernels/src, harness/src and
// bench/timing/src no_cuda.cpp).
#pragma once

#include <stdexcept>
#include <string>

namespace normgate::kernels::detail {

/// Throws std::runtime_error "<what>: normgate_kernels was built without CUDA
/// (no nvcc at configure time)".
[[noreturn]] inline void no_cuda(const char* what) {
  throw std::runtime_error(std::string(what) + ": normgate_kernels was built without CUDA (no nvcc at configure time)");
}

}  // namespace normgate::kernels::detail
