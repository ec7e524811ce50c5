// tests/kernels/bwd_det_heads_test.cpp: bwd_det_heads (registry.h) on the
// GPU (its H, forms, workspace and refusals: bwd_own_kernel_test.cpp): its
// dx and dw are bwd_det_chunked's bit for bit on both paths, both weight
// dtypes, both per-head forms, one token to many chunks (skipped without a
// CUDA device).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "normgate/harness/runner.h"
#include "normgate/kernels/rmsnorm.h"
#include "util/gpu_test_util.h"
#include "util/kernel_test_util.h"

namespace normgate::kernels::test {
namespace {

const Variant& heads() { return variant("bwd_det_heads"); }

TEST(BwdDetHeads, EqualsDetChunkedBitForBit) {
  NG_REQUIRE_GPU();
  struct S {
    int64_t T;
    Form form;
    WDtype w;
    int64_t misalign;
  };
  const S shapes[] = {
      {1, Form::heads24, WDtype::fp32, 0},     // one token: 24 rows, one chunk
      {1, Form::heads4, WDtype::bf16, 0},      // 4 rows
      {77, Form::heads24, WDtype::fp32, 0},    // 1848 rows
      {3000, Form::heads4, WDtype::fp32, 0},   // 12000 rows: more chunks than the combine's 32 lanes
      {3000, Form::heads24, WDtype::bf16, 0},  // 72000 rows
      {513, Form::heads4, WDtype::fp32, 1},    // scalar path (misaligned views), FP32 w
      {41, Form::heads24, WDtype::bf16, 1},    // scalar path, BF16 w
  };
  const std::vector<const Variant*> vs = {&variant("bwd_det_chunked"), &heads()};
  uint64_t seed = 31;
  for (const S& s : shapes) {
    seeds::CaseId c = make_case(256, s.T, seeds::Family::cancel, seed++, s.w);
    c.form = s.form;
    GpuRunOptions opt;
    opt.misalign_elems = s.misalign;
    GpuRunInfo info;
    const std::vector<Outputs> o = run_gpu(vs, c, kEps, opt, &info);
    EXPECT_EQ(info.bwd_vector, s.misalign == 0) << seeds::to_string(c);
    ASSERT_EQ(o.size(), 2u);
    const int64_t rows = s.T * (s.form == Form::heads24 ? 24 : 4);
    ASSERT_EQ(o[0].dx.size(), static_cast<size_t>(rows * 256)) << seeds::to_string(c);
    EXPECT_EQ(bit_diff(o[0].dx, o[1].dx).count, 0) << seeds::to_string(c);
    ASSERT_EQ(o[1].dw.size(), size_t{256});
    EXPECT_EQ(bit_diff(o[0].dw, o[1].dw).count, 0) << seeds::to_string(c) << ": " << bit_diff(o[0].dw, o[1].dw).str();
    // Not equal on poison or zeros: every output written (the poison is NaN,
    // which bit_diff counts as equal to NaN) and dw mostly nonzero.
    EXPECT_EQ(count_nan(o[1].dx), 0) << seeds::to_string(c);
    EXPECT_EQ(count_nan(o[1].dw), 0) << seeds::to_string(c);
    int64_t nonzero = 0;
    for (float d : o[1].dw) nonzero += std::isfinite(d) && d != 0.0f;
    EXPECT_GT(nonzero, 128) << seeds::to_string(c);
  }
}

}  // namespace
}  // namespace normgate::kernels::test
