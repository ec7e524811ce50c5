// examples/plugin/cuda_rmsnorm.cu: a device-memory normgate plugin, a plain
// CUDA RMSNorm (no tuning: one block of 256 threads per row), to show what an
// outside kernel needs to be gated (capi/include/normgate/plugin.h).
//
// Variants:
//   ex_cuda_fwd  forward (y, rstd; h_new for res)
//   ex_cuda_bwd  backward (a whole step: this forward, then dx, dw)
// Both: deterministic (fixed reduction trees and orders), H 1..16384, BF16
// and FP32 weights, every form.
//
// Forward, one block per normalized row: sum of squares in binary64 (a fixed
//   tree over the block), rstd = FP32(1/sqrt(m)), y = BF16(x * rstd * w).
// Backward: (1) one block per row: rstd64 = 1/sqrt(m) recomputed in binary64
//   (kept in the workspace), c = sum(g*xhat)/H, dx = BF16(rstd64*(g - xhat*c)
//   [+ dh_new]); (2) one thread per column and chunk of 256 rows: a binary64
//   partial of dy*x*rstd64 (workspace); (3) one thread per column: the
//   partials summed in chunk order, dw = FP32 of that.
// Workspace: rows*8 bytes (rstd64, rounded up to 256) + chunks*H*8 bytes.
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>

#include "normgate/plugin.h"
#include "rmsnorm_math.h"

#ifndef EXAMPLE_SOURCE_SHA256
#error "EXAMPLE_SOURCE_SHA256 must be defined (examples/plugin/CMakeLists.txt: normgate_plugin_sha256)"
#endif

