// tests/oracle/seeds_integration_test.cpp: the reference on inputs from the
// project's generator (seeds::generate_host), every family, against MPFR.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"
#include "util/oracle_test_util.h"

namespace ngt {
namespace {


// Finite bound => |v - exact| <= bound; non-finite value => bound +inf.
void check_case(const std::string& id, bool expect_all_finite) {
  SCOPED_TRACE(id);
  Case cs = from_seeds(id);
  for (RstdMode mode : {RstdMode::fp64, RstdMode::fp32_rounded}) {
    SCOPED_TRACE(mode == RstdMode::fp64 ? "fp64" : "fp32_rounded");
    Reference ref = Reference::compute(cs.problem(), {0, mode});
    std::vector<float> f32(cs.R);
    for (int64_t r = 0; r < cs.R; ++r) f32[r] = ref.rstd_f32(r);
    MpRef m(cs, mode, f32);
    int64_t checked = 0, unbounded = 0, fails = 0;
    auto check = [&](const char* what, int64_t a, int64_t b, const VB& v, const mp& ex, double scale) {
      if (!std::isfinite(v.v)) {
        EXPECT_EQ(v.bound, std::numeric_limits<double>::infinity());
      }
      if (!std::isfinite(v.bound)) {
        ++unbounded;
        return;
      }
      ++checked;
      if (!within(v, ex, scale) && fails++ < 5)
        ADD_FAILURE() << what << "(" << a << "," << b << ") v=" << v.v << " bound=" << v.bound
                      << " exact=" << to_d(ex);
    };
    for (int64_t r = 0; r < cs.R; ++r) {
      check("rstd", r, 0, ref.rstd(r), m.rs[r], std::fabs(ref.rstd(r).v));
      check("c", r, 0, ref.c(r), m.cc[r], std::fabs(ref.c(r).v) + 1);
      for (int64_t j = 0; j < cs.H; ++j) {
        check("y", r, j, ref.y(r, j), m.y(r, j), std::fabs(ref.y(r, j).v));
        check("dx", r, j, ref.dx(r, j), m.dx(r, j), std::fabs(ref.dx(r, j).v) + 1);
      }
    }
    for (int64_t j = 0; j < cs.H; ++j) {
      check("dw", j, 0, ref.dw(j), m.dw[j], ref.dw_abs(j));
      if (std::isfinite(ref.dw(j).bound)) {
        EXPECT_LE(ref.dw(j).bound, 0x1p-51 * std::fabs(ref.dw(j).v) + 0x1p-80 * ref.dw_abs(j)) << j;
      }
    }
    double kmax = 0;
    for (int64_t j = 0; j < cs.H; ++j)
      if (std::isfinite(ref.dw(j).bound)) kmax = std::max(kmax, ref.dw_abs(j) / std::fabs(ref.dw(j).v));
    std::printf("  %-48s %s: %lld values checked, %lld unbounded (non-finite inputs), max dw cond %.2e\n",
                id.c_str(), mode == RstdMode::fp64 ? "fp64" : "fp32", (long long)checked,
                (long long)unbounded, kmax);
    if (expect_all_finite) {
      EXPECT_EQ(unbounded, 0);
    }
    EXPECT_GT(checked, 0);
  }
}

TEST(ReferenceSeeds, EveryFamilyAgainstMpfr) {
  check_case("H=128,T=48,w=bf16,family=normal,seed=1", true);
  check_case("H=96,T=40,w=fp32,family=llm,seed=2", true);
  check_case("H=64,T=64,w=bf16,family=cancel,seed=3", true);
  check_case("H=64,T=64,w=fp32,family=cancel,seed=4,kappa=1e12", true);
  check_case("H=100,T=30,w=bf16,family=zeros,seed=5", true);
  check_case("H=100,T=30,w=fp32,family=tiny,seed=6", true);
  check_case("H=100,T=30,w=bf16,family=huge,seed=7", true);
  check_case("H=256,T=64,w=fp32,family=specials,seed=8", false);
}

}  // namespace
}  // namespace ngt
