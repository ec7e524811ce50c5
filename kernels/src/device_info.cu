// kernels/src/device_info.cu: device_info() (device.h) of a CUDA build.
#include <cuda_runtime.h>

#include <fstream>
#include <sstream>
#include <string>

#include "normgate/kernels/device.h"
#include "cuda_check.h"
#include "launch.h"

namespace normgate::kernels {

namespace {
// "580.159.04" from "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ...".
std::string proc_driver_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (!f || !std::getline(f, line)) return "";
  const auto k = line.find("Kernel Module");
  if (k == std::string::npos) return "";
  // "... Kernel Module  580.65.06  Sun ..." or "... Open Kernel Module for
  // x86_64  580.159.04  Release Build ...": the first token of digits and dots.
  std::istringstream rest(line.substr(k + 13));
  std::string v;
  while (rest >> v)
    if (!v.empty() && v.find_first_not_of("0123456789.") == std::string::npos && v.find('.') != std::string::npos &&
        v.front() != '.')
      return v;
  return "";
}
std::string api_version(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }
}  // namespace

bool gpu_available() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear: "no device" must not leak into later calls
    return false;
  }
  return n > 0;
}

namespace detail {

void launch_zero_f32(float* p, int64_t n, Stream s) {
  NG_CUDA(cudaMemsetAsync(p, 0, static_cast<size_t>(n) * sizeof(float), s));
}
}  // namespace detail

DeviceInfo device_info() { return device_info(0); }

DeviceInfo device_info(int device) {
  DeviceInfo d;
  if (device < 0 || !gpu_available()) return d;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || device >= n) {
    (void)cudaGetLastError();
    return d;
  }
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return d;
  }
  d.present = true;
  d.name = p.name;
  d.cc = std::to_string(p.major) + "." + std::to_string(p.minor);
  int drv = 0, rt = 0;
  d.driver = proc_driver_version();
  if (d.driver.empty() && cudaDriverGetVersion(&drv) == cudaSuccess) d.driver = "CUDA driver API " + api_version(drv);
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) d.cuda_runtime = api_version(rt);
  (void)cudaGetLastError();
  return d;
}

}  // namespace normgate::kernels
