// tests/harness/skip_unsupported_test.cpp: implementations that do not
// support a case (pipeline.h unsupported_reason). "all" leaves them out of
// that case and says so (CheckReport::skipped, the text report, the JSON);
// a grid naming one is refused before any case runs (require_supported,
// run_campaign); grid_skips says what "all" leaves out of a grid. On the
// CPU models.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/harness/pipeline.h"
#include "normgate/kernels/registry.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/seed_set.h"

namespace nv = normgate::validators;
namespace nk = normgate::kernels;
namespace ns = normgate::seeds;

namespace {

TEST(SkipUnsupported, ReasonNamesWhatTheVariantDoesNotTake) {
  const auto h512 = ns::parse_case("H=512,T=3,w=bf16,form=plain,family=normal,seed=0");
  const auto res = ns::parse_case("H=256,T=3,w=bf16,form=res,family=normal,seed=0");
  const auto h256 = ns::parse_case("H=256,T=3,w=fp32,form=heads4,family=normal,seed=0");
  EXPECT_EQ(nv::unsupported_reason("fwd_narrow", h512), "H = 512 outside 256..256");
  EXPECT_EQ(nv::unsupported_reason("fwd_narrow", res), "form res");
  EXPECT_EQ(nv::unsupported_reason("fwd_narrow", h256), "");
  EXPECT_EQ(nv::unsupported_reason("bwd_det_chunked", h512), "");
  EXPECT_EQ(nv::unsupported_reason("fp32-baseline", h512), "");
  EXPECT_THROW((void)nv::unsupported_reason("fwd_fast", h512), std::invalid_argument);
}

// "all" on a case of H = 512: fwd_narrow (rows of 256 only) is left out,
// named with its reason in the report, its text and its JSON; every variant
// of the registry is either run or listed as skipped, with the reason
// unsupported_reason gives.
TEST(SkipUnsupported, AllSaysWhatItLeavesOutOfACaseAndWhy) {
  nv::CheckRequest req;
  req.id = ns::parse_case("H=512,T=3,w=bf16,form=plain,family=normal,seed=0");
  req.impls = nv::expand_impls({"all"});
  req.backend = nv::Backend::cpu;
  req.threads = 2;
  req.skip_unsupported = true;
  const nv::CheckReport rep = nv::run_check(req);
  auto skipped = [&](const std::string& impl) {
    return std::find_if(rep.skipped.begin(), rep.skipped.end(), [&](const nv::Skipped& s) { return s.impl == impl; });
  };
  auto ran = [&](const std::string& impl) {
    return std::any_of(rep.impls.begin(), rep.impls.end(), [&](const nv::ImplResult& r) { return r.impl == impl; });
  };
  ASSERT_NE(skipped("fwd_narrow"), rep.skipped.end());
  EXPECT_EQ(skipped("fwd_narrow")->why, "H = 512 outside 256..256");
  EXPECT_FALSE(ran("fwd_narrow"));
  EXPECT_TRUE(ran("bwd_det_chunked"));
  EXPECT_TRUE(ran("fwd_multirow"));
  EXPECT_EQ(rep.impls.size() + rep.skipped.size(), req.impls.size());
  for (const auto& name : req.impls) {
    const std::string why = nv::unsupported_reason(name, req.id);
    EXPECT_EQ(ran(name), why.empty()) << name;
    if (!why.empty()) {
      ASSERT_NE(skipped(name), rep.skipped.end()) << name;
      EXPECT_EQ(skipped(name)->why, why) << name;
    }
  }
  const std::string text = nv::format_report(rep);
  EXPECT_NE(text.find("skipped  fwd_narrow: H = 512 outside 256..256\n"), std::string::npos) << text;
  const nlohmann::json j = nv::to_json(rep);
  ASSERT_TRUE(j["skipped"].is_array());
  EXPECT_EQ(j["skipped"].size(), rep.skipped.size());
  bool found = false;
  for (const auto& s : j["skipped"]) found = found || (s["impl"] == "fwd_narrow" && s["why"] == "H = 512 outside 256..256");
  EXPECT_TRUE(found) << j["skipped"].dump();

  // Rows of 256: fwd_narrow runs, and is not listed.
  req.id = ns::parse_case("H=256,T=3,w=bf16,form=plain,family=normal,seed=0");
  const nv::CheckReport rep256 = nv::run_check(req);
  EXPECT_TRUE(std::any_of(rep256.impls.begin(), rep256.impls.end(), [](const auto& r) { return r.impl == "fwd_narrow"; }));
  EXPECT_TRUE(std::none_of(rep256.skipped.begin(), rep256.skipped.end(), [](const auto& s) { return s.impl == "fwd_narrow"; }));
  EXPECT_EQ(nv::format_report(rep256).find("skipped  fwd_narrow"), std::string::npos);
}

// A grid of H 256 and 512: the H = 256 cases come first, yet a grid naming
// fwd_narrow is refused before any of them runs, naming the variant, its
// first unsupported case, why, and how many it does not support.
TEST(SkipUnsupported, GridNamingAnUnsupportedVariantIsRefusedBeforeAnyWork) {
  nv::Grid g;
  g.H = {256, 512};
  g.T = {3};
  g.w = {normgate::WDtype::bf16};
  g.seeds = ns::parse_seed_set("normal:0..1");
  const auto cases = g.cases();
  ASSERT_EQ(cases.size(), 4u);
  ASSERT_EQ(cases.front().H, 256);
  const std::vector<std::string> impls{"bwd_det_chunked", "fwd_narrow"};
  int ran = 0;
  try {
    (void)nv::run_campaign(cases, impls, nv::Backend::cpu, 2, [&](const nv::CheckReport&) { ++ran; });
    ADD_FAILURE() << "the grid was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("variant fwd_narrow does not support case H=512,T=3,w=bf16,form=plain,family=normal,seed=0 "
                     "(H = 512 outside 256..256)"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("2 of the grid's 4 cases"), std::string::npos) << m;
  }
  EXPECT_EQ(ran, 0) << "cases ran before the refusal";
  EXPECT_THROW(nv::require_supported(cases, impls), std::invalid_argument);
  // Every case supported: nothing to refuse.
  const std::vector<ns::CaseId> rows256(cases.begin(), cases.begin() + 2);
  EXPECT_NO_THROW(nv::require_supported(rows256, impls));
  // A named variant's first unsupported case in grid order, here the form.
  g.H = {256};
  g.forms = {normgate::Form::heads4, normgate::Form::res};
  try {
    nv::require_supported(g.cases(), {"fwd_narrow"});
    ADD_FAILURE() << "form res accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("case H=256,T=3,w=bf16,form=res,family=normal,seed=0 (form res)"),
              std::string::npos)
        << e.what();
  }
}

// What "all" leaves out of a grid: per implementation, how many cases, the
// first and why; an implementation every case supports is not listed.
TEST(SkipUnsupported, GridSkipsCountTheCasesLeftOut) {
  nv::Grid g;
  g.H = {256, 512, 1024};
  g.T = {3};
  g.w = {normgate::WDtype::bf16};
  g.seeds = ns::parse_seed_set("normal:0..1");
  const auto cases = g.cases();
  const auto skips = nv::grid_skips(cases, nv::expand_impls({"all"}));
  const auto narrow = std::find_if(skips.begin(), skips.end(), [](const nv::GridSkip& s) { return s.impl == "fwd_narrow"; });
  ASSERT_NE(narrow, skips.end());
  EXPECT_EQ(narrow->cases, 4);
  EXPECT_EQ(narrow->first_case, "H=512,T=3,w=bf16,form=plain,family=normal,seed=0");
  EXPECT_EQ(narrow->why, "H = 512 outside 256..256");
  for (const auto& s : skips) {
    EXPECT_NE(s.impl, "bwd_det_chunked");
    EXPECT_NE(s.impl, "fwd_multirow");
    EXPECT_GE(s.cases, 1);
  }
}

}  // namespace
