// kernels/src/api.cpp: argument validation and dispatch of rmsnorm.h.
// Compiled in every build; the launchers (launch.h) need CUDA.
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "bwd_det_onepass.h"
#include "launch.h"
#include "nondet_replicas.h"
#include "normgate/kernels/chunk_plan.h"
#include "normgate/kernels/plan.h"
#include "normgate/kernels/rmsnorm.h"

namespace normgate::kernels {

namespace {

[[noreturn]] void bad(const Variant& v, const char* fn, const std::string& msg) {
  throw std::invalid_argument(std::string(fn) + "(" + std::string(v.name) + "): " + msg);
}

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

/// A [T, H] (or [n]) tensor's byte range, for null/alignment/overlap checks.
struct Span {
  const char* name;
  const void* p;
  int64_t bytes;  // 0: empty
};

bool overlap(const Span& a, const Span& b) {
  if (a.bytes == 0 || b.bytes == 0) return false;
  const uintptr_t a0 = addr(a.p), b0 = addr(b.p);
  return a0 < b0 + static_cast<uintptr_t>(b.bytes) && b0 < a0 + static_cast<uintptr_t>(a.bytes);
}

/// Checks one BF16 [T, H] tensor, or [T, heads, H] with head stride
/// stride_h; returns its byte range. Outputs (written) must not overlap
/// themselves: stride >= H, and with heads, stride_h >= H and stride >=
/// (heads-1)*stride_h + H. Inputs (read only) may: any strides >= 0 (e.g. an
/// expanded dy of stride 0) when heads > 1.
Span check_rows(const Variant& v, const char* fn, const char* name, const void* p, int64_t stride, int64_t T,
                int64_t H, int64_t heads = 1, int64_t stride_h = 0, bool output = false) {
  if (T == 0) return {name, p, 0};  // nothing is read or written
  const std::string n(name);
  if (heads == 1) {
    if (stride < H)
      bad(v, fn, n + "_stride = " + std::to_string(stride) + " is less than H = " + std::to_string(H));
  } else {
    if (stride < 0 || stride_h < 0)
      bad(v, fn, n + "_stride = " + std::to_string(stride) + ", " + n + "_stride_h = " + std::to_string(stride_h) +
                     ": strides must be >= 0");
    if (output && stride_h < H)
      bad(v, fn, n + "_stride_h = " + std::to_string(stride_h) + " is less than H = " + std::to_string(H) +
                     " (an output's heads must not overlap)");
    if (output && stride < (heads - 1) * stride_h + H)
      bad(v, fn, n + "_stride = " + std::to_string(stride) + " is less than (heads-1)*" + n + "_stride_h + H = " +
                     std::to_string((heads - 1) * stride_h + H) + " (an output's tokens must not overlap)");
  }
  if (p == nullptr) bad(v, fn, n + " is null with T = " + std::to_string(T));
  if (addr(p) % 2 != 0) bad(v, fn, n + " = " + hex(p) + " is not 2-byte aligned (BF16)");
  // (T-1)*stride + (heads-1)*stride_h + H elements, 2 bytes each, must fit in
  // int64 with room to spare.
  constexpr int64_t kMaxElems = int64_t{1} << 61;
  if (heads > 1 && stride_h > (kMaxElems - H) / heads)
    bad(v, fn, n + ": extent (heads-1)*stride_h + H overflows (stride_h = " + std::to_string(stride_h) + ")");
  const int64_t inner = heads > 1 ? (heads - 1) * stride_h + H : H;
  if (T > 1 && stride > (kMaxElems - inner) / (T - 1))
    bad(v, fn, n + ": extent (T-1)*stride + (heads-1)*stride_h + H overflows (T = " + std::to_string(T) +
                   ", stride = " + std::to_string(stride) + ")");
  return {name, p, ((T - 1) * stride + inner) * 2};
}

// n floating-point values of `bytes` bytes each (4: FP32, 8: binary64) at p:
// non-null when n > 0, aligned to their size.
Span check_floats(const Variant& v, const char* fn, const char* name, const void* p, int64_t n, int bytes) {
  const std::string kind = bytes == 4 ? "FP32" : "binary64";
  if (n == 0) return {name, p, 0};
  if (p == nullptr) bad(v, fn, std::string(name) + " is null (" + std::to_string(n) + " " + kind + " values expected)");
  if (addr(p) % static_cast<uintptr_t>(bytes) != 0)
    bad(v, fn, std::string(name) + " = " + hex(p) + " is not " + std::to_string(bytes) + "-byte aligned (" + kind + ")");
  return {name, p, n * bytes};
}

void check_shape(const Variant& v, const char* fn, Form form, int64_t T, int64_t H, int64_t heads) {
  if (!v.supports(form)) bad(v, fn, "form '" + std::string(to_string(form)) + "' is not supported");

  const int64_t want = heads_of(form);
  if (heads != want)
    bad(v, fn, "heads = " + std::to_string(heads) + " does not match form '" + std::string(to_string(form)) +
                   "' (" + std::to_string(want) + ")");
  if (want > 1 && H != 256)
    bad(v, fn, "H = " + std::to_string(H) + ": form '" + std::string(to_string(form)) + "' normalizes heads of 256");
  if (T < 0 || T > kMaxT / heads)
    bad(v, fn, "T = " + std::to_string(T) + " is out of range 0.." + std::to_string(kMaxT / heads) +
                   (heads > 1 ? " (T*heads <= " + std::to_string(kMaxT) + ")" : std::string()));
  if (!v.supports_h(H))
    bad(v, fn, "H = " + std::to_string(H) + " is out of range " + std::to_string(v.h_min) + ".." +
                   std::to_string(v.h_max));
}

Span check_weight(const Variant& v, const char* fn, const WeightView& w, int64_t H) {
  if (w.dtype != WDtype::bf16 && w.dtype != WDtype::fp32)
    bad(v, fn, "weight dtype code " + std::to_string(static_cast<int>(w.dtype)) + " is unknown");
  if (!v.supports(w.dtype)) bad(v, fn, "weight dtype " + std::string(to_string(w.dtype)) + " is not supported");
  if (w.cols != H) bad(v, fn, "w.cols = " + std::to_string(w.cols) + " differs from H = " + std::to_string(H));
  if (w.p == nullptr) bad(v, fn, "w is null");
  const int64_t es = w.dtype == WDtype::bf16 ? 2 : 4;
  if (addr(w.p) % static_cast<uintptr_t>(es) != 0)
    bad(v, fn, "w = " + hex(w.p) + " is not " + std::to_string(es) + "-byte aligned");
  return {"w", w.p, H * es};
}

void check_disjoint(const Variant& v, const char* fn, const Span& out, std::initializer_list<Span> others) {
  for (const Span& o : others)
    if (overlap(out, o))
      bad(v, fn, std::string(out.name) + " overlaps " + o.name + " (address ranges of the strided extents intersect)");
}

bool al16(const void* p) { return addr(p) % 16 == 0; }

}  // namespace

namespace {
constexpr const char* kModelOnly =
    "is a model-only negative control: it has no GPU kernel (registry.h); its CPU model runs it (--backend cpu)";
}  // namespace

size_t bwd_workspace_bytes(const Variant& v, int64_t T, int64_t H) {
  const char* fn = "bwd_workspace_bytes";
  if (v.external) bad(v, fn, "an external variant (registered at run time) has no launcher: it runs through its own callback (harness/external.h)");
  if (v.model_only) bad(v, fn, kModelOnly);
  if (v.op != Op::bwd) bad(v, fn, "not a backward variant");
  if (T < 0 || T > kMaxT) bad(v, fn, "T = " + std::to_string(T) + " is out of range 0.." + std::to_string(kMaxT));
  if (!v.supports_h(H))
    bad(v, fn, "H = " + std::to_string(H) + " is out of range " + std::to_string(v.h_min) + ".." +
                   std::to_string(v.h_max));
  if (T == 0) return 0;
  switch (v.id) {
    case VariantId::bwd_nondet_atomic:  // atomics, or for short chunks the det partials (nondet_replicas.h)
      return nondet_uses_atomics(T, H) ? static_cast<size_t>(kAtomicReplicas) * static_cast<size_t>(H) * sizeof(double)
                                       : static_cast<size_t>(num_chunks(T, H)) * static_cast<size_t>(H) * sizeof(double);
    case VariantId::bwd_det_chunked:
    case VariantId::bwd_det_wide:
    case VariantId::bwd_det_heads:
    case VariantId::bwd_det_wreg:
    case VariantId::bwd_det_lean:
    case VariantId::ctl_fp32_seq:
    case VariantId::ctl_bf16_partials:
    case VariantId::ctl_warp64_dw:
      return static_cast<size_t>(num_chunks(T, H)) * static_cast<size_t>(H) * sizeof(double);  // FP64 chunk partials
    case VariantId::bwd_det_onepass:  // the FP64 partials, then the ticket counter (bwd_det_onepass.h)
      return detail::onepass_workspace_bytes(T, H);
    case VariantId::bwd_fp32_blocked:  // FP32 chunk partials, rounded up to 16 bytes
      return (static_cast<size_t>(num_chunks(T, H)) * static_cast<size_t>(H) * sizeof(float) + 15) / 16 * 16;
    case VariantId::fwd_rowwise:
    case VariantId::fwd_multirow:
    case VariantId::fwd_narrow:
    case VariantId::fwd_wide:
    case VariantId::fwd_staged:
      break;
    default:  // the model-only controls (refused above)
      break;
  }
  bad(v, fn, "no workspace rule for this variant");
}

void validate_fwd(const Variant& v, const FwdArgs& a) {
  const char* fn = "rmsnorm_fwd";
  if (v.external) bad(v, fn, "an external variant (registered at run time) has no launcher: it runs through its own callback (harness/external.h)");
  if (v.op != Op::fwd) bad(v, fn, "not a forward variant");
  check_shape(v, fn, a.form, a.T, a.H, a.heads);
  if (!std::isfinite(a.eps) || a.eps < 0.0f) bad(v, fn, "eps = " + std::to_string(a.eps) + " is not finite and >= 0");
  const Span w = check_weight(v, fn, a.w, a.H);
  const Span x = check_rows(v, fn, "x", a.x, a.x_stride, a.T, a.H, a.heads, a.x_stride_h);
  const Span y = check_rows(v, fn, "y", a.y, a.y_stride, a.T, a.H, a.heads, a.y_stride_h, true);
  const Span r = check_floats(v, fn, "rstd", a.rstd, a.T * a.heads, 4);
  Span u{"u", nullptr, 0}, hn{"h_new", nullptr, 0};
  if (a.form == Form::res) {
    if (a.T > 0 && (a.u == nullptr || a.h_new == nullptr))
      bad(v, fn, std::string(a.u == nullptr ? "u" : "h_new") + " is null: form res needs u and h_new");
    u = check_rows(v, fn, "u", a.u, a.u_stride, a.T, a.H);
    hn = check_rows(v, fn, "h_new", a.h_new, a.h_new_stride, a.T, a.H, 1, 0, true);
    check_disjoint(v, fn, hn, {x, u, w, y, r});
    check_disjoint(v, fn, y, {u});
    check_disjoint(v, fn, r, {u});  // rstd is written while other rows' u is still read
  } else if (a.u != nullptr || a.h_new != nullptr) {
    bad(v, fn, "u / h_new are given but the form is '" + std::string(to_string(a.form)) + "' (only res uses them)");
  }
  check_disjoint(v, fn, y, {x, w, r});
  check_disjoint(v, fn, r, {x, w});
  if (a.msq != nullptr) {  // optional output
    const Span m = check_floats(v, fn, "msq", a.msq, a.T * a.heads, 8);
    check_disjoint(v, fn, m, {x, w, y, r, u, hn});
  }
}

void validate_bwd(const Variant& v, const BwdArgs& a, ControlUse ctl) {
  const char* fn = "rmsnorm_bwd";
  if (v.external) bad(v, fn, "an external variant (registered at run time) has no launcher: it runs through its own callback (harness/external.h)");
  if (v.op != Op::bwd) bad(v, fn, "not a backward variant");
  if (v.control && ctl != ControlUse::allow)
    bad(v, fn, "is a negative control; pass ControlUse::allow to run it on purpose");
  if (v.model_only) bad(v, fn, kModelOnly);
  check_shape(v, fn, a.form, a.T, a.H, a.heads);
  const Span w = check_weight(v, fn, a.w, a.H);
  const Span dy = check_rows(v, fn, "dy", a.dy, a.dy_stride, a.T, a.H, a.heads, a.dy_stride_h);
  const Span x = check_rows(v, fn, "x", a.x, a.x_stride, a.T, a.H, a.heads, a.x_stride_h);
  const Span dx = check_rows(v, fn, "dx", a.dx, a.dx_stride, a.T, a.H, a.heads, a.dx_stride_h, true);
  const Span r = check_floats(v, fn, "rstd", a.rstd, a.T * a.heads, 4);
  const Span dw = check_floats(v, fn, "dw", a.dw, a.H, 4);
  const size_t need = bwd_workspace_bytes(v, a.T * a.heads, a.H);
  Span ws{"workspace", a.workspace, 0};
  if (need > 0) {
    if (a.workspace == nullptr) bad(v, fn, "workspace is null (" + std::to_string(need) + " bytes needed)");
    if (!al16(a.workspace)) bad(v, fn, "workspace = " + hex(a.workspace) + " is not 16-byte aligned");
    if (a.workspace_bytes < need)
      bad(v, fn, "workspace_bytes = " + std::to_string(a.workspace_bytes) + " is less than the " +
                     std::to_string(need) + " bytes needed for T = " + std::to_string(a.T) +
                     ", H = " + std::to_string(a.H));
    ws.bytes = static_cast<int64_t>(need);
  }
  if (a.dh_new != nullptr) {
    if (a.form != Form::res)
      bad(v, fn, "dh_new is given but the form is '" + std::string(to_string(a.form)) + "' (only res uses it)");
    const Span dn = check_rows(v, fn, "dh_new", a.dh_new, a.dh_new_stride, a.T, a.H);
    check_disjoint(v, fn, dx, {dn});
    check_disjoint(v, fn, dw, {dn});
    check_disjoint(v, fn, ws, {dn});
  }
  check_disjoint(v, fn, dx, {dy, x, w, r, dw, ws});
  check_disjoint(v, fn, dw, {dy, x, w, r, ws});
  check_disjoint(v, fn, ws, {dy, x, w, r});
  if (a.msq != nullptr) {  // optional input
    const Span m = check_floats(v, fn, "msq", a.msq, a.T * a.heads, 8);
    check_disjoint(v, fn, m, {dx, dw, ws});
  }
}

bool fwd_vector_path(const FwdArgs& a) {
  return a.H % 8 == 0 && al16(a.x) && al16(a.y) && al16(a.w.p) && a.x_stride % 8 == 0 && a.y_stride % 8 == 0 &&
         a.x_stride_h % 8 == 0 && a.y_stride_h % 8 == 0 &&
         (a.form != Form::res || (al16(a.u) && al16(a.h_new) && a.u_stride % 8 == 0 && a.h_new_stride % 8 == 0));
}

bool bwd_vector_path(const BwdArgs& a) {
  return a.H % 8 == 0 && al16(a.x) && al16(a.dy) && al16(a.dx) && al16(a.w.p) && a.x_stride % 8 == 0 &&
         a.dy_stride % 8 == 0 && a.dx_stride % 8 == 0 && a.x_stride_h % 8 == 0 && a.dy_stride_h % 8 == 0 &&
         a.dx_stride_h % 8 == 0 && (a.dh_new == nullptr || (al16(a.dh_new) && a.dh_new_stride % 8 == 0));
}

void rmsnorm_fwd(const Variant& v, const FwdArgs& a, Stream stream) {
  validate_fwd(v, a);
  if (a.T == 0) return;
  switch (v.id) {
    case VariantId::fwd_rowwise:
      detail::launch_fwd_rowwise(a, fwd_vector_path(a), stream);
      return;
    case VariantId::fwd_multirow:
      detail::launch_fwd_multirow(a, fwd_vector_path(a), stream);
      return;
    case VariantId::fwd_narrow:
      detail::launch_fwd_narrow(a, fwd_vector_path(a), stream);
      return;
    case VariantId::fwd_wide:
      detail::launch_fwd_wide(a, fwd_vector_path(a), stream);
      return;
    case VariantId::fwd_staged:
      detail::launch_fwd_staged(a, fwd_vector_path(a), stream);
      return;
    default:
      bad(v, "rmsnorm_fwd", "no forward launcher");
  }
}

void rmsnorm_bwd(const Variant& v, const BwdArgs& a, Stream stream, ControlUse ctl) {
  validate_bwd(v, a, ctl);
  if (a.T == 0) {
    detail::launch_zero_f32(a.dw, a.H, stream);
    return;
  }
  const bool vec = bwd_vector_path(a);
  switch (v.id) {
    case VariantId::bwd_det_chunked:
      detail::launch_bwd_det_chunked(a, vec, stream);
      return;
    case VariantId::bwd_det_wide:
      detail::launch_bwd_det_wide(a, vec, stream);
      return;
    case VariantId::bwd_det_heads:
      detail::launch_bwd_det_heads(a, vec, stream);
      return;
    case VariantId::bwd_det_wreg:
      detail::launch_bwd_det_wreg(a, vec, stream);
      return;
    case VariantId::bwd_det_lean:
      detail::launch_bwd_det_lean(a, vec, stream);
      return;
    case VariantId::bwd_nondet_atomic:
      detail::launch_bwd_nondet_atomic(a, vec, stream);
      return;
    case VariantId::ctl_fp32_seq:
      detail::launch_ctl_fp32_seq(a, vec, stream);
      return;
    case VariantId::ctl_bf16_partials:
      detail::launch_ctl_bf16_partials(a, vec, stream);
      return;
    case VariantId::ctl_warp64_dw:
      detail::launch_ctl_warp64_dw(a, vec, stream);
      return;
    case VariantId::bwd_det_onepass:
      detail::launch_bwd_det_onepass(a, vec, stream);
      return;
    case VariantId::bwd_fp32_blocked:
      detail::launch_bwd_fp32_blocked(a, vec, stream);
      return;
    case VariantId::fwd_rowwise:
    case VariantId::fwd_multirow:
    case VariantId::fwd_narrow:
    case VariantId::fwd_wide:
    case VariantId::fwd_staged:
      break;
    default:  // the model-only controls (validate_bwd refused them)
      break;
  }
  bad(v, "rmsnorm_bwd", "no backward launcher");
}

}  // namespace normgate::kernels
