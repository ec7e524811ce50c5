// examples/plugin/host_reference.cpp: a host-memory normgate plugin, an
// accurate RMSNorm on the CPU (binary64 throughout, compensated dw sums),
// with each output rounded once. It exists so that a machine without a GPU
// (CI) can gate a plugin end to end; it is also a readable statement of the
// math the gate checks (capi/include/normgate/plugin.h).
//
// Variants:
//   ex_ref_fwd  forward (y, rstd; h_new for res)
//   ex_ref_bwd  backward (a whole step: this forward, then dx, dw)
// Both: deterministic, H 1..16384, BF16 and FP32 weights, every form.
//
// Forward, row r:  m = sum(x^2)/H + eps (binary64), rstd = FP32(1/sqrt(m)),
//                  y = BF16(x * rstd * w) (form res: x is h_new = BF16(h + u)).
// Backward, row r: rstd64 = 1/sqrt(m) recomputed in binary64 (the backward
//                  gets eps), g = dy*w, xhat = x*rstd64, c = sum(g*xhat)/H,
//                  dx = BF16(rstd64*(g - xhat*c) [+ dh_new]);
//                  dw_j = FP32(sum_r dy*x*rstd64), each column a Neumaier-
//                  compensated binary64 sum kept in the workspace (16 bytes
//                  per column).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "normgate/plugin.h"
#include "rmsnorm_math.h"

#ifndef EXAMPLE_SOURCE_SHA256
#error "EXAMPLE_SOURCE_SHA256 must be defined (examples/plugin/CMakeLists.txt: normgate_plugin_sha256)"
#endif

namespace {

int fail(char* err, size_t n, int rc, const char* msg) {
  snprintf(err, n, "%s", msg);
  return rc;
}

// Neumaier's compensated sum: s + c carries the sum to about one rounding.
struct Sum {
  double s = 0, c = 0;
  void add(double v) {
    const double t = s + v;
    if (fabs(s) >= fabs(v)) c += (s - t) + v;
    else c += (v - t) + s;
    s = t;
  }
  double value() const { return s + c; }
};

int check_shape(const ng_plugin_shape& sh, char* err, size_t n) {
  const int64_t heads = sh.form == NG_PLUGIN_FORM_HEADS24 ? 24 : sh.form == NG_PLUGIN_FORM_HEADS4 ? 4 : 1;
  if (sh.form < 0 || sh.form > 3) return fail(err, n, NG_PLUGIN_EINVAL, "ex_ref: unknown form");
  if (sh.heads != heads) return fail(err, n, NG_PLUGIN_EINVAL, "ex_ref: heads does not match the form");
  if (sh.H < 1 || sh.H > 16384 || sh.T < 0) return fail(err, n, NG_PLUGIN_EINVAL, "ex_ref: T or H out of range");
  if (sh.w_dtype != NG_PLUGIN_W_BF16 && sh.w_dtype != NG_PLUGIN_W_FP32)
    return fail(err, n, NG_PLUGIN_EINVAL, "ex_ref: unknown weight dtype");
  return NG_PLUGIN_OK;
}

// 1/sqrt(mean of squares + eps) of one row, binary64.
double rstd64(const uint16_t* x, int64_t H, float eps) {
  double ss = 0;
  for (int64_t j = 0; j < H; ++j) {
    const double v = ex::bf16_to_double(x[j]);
    ss += v * v;
  }
  return 1.0 / sqrt(ss / static_cast<double>(H) + static_cast<double>(eps));
}

int fwd(const ng_plugin_fwd_args* a, char* err, size_t n) {
  if (int rc = check_shape(a->shape, err, n)) return rc;
  const auto& sh = a->shape;
  const int64_t rows = sh.T * sh.heads, H = sh.H;
  const bool res = sh.form == NG_PLUGIN_FORM_RES;
  if (rows > 0 && (!a->x || !a->w || !a->y || !a->rstd || (res && (!a->u || !a->h_new))))
    return fail(err, n, NG_PLUGIN_EINVAL, "ex_ref_fwd: a required pointer is NULL");
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* x = a->x + ex::row_offset(r, sh.heads, a->x_stride, a->x_stride_h);
    uint16_t* y = a->y + ex::row_offset(r, sh.heads, a->y_stride, a->y_stride_h);
    if (res) {  // h_new = BF16(h + u): the binary64 sum of two BF16 values, rounded once
      const uint16_t* u = a->u + r * a->u_stride;
      uint16_t* hn = a->h_new + r * a->h_new_stride;
      for (int64_t j = 0; j < H; ++j) hn[j] = ex::bf16_from_double(ex::bf16_to_double(x[j]) + ex::bf16_to_double(u[j]));
      x = hn;
    }
    const float rstd = static_cast<float>(rstd64(x, H, a->eps));
    a->rstd[r] = rstd;
    for (int64_t j = 0; j < H; ++j)
      y[j] = ex::bf16_from_double(ex::bf16_to_double(x[j]) * static_cast<double>(rstd) *
                                  ex::weight(a->w, sh.w_dtype, j));
  }
  return NG_PLUGIN_OK;
}

