// tests/validators/admissibility_test.cpp: Admissibility of the gate families: the ideal kernel (exact arithmetic on
// the BF16 inputs and on the FP32-rounded rstd the forward hands to the
// backward, every output rounded once to BF16/FP32) must stay below 0.75 of
// every budget on every element. Otherwise a gate failure could be forced by
// the interface itself, not by the kernel. CI runs small shapes; the H200 grid
// reports the same "forced" part per case at T up to 131072
// (docs/results/main-job/; docs/perf/numerics.md, D7).
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "normgate/core/bf16.h"
#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"
#include "normgate/validators/check.h"

namespace nv = normgate::validators;
namespace ns = normgate::seeds;
namespace no = normgate::oracle;

namespace {

struct Adm {
  int64_t H, T;
  ns::Family f;
  normgate::WDtype w;
};

std::string label(const Adm& a) {
  return std::string(ns::to_string(a.f)) + "_H" + std::to_string(a.H) + "_T" + std::to_string(a.T) + "_w" +
         std::string(normgate::to_string(a.w));
}

std::string name(const testing::TestParamInfo<Adm>& i) { return label(i.param); }

// gtest prints a parameter in test listings (ctest's names): without this it
// dumps the struct's bytes, padding included, which vary from run to run.
void PrintTo(const Adm& a, std::ostream* os) { *os << label(a); }

class Admissible : public testing::TestWithParam<Adm> {};

TEST_P(Admissible, IdealKernelBelowThreeQuartersOfEveryBudget) {
  const Adm a = GetParam();
  ns::CaseId c;
  c.H = a.H;
  c.T = a.T;
  c.family = a.f;
  c.w = a.w;
  c.seed = 11;
  const auto in = ns::generate_host(c);
  const no::Problem p{in.x_view(), in.dy_view(), in.w_view(), c.eps};
  const auto ref = no::Reference::compute(p, {0, no::RstdMode::fp64});
  const auto ideal = no::Reference::compute(p, {0, no::RstdMode::fp32_rounded});

  // The ideal kernel's outputs: each exact value rounded once.
  normgate::Outputs got;
  const int64_t rows = in.rows, cols = in.cols;
  got.y.resize(static_cast<size_t>(rows * cols));
  got.dx.resize(got.y.size());
  got.rstd.resize(static_cast<size_t>(rows));
  got.dw.resize(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    got.rstd[r] = ref.rstd_f32(r);
    for (int64_t j = 0; j < cols; ++j) {
      got.y[r * cols + j] = normgate::bf16_from_float(nv::round_to_bf16(ref.y(r, j).v));
      got.dx[r * cols + j] = normgate::bf16_from_float(nv::round_to_bf16(ideal.dx(r, j).v));
    }
  }
  for (int64_t j = 0; j < cols; ++j) got.dw[j] = static_cast<float>(ideal.dw(j).v);

  const auto res = nv::validate_case(p, got, ref, ideal, nullptr);
  for (const auto& s : res.tensors) {
    EXPECT_LT(s.worst.ratio, 0.75) << nv::to_string(s.output()) << " worst at " << s.worst.index << ": got "
                                   << s.worst.got << " ref " << s.worst.ref;
    // The forced part the validators report is exactly this error.
    EXPECT_EQ(s.worst.ratio, s.max_forced) << nv::to_string(s.output());
  }
  // Not vacuous: rounding y and dx to BF16 costs a visible share of the budget.
  EXPECT_GT(res.get(nv::Output::dx).worst.ratio, 0.05);
}

INSTANTIATE_TEST_SUITE_P(
    GateFamilies, Admissible,
    testing::Values(Adm{256, 1025, ns::Family::normal, normgate::WDtype::bf16},
                    Adm{1000, 300, ns::Family::normal, normgate::WDtype::fp32},
                    Adm{2048, 257, ns::Family::llm, normgate::WDtype::bf16},
                    Adm{512, 1031, ns::Family::llm, normgate::WDtype::fp32},
                    Adm{64, 8193, ns::Family::cancel, normgate::WDtype::bf16},
                    Adm{256, 2049, ns::Family::cancel, normgate::WDtype::fp32}),
    name);

}  // namespace
