// plugin/src/no_cuda.cpp: the device side of a plugin run in a build without
// CUDA: device-memory variants are refused when the plugin loads.
#include <stdexcept>
#include <string>

#include "staging.h"

namespace normgate::plugin::detail {

bool device_runs_possible(std::string* why) {
  *why = "this normgate was built without CUDA (configure with nvcc and -DNORMGATE_CUDA=ON to run device plugins)";
  return false;
}

std::string device_name() { return "gpu"; }

void run_device(const PluginVariant& pv, Staging&) {
  throw std::runtime_error(pv.who() + ": a device-memory variant cannot run: this normgate was built without CUDA");
}

}  // namespace normgate::plugin::detail
