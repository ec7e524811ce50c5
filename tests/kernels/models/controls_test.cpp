// tests/kernels/models/controls_test.cpp: the model-only negative controls
// (registry.h, kernels/models/src/model_controls.cpp): each is the correct
// step (fwd_rowwise, bwd_det_chunked) with exactly its fault, bit for bit
// where the fault does not reach, and the fault where it does. Whether the
// gate's families kill them: tests/gate/mutation_test.cpp.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <string>

#include "util/kernel_test_util.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/rmsnorm.h"
#include "normgate/kernels/rstd.h"

namespace normgate::kernels::test {
namespace {

RowView<uint16_t> rows(const std::vector<uint16_t>& v, int64_t R, int64_t H) {
  return RowView<uint16_t>::plain(v.data(), R, H);
}

struct Step {
  seeds::HostInputs in;
  int64_t heads;
  Outputs run(const char* v, float eps, int threads = 0) const {
    const int64_t R = in.rows, H = in.cols;
    const bool res = in.id.form == Form::res;
    return run_model(variant(v), in.x_view(), in.dy_view(), in.w_view(), eps, threads,
                     res ? rows(in.u, R, H) : RowView<uint16_t>{}, res ? rows(in.dh_new, R, H) : RowView<uint16_t>{},
                     heads);
  }
};

Step step(int64_t H, int64_t T, seeds::Family f, Form form = Form::plain, double eps = seeds::kDefaultEps) {
  seeds::CaseId c = make_case(H, T, f, 5);
  c.form = form;
  c.eps = eps;
  return Step{seeds::generate_host(c), c.heads()};
}

TEST(Controls, ModelOnlyControlsAreFlaggedAndRefusedByTheLaunchApi) {
  for (const Variant& v : variants()) {
    if (!v.model_only) continue;
    EXPECT_TRUE(v.control) << v.name;
    EXPECT_FALSE(v.source_of_class.empty()) << v.name;
    try {
      (void)bwd_workspace_bytes(v, 8, 64);
      ADD_FAILURE() << v.name << ": no error";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("model-only negative control"), std::string::npos) << e.what();
    }
  }
}

TEST(Controls, RstdRoundedToBf16) {
  const Step s = step(1000, 40, seeds::Family::normal);
  const Outputs ok = s.run("bwd_det_chunked", 1e-6f), bad = s.run("ctl_rstd_bf16", 1e-6f);
  for (size_t r = 0; r < ok.rstd.size(); ++r) ASSERT_EQ(bad.rstd[r], round_bf16(ok.rstd[r])) << r;
}

TEST(Controls, EpsFaultsAreInvisibleNearMeanSquareOneAndLargeNearEps) {
  // normal rows (mean square ~1): each eps fault moves rstd by under 1e-6 relative
  const Step n = step(1000, 40, seeds::Family::normal);
  const Outputs ok = n.run("bwd_det_chunked", 1e-6f);
  for (const char* c : {"ctl_eps_outside_sqrt", "ctl_eps_dropped", "ctl_eps_bf16"}) {
    const Outputs bad = n.run(c, 1e-6f);
    for (size_t r = 0; r < ok.rstd.size(); ++r) ASSERT_NEAR(bad.rstd[r] / ok.rstd[r], 1.0, 1e-6) << c << " row " << r;
  }
  // epsnear rows: at least 1e-4 relative somewhere (the budget is 1e-5)
  const Step e = step(1000, 40, seeds::Family::epsnear);
  const Outputs eok = e.run("bwd_det_chunked", 1e-6f);
  for (const char* c : {"ctl_eps_outside_sqrt", "ctl_eps_dropped", "ctl_eps_bf16"}) {
    const Outputs bad = e.run(c, 1e-6f);
    double worst = 0;
    for (size_t r = 0; r < eok.rstd.size(); ++r) worst = std::max(worst, std::fabs(bad.rstd[r] / eok.rstd[r] - 1.0));
    EXPECT_GT(worst, 1e-4) << c;
  }
  // eps exact in BF16 (2^-20): rounding it is no fault at all, bit for bit
  const Step x = step(1000, 40, seeds::Family::epsnear, Form::plain, 0x1p-20);
  const Outputs a = x.run("bwd_det_chunked", 0x1p-20f), b = x.run("ctl_eps_bf16", 0x1p-20f);
  EXPECT_EQ(bit_diff(a.rstd, b.rstd).count, 0);
  EXPECT_EQ(bit_diff(a.y, b.y).count, 0);
  EXPECT_EQ(bit_diff(a.dx, b.dx).count, 0);
}

TEST(Controls, PaddedLanesShowOnlyWhereHIsNotAPowerOfTwo) {
  const Step p2 = step(1024, 20, seeds::Family::normal);
  EXPECT_EQ(bit_diff(p2.run("bwd_det_chunked", 1e-6f).rstd, p2.run("ctl_padded_lanes", 1e-6f).rstd).count, 0);
  const Step np = step(1000, 20, seeds::Family::normal);
  const Outputs ok = np.run("bwd_det_chunked", 1e-6f), bad = np.run("ctl_padded_lanes", 1e-6f);
  for (size_t r = 0; r < ok.rstd.size(); ++r) ASSERT_NEAR(bad.rstd[r] / ok.rstd[r], std::sqrt(1024.0 / 1000.0), 1e-6);
}

TEST(Controls, SumOfSquaresInBf16) {
  const Step s = step(2048, 20, seeds::Family::llm);
  const Outputs ok = s.run("bwd_det_chunked", 1e-6f), bad = s.run("ctl_sumsq_bf16", 1e-6f);
  double worst = 0;
  for (size_t r = 0; r < ok.rstd.size(); ++r) worst = std::max(worst, std::fabs(bad.rstd[r] / ok.rstd[r] - 1.0));
  EXPECT_GT(worst, 1e-3);
}

TEST(Controls, Warp64DropsTheUpperHalfOfEach64Columns) {
  const Step s = step(200, 30, seeds::Family::normal);
  const Outputs ok = s.run("bwd_det_chunked", 1e-6f), bad = s.run("ctl_warp64_dw", 1e-6f);
  EXPECT_EQ(bit_diff(ok.dx, bad.dx).count, 0);
  for (size_t j = 0; j < ok.dw.size(); ++j) {
    if (j % 64 >= 32)
      ASSERT_EQ(bad.dw[j], 0.0f) << j;
    else
      ASSERT_EQ(std::bit_cast<uint32_t>(bad.dw[j]), std::bit_cast<uint32_t>(ok.dw[j])) << j;
  }
}

TEST(Controls, ResidualGradientAddedBeforeTheNormBackward) {
  const Step s = step(256, 30, seeds::Family::normal, Form::res);
  const Outputs bad = s.run("ctl_res_grad_early", 1e-6f);
  // The same step as bwd_det_chunked's with dy' = BF16(dy + dh_new) and no dh_new after.
  const int64_t R = s.in.rows, H = s.in.cols;
  const std::vector<uint16_t> dy2 = model_residual_add(rows(s.in.dy, R, H), rows(s.in.dh_new, R, H));
  const Outputs want = run_model(variant("bwd_det_chunked"), s.in.x_view(), rows(dy2, R, H), s.in.w_view(), 1e-6f, 0,
                                 rows(s.in.u, R, H), {});
  EXPECT_EQ(bit_diff(bad.dx, want.dx).count, 0);
  EXPECT_EQ(bit_diff(bad.dw, want.dw).count, 0);
  const Outputs ok = s.run("bwd_det_chunked", 1e-6f);
  EXPECT_GT(bit_diff(bad.dx, ok.dx).count, 0);
  EXPECT_EQ(bit_diff(bad.rstd, ok.rstd).count, 0);  // the forward is untouched
}

TEST(Controls, HeadsShareOneRstdPerToken) {
  const Step s = step(256, 10, seeds::Family::normal, Form::heads4);
  const Outputs bad = s.run("ctl_heads_shared_stats", 1e-6f), ok = s.run("bwd_det_chunked", 1e-6f);
  for (int64_t t = 0; t < 10; ++t) {
    double ss = 0;
    for (int64_t r = t * 4; r < t * 4 + 4; ++r) ss += std::pow(ok.rstd[r], -2.0);  // mean squares (+eps) of the heads
    for (int64_t h = 0; h < 4; ++h) {
      ASSERT_EQ(bad.rstd[t * 4 + h], bad.rstd[t * 4]);
      ASSERT_NEAR(bad.rstd[t * 4 + h], 1.0 / std::sqrt(ss / 4), 1e-6);
    }
  }
}

TEST(Controls, HeadsDwReadsTheEvenHeadsBuffers) {
  const Step s = step(256, 12, seeds::Family::normal, Form::heads4);
  const Outputs bad = s.run("ctl_heads_dw_mixed", 1e-6f);
  // Reference in double: dw_j = sum over tokens of 2 * (head 0 + head 2) terms.
  for (int64_t j = 0; j < 256; ++j) {
    double want = 0;
    for (int64_t t = 0; t < 12; ++t)
      for (int64_t h : {0, 2}) {
        const int64_t r = t * 4 + h;
        want += 2.0 * bf16_to_float(s.in.dy[r * 256 + j]) * bf16_to_float(s.in.x[r * 256 + j]) * bad.rstd[r];
      }
    ASSERT_NEAR(bad.dw[j], want, 1e-5 * (1 + std::fabs(want))) << j;
  }
}

TEST(Controls, ModelsAreIndependentOfTheThreadCount) {
  for (const Variant& v : variants()) {
    if (!v.model_only) continue;
    const Form f = v.supports(Form::plain) ? Form::plain : v.supports(Form::res) ? Form::res : Form::heads4;
    const Step s = step(f == Form::plain ? 1000 : 256, 100, seeds::Family::epsnear, f);
    const Outputs a = s.run(std::string(v.name).c_str(), 1e-6f, 1), b = s.run(std::string(v.name).c_str(), 1e-6f, 4);
    EXPECT_EQ(bit_diff(a.y, b.y).count, 0) << v.name;
    EXPECT_EQ(bit_diff(a.rstd, b.rstd).count, 0) << v.name;
    EXPECT_EQ(bit_diff(a.dx, b.dx).count, 0) << v.name;
    EXPECT_EQ(bit_diff(a.dw, b.dw).count, 0) << v.name;
  }
}

}  // namespace
}  // namespace normgate::kernels::test
