// tests/harness/validate_cases_test.cpp: validate_cases (one oracle sweep for several implementations) must give
// exactly what validate_case gives for each implementation alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"
#include "normgate/validators/check.h"
#include "normgate/harness/pipeline.h"

namespace nv = normgate::validators;

TEST(ValidateCases, EqualsOneAtATime) {
  const auto c = normgate::seeds::parse_case("H=96,T=515,w=fp32,form=plain,family=llm,seed=3");
  const auto in = normgate::seeds::generate_host(c);
  const normgate::oracle::Problem p{in.x_view(), in.dy_view(), in.w_view(), c.eps};
  const auto ref = normgate::oracle::Reference::compute(p, {0, normgate::oracle::RstdMode::fp64});
  const auto ideal = normgate::oracle::Reference::compute(p, {0, normgate::oracle::RstdMode::fp32_rounded});
  const auto base = normgate::oracle::fp32_baseline(p);
  auto other = base;  // a second implementation that differs: one dx element and one dw element off
  other.dx[777] ^= 0x0040;
  other.dw[5] *= 1.01f;
  const auto many = nv::validate_cases(p, {&base, &other}, ref, ideal, &base, 3);
  ASSERT_EQ(many.size(), 2u);
  const normgate::Outputs* one[] = {&base, &other};
  for (size_t k = 0; k < 2; ++k) {
    const auto single = nv::validate_case(p, *one[k], ref, ideal, &base, 2);
    ASSERT_EQ(single.tensors.size(), many[k].tensors.size());
    for (size_t t = 0; t < single.tensors.size(); ++t) {
      const auto& a = single.tensors[t];
      const auto& b = many[k].tensors[t];
      EXPECT_EQ(a.worst.index, b.worst.index) << k << " " << nv::to_string(a.output());
      EXPECT_EQ(a.worst.ratio, b.worst.ratio) << k << " " << nv::to_string(a.output());
      EXPECT_EQ(a.over, b.over);
      EXPECT_EQ(a.max_forced, b.max_forced);
      EXPECT_EQ(a.hist.count, b.hist.count);
    }
    EXPECT_EQ(single.dw_vs_fp32_worst, many[k].dw_vs_fp32_worst);
  }
  // The two implementations really were told apart.
  EXPECT_NE(many[0].get(nv::Output::dw).worst.ratio, many[1].get(nv::Output::dw).worst.ratio);
}

// Bitwise identical tensors are validated once and their statistics shared;
// a tensor that differs in one bit must still get its own statistics. Three
// implementations: a, a copy of a (every tensor shared), and b = a with one
// y element and one dx element changed (those tensors not shared).
TEST(ValidateCases, SharedIdenticalTensorsStillEqualOneAtATime) {
  const auto c = normgate::seeds::parse_case("H=64,T=300,w=bf16,form=plain,family=cancel,seed=2");
  const auto in = normgate::seeds::generate_host(c);
  const normgate::oracle::Problem p{in.x_view(), in.dy_view(), in.w_view(), c.eps};
  const auto ref = normgate::oracle::Reference::compute(p, {0, normgate::oracle::RstdMode::fp64});
  const auto ideal = normgate::oracle::Reference::compute(p, {0, normgate::oracle::RstdMode::fp32_rounded});
  const auto a = normgate::oracle::fp32_baseline(p);
  const auto a2 = a;
  auto b = a;
  b.y[4242] ^= 0x0100;  // a big change: y's worst element moves there
  b.dx[17] ^= 0x0001;   // one ulp
  const auto many = nv::validate_cases(p, {&a, &a2, &b}, ref, ideal, &a, 2);
  const normgate::Outputs* one[] = {&a, &a2, &b};
  for (size_t k = 0; k < 3; ++k) {
    const auto single = nv::validate_case(p, *one[k], ref, ideal, &a, 1);
    for (size_t t = 0; t < single.tensors.size(); ++t) {
      const auto& s = single.tensors[t];
      const auto& m = many[k].tensors[t];
      EXPECT_EQ(s.worst.index, m.worst.index) << k << " " << nv::to_string(s.output());
      EXPECT_EQ(s.worst.ratio, m.worst.ratio) << k << " " << nv::to_string(s.output());
      EXPECT_EQ(s.n, m.n);
      EXPECT_EQ(s.hist.count, m.hist.count) << k << " " << nv::to_string(s.output());
    }
  }
  EXPECT_EQ(many[2].get(nv::Output::y).worst.index, 4242);
  EXPECT_NE(many[0].get(nv::Output::y).worst.index, 4242);
}

