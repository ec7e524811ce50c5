// kernels/src/no_cuda.cpp: the kernels' GPU entry points in a build without
// CUDA. Validation (api.cpp) still runs first; then these throw.
#include "built_without_cuda.h"
#include "launch.h"
#include "normgate/kernels/device.h"

namespace normgate::kernels {

using detail::no_cuda;

namespace detail {
void launch_fwd_rowwise(const FwdArgs&, bool, Stream) { no_cuda("fwd_rowwise"); }
void launch_fwd_multirow(const FwdArgs&, bool, Stream) { no_cuda("fwd_multirow"); }
void launch_fwd_narrow(const FwdArgs&, bool, Stream) { no_cuda("fwd_narrow"); }
void launch_fwd_wide(const FwdArgs&, bool, Stream) { no_cuda("fwd_wide"); }
void launch_fwd_staged(const FwdArgs&, bool, Stream) { no_cuda("fwd_staged"); }
void launch_bwd_det_chunked(const BwdArgs&, bool, Stream) { no_cuda("bwd_det_chunked"); }
void launch_bwd_det_wide(const BwdArgs&, bool, Stream) { no_cuda("bwd_det_wide"); }
void launch_bwd_det_heads(const BwdArgs&, bool, Stream) { no_cuda("bwd_det_heads"); }
void launch_bwd_det_wreg(const BwdArgs&, bool, Stream) { no_cuda("bwd_det_wreg"); }
void launch_bwd_det_lean(const BwdArgs&, bool, Stream) { no_cuda("bwd_det_lean"); }
void launch_bwd_nondet_atomic(const BwdArgs&, bool, Stream) { no_cuda("bwd_nondet_atomic"); }
void launch_ctl_fp32_seq(const BwdArgs&, bool, Stream) { no_cuda("ctl_fp32_seq"); }
void launch_ctl_bf16_partials(const BwdArgs&, bool, Stream) { no_cuda("ctl_bf16_partials"); }
void launch_ctl_warp64_dw(const BwdArgs&, bool, Stream) { no_cuda("ctl_warp64_dw"); }
void launch_bwd_det_onepass(const BwdArgs&, bool, Stream) { no_cuda("bwd_det_onepass"); }
void launch_bwd_fp32_blocked(const BwdArgs&, bool, Stream) { no_cuda("bwd_fp32_blocked"); }
void launch_zero_f32(float*, int64_t, Stream) { no_cuda("rmsnorm_bwd"); }
}  // namespace detail

bool gpu_available() { return false; }

}  // namespace normgate::kernels
