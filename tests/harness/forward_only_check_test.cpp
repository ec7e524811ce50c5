// tests/harness/forward_only_check_test.cpp: CheckRequest::forward_only. The
// implementations run as always, the oracle skips the backward's reference
// and the FP32 baseline, and dx, dw are left out of every result; y, rstd
// (and h_new for form res) have the statistics of the full check, field by
// field (to_json(RatioStats): every count, maximum, index and histogram bin).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/gpu_test_util.h"
#include "normgate/harness/pipeline.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"

namespace nv = normgate::validators;

namespace {

nv::CheckReport check(const std::string& id, const std::vector<std::string>& impls, bool forward_only,
                      int threads, nv::Backend backend = nv::Backend::cpu) {
  nv::CheckRequest req;
  req.id = normgate::seeds::parse_case(id);
  req.impls = impls;
  req.backend = backend;
  req.threads = threads;
  req.forward_only = forward_only;
  return nv::run_check(req);
}

TEST(ForwardOnlyCheck, ForwardStatisticsEqualTheFullCheck) {
  const std::vector<std::string> impls{"bwd_det_chunked", "bwd_nondet_atomic", "fwd_multirow", "fp32-baseline",
                                       "ctl_fp32_seq"};
  const char* ids[] = {
      "H=64,T=33,w=bf16,form=plain,family=cancel,seed=0",   "H=96,T=20,w=fp32,form=res,family=llm,seed=1",
      "H=256,T=5,w=bf16,form=heads4,family=epsnear,seed=2", "H=64,T=1,w=bf16,form=plain,family=epsnear,seed=3",
      "H=64,T=0,w=bf16,form=plain,family=normal,seed=4",    "H=80,T=17,w=fp32,form=res,family=cancel,seed=5",
  };
  for (const char* id : ids) {
    SCOPED_TRACE(id);
    std::vector<std::string> use;
    for (const auto& i : impls)
      if (nv::unsupported_reason(i, normgate::seeds::parse_case(id)).empty()) use.push_back(i);
    const nv::CheckReport full = check(id, use, false, 2);
    const nv::CheckReport fwd = check(id, use, true, 3);
    ASSERT_EQ(full.impls.size(), fwd.impls.size());
    const bool res = normgate::seeds::parse_case(id).form == normgate::Form::res;
    for (size_t k = 0; k < full.impls.size(); ++k) {
      SCOPED_TRACE(full.impls[k].impl);
      const nv::CaseResult &a = full.impls[k].result, &b = fwd.impls[k].result;
      std::vector<nv::Output> want{nv::Output::y, nv::Output::rstd};
      if (res) want.push_back(nv::Output::h_new);
      ASSERT_EQ(b.tensors.size(), want.size());
      for (size_t t = 0; t < want.size(); ++t) {
        EXPECT_EQ(b.tensors[t].output(), want[t]);
        EXPECT_EQ(nv::to_json(b.tensors[t]).dump(), nv::to_json(a.get(want[t])).dump());
      }
      EXPECT_THROW((void)b.get(nv::Output::dx), std::out_of_range);
      EXPECT_THROW((void)b.get(nv::Output::dw), std::out_of_range);
      EXPECT_TRUE(std::isnan(b.dw_vs_fp32_worst));
      EXPECT_TRUE(std::isnan(b.dw_vs_fp32_median));
    }
    // The escalations of y and rstd rows are the full oracle's; no dw column.
    EXPECT_EQ(fwd.escalations_ref.rows, full.escalations_ref.rows);
    EXPECT_EQ(fwd.escalations_ref.rstd, full.escalations_ref.rstd);
    EXPECT_EQ(fwd.escalations_ref.dw, 0);
    // The reports say so.
    const nlohmann::json j = nv::to_json(fwd);
    EXPECT_EQ(j.value("outputs", ""), "fwd");
    EXPECT_FALSE(nv::to_json(full).contains("outputs"));
    EXPECT_NE(nv::format_report(fwd).find("outputs  forward only"), std::string::npos);
    EXPECT_EQ(nv::format_report(full).find("outputs  forward only"), std::string::npos);
  }
}

// On the GPU: the forward-only check downloads no dx, dw (the kernels'
// GpuRunOptions::forward_outputs_only) and validates y, rstd (h_new) to the
// full GPU check's statistics, field by field; a forward variant's own run
// (fwd_narrow) and a backward variant's run in one request.
TEST(ForwardOnlyCheck, GpuForwardStatisticsEqualTheFullCheck) {
  using normgate::kernels::gpu_available;
  NG_REQUIRE_GPU();
  for (const char* id : {"H=256,T=300,w=bf16,form=heads24,family=cancel,seed=1",
                         "H=1000,T=65,w=fp32,form=res,family=llm,seed=2"}) {
    SCOPED_TRACE(id);
    std::vector<std::string> use;
    for (const char* i : {"bwd_det_chunked", "fwd_narrow"})
      if (nv::unsupported_reason(i, normgate::seeds::parse_case(id)).empty()) use.push_back(i);
    const nv::CheckReport full = check(id, use, false, 4, nv::Backend::gpu);
    std::vector<bool> dx_seen;
    nv::CheckRequest req;
    req.id = normgate::seeds::parse_case(id);
    req.impls = use;
    req.backend = nv::Backend::gpu;
    req.threads = 4;
    req.forward_only = true;
    const nv::CheckReport fwd = nv::finish_check(nv::prepare_check(req), [&](const nv::CheckInternals& ci) {
      for (const auto& o : ci.outs) dx_seen.push_back(!o.dx.empty() || !o.dw.empty());
    });
    ASSERT_EQ(dx_seen.size(), use.size());
    for (bool seen : dx_seen) EXPECT_FALSE(seen);  // not downloaded
    ASSERT_EQ(full.impls.size(), fwd.impls.size());
    const bool res = req.id.form == normgate::Form::res;
    for (size_t k = 0; k < full.impls.size(); ++k) {
      SCOPED_TRACE(full.impls[k].impl);
      EXPECT_EQ(fwd.impls[k].ran_on, "gpu");
      const nv::CaseResult &a = full.impls[k].result, &b = fwd.impls[k].result;
      std::vector<nv::Output> want{nv::Output::y, nv::Output::rstd};
      if (res) want.push_back(nv::Output::h_new);
      ASSERT_EQ(b.tensors.size(), want.size());
      for (size_t t = 0; t < want.size(); ++t)
        EXPECT_EQ(nv::to_json(b.tensors[t]).dump(), nv::to_json(a.get(want[t])).dump());
      EXPECT_EQ(b.verdict(), nv::Verdict::pass);
    }
  }
}

// The oracle of a forward-only check: no baseline unless it is validated,
// and the references' backward accessors refuse.
TEST(ForwardOnlyCheck, CaseOracleHasNoBackward) {
  const auto in = normgate::seeds::generate_host(
      normgate::seeds::parse_case("H=64,T=9,w=bf16,form=plain,family=llm,seed=1"), 1);
  const nv::CaseOracle fo(in, normgate::oracle::OracleMode::auto_, 1, false, true);
  EXPECT_TRUE(fo.baseline.dw.empty());
  EXPECT_TRUE(fo.baseline.rstd.empty());
  EXPECT_THROW((void)fo.ref.dw(0), std::logic_error);
  EXPECT_THROW((void)fo.ideal.dx(0, 0), std::logic_error);
  const nv::CaseOracle fob(in, normgate::oracle::OracleMode::auto_, 1, true, true);
  EXPECT_EQ(fob.baseline.y.size(), in.x.size());  // validated as an implementation: computed
  const nv::CaseOracle full(in, normgate::oracle::OracleMode::auto_, 1, false, false);
  EXPECT_EQ(full.baseline.dw.size(), 64u);
}

}  // namespace
