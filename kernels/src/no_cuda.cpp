// kernels/src/no_cuda.cpp: the GPU entry points of a build without CUDA.
// Validation (api.cpp) still runs first; then these throw.
#include <stdexcept>
#include <string>

#include "launch.h"
#include "normgate/kernels/runner.h"
#include "normgate/kernels/timing.h"

namespace normgate::kernels {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw std::runtime_error(std::string(what) + ": normgate_kernels was built without CUDA (no nvcc at configure time)");
}
}  // namespace

namespace detail {
void launch_fwd_rowwise(const FwdArgs&, bool, Stream) { no_cuda("fwd_rowwise"); }
void launch_bwd_det_chunked(const BwdArgs&, bool, Stream) { no_cuda("bwd_det_chunked"); }
void launch_bwd_nondet_atomic(const BwdArgs&, bool, Stream) { no_cuda("bwd_nondet_atomic"); }
void launch_ctl_fp32_seq(const BwdArgs&, bool, Stream) { no_cuda("ctl_fp32_seq"); }
void launch_ctl_bf16_partials(const BwdArgs&, bool, Stream) { no_cuda("ctl_bf16_partials"); }
void launch_zero_f32(float*, int64_t, Stream) { no_cuda("rmsnorm_bwd"); }
}  // namespace detail

bool gpu_available() { return false; }
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
void copy_vec16(void*, const void*, size_t, Stream) { no_cuda("copy_vec16"); }
TimingStats time_graph(const std::function<void(Stream)>&, int, int) { no_cuda("time_graph"); }
void graph_spans_start() { no_cuda("graph_spans_start"); }
std::vector<GraphSpan> graph_spans_take() { no_cuda("graph_spans_take"); }
std::vector<GraphSpan> graph_spans_stop() { no_cuda("graph_spans_stop"); }

}  // namespace normgate::kernels
