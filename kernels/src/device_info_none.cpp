// kernels/src/device_info_none.cpp: device_info() (device.h) of a build
// without CUDA: never a device.
#include "normgate/kernels/device.h"

namespace normgate::kernels {

DeviceInfo device_info() { return {}; }
DeviceInfo device_info(int) { return {}; }

}  // namespace normgate::kernels
