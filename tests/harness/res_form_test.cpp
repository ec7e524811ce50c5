// tests/harness/res_form_test.cpp: Form res, validator side: the oracle's dh = dx + dh_new (Problem::dx_add),
// h_new checked bitwise, and the public bug classes the issue names must FAIL:
// dh_new added to dy before the norm backward instead of after it, h_new not
// written (NaN-poisoned buffer), and u = 0 must give h_new == h bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "normgate/core/bf16.h"
#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"
#include "normgate/validators/check.h"
#include "normgate/harness/pipeline.h"
#include "normgate/seeds/seed_set.h"

#include "util/row_accessors.h"

namespace nv = normgate::validators;
namespace no = normgate::oracle;
using normgate::bf16_from_float;
using normgate::bf16_sum_rn;
using normgate::bf16_to_float;

namespace {

struct ResCase {
  normgate::seeds::HostInputs in;        // x = h, u, dy, dh_new, w
  std::vector<uint16_t> h_new;           // exact BF16(h + u)
  no::Problem p;                         // x = h_new, dx_add = dh_new
};

ResCase make(const char* id) {
  ResCase c;
  c.in = normgate::seeds::generate_host(normgate::seeds::parse_case(id));
  c.h_new.resize(c.in.x.size());
  for (size_t i = 0; i < c.h_new.size(); ++i)
    c.h_new[i] = bf16_sum_rn(bf16_to_float(c.in.x[i]), bf16_to_float(c.in.u[i]));
  const int64_t R = c.in.rows, H = c.in.cols;
  c.p = no::Problem{normgate::RowView<uint16_t>::plain(c.h_new.data(), R, H), c.in.dy_view(), c.in.w_view(),
                    c.in.id.eps, normgate::RowView<uint16_t>::plain(c.in.dh_new.data(), R, H)};
  return c;
}

}  // namespace

TEST(ResForm, OracleAddsDhNewAfterTheNormBackward) {
  ResCase c = make("H=96,T=70,w=bf16,form=res,family=llm,seed=2");
  no::Problem plain = c.p;
  plain.dx_add = {};
  const auto with = no::Reference::compute(c.p, {0, no::RstdMode::fp64});
  const auto without = no::Reference::compute(plain, {0, no::RstdMode::fp64});
  std::vector<no::VB> row(96);
  int64_t nonzero_addend = 0;
  for (int64_t r = 0; r < 70; ++r) {
    with.dx_row(r, row.data());
    for (int64_t j = 0; j < 96; ++j) {
      const double a = bf16_to_float(c.in.dh_new[static_cast<size_t>(r * 96 + j)]);
      const no::VB d = without.dx(r, j);
      const double s = d.v + a;
      ASSERT_EQ(row[j].v, s) << r << "," << j;
      ASSERT_EQ(row[j].bound, d.bound + 0x1p-52 * std::fabs(s)) << r << "," << j;
      ASSERT_EQ(with.dx(r, j).v, s);
      nonzero_addend += a != 0.0;
    }
  }
  EXPECT_GT(nonzero_addend, 6000);  // dh_new is unit scale, not zeros
  normgate::test::expect_split_rows_match(with);
  normgate::test::expect_split_rows_match(no::Reference::compute(c.p, {0, no::RstdMode::fp32_rounded}));
  // dw and rstd do not see the addend.
  EXPECT_EQ(with.dw(5).v, without.dw(5).v);
  EXPECT_EQ(with.rstd(3).v, without.rstd(3).v);
}

TEST(ResForm, CorrectOutputsPassAndTheBugClassesFail) {
  ResCase c = make("H=128,T=200,w=fp32,form=res,family=normal,seed=5");
  const auto ref = no::Reference::compute(c.p, {0, no::RstdMode::fp64});
  const auto ideal = no::Reference::compute(c.p, {0, no::RstdMode::fp32_rounded});
  // A correct implementation's outputs: the FP32 baseline on the res problem
  // (its dx includes dh_new), with the exact h_new.
  normgate::Outputs good = no::fp32_baseline(c.p);
  good.h_new = c.h_new;
  const auto ok = nv::validate_case(c.p, good, ref, ideal, nullptr, 2, c.h_new);
  EXPECT_EQ(ok.get(nv::Output::dx).over, 0);
  EXPECT_EQ(ok.get(nv::Output::h_new).over, 0);

  // Bug class 1: dh_new added to dy before the norm backward.
  std::vector<uint16_t> dy_plus(c.in.dy.size());
  for (size_t i = 0; i < dy_plus.size(); ++i)
    dy_plus[i] = bf16_sum_rn(bf16_to_float(c.in.dy[i]), bf16_to_float(c.in.dh_new[i]));
  no::Problem before = c.p;
  before.dy = normgate::RowView<uint16_t>::plain(dy_plus.data(), c.in.rows, c.in.cols);
  before.dx_add = {};
  normgate::Outputs bad1 = no::fp32_baseline(before);
  bad1.h_new = c.h_new;
  const auto r1 = nv::validate_case(c.p, bad1, ref, ideal, nullptr, 2, c.h_new);
  EXPECT_FALSE(r1.get(nv::Output::dx).pass());
  EXPECT_GT(r1.get(nv::Output::dx).over, 1000);

  // Bug class 2: h_new never written (the NaN poison is still there).
  normgate::Outputs bad2 = good;
  bad2.h_new.assign(c.h_new.size(), 0x7FC0);
  const auto r2 = nv::validate_case(c.p, bad2, ref, ideal, nullptr, 2, c.h_new);
  EXPECT_EQ(r2.get(nv::Output::h_new).over, static_cast<int64_t>(c.h_new.size()));
  EXPECT_EQ(r2.verdict(), nv::Verdict::fail);
  // ... or not returned at all: a clear error naming the tensor.
  normgate::Outputs bad3 = good;
  bad3.h_new.clear();
  try {
    (void)nv::validate_case(c.p, bad3, ref, ideal, nullptr, 2, c.h_new);
    ADD_FAILURE() << "missing h_new accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("h_new"), std::string::npos) << e.what();
  }
  // h_new rounded through FP32 first (double rounding) where it matters is caught bitwise:
  // flip one element by one BF16 ulp.
  normgate::Outputs bad4 = good;
  bad4.h_new[123] ^= 0x0001;
  EXPECT_EQ(nv::validate_case(c.p, bad4, ref, ideal, nullptr, 2, c.h_new).get(nv::Output::h_new).over, 1);
}

