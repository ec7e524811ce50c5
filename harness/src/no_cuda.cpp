// harness/src/no_cuda.cpp: the GPU runner (runner.h) in a build without CUDA: each throws.
#include <string>

#include "built_without_cuda.h"
#include "normgate/harness/devices.h"
#include "normgate/harness/runner.h"

namespace normgate::kernels {

using detail::no_cuda;

int device_count() { return 0; }
void use_device(int device) { no_cuda(("use_device(" + std::to_string(device) + ")").c_str()); }

void generate_device_inputs(const seeds::CaseId&, const DeviceInputBuffers&, Stream) {
  no_cuda("generate_device_inputs");
}
seeds::HostInputs generate_inputs_on_gpu(const seeds::CaseId&) { no_cuda("generate_inputs_on_gpu"); }
ReuseGpuBuffers::ReuseGpuBuffers() = default;  // nothing to keep without CUDA
ReuseGpuBuffers::~ReuseGpuBuffers() = default;
Outputs run_gpu(const Variant&, const seeds::CaseId&, float, const GpuRunOptions&, GpuRunInfo*) {
  no_cuda("run_gpu");
}
std::vector<Outputs> run_gpu(const std::vector<const Variant*>&, const seeds::CaseId&, float, const GpuRunOptions&,
                             GpuRunInfo*) {
  no_cuda("run_gpu");
}
std::vector<Outputs> run_gpu(const std::vector<const Variant*>&, const seeds::HostInputs&, float, const GpuRunOptions&) {
  no_cuda("run_gpu");
}
SharedGpuRun run_gpu_shared(const std::vector<const Variant*>&, const seeds::CaseId&, const seeds::HostInputs*, float,
                            const GpuRunOptions&) {
  no_cuda("run_gpu_shared");
}
OutputDigests run_gpu_digests(const Variant&, const seeds::CaseId&, float, const GpuRunOptions&) {
  no_cuda("run_gpu_digests");
}

}  // namespace normgate::kernels
