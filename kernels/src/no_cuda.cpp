// kernels/src/no_cuda.cpp: the kernels' GPU entry points in a build without
// CUDA. Validation (api.cpp) still runs first; then these throw.
#include <stdexcept>
#include <string>

#include "launch.h"
#include "normgate/kernels/device.h"

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

}  // namespace normgate::kernels
