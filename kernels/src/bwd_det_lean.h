// kernels/src/bwd_det_lean.h (internal): where bwd_det_lean runs its own
// chunk kernel (bwd_det_lean.cu). Host code only, so that the CPU tests can
// check the choice without a GPU.
#pragma once

#include <cstdint>

#include "normgate/kernels/plan.h"
#include "normgate/kernels/rmsnorm.h"

namespace normgate::kernels::detail {

/// Whether a validated backward call takes bwd_det_lean's own kernel: the
/// 16-byte vector path (`vec`, api.cpp bwd_vector_path), plan.h's one-slot
/// backward team covering H exactly (team * 8 == H, so every thread owns one
/// full group: H % 256 == 0, H <= 8192), and plain rows, form res, or
/// per-head views that are dense (stride_h == H and stride == heads * H for
/// x, dy and dx: normalized row r then starts at r * H, as a plain row
/// would). Every other call runs bwd_det_chunked's kernels, whose bits the
/// lean kernel reproduces.
inline bool lean_kernel_applies(const BwdArgs& a, bool vec) {
  if (!vec || a.H < 1 || a.H > kMaxH) return false;
  const RowGeometry g = bwd_row_geometry(a.H);
  if (g.slots != 1 || static_cast<int64_t>(g.team) * kGroup != a.H) return false;
  if (a.heads == 1) return true;
  auto dense = [&](int64_t stride, int64_t stride_h) { return stride_h == a.H && stride == a.heads * a.H; };
  return a.dh_new == nullptr && dense(a.x_stride, a.x_stride_h) && dense(a.dy_stride, a.dy_stride_h) &&
         dense(a.dx_stride, a.dx_stride_h);
}

}  // namespace normgate::kernels::detail
