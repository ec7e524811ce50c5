// tests/kernels/models/fwd_rstd_test.cpp: The forward's rstd (rstd.h) against the oracle: the FP32 value nearest to
// the exact 1/sqrt(mean(x^2) + eps) of every row, for every family, including
// rows whose FP32 sum of squares overflows (`huge`) or underflows (`tiny`).
// The CPU model is what the GPU kernel computes bit for bit (tests/kernels/variant_driver.cpp),
// so this holds on the GPU too. A row may differ only where the oracle cannot
// certify its own FP32 rounding (rstd_f32_certain: the exact value within its
// bound of a rounding boundary); none does in these cases.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "normgate/kernels/models.h"
#include "normgate/kernels/registry.h"
#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"

namespace {

using namespace normgate;

TEST(ForwardRstd, CorrectlyRoundedOnEveryRowOfEveryFamily) {
  int rows_checked = 0;
  for (seeds::Family f : {seeds::Family::normal, seeds::Family::llm, seeds::Family::cancel, seeds::Family::zeros,
                          seeds::Family::tiny, seeds::Family::huge}) {
    for (int64_t H : {64, 1001, 2056, 4096, 8200, 16384}) {  // one slot (64, 1001), two (plan.h row geometry)
      seeds::CaseId c;
      c.H = H;
      c.T = 96;
      c.family = f;
      c.seed = 5;
      const auto in = seeds::generate_host(c);
      const kernels::FwdResult fr = kernels::model_fwd(kernels::default_fwd(), in.x_view(), in.w_view(), c.eps, 1);
      const oracle::Problem p{in.x_view(), in.dy_view(), in.w_view(), c.eps};
      const auto ref = oracle::Reference::compute(p, {1, oracle::RstdMode::fp64});
      for (int64_t r = 0; r < in.rows; ++r) {
        ASSERT_TRUE(ref.rstd_f32_certain(r)) << seeds::to_string(c) << " row " << r;
        ASSERT_EQ(fr.rstd[static_cast<size_t>(r)], ref.rstd_f32(r)) << seeds::to_string(c) << " row " << r;
        ASSERT_TRUE(std::isfinite(fr.rstd[static_cast<size_t>(r)]));
        ++rows_checked;
      }
    }
  }
  EXPECT_EQ(rows_checked, 6 * 6 * 96);  // families x H x rows
}

}  // namespace
