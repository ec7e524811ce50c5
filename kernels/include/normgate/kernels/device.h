// normgate/kernels/device.h: which GPU a run used, for reports and approvals.
#pragma once

#include <string>

namespace normgate::kernels {

/// Provenance of the CUDA device of this process (device 0).
struct DeviceInfo {
  bool present = false;      ///< a usable CUDA device exists (gpu_available())
  std::string name;          ///< e.g. "NVIDIA H200"; "" when absent
  std::string cc;            ///< compute capability, e.g. "9.0"; "" when absent
  std::string driver;        ///< NVIDIA driver version from /proc/driver/nvidia/version
                             ///< (e.g. "580.159.04"), else "CUDA driver API X.Y"; "" when absent
  std::string cuda_runtime;  ///< CUDA runtime version, e.g. "13.0"; "" when absent
};

/// True when a CUDA device can be used (cudaGetDeviceCount succeeds with at
/// least one device). Never throws; false without a driver or device and in a
/// build without CUDA.
bool gpu_available();

/// Query device 0. Never throws: a build without CUDA or a machine without a
/// device returns present == false with empty strings.
DeviceInfo device_info();

/// Query CUDA device `device` (0-based, as cudaSetDevice counts them). Never
/// throws: a negative or absent device, a build without CUDA or a machine
/// without a device returns present == false with empty strings.
DeviceInfo device_info(int device);

}  // namespace normgate::kernels