int workspace(const ng_plugin_shape* sh, uint64_t* bytes, char* err, size_t n) {
  if (int rc = check_shape(*sh, err, n)) return rc;
  *bytes = static_cast<uint64_t>(sh->H) * 2 * sizeof(double);  // a Sum per column
  return NG_PLUGIN_OK;
}

int bwd(const ng_plugin_bwd_args* a, char* err, size_t n) {
  if (int rc = check_shape(a->shape, err, n)) return rc;
  const auto& sh = a->shape;
  const int64_t rows = sh.T * sh.heads, H = sh.H;
  const bool res = sh.form == NG_PLUGIN_FORM_RES;
  if (!a->dw || !a->w || (rows > 0 && (!a->dy || !a->x || !a->dx)))
    return fail(err, n, NG_PLUGIN_EINVAL, "ex_ref_bwd: a required pointer is NULL");
  if (a->workspace == nullptr || a->workspace_bytes < static_cast<uint64_t>(H) * 2 * sizeof(double))
    return fail(err, n, NG_PLUGIN_EINVAL, "ex_ref_bwd: workspace missing or too small");
  Sum* dw = static_cast<Sum*>(a->workspace);  // 256-byte aligned; contents undefined: initialize
  for (int64_t j = 0; j < H; ++j) dw[j] = Sum{};
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* x = a->x + ex::row_offset(r, sh.heads, a->x_stride, a->x_stride_h);
    const uint16_t* dy = a->dy + ex::row_offset(r, sh.heads, a->dy_stride, a->dy_stride_h);
    uint16_t* dx = a->dx + ex::row_offset(r, sh.heads, a->dx_stride, a->dx_stride_h);
    const uint16_t* dh = res && a->dh_new ? a->dh_new + r * a->dh_new_stride : nullptr;
    const double rs = rstd64(x, H, a->eps);
    Sum s;
    for (int64_t j = 0; j < H; ++j)
      s.add(ex::bf16_to_double(dy[j]) * ex::weight(a->w, sh.w_dtype, j) * (ex::bf16_to_double(x[j]) * rs));
    const double c = s.value() / static_cast<double>(H);
    for (int64_t j = 0; j < H; ++j) {
      const double xv = ex::bf16_to_double(x[j]), dyv = ex::bf16_to_double(dy[j]);
      const double g = dyv * ex::weight(a->w, sh.w_dtype, j), xhat = xv * rs;
      double v = rs * (g - xhat * c);
      if (dh) v += ex::bf16_to_double(dh[j]);
      dx[j] = ex::bf16_from_double(v);
      dw[j].add(dyv * xv * rs);  // dy*x is exact in binary64 (two BF16 values)
    }
  }
  for (int64_t j = 0; j < H; ++j) a->dw[j] = static_cast<float>(dw[j].value());
  return NG_PLUGIN_OK;
}

const ng_plugin_variant kVariants[] = {
    {"ex_ref_fwd", NG_PLUGIN_OP_FWD, NG_PLUGIN_MODE_DET, 1, 16384, NG_PLUGIN_WDTYPES_ALL, NG_PLUGIN_FORMS_ALL,
     NG_PLUGIN_MEMORY_HOST, EXAMPLE_SOURCE_SHA256, "example plugin: binary64 host RMSNorm forward", nullptr, fwd,
     nullptr},
    {"ex_ref_bwd", NG_PLUGIN_OP_BWD, NG_PLUGIN_MODE_DET, 1, 16384, NG_PLUGIN_WDTYPES_ALL, NG_PLUGIN_FORMS_ALL,
     NG_PLUGIN_MEMORY_HOST, EXAMPLE_SOURCE_SHA256,
     "example plugin: binary64 host RMSNorm step, compensated dw sums", workspace, fwd, bwd},
};
const ng_plugin_table kTable = {NG_PLUGIN_ABI_VERSION, 2, kVariants};

}  // namespace

extern "C" NG_PLUGIN_EXPORT const ng_plugin_table* ng_plugin_v1(void) { return &kTable; }
