// bench/bench_util.h: what the CUDA host benchmarks share (ceiling_bench,
// download_bench, gen_bench): a CUDA error as an exception, and the median.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace normgate::bench_util {

/// Throws std::runtime_error "WHAT: <CUDA's error string>" unless e is cudaSuccess.
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// The median of v (the mean of the two middle values for an even count); 0 when empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace normgate::bench_util
