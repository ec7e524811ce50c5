// normgate/harness/devices.h: the CUDA devices a check pipeline spreads its
// cases over (validators::run_checks, `--devices` of gate and check).
//
// Declared in every build; without CUDA device_count() is 0.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace normgate::kernels {

/// Number of CUDA devices this process sees (cudaGetDeviceCount, after
/// CUDA_VISIBLE_DEVICES); 0 without a driver or device and in a build
/// without CUDA. Never throws.
int device_count();

/// Make `device` the calling thread's current CUDA device (cudaSetDevice),
/// before any other CUDA call of a worker thread. Throws std::runtime_error
/// naming the device and the CUDA error (a build without CUDA: always).
void use_device(int device);

/// Parse a device list for `count` visible devices: "all" (every visible
/// device: 0, 1, ..., count-1; empty when count is 0) or comma-separated
/// device indices, e.g. "0,1,2,3", or "0,0" (two workers on device 0: a list
/// may repeat a device). Returns one entry per worker, in the given order.
/// Throws std::invalid_argument naming the bad value and `text` for an empty
/// list or entry, an entry that is not a decimal integer, a negative one
/// (every entry's syntax is checked first), or an index >= count (the
/// message gives count).
std::vector<int> parse_devices(std::string_view text, int count);

/// "0,0,1": a device list as parse_devices reads it back.
std::string to_string(const std::vector<int>& devices);

}  // namespace normgate::kernels
