// tests/validators/sweep_equiv_test.cpp: the validation sweep (validate_cases:
// the oracle's row loops, the BF16 conversions and RatioStats::add_row, in
// whichever SIMD clone this CPU gets: AVX-512, AVX2 or the baseline) against
// the definition, one RatioStats::add per element with the oracle's
// element accessors, for every output (y, rstd, dx, dw, h_new), on the gate's
// input families with non-finite inputs and outputs mixed in.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "normgate/core/bf16.h"
#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"
#include "normgate/validators/check.h"
#include "util/stats_eq.h"

namespace nv = normgate::validators;
namespace no = normgate::oracle;
namespace ns = normgate::seeds;
using normgate::bf16_from_float;
using normgate::bf16_to_float;
using normgate::Outputs;
using nv::Output;
using nv::testing::expect_same;

namespace {

constexpr uint16_t kNaN = 0x7FC0, kInf = 0x7F80, kNegInf = 0xFF80;

struct Fixture {
  ns::HostInputs in;
  std::vector<uint16_t> x;      // the normalized input: x, or form res's h_new = BF16(h + u)
  std::vector<uint16_t> h_new;  // form res only
  no::Problem p;
};

// The case's inputs with non-finite elements put into some rows of x and dy
// (rows whose oracle values are NaN or inf, validated by the non-finite rules).
Fixture make(const std::string& id) {
  Fixture f;
  f.in = ns::generate_host(ns::parse_case(id), 1);
  const int64_t rows = f.in.rows, cols = f.in.cols;
  auto at = [&](int64_t r, int64_t j) { return static_cast<size_t>(r * cols + j); };
  f.in.x[at(1, 7)] = kNaN;
  f.in.x[at(4, cols - 1)] = kInf;
  f.in.dy[at(6, 300)] = kNegInf;
  f.in.dy[at(rows - 1, 0)] = kNaN;
  const bool res = f.in.id.form == normgate::Form::res;
  if (res) {
    f.h_new.resize(f.in.x.size());
    nv::round_sum_to_bf16_row(f.in.x.data(), f.in.u.data(), rows * cols, f.h_new.data());
  }
  f.x = res ? f.h_new : f.in.x;
  const normgate::RowView<uint16_t> dh =
      res ? normgate::RowView<uint16_t>::plain(f.in.dh_new.data(), rows, cols) : normgate::RowView<uint16_t>{};
  f.p = no::Problem{normgate::RowView<uint16_t>::plain(f.x.data(), rows, cols), f.in.dy_view(), f.in.w_view(),
                    f.in.id.eps, dh};
  return f;
}

// An implementation's outputs: the ideal kernel's, then perturbed: every
// 13th element of y and dx moved by up to +-3 BF16 ulps, a few set to NaN,
// +-inf or a value far over budget; rstd and dw likewise.
Outputs perturbed(const Fixture& f, const no::Reference& ref, const no::Reference& ideal) {
  const int64_t rows = f.in.rows, cols = f.in.cols;
  Outputs o;
  o.y.resize(static_cast<size_t>(rows * cols));
  o.dx.resize(o.y.size());
  o.rstd.resize(static_cast<size_t>(rows));
  o.dw.resize(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    o.rstd[r] = ref.rstd_f32(r);
    for (int64_t j = 0; j < cols; ++j) {
      o.y[r * cols + j] = bf16_from_float(nv::round_to_bf16(ref.y(r, j).v));
      o.dx[r * cols + j] = bf16_from_float(nv::round_to_bf16(ideal.dx(r, j).v));
    }
  }
  for (int64_t j = 0; j < cols; ++j) o.dw[j] = static_cast<float>(ideal.dw(j).v);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  };
  for (size_t k = 0; k < o.y.size(); k += 13) {
    o.y[k] = static_cast<uint16_t>(o.y[k] + static_cast<int>(next() % 7) - 3);
    o.dx[k] = static_cast<uint16_t>(o.dx[k] + static_cast<int>(next() % 7) - 3);
  }
  o.y[3] = kNaN;
  o.y[o.y.size() / 2] = kInf;
  o.y[o.y.size() - 2] = bf16_from_float(1e4f);
  o.dx[11] = kNegInf;
  o.dx[o.dx.size() / 3] = kNaN;
  o.dx[o.dx.size() - 1] = bf16_from_float(-3e3f);
  o.rstd[2] = std::nextafter(o.rstd[2], 1e30f);
  o.rstd[5] = std::numeric_limits<float>::quiet_NaN();
  o.dw[0] = std::numeric_limits<float>::infinity();
  o.dw[9] = o.dw[9] * 1.01f;
  o.dw[static_cast<size_t>(cols - 1)] = std::nextafter(o.dw[static_cast<size_t>(cols - 1)], 0.0f);
  if (!f.h_new.empty()) {
    o.h_new = f.h_new;
    o.h_new[17] = static_cast<uint16_t>(o.h_new[17] ^ 1u);
    o.h_new[o.h_new.size() / 2] = kNaN;
    o.h_new[o.h_new.size() - 3] = kInf;
  }
  return o;
}