// validate_present: the given tensors get exactly validate_case's statistics,
// the absent ones are left out (and their oracle rows need not be evaluated);
// nothing given is an error, and null pointers stay an error for validate_cases.
TEST(ValidatePresent, GivenTensorsEqualValidateCaseAbsentOnesLeftOut) {
  const auto c = normgate::seeds::parse_case("H=80,T=211,w=bf16,form=plain,family=cancel,seed=4");
  const auto in = normgate::seeds::generate_host(c);
  const nv::CaseOracle co(in, normgate::oracle::OracleMode::auto_, 2);
  auto got = co.baseline;
  got.dx[333] ^= 0x0040;
  const auto full = nv::validate_case(co.problem, got, co.ref, co.ideal, &co.baseline, 2);
  nv::OutputsRef fwd_only{&got.y, &got.rstd, nullptr, nullptr, nullptr};
  const auto f = nv::validate_present(co.problem, fwd_only, co.ref, co.ideal, &co.baseline, 1);
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[0].output(), nv::Output::y);
  EXPECT_EQ(f.tensors[1].output(), nv::Output::rstd);
  EXPECT_THROW(f.get(nv::Output::dx), std::out_of_range);
  EXPECT_TRUE(std::isnan(f.dw_vs_fp32_worst));
  nv::OutputsRef bwd_only{nullptr, nullptr, &got.dx, &got.dw, nullptr};
  const auto b = nv::validate_present(co.problem, bwd_only, co.ref, co.ideal, &co.baseline, 3);
  ASSERT_EQ(b.tensors.size(), 2u);
  EXPECT_EQ(b.dw_vs_fp32_worst, full.dw_vs_fp32_worst);
  EXPECT_EQ(b.dw_max_condition, full.dw_max_condition);
  for (const auto* part : {&f, &b})
    for (const auto& s : part->tensors) {
      const auto& w = full.get(s.output());
      EXPECT_EQ(s.worst.index, w.worst.index) << nv::to_string(s.output());
      EXPECT_EQ(s.worst.ratio, w.worst.ratio) << nv::to_string(s.output());
      EXPECT_EQ(s.n, w.n);
      EXPECT_EQ(s.hist.count, w.hist.count);
      EXPECT_EQ(s.uncertified, w.uncertified);
    }
  EXPECT_EQ(b.get(nv::Output::dx).worst.index, 333);
  EXPECT_THROW(nv::validate_present(co.problem, nv::OutputsRef{}, co.ref, co.ideal, &co.baseline),
               std::invalid_argument);
  EXPECT_THROW(nv::validate_cases(co.problem, std::vector<nv::OutputsRef>{fwd_only}, co.ref, co.ideal, &co.baseline),
               std::invalid_argument);
}

// run_checks: results in order, each equal to run_check's; an invalid request
// is reported as that request's error and the others still run.
TEST(RunChecks, InOrderErrorsCarriedAndEqualToRunCheck) {
  using namespace normgate;
  std::vector<nv::CheckRequest> reqs(3);
  const char* ids[] = {"H=32,T=40,w=bf16,form=plain,family=normal,seed=1",
                       "H=32,T=41,w=bf16,form=plain,family=normal,seed=1",
                       "H=48,T=33,w=fp32,form=plain,family=cancel,seed=2"};
  for (int i = 0; i < 3; ++i) {
    reqs[i].id = seeds::parse_case(ids[i]);
    reqs[i].impls = {"bwd_det_chunked", "fp32-baseline"};
    reqs[i].backend = nv::Backend::cpu;
    reqs[i].threads = 1;
  }
  reqs[1].impls = {"bwd_no_such_variant"};  // throws in prepare_check
  std::vector<size_t> order;
  std::vector<std::string> errors(3);
  std::vector<double> dw(3, -1);
  const nv::PipelineStats st = nv::run_checks(
      3, [&](size_t i) { return reqs[i]; },
      [&](size_t i, nv::CheckReport* rep, std::exception_ptr err) {
        order.push_back(i);
        if (err) {
          try {
            std::rethrow_exception(err);
          } catch (const std::exception& e) {
            errors[i] = e.what();
          }
          EXPECT_EQ(rep, nullptr);
          return;
        }
        ASSERT_NE(rep, nullptr);
        dw[i] = rep->impls[0].result.get(nv::Output::dw).worst.ratio;
      });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(st.cases, 3);
  EXPECT_FALSE(st.overlapped);  // CPU backend: no overlap
  EXPECT_NE(errors[1].find("bwd_no_such_variant"), std::string::npos) << errors[1];
  for (int i : {0, 2}) {
    EXPECT_TRUE(errors[i].empty()) << errors[i];
    EXPECT_EQ(dw[i], nv::run_check(reqs[i]).impls[0].result.get(nv::Output::dw).worst.ratio);
    EXPECT_GT(dw[i], 0.0);
  }
}

