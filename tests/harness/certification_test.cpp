// tests/harness/certification_test.cpp: Tests for certification in the validators: certified() per comparison
// (checked exactly with MPFR at the points where err/tol can turn), the
// three-way verdict of RatioStats / CaseResult / CheckReport, merging, the
// oracle options taken from the budget table, and end to end: an FP64-only
// oracle on a hand-built cancellation case gives INCONCLUSIVE (its bounds
// cannot decide), the escalated oracle decides.
#include <gtest/gtest.h>
#include <mpfr.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/core/bf16.h"
#include "normgate/oracle/reference.h"
#include "normgate/validators/check.h"
#include "normgate/harness/pipeline.h"
#include "util/stats_eq.h"

namespace nv = normgate::validators;
namespace no = normgate::oracle;
using normgate::bf16_from_float;
using normgate::bf16_to_float;
using normgate::Outputs;
using nv::Output;
using nv::RatioStats;
using nv::Verdict;
using nv::testing::expect_same;

namespace {

const double inf = std::numeric_limits<double>::infinity();
const double nan_ = std::numeric_limits<double>::quiet_NaN();

// ---- certified(): the rules ----------------------------------------------------------

TEST(Certified, Rules) {
  const nv::Budget dw = nv::budget(Output::dw), exact = nv::budget(Output::h_new), rs = nv::budget(Output::rstd);
  // tol(ref = 0) = 1e-4 for dw.
  EXPECT_TRUE(nv::certified(dw, 0.5e-4, 0.0, 0.0));              // exact reference
  EXPECT_TRUE(nv::certified(dw, 0.5e-4, 0.0, 1e-6));             // err + b << tol
  EXPECT_FALSE(nv::certified(dw, 0.99e-4, 0.0, 2e-6));           // could cross 1
  EXPECT_TRUE(nv::certified(dw, 3e-4, 0.0, 1e-6));               // certain failure
  EXPECT_FALSE(nv::certified(dw, 1.01e-4, 0.0, 2e-6));           // failure not certain
  EXPECT_FALSE(nv::certified(dw, 0.5e-4, 0.0, inf));             // no enclosure
  EXPECT_FALSE(nv::certified(dw, 0.5e-4, 0.0, nan_));
  EXPECT_TRUE(nv::certified(dw, nan_, 0.0, 1e3));                // NaN vs any real X: fails
  EXPECT_TRUE(nv::certified(dw, inf, 1.0, inf));                 // Inf vs any real X: fails
  EXPECT_TRUE(nv::certified(dw, 1.0, inf, inf));                 // non-finite ref: IEEE rules
  EXPECT_TRUE(nv::certified(dw, nan_, nan_, inf));
  EXPECT_TRUE(nv::certified(exact, 1.0, 2.0, 5.0));              // bitwise budgets ignore bounds
  // tol 0 (rstd at ref 0, rtol only): any positive bound leaves X != 0 possible.
  EXPECT_FALSE(nv::certified(rs, 0.0, 0.0, 1e-300));
  EXPECT_TRUE(nv::certified(rs, 0.0, 0.0, 0.0));
  // The relative part of tol moves with X: err + (1 + rtol) b <= tol is the test.
  const double ref = 1.0, t = 1e-4 + 1e-4 * ref;
  const double b = 1e-9, err_ok = t - (1 + 1e-4) * b * (1 + 1e-12) - 1e-15;
  EXPECT_TRUE(nv::certified(dw, ref + err_ok * 0.999, ref, b));
  EXPECT_FALSE(nv::certified(dw, ref + t * 0.99999999, ref, b));
}

// Exact real verdict |got - X| <= atol + rtol |X| with MPFR (inputs are doubles;
// 2200 bits hold every sum/product exactly).
bool real_pass(const nv::Budget& b, double got, const mpfr_t X) {
  mpfr_t d, t, a;
  mpfr_inits2(2200, d, t, a, static_cast<mpfr_ptr>(nullptr));
  mpfr_sub_d(d, X, got, MPFR_RNDN);
  mpfr_abs(d, d, MPFR_RNDN);
  mpfr_abs(a, X, MPFR_RNDN);
  mpfr_mul_d(t, a, b.rtol, MPFR_RNDN);
  mpfr_add_d(t, t, b.atol, MPFR_RNDN);
  const bool pass = mpfr_lessequal_p(d, t);
  mpfr_clears(d, t, a, static_cast<mpfr_ptr>(nullptr));
  return pass;
}

TEST(Certified, CertifiedVerdictsHoldForEveryXInTheEnclosure) {
  // f(X) = |got - X| - rtol |X| - atol is piecewise linear with kinks at got
  // and 0, so its sign over [ref - b, ref + b] is decided at the ends and the
  // kinks inside. For every certified comparison all of them must give the
  // verdict of ratio(); the random set is built so that many are near 1.
  std::mt19937_64 g(2024);
  std::uniform_real_distribution<double> u01(0, 1);
  int64_t certified = 0, uncertified = 0;
  for (Output o : {Output::y, Output::rstd, Output::dx, Output::dw}) {
    const nv::Budget B = nv::budget(o);
    for (int i = 0; i < 20000; ++i) {
      const double ref = (u01(g) < 0.1) ? 0.0 : std::ldexp(u01(g) - 0.5, int(g() % 20) - 10);
      const double tol = nv::tolerance(B, ref);
      const double ratio_target = std::ldexp(u01(g), int(g() % 6) - 3) * ((g() & 1) ? 1 : -1);
      double got = ref + ratio_target * tol;
      if (i % 7 == 0) got = ref + ((g() & 1) ? tol : -tol) * (1 + (u01(g) - 0.5) * 1e-9);  // at the edge
      const double bound = (i % 11 == 0) ? 0.0 : tol * std::ldexp(u01(g), -int(g() % 40));
      const bool pass = nv::ratio(B, got, ref) <= 1.0;
      if (!nv::certified(B, got, ref, bound)) {
        ++uncertified;
        continue;
      }
      ++certified;
      mpfr_t X, lo, hi;
      mpfr_inits2(2200, X, lo, hi, static_cast<mpfr_ptr>(nullptr));
      mpfr_set_d(lo, ref, MPFR_RNDN);
      mpfr_sub_d(lo, lo, bound, MPFR_RNDN);
      mpfr_set_d(hi, ref, MPFR_RNDN);
      mpfr_add_d(hi, hi, bound, MPFR_RNDN);
      std::vector<double> kinks = {got, 0.0};
      bool ok = real_pass(B, got, lo) == pass && real_pass(B, got, hi) == pass;
      for (double k : kinks) {
        mpfr_set_d(X, k, MPFR_RNDN);
        if (mpfr_greaterequal_p(X, lo) && mpfr_lessequal_p(X, hi)) ok = ok && real_pass(B, got, X) == pass;
      }
      mpfr_clears(X, lo, hi, static_cast<mpfr_ptr>(nullptr));
      ASSERT_TRUE(ok) << nv::to_string(o) << " got " << got << " ref " << ref << " bound " << bound;
    }
  }
  EXPECT_GT(certified, 10000);
  EXPECT_GT(uncertified, 100);
}

// ---- RatioStats: counts, least certain element, verdict ---------------------------------

TEST(RatioStatsCertification, CountsAndVerdict) {
  RatioStats s(Output::dw);  // tol at ref 0: 1e-4
  s.add(0, 0.2e-4, 0.0, 1e-9, 0.0);
  EXPECT_EQ(s.verdict(), Verdict::pass);
  EXPECT_TRUE(s.pass());
  EXPECT_EQ(s.uncertain.index, -1);
  s.add(1, 0.99e-4, 0.0, 3e-6, 0.0);  // could cross: inconclusive
  s.add(2, 0.5e-4, 0.0, 6e-5, 0.0);   // could cross, larger bound/tol
  s.add(3, 0.5e-4, 0.0, 6e-5, 0.0);   // same bound/tol, higher index
  EXPECT_EQ(s.uncertified, 3);
  EXPECT_EQ(s.over, 0);
  EXPECT_EQ(s.verdict(), Verdict::inconclusive);
  EXPECT_FALSE(s.pass());
  EXPECT_TRUE(s.inconclusive());
  EXPECT_EQ(s.uncertain.index, 2);
  EXPECT_EQ(s.uncertain.bound, 6e-5);
  EXPECT_EQ(s.uncertain.got, 0.5e-4);
  s.add(4, 1.02e-4, 0.0, 1e-5, 0.0);  // over budget but not certainly
  EXPECT_EQ(s.over, 1);
  EXPECT_EQ(s.over_certified, 0);
  EXPECT_EQ(s.verdict(), Verdict::inconclusive);
  s.add(5, 9e-4, 0.0, 1e-6, 0.0);  // a certain failure decides
  EXPECT_EQ(s.over_certified, 1);
  EXPECT_EQ(s.verdict(), Verdict::fail);
  EXPECT_FALSE(s.inconclusive());
  EXPECT_EQ(nv::combine(Verdict::pass, Verdict::inconclusive), Verdict::inconclusive);
  EXPECT_EQ(nv::combine(Verdict::fail, Verdict::inconclusive), Verdict::fail);
  EXPECT_EQ(nv::combine(Verdict::pass, Verdict::pass), Verdict::pass);
  EXPECT_EQ(nv::to_string(Verdict::inconclusive), "inconclusive");
}

TEST(RatioStatsCertification, MergeEqualsSequentialWithUncertified) {
  std::mt19937_64 g(5);
  std::uniform_real_distribution<double> u01(0, 1);
  const int n = 3000;
  std::vector<std::array<double, 3>> v(n);
  for (int i = 0; i < n; ++i) {
    const double ref = u01(g) * 4 - 2, tol = 1e-2 + 1e-2 * std::fabs(ref);
    v[i] = {ref + (u01(g) * 2 - 1) * 1.2 * tol, ref, (i % 3 == 0) ? 0.04 * tol : 1e-12};
  }
  for (int i : {100, 700, 2100}) v[i] = {1.0 + 0.019, 1.0, 0.01};  // tied least certain (bound/tol 0.5)
  RatioStats seq(Output::dx);
  for (int i = 0; i < n; ++i) seq.add(i, v[i][0], v[i][1], v[i][2], v[i][1]);
  EXPECT_GT(seq.uncertified, 50);
  EXPECT_EQ(seq.uncertain.index, 100);
  const int cuts[] = {0, 333, 700, 701, 2500, n};
  RatioStats fwd(Output::dx), rev(Output::dx);
  std::vector<RatioStats> parts;
  for (int c = 0; c + 1 < 6; ++c) {
    RatioStats p(Output::dx);
    for (int i = cuts[c]; i < cuts[c + 1]; ++i) p.add(i, v[i][0], v[i][1], v[i][2], v[i][1]);
    parts.push_back(p);
  }
  for (const auto& p : parts) fwd.merge(p);
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) rev.merge(*it);
  expect_same(fwd, seq);
  expect_same(rev, seq);
}