// u = 0: h_new = BF16(h + 0) is h, bit for bit, for every BF16 h except -0
// (IEEE: -0 + +0 = +0 in round-to-nearest) and NaN (quieted, still NaN).
TEST(ResForm, ZeroResidualGivesHBack) {
  int64_t checked = 0;
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float hf = bf16_to_float(h);
    const uint16_t out = bf16_sum_rn(hf, 0.0f);
    if (std::isnan(hf)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(out)));
    } else if (h == 0x8000u) {
      EXPECT_EQ(out, 0x0000u);
    } else {
      ASSERT_EQ(out, h) << std::hex << b;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 65536 - 1 - 254);  // all but -0 and the 2 x 127 NaN patterns
}

// CaseOracle's expected h_new (round_sum_to_bf16_row by rows on OpenMP
// threads, into an uninitialized vector) is, element for element, the
// TwoSum-based bf16_sum_rn (an independent method) and the same at every
// thread count; its Problem's x is it; the baseline's h_new is
// RN_bf16(RN_fp32(h + u)). Families with sums that overflow (huge), are
// subnormal or zero (tiny, zeros); H small and odd (many rows per chunk) and
// large (one row per chunk).
TEST(ResForm, CaseOracleHNewIsTheExactSumAtAnyThreadCount) {
  for (const char* id : {"H=96,T=70,w=bf16,form=res,family=llm,seed=2", "H=3,T=9001,w=fp32,form=res,family=huge,seed=1",
                         "H=1001,T=37,w=bf16,form=res,family=tiny,seed=3",
                         "H=16384,T=3,w=bf16,form=res,family=zeros,seed=4",
                         "H=513,T=64,w=bf16,form=res,family=specials,seed=5"}) {
    const ResCase c = make(id);
    for (int threads : {1, 2, 3, 5}) {
      const nv::CaseOracle co(c.in, no::OracleMode::fp64, threads, true);
      ASSERT_EQ(co.h_new_expected.size(), c.h_new.size()) << id;
      for (size_t i = 0; i < c.h_new.size(); ++i)
        ASSERT_EQ(co.h_new_expected[i], c.h_new[i]) << id << " threads " << threads << " at " << i;
      EXPECT_EQ(co.problem.x.row(0), co.h_new_expected.data()) << id;
      ASSERT_EQ(co.baseline.h_new.size(), c.h_new.size()) << id;
      for (size_t i = 0; i < c.h_new.size(); ++i)
        ASSERT_EQ(co.baseline.h_new[i], bf16_from_float(bf16_to_float(c.in.x[i]) + bf16_to_float(c.in.u[i]))) << id;
    }
  }
}

// check's grid over forms: head forms take only H = 256 from the H list; a
// head form without 256 in it is an error naming the form.
TEST(GridForms, HeadFormsTakeOnlyH256) {
  normgate::validators::Grid g;
  g.H = {64, 256};
  g.T = {3};
  g.w = {normgate::WDtype::bf16};
  g.seeds = normgate::seeds::parse_seed_set("normal:0..1");
  g.forms = {normgate::Form::plain, normgate::Form::heads24, normgate::Form::res};
  const auto cases = g.cases();
  // plain: 2 H x 2 seeds; heads24: H=256 only x 2 seeds; res: 2 H x 2 seeds.
  ASSERT_EQ(cases.size(), 4u + 2u + 4u);
  EXPECT_EQ(cases[4].form, normgate::Form::heads24);
  EXPECT_EQ(cases[4].H, 256);
  EXPECT_EQ(cases[5].H, 256);
  EXPECT_EQ(cases[6].form, normgate::Form::res);
  EXPECT_EQ(cases[6].H, 64);
  g.H = {64};
  try {
    (void)g.cases();
    FAIL() << "heads24 without H=256 must throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("heads24 needs H=256"), std::string::npos) << e.what();
  }
}
