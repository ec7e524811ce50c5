// kernels/models/src/model_bwd_fp32_blocked.cpp: the CPU model of
// bwd_fp32_blocked's dw (its dx is bwd_det_chunked's: model_bwd.cpp's
// chunk_pass). Each step mirrors the kernel that does it on the GPU:
//   FP32 chunk partials   bwd_chunk_pass_f32.cuh  (acc = fmaf(FP32_rn(dy*x), rstd, acc),
//                                                  rows of a chunk in order, from 0)
//   FP32 combine          bwd_fp32_blocked.cu     (combine_f32_kernel: lane L over
//                                                  chunks L, L+32, ...; lanes 0..31 in order)
// OpenMP over chunks, then over columns; results do not depend on the thread count.
#include <omp.h>

#include <vector>

#include "model_common.h"
#include "normgate/core/hd.h"
#include "normgate/kernels/chunk_plan.h"
#include "normgate/kernels/plan.h"

namespace normgate::kernels::detail {

std::vector<float> model_dw_fp32_blocked(RowView<uint16_t> x, RowView<uint16_t> dy, const std::vector<float>& rstd,
                                         int threads) {
  const int64_t R = x.rows(), H = x.cols;
  std::vector<float> dw(static_cast<size_t>(H), 0.0f);
  if (R == 0) return dw;
  const int64_t n = num_chunks(R, H);
  std::vector<float> partials(static_cast<size_t>(n * H), 0.0f);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (n > 1)
  for (int64_t c = 0; c < n; ++c) {
    float* acc = partials.data() + c * H;
    const int64_t r0 = chunk_begin(R, n, c), r1 = chunk_begin(R, n, c + 1);
    for (int64_t r = r0; r < r1; ++r) {
      const uint16_t* xr = x.row(r);
      const uint16_t* dyr = dy.row(r);
      const float rs = rstd[static_cast<size_t>(r)];
      for (int64_t j = 0; j < H; ++j)
        acc[j] = fma_rn(mul_rn(bf16_to_float(dyr[j]), bf16_to_float(xr[j])), rs, acc[j]);
    }
  }
#pragma omp parallel for num_threads(threads) schedule(static) if (n * H > 65536)
  for (int64_t j = 0; j < H; ++j) {
    float tot = 0.0f;
    for (int L = 0; L < kCombineLanes; ++L) {
      float s = 0.0f;
      for (int64_t c = L; c < n; c += kCombineLanes) s = add_rn(s, partials[static_cast<size_t>(c * H + j)]);
      tot = add_rn(tot, s);
    }
    dw[static_cast<size_t>(j)] = tot;
  }
  return dw;
}

}  // namespace normgate::kernels::detail