// The per-head forms go through the whole check on the CPU models: heads are
// rows of 256 (T*heads of them) sharing one w[256]; real variants pass the
// gate families, the FP32-column-sum control fails cancel.
TEST(RunChecks, HeadFormsOnTheCpuModels) {
  for (const char* id : {"H=256,T=40,w=bf16,form=heads24,family=cancel,seed=3",
                         "H=256,T=300,w=fp32,form=heads4,family=cancel,seed=1"}) {
    nv::CheckRequest req;
    req.id = normgate::seeds::parse_case(id);
    req.impls = {"bwd_det_chunked", "bwd_nondet_atomic", "ctl_fp32_seq"};
    req.backend = nv::Backend::cpu;
    req.threads = 2;
    const nv::CheckReport rep = nv::run_check(req);
    ASSERT_EQ(rep.impls.size(), 3u);
    EXPECT_EQ(rep.impls[0].result.get(nv::Output::dx).n, req.id.rows() * 256) << id;
    EXPECT_EQ(rep.impls[0].result.get(nv::Output::rstd).n, req.id.rows()) << id;
    EXPECT_TRUE(rep.impls[0].result.pass()) << id;
    EXPECT_TRUE(rep.impls[1].result.pass()) << id;
    EXPECT_FALSE(rep.impls[2].result.pass()) << id;
    EXPECT_GT(rep.impls[2].result.get(nv::Output::dw).worst.ratio, 1.0) << id;
  }
}

// Form res on the CPU models: the model computes h_new = BF16(h + u) itself
// and must match the check's independent h_new bit for bit; dh = dx + dh_new
// stays in the dx budget; the control still fails dw on cancel; the FP32
// baseline (with its own FP32-rounded h_new) runs too.
TEST(RunChecks, ResidualFormOnTheCpuModels) {
  nv::CheckRequest req;
  req.id = normgate::seeds::parse_case("H=200,T=333,w=fp32,form=res,family=cancel,seed=4");
  req.impls = {"bwd_det_chunked", "ctl_fp32_seq", "fp32-baseline"};
  req.backend = nv::Backend::cpu;
  req.threads = 2;
  const nv::CheckReport rep = nv::run_check(req);
  ASSERT_EQ(rep.impls.size(), 3u);
  const auto& det = rep.impls[0].result;
  EXPECT_TRUE(det.pass());
  EXPECT_EQ(det.get(nv::Output::h_new).n, 333 * 200);
  EXPECT_EQ(det.get(nv::Output::h_new).over, 0);
  EXPECT_GT(det.get(nv::Output::dx).worst.ratio, 0.01);  // dh is compared, not vacuous
  EXPECT_FALSE(rep.impls[1].result.pass());
  EXPECT_GT(rep.impls[1].result.get(nv::Output::dw).worst.ratio, 1.0);
  EXPECT_EQ(rep.impls[2].result.get(nv::Output::h_new).n, 333 * 200);
}