// ---- oracle options from the budget table ---------------------------------------------------

TEST(OracleOptions, ToleranceFromTheBudgetTable) {
  const no::Options o = nv::oracle_options(no::RstdMode::fp32_rounded, no::OracleMode::mpfr, 3);
  EXPECT_EQ(o.rstd, no::RstdMode::fp32_rounded);
  EXPECT_EQ(o.oracle, no::OracleMode::mpfr);
  EXPECT_EQ(o.threads, 3);
  const std::pair<Output, no::Tolerance> t[] = {
      {Output::y, o.escalation.y}, {Output::rstd, o.escalation.rstd}, {Output::dx, o.escalation.dx}, {Output::dw, o.escalation.dw}};
  const no::EscalationPolicy defaults{};
  const no::Tolerance d[] = {defaults.y, defaults.rstd, defaults.dx, defaults.dw};
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(std::string(nv::to_string(t[i].first)));
    EXPECT_EQ(t[i].second.atol, nv::budget(t[i].first).atol);
    EXPECT_EQ(t[i].second.rtol, nv::budget(t[i].first).rtol);
    // The oracle's defaults agree with the budget table too.
    EXPECT_EQ(d[i].atol, nv::budget(t[i].first).atol);
    EXPECT_EQ(d[i].rtol, nv::budget(t[i].first).rtol);
  }
  EXPECT_EQ(nv::oracle_options(no::RstdMode::fp64).oracle, no::OracleMode::auto_);
  EXPECT_EQ(nv::CheckRequest{}.oracle, no::OracleMode::auto_);
}

