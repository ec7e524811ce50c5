// tests/kernels/bwd_det_wreg_test.cpp: bwd_det_wreg (registry.h) on the GPU,
// beyond the generic checks of variant_driver.cpp (its H range, workspace
// and refusals: bwd_own_kernel_test.cpp): its dx and dw are
// bwd_det_chunked's bit for bit on both paths, both weight dtypes, plain and
// res, one row to many chunks, and res layouts (misaligned, padded) give the
// same bits (skipped without a CUDA device).
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

const Variant& wreg() { return variant("bwd_det_wreg"); }

TEST(BwdDetWreg, EqualsDetChunkedBitForBit) {
  NG_REQUIRE_GPU();
  struct S {
    int64_t H, T;
    Form form;
    WDtype w;
  };
  const S shapes[] = {
      {4095, 300, Form::plain, WDtype::fp32},  // scalar path, team 512, a last group of seven columns
      {4096, 77, Form::plain, WDtype::bf16},   // vector path, team 512
      {1536, 1, Form::plain, WDtype::fp32},    // one row, one chunk, team 192
      {2048, 700, Form::res, WDtype::fp32},    // dh_new ring with FP32 w in registers, team 256
      {1536, 3000, Form::plain, WDtype::fp32}, // more chunks than the combine's 32 lanes
      {4096, 50, Form::res, WDtype::bf16},     // res, team 512
      {1001, 41, Form::res, WDtype::fp32},     // res on the scalar path
      {3, 5, Form::plain, WDtype::fp32},       // a team of one warp, one partial group
  };
  const std::vector<const Variant*> vs = {&variant("bwd_det_chunked"), &wreg()};
  uint64_t seed = 23;
  for (const S& s : shapes) {
    seeds::CaseId c = make_case(s.H, s.T, seeds::Family::cancel, seed++, s.w);
    c.form = s.form;
    const std::vector<Outputs> o = run_gpu(vs, c, kEps);
    ASSERT_EQ(o.size(), 2u);
    ASSERT_EQ(o[0].dx.size(), static_cast<size_t>(s.H * s.T));
    EXPECT_EQ(bit_diff(o[0].dx, o[1].dx).count, 0) << seeds::to_string(c);
    ASSERT_EQ(o[1].dw.size(), static_cast<size_t>(s.H));
    EXPECT_EQ(bit_diff(o[0].dw, o[1].dw).count, 0) << seeds::to_string(c) << ": " << bit_diff(o[0].dw, o[1].dw).str();
    // Not equal on poison or zeros: every output written (the poison is NaN,
    // which bit_diff counts as equal to NaN) and dw mostly nonzero.
    EXPECT_EQ(count_nan(o[1].dx), 0) << seeds::to_string(c);
    EXPECT_EQ(count_nan(o[1].dw), 0) << seeds::to_string(c);
    int64_t nonzero = 0;
    for (float d : o[1].dw) nonzero += std::isfinite(d) && d != 0.0f;
    EXPECT_GT(nonzero, s.H / 2) << seeds::to_string(c);
  }
}

// Form res (the dh_new ring) and FP32 w off the vector path and with padded
// rows: the same bits as the contiguous run (variant_driver's layout test
// covers plain rows only for this variant).
TEST(BwdDetWreg, ResLayoutsDoNotChangeTheBits) {
  NG_REQUIRE_GPU();
  const Variant& v = wreg();
  for (const WDtype w : {WDtype::fp32, WDtype::bf16}) {
    seeds::CaseId c = make_case(2048, 97, seeds::Family::llm, 41, w);
    c.form = Form::res;
    GpuRunInfo base_info;
    const Outputs base = run_gpu(v, c, kEps, {}, &base_info);
    EXPECT_TRUE(base_info.bwd_vector);
    GpuRunOptions mis;
    mis.misalign_elems = 1;
    GpuRunInfo mis_info;
    const Outputs m = run_gpu(v, c, kEps, mis, &mis_info);
    EXPECT_FALSE(mis_info.bwd_vector);
    GpuRunOptions pad;
    pad.row_pad = 24;
    const Outputs q = run_gpu(v, c, kEps, pad);
    EXPECT_EQ(count_nan(base.dx), 0);
    for (const Outputs* o : {&m, &q}) {
      EXPECT_EQ(bit_diff(base.dx, o->dx).count, 0) << seeds::to_string(c);
      EXPECT_EQ(bit_diff(base.dw, o->dw).count, 0) << seeds::to_string(c);
    }
  }
}

}  // namespace
}  // namespace normgate::kernels::test
