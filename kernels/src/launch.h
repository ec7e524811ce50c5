// kernels/src/launch.h (internal): the launchers behind rmsnorm_fwd/_bwd.
// Called with validated arguments only (api.cpp); defined in the variants'
// .cu files, or by no_cuda.cpp in a build without CUDA.
#pragma once

#include <cstdint>

#include "normgate/kernels/rmsnorm.h"

namespace normgate::kernels::detail {

void launch_fwd_rowwise(const FwdArgs& a, bool vec, Stream s);
void launch_fwd_multirow(const FwdArgs& a, bool vec, Stream s);
void launch_fwd_narrow(const FwdArgs& a, bool vec, Stream s);
void launch_fwd_wide(const FwdArgs& a, bool vec, Stream s);
void launch_fwd_staged(const FwdArgs& a, bool vec, Stream s);
void launch_bwd_det_chunked(const BwdArgs& a, bool vec, Stream s);
void launch_bwd_det_wide(const BwdArgs& a, bool vec, Stream s);
void launch_bwd_det_heads(const BwdArgs& a, bool vec, Stream s);
void launch_bwd_det_wreg(const BwdArgs& a, bool vec, Stream s);
void launch_bwd_det_lean(const BwdArgs& a, bool vec, Stream s);
void launch_bwd_nondet_atomic(const BwdArgs& a, bool vec, Stream s);
void launch_ctl_fp32_seq(const BwdArgs& a, bool vec, Stream s);
void launch_ctl_bf16_partials(const BwdArgs& a, bool vec, Stream s);
void launch_ctl_warp64_dw(const BwdArgs& a, bool vec, Stream s);
void launch_bwd_det_onepass(const BwdArgs& a, bool vec, Stream s);
void launch_bwd_fp32_blocked(const BwdArgs& a, bool vec, Stream s);
/// dw[0..H) = 0 (the T == 0 backward).
void launch_zero_f32(float* p, int64_t n, Stream s);

}  // namespace normgate::kernels::detail
