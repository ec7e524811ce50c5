// tests/harness/admissible_test.cpp: every family point the default gate set
// (seed_set.h 5xN) adds is admissible: an ideal kernel fed the FP32/BF16
// interface (exact arithmetic on the FP32 rstd, one rounding to each output
// dtype: the validators' "forced" part) stays below 0.75 of every budget, on
// every output, in every form. A point where the interface alone came near
// the budget would fail correct kernels by chance.
#include <gtest/gtest.h>

#include <string>

#include "normgate/harness/pipeline.h"
#include "normgate/seeds/seed_set.h"

namespace {

using namespace normgate;
using namespace normgate::validators;

TEST(Admissible, NewFamilyPointsLeaveTheIdealKernelBelow075OfEveryBudget) {
  const seeds::SeedSet all = seeds::parse_seed_set("5x2");
  const seeds::SeedSet old = seeds::parse_seed_set("3x2");
  struct Shape {
    int64_t H, T;
    WDtype w;
    Form form;
  };
  const Shape shapes[] = {{1000, 300, WDtype::bf16, Form::plain},
                          {4096, 64, WDtype::fp32, Form::plain},
                          {256, 200, WDtype::fp32, Form::res},
                          {256, 50, WDtype::bf16, Form::heads24}};
  int points = 0;
  for (const seeds::FamilyPoint& pt : all.points()) {
    bool is_new = true;
    for (const auto& o : old.points()) is_new = is_new && !(o == pt);
    if (!is_new) continue;
    ++points;
    for (const Shape& sh : shapes)
      for (uint64_t seed : {0u, 1u}) {
        CheckRequest req;
        req.id.H = sh.H;
        req.id.T = sh.T;
        req.id.w = sh.w;
        req.id.form = sh.form;
        req.id.family = pt.family;
        req.id.seed = seed;
        req.id.eps = pt.eps;
        req.id.kappa = pt.kappa;
        req.impls = {"bwd_det_chunked"};
        req.backend = Backend::cpu;
        const CheckReport rep = run_check(req);
        const std::string id = seeds::to_string(req.id);
        ASSERT_EQ(rep.impls.size(), 1u);
        EXPECT_TRUE(rep.pass()) << id << ": a real variant fails the point";
        for (const RatioStats& s : rep.impls[0].result.tensors) {
          if (s.output() == Output::h_new) continue;  // bitwise budget: no forced part
          EXPECT_LT(s.max_forced, 0.75) << id << " " << to_string(s.output());
        }
      }
  }
  EXPECT_EQ(points, 6);  // epsnear at three eps, cancel at three lower kappas
}

}  // namespace
