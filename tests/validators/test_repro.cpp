// repro.h: the k worst elements and the dw column explanation must agree with
// the validator (same worst element, same ratio), be ordered, and name the
// rows that really dominate a cancelling column.
#include <gtest/gtest.h>

#include <cmath>

#include "normgate/core/bf16.h"
#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"
#include "normgate/validators/check.h"
#include "normgate/validators/repro.h"

namespace nv = normgate::validators;
namespace no = normgate::oracle;

TEST(Repro, WorstElementsAgreeWithTheValidatorAndAreOrdered) {
  const auto c = normgate::seeds::parse_case("H=96,T=257,w=bf16,form=plain,family=llm,seed=4");
  const auto in = normgate::seeds::generate_host(c);
  const no::Problem p{in.x_view(), in.dy_view(), in.w_view(), c.eps};
  const auto ref = no::Reference::compute(p, {0, no::RstdMode::fp64});
  const auto ideal = no::Reference::compute(p, {0, no::RstdMode::fp32_rounded});
  auto got = no::fp32_baseline(p);
  got.dx[5000] ^= 0x0200;  // make one dx element clearly the worst
  const auto res = nv::validate_case(p, got, ref, ideal, nullptr, 2);
  for (nv::Output o : {nv::Output::y, nv::Output::rstd, nv::Output::dx, nv::Output::dw}) {
    const auto w = nv::worst_elements(p, got, ref, ideal, o, 7, 3);
    ASSERT_EQ(w.size(), 7u) << nv::to_string(o);
    EXPECT_EQ(w.front().index, res.get(o).worst.index) << nv::to_string(o);
    EXPECT_EQ(w.front().ratio, res.get(o).worst.ratio) << nv::to_string(o);
    EXPECT_EQ(w.front().forced, res.get(o).worst.forced) << nv::to_string(o);
    for (size_t i = 1; i < w.size(); ++i) EXPECT_GE(w[i - 1].ratio, w[i].ratio) << nv::to_string(o);
    for (const auto& e : w) EXPECT_NEAR(e.ratio, e.err / e.tol, 1e-12 * e.ratio) << nv::to_string(o);
  }
  EXPECT_EQ(nv::worst_elements(p, got, ref, ideal, nv::Output::dx, 1, 1).front().index, 5000);
  // Thread count does not change the answer.
  const auto a = nv::worst_elements(p, got, ref, ideal, nv::Output::y, 20, 1);
  const auto b = nv::worst_elements(p, got, ref, ideal, nv::Output::y, 20, 4);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].index, b[i].index);
  EXPECT_THROW(nv::worst_elements(p, got, ref, ideal, nv::Output::dx, 0), std::invalid_argument);
  EXPECT_THROW(nv::worst_elements(p, got, ref, ideal, nv::Output::h_new, 3), std::invalid_argument);
}

TEST(Repro, DwColumnConditioningAndTopRows) {
  const auto c = normgate::seeds::parse_case("H=32,T=300,w=fp32,form=plain,family=cancel,seed=1");
  const auto in = normgate::seeds::generate_host(c);
  const no::Problem p{in.x_view(), in.dy_view(), in.w_view(), c.eps};
  const auto ref = no::Reference::compute(p, {0, no::RstdMode::fp64});
  const auto col = nv::dw_column(p, ref, 7, 4);
  EXPECT_EQ(col.col, 7);
  EXPECT_DOUBLE_EQ(col.condition, ref.dw_abs(7) / std::fabs(ref.dw(7).v));
  EXPECT_GT(col.condition, 1e6);  // cancel: kappa 1e8 by construction
  ASSERT_EQ(col.top_rows.size(), 4u);
  // The listed rows are the largest |dy*x*rstd| of the column, recomputed here.
  double kth = std::fabs(col.top_rows.back().term), maxabs = 0;
  for (int64_t r = 0; r < p.x.rows(); ++r) {
    const double t = static_cast<double>(normgate::bf16_to_float(p.dy.row(r)[7])) *
                     static_cast<double>(normgate::bf16_to_float(p.x.row(r)[7])) * ref.rstd(r).v;
    maxabs = std::max(maxabs, std::fabs(t));
    bool listed = false;
    for (const auto& row : col.top_rows) listed = listed || row.row == r;
    if (!listed) {
      EXPECT_LE(std::fabs(t), kth) << r;
    }
  }
  EXPECT_EQ(std::fabs(col.top_rows.front().term), maxabs);
  EXPECT_THROW(nv::dw_column(p, ref, 32, 1), std::invalid_argument);
}

TEST(Repro, ReportNamesTheCaseAndACommand) {
  nv::CheckRequest req;
  req.id = normgate::seeds::parse_case("H=64,T=600,w=bf16,form=plain,family=cancel,seed=1");
  req.impls = {"ctl_fp32_seq"};
  req.backend = nv::Backend::cpu;
  req.threads = 2;
  const auto r = nv::repro(req, 3);
  EXPECT_FALSE(r.check.pass());  // the control fails cancel
  ASSERT_EQ(r.worst.size(), 4u);
  EXPECT_GT(r.worst[3].front().ratio, 1.0);
  ASSERT_EQ(r.dw_columns.size(), 3u);
  EXPECT_EQ(r.dw_columns[0].col, r.worst[3].front().index);
  const std::string text = nv::format_repro(r);
  EXPECT_NE(text.find("reproduce: normgate repro 'H=64,T=600,w=bf16,form=plain,family=cancel,seed=1' --variant "
                      "ctl_fp32_seq --backend cpu --oracle auto --k 3"),
            std::string::npos);
  req.impls = {"ctl_fp32_seq", "bwd_det_chunked"};
  EXPECT_THROW(nv::repro(req, 3), std::invalid_argument);
}
