// tests/kernels/bwd_det_heads_test.cpp: bwd_det_heads (registry.h) beyond the
// generic checks of variant_driver.cpp. It serves exactly the per-head views
// at H = 256, takes bwd_det_chunked's workspace and refuses plain rows, res
// and other H (CPU, always run); on the GPU its dx and dw are
// bwd_det_chunked's bit for bit on both paths, both weight dtypes, both
// per-head forms, one token to many chunks (skipped without a CUDA device).
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "normgate/harness/runner.h"
#include "normgate/kernels/plan.h"
#include "normgate/kernels/rmsnorm.h"
#include "util/gpu_test_util.h"
#include "util/kernel_test_util.h"

namespace normgate::kernels::test {
namespace {

const Variant& heads() { return variant("bwd_det_heads"); }

TEST(BwdDetHeads, ServesThePerHeadViewsAtH256Only) {
  const Variant& v = heads();
  EXPECT_EQ(v.op, Op::bwd);
  EXPECT_EQ(v.mode, Mode::det);
  EXPECT_FALSE(v.control);
  EXPECT_EQ(v.h_min, 256);
  EXPECT_EQ(v.h_max, 256);
  EXPECT_FALSE(v.supports_h(255));
  EXPECT_FALSE(v.supports_h(257));
  EXPECT_TRUE(v.supports(Form::heads24));
  EXPECT_TRUE(v.supports(Form::heads4));
  EXPECT_FALSE(v.supports(Form::plain));
  EXPECT_FALSE(v.supports(Form::res));
  EXPECT_TRUE(v.supports(WDtype::bf16));
  EXPECT_TRUE(v.supports(WDtype::fp32));
  // The kernel's geometry: plan.h's team at H = 256 is one warp, one slot.
  EXPECT_EQ(bwd_row_geometry(256).team, 32);
  EXPECT_EQ(bwd_row_geometry(256).slots, 1);
}

TEST(BwdDetHeads, TakesBwdDetChunkedsWorkspace) {
  for (const int64_t rows : {int64_t{1}, int64_t{24}, int64_t{4 * 131072}, int64_t{24 * 131072}, int64_t{0}})
    EXPECT_EQ(bwd_workspace_bytes(heads(), rows, 256), bwd_workspace_bytes(variant("bwd_det_chunked"), rows, 256))
        << rows << " rows";
}

// The launch API's own checks (validate_bwd, before any launch): host memory
// stands in for device memory, which validation never dereferences.
TEST(BwdDetHeads, LaunchApiRefusesPlainRowsResAndOtherHNamingThem) {
  const int64_t T = 8, nh = 4;
  std::vector<double> arena(size_t{1} << 18);  // 2 MiB
  auto* base = reinterpret_cast<unsigned char*>(arena.data());
  size_t used = 0;
  auto take = [&](size_t n) {
    if (used + n > arena.size() * sizeof(double)) throw std::runtime_error("test arena too small");
    void* p = base + used;
    used += (n + 255) / 256 * 256;
    return p;
  };
  auto args = [&](int64_t H, Form form) {
    used = 0;
    const int64_t h = form == Form::heads4 ? nh : 1, rows = T * h;
    BwdArgs b;
    b.form = form;
    b.heads = h;
    b.dy = static_cast<uint16_t*>(take(rows * H * 2));
    b.x = static_cast<uint16_t*>(take(rows * H * 2));
    b.dx = static_cast<uint16_t*>(take(rows * H * 2));
    b.dy_stride = b.x_stride = b.dx_stride = h * H;
    b.dy_stride_h = b.x_stride_h = b.dx_stride_h = form == Form::heads4 ? H : 0;
    b.w = WeightView{WDtype::fp32, take(H * 4), H};
    b.rstd = static_cast<float*>(take(rows * 4));
    b.dw = static_cast<float*>(take(H * 4));
    b.T = T;
    b.H = H;
    if (form == Form::res) {
      b.dh_new = static_cast<uint16_t*>(take(rows * H * 2));
      b.dh_new_stride = H;
    }
    b.workspace_bytes = bwd_workspace_bytes(variant("bwd_det_chunked"), rows, H);
    b.workspace = take(b.workspace_bytes);
    return b;
  };
  EXPECT_NO_THROW(validate_bwd(heads(), args(256, Form::heads4)));
  for (const Form f : {Form::plain, Form::res}) {
    try {
      validate_bwd(heads(), args(256, f));
      ADD_FAILURE() << "form " << to_string(f) << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(to_string(f))), std::string::npos) << e.what();
    }
  }
  try {
    (void)bwd_workspace_bytes(heads(), 100, 512);
    ADD_FAILURE() << "H = 512 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("H = 512 is out of range 256..256"), std::string::npos) << e.what();
  }
}

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
