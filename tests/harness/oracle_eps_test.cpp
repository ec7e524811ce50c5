// tests/harness/oracle_eps_test.cpp: the oracle of a check solves the
// problem the kernels are given: eps = float32(case eps) exactly
// (seeds::kernel_eps), not the case's binary64 eps. On epsnear rows (mean
// square near eps) the two differ by ~1e-9 relative in rstd, enough to move
// about one row in a hundred across an FP32 rounding boundary: the kernels'
// correctly rounded rstd (their CPU model) must then equal the oracle's
// RN_fp32(exact rstd) on every row.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "normgate/harness/pipeline.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/registry.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"

namespace nv = normgate::validators;
namespace nk = normgate::kernels;
namespace ns = normgate::seeds;

namespace {

TEST(OracleEps, TheOracleUsesTheKernelsFloat32Eps) {
  for (const char* id : {"H=64,T=3000,w=bf16,form=plain,family=epsnear,seed=3",
                         "H=96,T=2000,w=fp32,form=plain,family=epsnear,seed=5,eps=1e-05"}) {
    SCOPED_TRACE(id);
    const ns::CaseId c = ns::parse_case(id);
    const ns::HostInputs in = ns::generate_host(c, 2);
    const nv::CaseOracle co(in, normgate::oracle::OracleMode::fp64, 2, false);
    const float eps32 = static_cast<float>(c.eps);
    EXPECT_EQ(co.problem.eps, static_cast<double>(eps32));
    EXPECT_EQ(co.problem.eps, ns::kernel_eps(c.eps));
    EXPECT_NE(co.problem.eps, c.eps);  // neither 1e-6 nor 1e-5 is a float32
    const nk::FwdResult f = nk::model_fwd(nk::default_fwd(), in.x_view(), in.w_view(), eps32, 2);
    ASSERT_EQ(static_cast<int64_t>(f.rstd.size()), c.rows());
    int64_t differ = 0, uncertain = 0;
    for (int64_t r = 0; r < c.rows(); ++r) {
      if (!co.ref.rstd_f32_certain(r)) {
        ++uncertain;
        continue;
      }
      differ += f.rstd[static_cast<size_t>(r)] != co.ref.rstd_f32(r);
    }
    EXPECT_EQ(uncertain, 0);
    EXPECT_EQ(differ, 0) << "rows whose kernel rstd is not the oracle's RN_fp32(rstd)";
  }
}

// The eps a case's kernels use: float32(eps), as a double, for the values
// the rule admits (both ends included) and the default.
TEST(OracleEps, KernelEpsIsFloat32Eps) {
  EXPECT_EQ(ns::kernel_eps(ns::kDefaultEps), static_cast<double>(1e-6f));
  EXPECT_EQ(ns::kernel_eps(ns::kMinEps), ns::kMinEps);
  EXPECT_EQ(ns::kernel_eps(ns::kMaxEps), ns::kMaxEps);
  EXPECT_EQ(ns::kernel_eps(0x1p-23), 0x1p-23);
}

}  // namespace
