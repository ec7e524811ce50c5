// tests/kernels/bwd_det_wreg_test.cpp: bwd_det_wreg (registry.h) beyond the
// generic checks of variant_driver.cpp. Its H range is exactly where plan.h
// gives the backward one CTA of at most 512 threads (bwd_det_chunked's
// narrow kernel), it takes bwd_det_chunked's workspace and refuses other H
// and the per-head forms (CPU, always run); on the GPU its dx and dw are
// bwd_det_chunked's bit for bit on both paths, both weight dtypes, plain and
// res, one row to many chunks, and res layouts (misaligned, padded) give the
// same bits (skipped without a CUDA device).
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

const Variant& wreg() { return variant("bwd_det_wreg"); }

TEST(BwdDetWreg, RangeIsWherePlanGivesOneCtaOfAtMost512Threads) {
  const Variant& v = wreg();
  EXPECT_EQ(v.op, Op::bwd);
  EXPECT_EQ(v.mode, Mode::det);
  EXPECT_FALSE(v.control);
  int64_t covered = 0;
  for (int64_t H = 1; H <= kMaxH; ++H) {
    const RowGeometry g = bwd_row_geometry(H);
    const bool one_narrow_cta = g.slots == 1 && g.team <= kMaxCtaTeam;
    ASSERT_EQ(v.supports_h(H), one_narrow_cta) << "H = " << H << ": team " << g.team << ", slots " << g.slots;
    covered += one_narrow_cta;
  }
  EXPECT_EQ(covered, 4096);
  EXPECT_EQ(bwd_row_geometry(4096).team, 512);
  EXPECT_EQ(bwd_row_geometry(4097).team, 544);
  EXPECT_TRUE(v.supports(Form::plain));
  EXPECT_TRUE(v.supports(Form::res));
  EXPECT_FALSE(v.supports(Form::heads24));
  EXPECT_FALSE(v.supports(Form::heads4));
  EXPECT_TRUE(v.supports(WDtype::bf16));
  EXPECT_TRUE(v.supports(WDtype::fp32));
}

TEST(BwdDetWreg, TakesBwdDetChunkedsWorkspace) {
  for (const auto& [T, H] : {std::pair<int64_t, int64_t>{1, 1}, {65537, 1536}, {131072, 4096}, {0, 2048}})
    EXPECT_EQ(bwd_workspace_bytes(wreg(), T, H), bwd_workspace_bytes(variant("bwd_det_chunked"), T, H))
        << T << " x " << H;
}

TEST(BwdDetWreg, RefusesHOutsideItsRangeNamingIt) {
  for (int64_t H : {int64_t{4097}, int64_t{6144}, int64_t{16384}}) {
    try {
      (void)bwd_workspace_bytes(wreg(), 100, H);
      ADD_FAILURE() << "H = " << H << " accepted";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("H = " + std::to_string(H)), std::string::npos) << m;
      EXPECT_NE(m.find("1..4096"), std::string::npos) << m;
    }
  }
}

// The launch API's own checks (validate_bwd, before any launch): host memory
// stands in for device memory, which validation never dereferences.
TEST(BwdDetWreg, LaunchApiRefusesOtherHAndPerHeadFormsNamingThem) {
  const int64_t T = 8;
  std::vector<double> arena(size_t{1} << 20);  // 8 MiB: two calls' buffers (about 1.2 MiB each) fit
  auto* base = reinterpret_cast<unsigned char*>(arena.data());
  size_t used = 0;
  auto take = [&](size_t n) {
    if (used + n > arena.size() * sizeof(double)) throw std::runtime_error("test arena too small");
    void* p = base + used;
    used += (n + 255) / 256 * 256;
    return p;
  };
  auto args = [&](int64_t H) {
    BwdArgs b;
    b.dy = static_cast<uint16_t*>(take(T * H * 2));
    b.dy_stride = H;
    b.x = static_cast<uint16_t*>(take(T * H * 2));
    b.x_stride = H;
    b.w = WeightView{WDtype::fp32, take(H * 4), H};
    b.rstd = static_cast<float*>(take(T * 4));
    b.dx = static_cast<uint16_t*>(take(T * H * 2));
    b.dx_stride = H;
    b.dw = static_cast<float*>(take(H * 4));
    b.T = T;
    b.H = H;
    b.workspace_bytes = bwd_workspace_bytes(variant("bwd_det_chunked"), T, H);
    b.workspace = take(b.workspace_bytes);
    return b;
  };
  EXPECT_NO_THROW(validate_bwd(wreg(), args(4096)));
  EXPECT_NO_THROW(validate_bwd(wreg(), args(1)));
  for (int64_t H : {int64_t{4097}, int64_t{6144}}) {
    used = 0;
    try {
      validate_bwd(wreg(), args(H));
      ADD_FAILURE() << "H = " << H << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("H = " + std::to_string(H) + " is out of range 1..4096"),
                std::string::npos)
          << e.what();
    }
  }
  used = 0;
  BwdArgs h = args(256);
  h.form = Form::heads4;
  try {
    validate_bwd(wreg(), h);
    ADD_FAILURE() << "form heads4 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("heads4"), std::string::npos) << e.what();
  }
}

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