// finish_check moves the FP32 baseline into its implementation's entry
// (no copy): named twice (a request not from expand_impls), both entries are
// complete and equal, both results equal the one-entry check's, and the
// "dw vs FP32" of another implementation does not change.
TEST(RunChecks, BaselineNamedTwiceOrWithOthersGivesTheSameResults) {
  using nlohmann::json;
  nv::CheckRequest req;
  req.id = normgate::seeds::parse_case("H=200,T=333,w=bf16,form=res,family=llm,seed=6");
  req.backend = nv::Backend::cpu;
  req.threads = 2;
  auto impl_json = [](const nv::ImplResult& ir) {
    json j;
    for (const auto& t : ir.result.tensors) j[std::string(nv::to_string(t.output()))] = nv::to_json(t);
    j["dw_vs_fp32_worst"] = ir.result.dw_vs_fp32_worst;
    j["dw_vs_fp32_median"] = ir.result.dw_vs_fp32_median;
    return j.dump();
  };
  req.impls = {"fp32-baseline"};
  const nv::CheckReport one = nv::run_check(req);
  req.impls = {"bwd_det_chunked"};
  const nv::CheckReport det = nv::run_check(req);
  req.impls = {"fp32-baseline", "bwd_det_chunked", "fp32-baseline"};
  size_t seen = 0;
  const nv::CheckReport three = nv::finish_check(nv::prepare_check(req), [&](const nv::CheckInternals& in) {
    ASSERT_EQ(in.outs.size(), 3u);
    const auto& a = in.outs[0];
    const auto& b = in.outs[2];
    EXPECT_EQ(a.y.size(), static_cast<size_t>(333 * 200));
    EXPECT_EQ(a.h_new.size(), static_cast<size_t>(333 * 200));
    EXPECT_EQ(a.dw.size(), 200u);
    EXPECT_TRUE(a.y == b.y && a.dx == b.dx && a.h_new == b.h_new && a.rstd == b.rstd);
    EXPECT_EQ(0, std::memcmp(a.dw.data(), b.dw.data(), a.dw.size() * sizeof(float)));
    ++seen;
  });
  EXPECT_EQ(seen, 1u);
  ASSERT_EQ(three.impls.size(), 3u);
  EXPECT_EQ(impl_json(three.impls[0]), impl_json(one.impls[0]));
  EXPECT_EQ(impl_json(three.impls[2]), impl_json(one.impls[0]));
  EXPECT_EQ(impl_json(three.impls[1]), impl_json(det.impls[0]));
}

// The oracle's row pass and the validation sweep take rows in dynamic chunks
// (which thread takes which rows varies from run to run): every number of a
// report must still be the same for any thread count and any run. Whole
// checks (every variant and the FP32 baseline, CPU models) on families cancel
// and huge, forms plain, res, heads24 and heads4, T = 1 and T = 0, oracle
// modes auto and mpfr (every row from MPFR), against the 1-thread report,
// "seconds" fields removed.
TEST(RunChecks, ReportsIndependentOfThreadsAndSchedule) {
  using nlohmann::json;
  const std::function<void(json&)> drop_seconds = [&drop_seconds](json& j) {
    if (j.is_object()) {
      j.erase("seconds");
      for (auto& [k, v] : j.items()) drop_seconds(v);
    } else if (j.is_array()) {
      for (auto& v : j) drop_seconds(v);
    }
  };
  const std::pair<const char*, normgate::oracle::OracleMode> cases[] = {
      {"H=1024,T=300,w=bf16,form=plain,family=cancel,seed=1", normgate::oracle::OracleMode::auto_},
      {"H=256,T=77,w=bf16,form=heads24,family=cancel,seed=3", normgate::oracle::OracleMode::auto_},
      {"H=256,T=301,w=fp32,form=heads4,family=huge,seed=4", normgate::oracle::OracleMode::auto_},
      {"H=700,T=129,w=bf16,form=res,family=huge,seed=2", normgate::oracle::OracleMode::auto_},
      {"H=1001,T=1,w=fp32,form=res,family=cancel,seed=7", normgate::oracle::OracleMode::auto_},
      {"H=128,T=0,w=bf16,form=plain,family=normal,seed=0", normgate::oracle::OracleMode::auto_},
      {"H=100,T=40,w=fp32,form=plain,family=huge,seed=5", normgate::oracle::OracleMode::mpfr},
  };
  for (const auto& [id, mode] : cases) {
    SCOPED_TRACE(id);
    nv::CheckRequest req;
    req.id = normgate::seeds::parse_case(id);
    req.impls = nv::expand_impls({"all", "fp32-baseline"});
    req.skip_unsupported = true;  // "all": the controls of one form (res, heads) sit out the plain cases
    req.backend = nv::Backend::cpu;
    req.oracle = mode;
    req.threads = 1;
    json want = nv::to_json(nv::run_check(req));
    drop_seconds(want);
    for (int t : {2, 3, 5, 8, 3}) {
      SCOPED_TRACE(t);
      req.threads = t;
      json got = nv::to_json(nv::run_check(req));
      drop_seconds(got);
      EXPECT_EQ(got.dump(), want.dump());  // text: -0.0 and 0.0 differ
    }
  }
}