// ---- end to end: FP64-only is inconclusive where its bounds cannot decide ---------------------

/// 64 rows, 8 columns: columns 0..5 carry pairs +-2^(70..100) that cancel
/// exactly (x = +-1, so every row has the same rstd) plus a small signal;
/// columns 6, 7 are ordinary. The plain-FP64 reference is wrong beyond the dw
/// budget on the cancelling columns, and its bounds say so.
struct HandCase {
  int64_t R = 64, H = 8;
  std::vector<uint16_t> x, dy, w;
  no::Problem p;
  HandCase() {
    std::mt19937_64 g(21);
    std::normal_distribution<double> n01(0, 1);
    x.resize(R * H);
    dy.assign(R * H, 0);
    for (auto& v : x) v = bf16_from_float((g() & 1) ? 1.0f : -1.0f);
    for (int64_t j = 0; j < H; ++j) {
      if (j < 6) {
        for (int64_t i = 0; i < 24; ++i) {
          const float big = std::ldexp(1.0f + float(g() % 128) / 128.0f, 70 + int(g() % 31));
          dy[i * H + j] = bf16_from_float(big * bf16_to_float(x[i * H + j]));
          dy[(i + 24) * H + j] = bf16_from_float(-big * bf16_to_float(x[(i + 24) * H + j]));
        }
        for (int64_t r = 48; r < R; ++r) dy[r * H + j] = bf16_from_float(float(0.01 * n01(g)));
      } else {
        for (int64_t r = 0; r < R; ++r) dy[r * H + j] = bf16_from_float(float(n01(g)));
      }
    }
    w.assign(H, bf16_from_float(1.0f));
    p.x = normgate::RowView<uint16_t>::plain(x.data(), R, H);
    p.dy = normgate::RowView<uint16_t>::plain(dy.data(), R, H);
    p.w = {normgate::WDtype::bf16, w.data(), H};
    p.eps = 1e-6;
  }
};

