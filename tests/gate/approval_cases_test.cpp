// tests/gate/approval_cases_test.cpp: approval_cases (gate.h), the campaign
// `normgate digest` runs again from an approval record: grid, dense grid
// around the record's worst case (clipped to the window), fresh seeds at its T.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "normgate/gate/gate.h"
#include "normgate/routing/routing.h"
#include "normgate/seeds/case_id.h"

namespace {

using namespace normgate::validators;
namespace nk = normgate::kernels;

nk::Approval record() {
  nk::Approval a;
  a.op = nk::Op::bwd;
  a.mode = nk::Mode::det;
  a.H = 64;
  a.w = normgate::WDtype::bf16;
  a.form = normgate::Form::plain;
  a.t_lo = 1;
  a.t_hi = 100;
  a.variant = "bwd_det_chunked";
  a.seed_set = "3x1";
  a.t_points = {1, 50, 100};
  a.has_strength = true;
  a.dense_points = 2;
  a.dense_step = 8;
  a.fresh_factor = 2;
  a.fresh_seeds = "llm:1..2";
  a.worst_case = "H=64,T=96,w=bf16,form=plain,family=llm,seed=0";
  return a;
}

std::vector<std::string> ids(const std::vector<normgate::seeds::CaseId>& cs) {
  std::vector<std::string> out;
  for (const auto& c : cs) out.push_back(normgate::seeds::to_string(c));
  return out;
}

TEST(ApprovalCases, GridThenDenseClippedThenFresh) {
  const std::string p = "H=64,T=", s = ",w=bf16,form=plain,family=";
  std::vector<std::string> want;
  for (const char* t : {"1", "50", "100"})
    for (const char* f : {"normal", "llm", "cancel"}) want.push_back(p + t + s + f + ",seed=0");
  // Dense: 96 - 16, 96 - 8 (96 + 8 and 96 + 16 are past T = 100), the worst's family and seed.
  want.push_back(p + "80" + s + "llm,seed=0");
  want.push_back(p + "88" + s + "llm,seed=0");
  // Fresh: its two seeds at the worst T.
  want.push_back(p + "96" + s + "llm,seed=1");
  want.push_back(p + "96" + s + "llm,seed=2");
  EXPECT_EQ(ids(approval_cases(record())), want);
}

TEST(ApprovalCases, DenseOverEverySeedWhenTheRecordSaysAll) {
  nk::Approval a = record();
  a.dense_all_seeds = true;
  a.fresh_seeds = "";
  const auto got = ids(approval_cases(a));
  ASSERT_EQ(got.size(), 9u + 2u * 3u);
  EXPECT_EQ(got[9], "H=64,T=80,w=bf16,form=plain,family=normal,seed=0");
  EXPECT_EQ(got[14], "H=64,T=88,w=bf16,form=plain,family=cancel,seed=0");
}

TEST(ApprovalCases, RecordsThatCannotBeListedThrow) {
  nk::Approval a = record();
  a.worst_case = "H=64,T=101,w=bf16,form=plain,family=llm,seed=0";  // past the window
  EXPECT_THROW(approval_cases(a), std::invalid_argument);
  a = record();
  a.has_strength = false;
  EXPECT_THROW(approval_cases(a), std::invalid_argument);
  a = record();
  a.t_points = {0, 50};
  EXPECT_THROW(approval_cases(a), std::invalid_argument);
  a = record();
  a.invalid = "record 3: field 'x': bad";
  EXPECT_THROW(approval_cases(a), std::invalid_argument);
}

}  // namespace
