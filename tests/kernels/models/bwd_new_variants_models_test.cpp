// tests/kernels/models/bwd_new_variants_models_test.cpp: the CPU models of
// bwd_det_onepass and bwd_fp32_blocked (models.h) beyond the registry-wide
// suites of models_test.cpp: onepass's model is bwd_det_chunked's, bit for
// bit; fp32_blocked's dw is an FP32 blocked sum that a naive reference
// written here reproduces bit for bit, its dx is the det dx, and on a
// cancelling column it loses what the FP64 variants keep. CPU; always run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "normgate/core/bf16.h"
#include "normgate/kernels/models.h"
#include "util/kernel_test_util.h"

namespace normgate::kernels::test {
namespace {

constexpr float kEps = 1e-6f;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Shapes: tiny, H % 8 != 0, more than 32 chunks (lanes with several chunks),
// the backward's wide one-CTA team, the 2-CTA cluster team.
TEST(ModelOnepass, EqualsDetChunkedBitwise) {
  struct S {
    int64_t H, T;
    seeds::Family f;
  };
  const S shapes[] = {{1, 5, seeds::Family::normal},
                      {7, 300, seeds::Family::cancel},
                      {96, 3001, seeds::Family::llm},
                      {5120, 40, seeds::Family::cancel},
                      {16384, 7, seeds::Family::normal}};
  uint64_t seed = 1;
  for (const S& s : shapes) {
    const WDtype w = seed % 2 ? WDtype::bf16 : WDtype::fp32;
    const seeds::HostInputs in = seeds::generate_host(make_case(s.H, s.T, s.f, seed++, w));
    const Outputs d = run_model(variant("bwd_det_chunked"), in.x_view(), in.dy_view(), in.w_view(), kEps, 2);
    const Outputs o = run_model(variant("bwd_det_onepass"), in.x_view(), in.dy_view(), in.w_view(), kEps, 2);
    EXPECT_EQ(d.dx, o.dx) << s.H << "x" << s.T;
    EXPECT_TRUE(same_bits(d.dw, o.dw)) << s.H << "x" << s.T;
    // Without msq (the FP32 rstd alone) too.
    const BwdResult d2 = model_bwd(variant("bwd_det_chunked"), in.x_view(), in.dy_view(), in.w_view(), d.rstd, 2);
    const BwdResult o2 = model_bwd(variant("bwd_det_onepass"), in.x_view(), in.dy_view(), in.w_view(), d.rstd, 2);
    EXPECT_TRUE(same_bits(d2.dw, o2.dw)) << s.H << "x" << s.T;
  }
}

/// The naive FP32 blocked dw, written from the variant's description: chunk c
/// of n = min(ceil(T/16), 2112) (H <= 15 here: the chunk cap is 8 x 264) holds
/// rows [c*T/n, (c+1)*T/n); its partial is s = fmaf(dy*x, rstd, s) over those
/// rows from 0 in FP32; lane L = c mod 32 sums its chunks in increasing order
/// from 0; dw = the lanes summed in order from 0, all in FP32.
std::vector<float> naive_fp32_blocked(const seeds::HostInputs& in, const std::vector<float>& rstd) {
  const int64_t T = in.rows, H = in.cols;
  const int64_t n = std::min<int64_t>((T + 15) / 16, 2112);
  std::vector<float> dw(static_cast<size_t>(H));
  for (int64_t j = 0; j < H; ++j) {
    float lane[32] = {};
    for (int64_t c = 0; c < n; ++c) {
      float s = 0.0f;
      for (int64_t r = c * T / n; r < (c + 1) * T / n; ++r) {
        const float dy = bf16_to_float(in.dy[static_cast<size_t>(r * H + j)]);
        const float x = bf16_to_float(in.x[static_cast<size_t>(r * H + j)]);
        const float p = dy * x;  // exact: two BF16 significands
        s = std::fmaf(p, rstd[static_cast<size_t>(r)], s);
      }
      lane[c % 32] = lane[c % 32] + s;
    }
    float tot = 0.0f;
    for (float l : lane) tot = tot + l;
    dw[static_cast<size_t>(j)] = tot;
  }
  return dw;
}

TEST(ModelFp32Blocked, EqualsANaiveFp32BlockedSum) {
  // T = 1000, H = 5: 63 chunks of 15-16 rows, so lanes 0..30 add two chunks
  // and lane 31 one; T = 37: 3 chunks, lanes 3..31 empty.
  for (const auto& [H, T, f] : {std::tuple{int64_t{5}, int64_t{1000}, seeds::Family::llm},
                                std::tuple{int64_t{3}, int64_t{37}, seeds::Family::normal},
                                std::tuple{int64_t{11}, int64_t{1500}, seeds::Family::cancel}}) {
    const seeds::HostInputs in = seeds::generate_host(make_case(H, T, f, 3));
    const FwdResult fw = model_fwd(default_fwd(), in.x_view(), in.w_view(), kEps, 1);
    const BwdResult b =
        model_bwd(variant("bwd_fp32_blocked"), in.x_view(), in.dy_view(), in.w_view(), fw.rstd, 2, {}, &fw.msq);
    const std::vector<float> want = naive_fp32_blocked(in, fw.rstd);
    EXPECT_TRUE(same_bits(b.dw, want)) << "H=" << H << " T=" << T << ": " << bit_diff(b.dw, want).str();
    // msq does not enter (FP32 products with the FP32 rstd).
    const BwdResult nomsq = model_bwd(variant("bwd_fp32_blocked"), in.x_view(), in.dy_view(), in.w_view(), fw.rstd, 1);
    EXPECT_TRUE(same_bits(b.dw, nomsq.dw));
  }
}

// dx is the det variant's; on a cancel case dw differs from the FP64 det dw
// in many columns and is further from the exact dw there.
TEST(ModelFp32Blocked, SharesDxAndLosesTheCancelSignal) {
  const seeds::HostInputs in = seeds::generate_host(make_case(64, 20000, seeds::Family::cancel, 17));
  const Outputs d = run_model(variant("bwd_det_chunked"), in.x_view(), in.dy_view(), in.w_view(), kEps, 2);
  const Outputs f = run_model(variant("bwd_fp32_blocked"), in.x_view(), in.dy_view(), in.w_view(), kEps, 2);
  EXPECT_EQ(d.dx, f.dx);
  const RefBwd rb = ref_bwd(in, d.rstd);
  int differ = 0;
  double err_det = 0, err_f32 = 0;
  for (size_t j = 0; j < d.dw.size(); ++j) {
    differ += d.dw[j] != f.dw[j];
    err_det = std::max(err_det, std::fabs(d.dw[j] - rb.dw[j]));
    err_f32 = std::max(err_f32, std::fabs(f.dw[j] - rb.dw[j]));
  }
  EXPECT_GT(differ, 32) << "of 64 columns";
  EXPECT_GT(err_f32, 100 * err_det) << "FP32 " << err_f32 << " vs FP64 " << err_det;
}

}  // namespace
}  // namespace normgate::kernels::test