namespace {

constexpr int kThreads = 256;      // threads per block (a power of two: the reduction tree)
constexpr int64_t kChunkRows = 256;  // rows per dw partial
constexpr int64_t kMaxGridY = 65535;

int fail(char* err, size_t n, int rc, const char* msg) {
  snprintf(err, n, "%s", msg);
  return rc;
}

// Launch errors (and earlier asynchronous ones) as NG_PLUGIN_EFAIL.
int launched(const char* what, char* err, size_t n) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return NG_PLUGIN_OK;
  snprintf(err, n, "ex_cuda: launch of %s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
  return NG_PLUGIN_EFAIL;
}

int check_shape(const ng_plugin_shape& sh, char* err, size_t n) {
  const int64_t heads = sh.form == NG_PLUGIN_FORM_HEADS24 ? 24 : sh.form == NG_PLUGIN_FORM_HEADS4 ? 4 : 1;
  if (sh.form < 0 || sh.form > 3) return fail(err, n, NG_PLUGIN_EINVAL, "ex_cuda: unknown form");
  if (sh.heads != heads) return fail(err, n, NG_PLUGIN_EINVAL, "ex_cuda: heads does not match the form");
  if (sh.H < 1 || sh.H > 16384 || sh.T < 0) return fail(err, n, NG_PLUGIN_EINVAL, "ex_cuda: T or H out of range");
  if (sh.T * sh.heads > 0x7FFFFFFF) return fail(err, n, NG_PLUGIN_EINVAL, "ex_cuda: more than 2^31-1 rows");
  if (sh.w_dtype != NG_PLUGIN_W_BF16 && sh.w_dtype != NG_PLUGIN_W_FP32)
    return fail(err, n, NG_PLUGIN_EINVAL, "ex_cuda: unknown weight dtype");
  return NG_PLUGIN_OK;
}

// Sum of v over the block, in a fixed tree (the same bits every run); every
// thread gets the result. `sh` holds kThreads doubles.
__device__ double block_sum(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  const double total = sh[0];
  __syncthreads();  // sh is reused by the caller's next block_sum
  return total;
}

__device__ double row_rstd64(const uint16_t* x, int64_t H, float eps, double* sh) {
  double ss = 0;
  for (int64_t j = threadIdx.x; j < H; j += kThreads) {
    const double v = ex::bf16_to_double(x[j]);
    ss += v * v;
  }
  ss = block_sum(ss, sh);
  return 1.0 / sqrt(ss / static_cast<double>(H) + static_cast<double>(eps));
}

__global__ void __launch_bounds__(kThreads) fwd_kernel(ng_plugin_fwd_args a) {
  __shared__ double sh[kThreads];
  const int64_t r = blockIdx.x, H = a.shape.H;
  const uint16_t* x = a.x + ex::row_offset(r, a.shape.heads, a.x_stride, a.x_stride_h);
  uint16_t* y = a.y + ex::row_offset(r, a.shape.heads, a.y_stride, a.y_stride_h);
  if (a.shape.form == NG_PLUGIN_FORM_RES) {  // h_new = BF16(h + u), one rounding of the exact sum
    const uint16_t* u = a.u + r * a.u_stride;
    uint16_t* hn = a.h_new + r * a.h_new_stride;
    for (int64_t j = threadIdx.x; j < H; j += kThreads)
      hn[j] = ex::bf16_from_double(ex::bf16_to_double(x[j]) + ex::bf16_to_double(u[j]));
    __syncthreads();
    __threadfence_block();
    x = hn;  // each thread reads back only the elements it wrote
  }
  const float rstd = static_cast<float>(row_rstd64(x, H, a.eps, sh));
  if (threadIdx.x == 0) a.rstd[r] = rstd;
  for (int64_t j = threadIdx.x; j < H; j += kThreads)
    y[j] = ex::bf16_from_double(ex::bf16_to_double(x[j]) * static_cast<double>(rstd) *
                                ex::weight(a.w, a.shape.w_dtype, j));
}

__global__ void __launch_bounds__(kThreads) bwd_rows_kernel(ng_plugin_bwd_args a, double* rstd64) {
  __shared__ double sh[kThreads];
  const int64_t r = blockIdx.x, H = a.shape.H;
  const uint16_t* x = a.x + ex::row_offset(r, a.shape.heads, a.x_stride, a.x_stride_h);
  const uint16_t* dy = a.dy + ex::row_offset(r, a.shape.heads, a.dy_stride, a.dy_stride_h);
  uint16_t* dx = a.dx + ex::row_offset(r, a.shape.heads, a.dx_stride, a.dx_stride_h);
  const uint16_t* dh = a.dh_new != nullptr ? a.dh_new + r * a.dh_new_stride : nullptr;
  const double rs = row_rstd64(x, H, a.eps, sh);
  if (threadIdx.x == 0) rstd64[r] = rs;
  double s = 0;
  for (int64_t j = threadIdx.x; j < H; j += kThreads)
    s += ex::bf16_to_double(dy[j]) * ex::weight(a.w, a.shape.w_dtype, j) * (ex::bf16_to_double(x[j]) * rs);
  const double c = block_sum(s, sh) / static_cast<double>(H);
  for (int64_t j = threadIdx.x; j < H; j += kThreads) {
    const double g = ex::bf16_to_double(dy[j]) * ex::weight(a.w, a.shape.w_dtype, j);
    const double xhat = ex::bf16_to_double(x[j]) * rs;
    double v = rs * (g - xhat * c);
    if (dh != nullptr) v += ex::bf16_to_double(dh[j]);
    dx[j] = ex::bf16_from_double(v);
  }
}

__global__ void __launch_bounds__(kThreads) dw_partial_kernel(ng_plugin_bwd_args a, const double* rstd64,
                                                              double* partial, int64_t chunks) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x, H = a.shape.H;
  if (j >= H) return;
  const int64_t rows = a.shape.T * a.shape.heads;
  for (int64_t k = blockIdx.y; k < chunks; k += gridDim.y) {
    double acc = 0;
    const int64_t end = min(rows, (k + 1) * kChunkRows);
    for (int64_t r = k * kChunkRows; r < end; ++r) {
      const double dy = ex::bf16_to_double(a.dy[ex::row_offset(r, a.shape.heads, a.dy_stride, a.dy_stride_h) + j]);
      const double x = ex::bf16_to_double(a.x[ex::row_offset(r, a.shape.heads, a.x_stride, a.x_stride_h) + j]);
      acc += dy * x * rstd64[r];  // dy*x is exact in binary64
    }
    partial[k * H + j] = acc;
  }
}

__global__ void __launch_bounds__(kThreads) dw_combine_kernel(ng_plugin_bwd_args a, const double* partial,
                                                              int64_t chunks) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x, H = a.shape.H;
  if (j >= H) return;
  double s = 0;
  for (int64_t k = 0; k < chunks; ++k) s += partial[k * H + j];
  a.dw[j] = static_cast<float>(s);
}