// The sweep of validate_cases against RatioStats::add element by element.
void check_case(const std::string& id) {
  SCOPED_TRACE(id);
  const Fixture f = make(id);
  const no::ReferencePair pair =
      no::Reference::compute_pair(f.p, nv::oracle_options(no::RstdMode::fp64, no::OracleMode::auto_, 2));
  const no::Reference &ref = pair.ref, &ideal = pair.ideal;
  const Outputs got = perturbed(f, ref, ideal);
  const Outputs base = no::fp32_baseline(f.p, 2, false);
  const nv::CaseResult res = nv::validate_cases(f.p, {&got}, ref, ideal, &base, 2, f.h_new).front();

  const int64_t rows = f.in.rows, cols = f.in.cols;
  nv::RatioStats y(Output::y), rs(Output::rstd), dx(Output::dx), dw(Output::dw), hn(Output::h_new);
  for (int64_t r = 0; r < rows; ++r) {
    const no::VB rv = ref.rstd(r);
    rs.add(r, got.rstd[r], rv.v, rv.bound, static_cast<double>(ref.rstd_f32(r)));
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t k = r * cols + j;
      const no::VB yv = ref.y(r, j), dv = ref.dx(r, j);
      y.add(k, bf16_to_float(got.y[k]), yv.v, yv.bound, nv::round_to_bf16(yv.v));
      dx.add(k, bf16_to_float(got.dx[k]), dv.v, dv.bound, nv::round_to_bf16(ideal.dx(r, j).v));
      if (!f.h_new.empty()) {
        const double e = bf16_to_float(f.h_new[k]);
        hn.add(k, bf16_to_float(got.h_new[k]), e, 0.0, e);
      }
    }
  }
  for (int64_t j = 0; j < cols; ++j) {
    const no::VB wv = ref.dw(j);
    dw.add(j, got.dw[j], wv.v, wv.bound, static_cast<double>(static_cast<float>(ideal.dw(j).v)));
  }
  std::vector<const nv::RatioStats*> want = {&y, &rs, &dx, &dw};
  if (!f.h_new.empty()) want.push_back(&hn);
  ASSERT_EQ(res.tensors.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(std::string(nv::to_string(want[i]->output())));
    expect_same(res.tensors[i], *want[i]);
  }
  // The perturbations reach the summaries (the comparison is not vacuous).
  EXPECT_GT(res.get(Output::y).over, 0);
  EXPECT_GT(res.get(Output::y).nonfinite_fail, 0);
  EXPECT_GT(res.get(Output::dx).nonfinite_fail, 0);
  EXPECT_GT(res.get(Output::rstd).nonfinite_fail, 0);
  EXPECT_GT(res.get(Output::dw).over, 0);
  if (!f.h_new.empty()) {
    EXPECT_GT(res.get(Output::h_new).over, 0);
  }
}

}  // namespace

TEST(SweepEqualsAdd, Normal) { check_case("H=1000,T=24,w=bf16,form=plain,family=normal,seed=3"); }
TEST(SweepEqualsAdd, Llm) { check_case("H=1000,T=24,w=bf16,form=plain,family=llm,seed=4"); }
TEST(SweepEqualsAdd, Cancel) { check_case("H=1000,T=24,w=bf16,form=plain,family=cancel,seed=5"); }
TEST(SweepEqualsAdd, Epsnear) { check_case("H=1000,T=24,w=fp32,form=plain,family=epsnear,seed=6"); }
TEST(SweepEqualsAdd, LlmResidual) { check_case("H=1000,T=24,w=bf16,form=res,family=llm,seed=7"); }
TEST(SweepEqualsAdd, CancelResidual) { check_case("H=520,T=40,w=bf16,form=res,family=cancel,seed=8"); }
