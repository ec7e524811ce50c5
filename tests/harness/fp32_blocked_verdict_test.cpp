// tests/harness/fp32_blocked_verdict_test.cpp: the accuracy-for-speed
// variant bwd_fp32_blocked through the whole check on the CPU models (the
// generator, the oracle and the validators the gate runs): the verdict goes
// both ways. Where its FP32 partials stay inside the dw budget (a `normal`
// case) it passes like bwd_det_chunked; on the `cancel` family, where the
// FP32 partials lose the small signal under the cancelling big terms, it
// fails dw while bwd_det_chunked (FP64 partials) passes the same case. Its dx
// is bwd_det_chunked's, so dx passes either way.
#include <gtest/gtest.h>

#include "normgate/harness/pipeline.h"
#include "normgate/seeds/case_id.h"

namespace nv = normgate::validators;

namespace {

nv::CheckReport check(const char* id) {
  nv::CheckRequest req;
  req.id = normgate::seeds::parse_case(id);
  req.impls = {"bwd_det_chunked", "bwd_fp32_blocked"};
  req.backend = nv::Backend::cpu;
  req.threads = 2;
  return nv::run_check(req);
}

TEST(Fp32BlockedVerdict, PassesANormalCase) {
  for (const char* id : {"H=512,T=4096,w=bf16,form=plain,family=normal,seed=1",
                         "H=256,T=300,w=fp32,form=heads4,family=llm,seed=2"}) {
    const nv::CheckReport rep = check(id);
    ASSERT_EQ(rep.impls.size(), 2u);
    EXPECT_TRUE(rep.impls[0].result.pass()) << id;
    const auto& f = rep.impls[1].result;
    EXPECT_TRUE(f.pass()) << id << ": dw worst err/tol " << f.get(nv::Output::dw).worst.ratio;
    EXPECT_EQ(f.get(nv::Output::dw).over, 0) << id;
    // Not vacuous: its dw error is visibly above the FP64 variant's.
    EXPECT_GT(f.get(nv::Output::dw).worst.ratio, rep.impls[0].result.get(nv::Output::dw).worst.ratio) << id;
  }
}

TEST(Fp32BlockedVerdict, FailsDwOnTheCancelFamily) {
  for (const char* id : {"H=64,T=20000,w=bf16,form=plain,family=cancel,seed=1",
                         "H=128,T=40000,w=fp32,form=plain,family=cancel,seed=2"}) {
    const nv::CheckReport rep = check(id);
    ASSERT_EQ(rep.impls.size(), 2u);
    EXPECT_TRUE(rep.impls[0].result.pass()) << id << ": bwd_det_chunked";
    const auto& f = rep.impls[1].result;
    EXPECT_FALSE(f.pass()) << id;
    EXPECT_GT(f.get(nv::Output::dw).over, 0) << id;
    EXPECT_GT(f.get(nv::Output::dw).worst.ratio, 1.0) << id;
    EXPECT_EQ(f.get(nv::Output::dx).over, 0) << id << ": dx is the det dx";
  }
}

}  // namespace