int64_t chunks_of(const ng_plugin_shape& sh) { return (sh.T * sh.heads + kChunkRows - 1) / kChunkRows; }
uint64_t rstd_bytes(const ng_plugin_shape& sh) { return (static_cast<uint64_t>(sh.T * sh.heads) * 8 + 255) / 256 * 256; }

int workspace(const ng_plugin_shape* sh, uint64_t* bytes, char* err, size_t n) {
  if (int rc = check_shape(*sh, err, n)) return rc;
  *bytes = rstd_bytes(*sh) + static_cast<uint64_t>(chunks_of(*sh)) * static_cast<uint64_t>(sh->H) * 8;
  return NG_PLUGIN_OK;
}

int fwd(const ng_plugin_fwd_args* a, char* err, size_t n) {
  if (int rc = check_shape(a->shape, err, n)) return rc;
  const int64_t rows = a->shape.T * a->shape.heads;
  const bool res = a->shape.form == NG_PLUGIN_FORM_RES;
  if (rows == 0) return NG_PLUGIN_OK;
  if (!a->x || !a->w || !a->y || !a->rstd || (res && (!a->u || !a->h_new)) || !a->stream)
    return fail(err, n, NG_PLUGIN_EINVAL, "ex_cuda_fwd: a required pointer (or the stream) is NULL");
  fwd_kernel<<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(a->stream)>>>(*a);
  return launched("fwd_kernel", err, n);
}

int bwd(const ng_plugin_bwd_args* a, char* err, size_t n) {
  if (int rc = check_shape(a->shape, err, n)) return rc;
  const auto& sh = a->shape;
  const int64_t rows = sh.T * sh.heads, chunks = chunks_of(sh);
  const auto stream = static_cast<cudaStream_t>(a->stream);
  if (!a->dw || !a->w || !stream || (rows > 0 && (!a->dy || !a->x || !a->dx)))
    return fail(err, n, NG_PLUGIN_EINVAL, "ex_cuda_bwd: a required pointer (or the stream) is NULL");
  uint64_t need = 0;
  workspace(&sh, &need, err, n);
  if (need > 0 && (a->workspace == nullptr || a->workspace_bytes < need))
    return fail(err, n, NG_PLUGIN_EINVAL, "ex_cuda_bwd: workspace missing or too small");
  auto* rstd64 = static_cast<double*>(a->workspace);
  auto* partial = reinterpret_cast<double*>(static_cast<char*>(a->workspace) + rstd_bytes(sh));
  const unsigned col_blocks = static_cast<unsigned>((sh.H + kThreads - 1) / kThreads);
  if (rows > 0) {
    bwd_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(*a, rstd64);
    if (int rc = launched("bwd_rows_kernel", err, n)) return rc;
    const dim3 grid(col_blocks, static_cast<unsigned>(chunks < kMaxGridY ? chunks : kMaxGridY));
    dw_partial_kernel<<<grid, kThreads, 0, stream>>>(*a, rstd64, partial, chunks);
    if (int rc = launched("dw_partial_kernel", err, n)) return rc;
  }
  dw_combine_kernel<<<col_blocks, kThreads, 0, stream>>>(*a, partial, chunks);  // T = 0: dw = 0
  return launched("dw_combine_kernel", err, n);
}

const ng_plugin_variant kVariants[] = {
    {"ex_cuda_fwd", NG_PLUGIN_OP_FWD, NG_PLUGIN_MODE_DET, 1, 16384, NG_PLUGIN_WDTYPES_ALL, NG_PLUGIN_FORMS_ALL,
     NG_PLUGIN_MEMORY_DEVICE, EXAMPLE_SOURCE_SHA256, "example plugin: plain CUDA RMSNorm forward, a block per row",
     nullptr, fwd, nullptr},
    {"ex_cuda_bwd", NG_PLUGIN_OP_BWD, NG_PLUGIN_MODE_DET, 1, 16384, NG_PLUGIN_WDTYPES_ALL, NG_PLUGIN_FORMS_ALL,
     NG_PLUGIN_MEMORY_DEVICE, EXAMPLE_SOURCE_SHA256,
     "example plugin: plain CUDA RMSNorm step, FP64 dw partials per 256 rows", workspace, fwd, bwd},
};
const ng_plugin_table kTable = {NG_PLUGIN_ABI_VERSION, 2, kVariants};

}  // namespace

extern "C" NG_PLUGIN_EXPORT const ng_plugin_table* ng_plugin_v1(void) { return &kTable; }