/// The ideal kernel's outputs from a (certified) reference pair.
Outputs ideal_outputs(const HandCase& c, const no::Reference& ref, const no::Reference& ideal) {
  Outputs o;
  o.y.resize(c.R * c.H);
  o.dx.resize(c.R * c.H);
  o.rstd.resize(c.R);
  o.dw.resize(c.H);
  for (int64_t r = 0; r < c.R; ++r) {
    o.rstd[r] = ref.rstd_f32(r);
    for (int64_t j = 0; j < c.H; ++j) {
      o.y[r * c.H + j] = bf16_from_float(nv::round_to_bf16(ref.y(r, j).v));
      o.dx[r * c.H + j] = bf16_from_float(nv::round_to_bf16(ideal.dx(r, j).v));
    }
  }
  for (int64_t j = 0; j < c.H; ++j) o.dw[j] = static_cast<float>(ideal.dw(j).v);
  return o;
}

TEST(CertifiedCheck, Fp64OnlyIsInconclusiveEscalatedDecides) {
  const HandCase c;
  auto refs = [&](no::OracleMode m) {
    return std::pair{no::Reference::compute(c.p, nv::oracle_options(no::RstdMode::fp64, m)),
                     no::Reference::compute(c.p, nv::oracle_options(no::RstdMode::fp32_rounded, m))};
  };
  const auto [ra, ia] = refs(no::OracleMode::auto_);
  const auto [rf, iff] = refs(no::OracleMode::fp64);
  // The implementation under test returns the ideal kernel's outputs (correct).
  const Outputs got = ideal_outputs(c, ra, ia);
  const nv::CaseResult auto_res = nv::validate_case(c.p, got, ra, ia, nullptr);
  const nv::CaseResult fp64_res = nv::validate_case(c.p, got, rf, iff, nullptr);
  EXPECT_EQ(auto_res.verdict(), Verdict::pass);
  EXPECT_EQ(auto_res.uncertified(), 0);
  // FP64 only: its reference is wrong beyond the budget on the cancelling
  // columns, but its bounds do not certify that: not a (false) FAIL, not a PASS.
  const RatioStats& dw = fp64_res.get(Output::dw);
  EXPECT_GT(dw.over, 0) << "the FP64 reference misses the budget (uncertified)";
  EXPECT_EQ(dw.over_certified, 0);
  EXPECT_EQ(dw.uncertified, 6);
  EXPECT_EQ(fp64_res.verdict(), Verdict::inconclusive);
  EXPECT_TRUE(fp64_res.inconclusive());
  EXPECT_FALSE(fp64_res.pass());
  EXPECT_LT(dw.uncertain.index, 6);
  EXPECT_GT(dw.uncertain.bound, dw.uncertain.tol);
  // A dw that is far off is a certain FAIL even with the FP64-only oracle.
  Outputs bad = got;
  bad.dw[7] += 1.0f;
  EXPECT_EQ(nv::validate_case(c.p, bad, rf, iff, nullptr).verdict(), Verdict::fail);
  EXPECT_EQ(nv::validate_case(c.p, bad, ra, ia, nullptr).verdict(), Verdict::fail);
  // A column within the budget but near 1 is decided by the escalated oracle.
  Outputs edge = got;
  edge.dw[2] = static_cast<float>(ra.dw(2).v + 0.9 * (1e-4 + 1e-4 * std::fabs(ra.dw(2).v)));
  EXPECT_EQ(nv::validate_case(c.p, edge, ra, ia, nullptr).verdict(), Verdict::pass);
}

