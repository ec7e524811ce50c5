// tests/util/gpu_test_util.h: what the GPU tests share (tests/kernels,
// tests/harness/device_inputs_test.cpp, tests/bench/timing_test.cpp): the
// skip without a CUDA device, the kernels tests' tolerances and eps, the
// name generator of the per-variant suites, and cudaMalloc'd bytes (CUDA
// builds only).
#pragma once

#include <gtest/gtest.h>

#if defined(NORMGATE_KERNELS_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

#include <cstddef>
#include <stdexcept>
#include <string>

#include "util/kernel_test_util.h"
#include "normgate/kernels/device.h"

#define NG_REQUIRE_GPU()                                                               \
  do {                                                                                 \
    if (!gpu_available()) GTEST_SKIP() << "no CUDA device: GPU test runs on the H200 (tools/h200.sh)"; \
  } while (0)

namespace normgate::kernels::test {

inline constexpr double kDxTol = 1e-2;
inline constexpr double kDwAtol = 1e-4, kDwRtol = 1e-4;
inline constexpr double kYTol = 1e-2;
inline constexpr float kEps = 1e-6f;

inline std::string param_name(const ::testing::TestParamInfo<VariantCase>& i) { return case_name(*i.param.v, i.param.c); }

#if defined(NORMGATE_KERNELS_HAVE_CUDA)

/// cudaMalloc'd bytes, freed on scope exit.
struct DevMem {
  void* p = nullptr;
  explicit DevMem(size_t n) {
    if (cudaMalloc(&p, n) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
  }
  ~DevMem() { cudaFree(p); }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

#endif  // NORMGATE_KERNELS_HAVE_CUDA

}  // namespace normgate::kernels::test
