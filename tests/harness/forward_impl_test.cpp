// tests/harness/forward_impl_test.cpp: a check can name a forward variant
// (pipeline.h impl_variants): it runs that forward, then the case's carrier
// backward, and its report names both; a backward variant's forward stays
// the default fwd_rowwise. On the CPU models (fwd_multirow's model is
// fwd_rowwise's, so its numbers equal the default forward's).
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/harness/pipeline.h"
#include "normgate/kernels/registry.h"
#include "normgate/seeds/case_id.h"

namespace nv = normgate::validators;
namespace nk = normgate::kernels;

namespace {

TEST(ForwardImpl, ExpandAcceptsForwardVariantsAndAllAppendsThem) {
  EXPECT_EQ(nv::expand_impls({"fwd_multirow"}), (std::vector<std::string>{"fwd_multirow"}));
  const std::vector<std::string> all = nv::expand_impls({"all"});
  // every backward variant first (controls too), then the forward variants but the default
  std::vector<std::string> want;
  for (const auto& v : nk::variants())
    if (v.op == nk::Op::bwd) want.emplace_back(v.name);
  want.emplace_back("fwd_multirow");
  want.emplace_back("fwd_narrow");
  want.emplace_back("fwd_wide");
  want.emplace_back("fwd_staged");
  EXPECT_EQ(all, want);
  EXPECT_EQ(std::count(all.begin(), all.end(), "fwd_rowwise"), 0);
  try {
    (void)nv::expand_impls({"fwd_fast"});
    ADD_FAILURE() << "unknown name accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fwd_multirow"), std::string::npos) << e.what();  // listed as known
  }
}

TEST(ForwardImpl, VariantsOfAnImplementation) {
  const auto c = normgate::seeds::parse_case("H=256,T=5,w=bf16,form=heads24,family=llm,seed=1");
  const nv::ImplVariants b = nv::impl_variants("bwd_nondet_atomic", c);
  EXPECT_EQ(b.fwd, &nk::default_fwd());
  EXPECT_EQ(b.bwd->name, "bwd_nondet_atomic");
  const nv::ImplVariants f = nv::impl_variants("fwd_multirow", c);
  EXPECT_EQ(f.fwd->name, "fwd_multirow");
  EXPECT_EQ(f.bwd->name, nv::fwd_carrier(c));
  EXPECT_EQ(f.bwd->name, "bwd_det_chunked");  // the first non-control backward variant
  EXPECT_EQ(nv::impl_variants("fwd_rowwise", c).fwd, &nk::default_fwd());
  EXPECT_THROW((void)nv::impl_variants("fp32-baseline", c), std::invalid_argument);
  EXPECT_THROW((void)nv::impl_variants("nope", c), std::invalid_argument);
}

// A check naming a variant that does not take the case says what it does
// not take (fwd_narrow: rows of 256, no form res), before any work.
TEST(ForwardImpl, UnsupportedCaseNamesWhatTheVariantDoesNotTake) {
  for (const auto& [id, want] : std::vector<std::pair<std::string, std::string>>{
           {"H=512,T=3,w=bf16,form=plain,family=normal,seed=1", "(H = 512 outside 256..256)"},
           {"H=256,T=3,w=bf16,form=res,family=normal,seed=1", "(form res)"}}) {
    nv::CheckRequest req;
    req.id = normgate::seeds::parse_case(id);
    req.impls = {"fwd_narrow"};
    req.backend = nv::Backend::cpu;
    try {
      (void)nv::run_check(req);
      ADD_FAILURE() << id << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("variant fwd_narrow does not support case"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

// One check, a backward variant and fwd_multirow side by side, in every
// form: fwd_multirow's y, rstd (and h_new) statistics equal the default
// forward's bit for bit (the same model), its dx and dw those of its carrier
// after the default forward, and the report says which forward ran.
TEST(ForwardImpl, CheckRunsTheNamedForwardAndSaysSo) {
  for (const char* id : {"H=64,T=33,w=bf16,form=plain,family=cancel,seed=1",
                         "H=1001,T=9,w=fp32,form=res,family=llm,seed=2",
                         "H=256,T=7,w=bf16,form=heads24,family=normal,seed=3",
                         "H=256,T=11,w=fp32,form=heads4,family=llm,seed=4"}) {
    SCOPED_TRACE(id);
    nv::CheckRequest req;
    req.id = normgate::seeds::parse_case(id);
    req.impls = nv::expand_impls({"bwd_det_chunked", "fwd_multirow"});
    req.backend = nv::Backend::cpu;
    req.threads = 2;
    const nv::CheckReport rep = nv::run_check(req);
    ASSERT_EQ(rep.impls.size(), 2u);
    const nv::ImplResult& b = rep.impls[0];
    const nv::ImplResult& f = rep.impls[1];
    EXPECT_EQ(b.fwd, "fwd_rowwise");
    EXPECT_EQ(b.bwd, "bwd_det_chunked");
    EXPECT_EQ(f.impl, "fwd_multirow");
    EXPECT_EQ(f.fwd, "fwd_multirow");
    EXPECT_EQ(f.bwd, "bwd_det_chunked");
    EXPECT_TRUE(rep.pass());
    ASSERT_EQ(b.result.tensors.size(), f.result.tensors.size());
    for (size_t k = 0; k < b.result.tensors.size(); ++k) {
      const auto& x = b.result.tensors[k];
      const auto& y = f.result.tensors[k];
      EXPECT_EQ(x.worst.ratio, y.worst.ratio) << to_string(x.output());
      EXPECT_EQ(x.worst.index, y.worst.index) << to_string(x.output());
      EXPECT_EQ(x.worst.got, y.worst.got) << to_string(x.output());
      EXPECT_EQ(x.over, y.over) << to_string(x.output());
    }
    const std::string text = nv::format_report(rep);
    EXPECT_NE(text.find("impl     fwd_multirow on cpu model (no GPU used) (forward fwd_multirow, backward bwd_det_chunked)"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("(forward fwd_rowwise, backward bwd_det_chunked)"), std::string::npos) << text;
    const nlohmann::json j = nv::to_json(rep);
    EXPECT_EQ(j["impls"][1]["fwd"], "fwd_multirow");
    EXPECT_EQ(j["impls"][1]["bwd"], "bwd_det_chunked");
    EXPECT_EQ(j["impls"][0]["fwd"], "fwd_rowwise");
  }
}

}  // namespace