TEST(CertifiedCheck, ReportAndJsonShowCertification) {
  nv::CheckRequest req;
  req.id = normgate::seeds::parse_case("H=32,T=17,w=bf16,family=llm,seed=3");
  req.backend = nv::Backend::cpu;
  for (no::OracleMode m : {no::OracleMode::auto_, no::OracleMode::fp64, no::OracleMode::mpfr}) {
    req.oracle = m;
    const nv::CheckReport rep = nv::run_check(req);
    EXPECT_EQ(rep.verdict(), Verdict::pass) << no::to_string(m);
    EXPECT_EQ(rep.escalations_ref.mode, m);
    if (m == no::OracleMode::mpfr) {
      EXPECT_EQ(rep.escalations_ref.rows, 17);
      EXPECT_EQ(rep.escalations_ref.dw, 32);
    } else {
      EXPECT_FALSE(rep.escalations_ref.any());
    }
    const std::string text = nv::format_report(rep);
    EXPECT_NE(text.find("uncertified"), std::string::npos) << text;
    EXPECT_NE(text.find("--oracle " + std::string(no::to_string(m))), std::string::npos) << text;
    const nlohmann::json j = nv::to_json(rep);
    EXPECT_EQ(j["verdict"], "pass");
    EXPECT_EQ(j["oracle"]["mode"], std::string(no::to_string(m)));
    EXPECT_EQ(j["impls"][0]["outputs"]["dw"]["uncertified"], 0);
    EXPECT_EQ(j["impls"][0]["outputs"]["dw"]["verdict"], "pass");
    EXPECT_EQ(j["oracle"]["escalations"]["ref"]["dw_cols"], rep.escalations_ref.dw);
  }
  // mpfr refuses big cases before any work, naming the way out.
  req.oracle = no::OracleMode::mpfr;
  req.id = normgate::seeds::parse_case("H=4096,T=4097,w=bf16,family=normal,seed=0");
  try {
    (void)nv::run_check(req);
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--oracle auto"), std::string::npos) << e.what();
  }
}

TEST(CertifiedCheck, AnInconclusiveImplementationMakesTheReportInconclusive) {
  nv::CheckReport rep;
  nv::ImplResult ok, unsure;
  ok.result.tensors = {RatioStats(Output::dw)};
  ok.result.tensors[0].add(0, 0.0, 0.0, 0.0, 0.0);
  unsure.result.tensors = {RatioStats(Output::dw)};
  unsure.result.tensors[0].add(0, 0.99e-4, 0.0, 1e-5, 0.0);
  rep.impls = {ok, unsure};
  EXPECT_EQ(rep.verdict(), Verdict::inconclusive);
  EXPECT_TRUE(rep.inconclusive());
  EXPECT_FALSE(rep.pass());
  EXPECT_EQ(unsure.result.uncertified(), 1);
  const std::string text = nv::format_report(rep);
  EXPECT_NE(text.find("verdict  INCONCLUSIVE"), std::string::npos) << text;
  EXPECT_NE(text.find("dw INCONCLUSIVE: 1 of 1 comparisons uncertified"), std::string::npos) << text;
  EXPECT_EQ(nv::to_json(rep)["verdict"], "inconclusive");
  rep.impls[0].result.tensors[0].add(1, 1.0, 0.0, 0.0, 0.0);  // a certain failure wins
  EXPECT_EQ(rep.verdict(), Verdict::fail);
}

TEST(CertifiedCheck, CampaignCountsInconclusiveApart) {
  nv::Aggregate a;
  EXPECT_EQ(a.inconclusive, 0);
  std::vector<normgate::seeds::CaseId> cases = {normgate::seeds::parse_case("H=16,T=5,w=bf16,family=normal,seed=1")};
  const auto aggs = nv::run_campaign(cases, {"fp32-baseline"}, nv::Backend::cpu, 0, {}, no::OracleMode::mpfr);
  ASSERT_EQ(aggs.size(), 1u);
  EXPECT_EQ(aggs[0].cases, 1);
  EXPECT_EQ(aggs[0].failed, 0);
  EXPECT_EQ(aggs[0].inconclusive, 0);
  EXPECT_NE(nv::format_aggregates(aggs).find("| inconclusive |"), std::string::npos);
}

}  // namespace
