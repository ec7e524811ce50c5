// tests/gate/forward_only_gate_test.cpp: a case that only forward windows
// need runs forward only (CheckRequest::forward_only): its journal record
// says "outputs":"fwd" and holds y, rstd only; reports equal those from full
// records; a backward window over such a case runs it again in full; full
// records (every journal written before) serve forward windows as before.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/gate/gate.h"
#include "normgate/gate/journal.h"
#include "gate/gate_test_util.h"

using namespace normgate;
using namespace normgate::validators;
using test::lines_of;
using test::small_opts;
using test::strip_date;

namespace {

std::string temp_dir(const std::string& name) { return test::fresh_dir("test_gate_fwdonly", name); }

// Records of a journal file (digests checked): (forward-only, full).
std::pair<int, int> record_kinds(const std::string& path) {
  int fwd = 0, full = 0;
  const auto lines = lines_of(path);
  for (size_t i = 1; i < lines.size(); ++i) {
    const CaseRecord r = case_record_from_json(parse_journal_line(lines[i]));
    const nlohmann::json j = nlohmann::json::parse(lines[i]);
    if (r.forward_only) {
      ++fwd;
      EXPECT_EQ(j.value("outputs", ""), "fwd");
      for (const auto& x : j["results"]) {
        EXPECT_FALSE(x.contains("dx"));
        EXPECT_FALSE(x.contains("dw"));
        EXPECT_FALSE(x.contains("dw_vs_fp32"));
      }
    } else {
      ++full;
      EXPECT_FALSE(j.contains("outputs"));
    }
  }
  return {fwd, full};
}

std::string md(const GateResult& r) { return strip_date(format_gate_markdown(r)); }
std::string js(const GateResult& r) { return strip_date(gate_to_json(r)).dump(); }

TEST(GateForwardOnly, ForwardWindowsRunForwardOnlyWithTheReportsOfFullRecords) {
  const std::string dir = temp_dir("fwd");
  GateOptions o = small_opts();
  o.dense_points = 1;
  // The whole table (every forward case is covered by a backward window:
  // full records), journalled.
  o.journal_path = dir + "/full.jsonl";
  const GateResult whole = run_gate(o);
  EXPECT_EQ(record_kinds(o.journal_path).first, 0);

  // The forward window alone, fresh: forward-only records.
  o.windows = "op=fwd";
  o.journal_path = dir + "/fwd.jsonl";
  const GateResult fwd = run_gate(o);
  ASSERT_EQ(fwd.windows.size(), 1u);
  EXPECT_TRUE(fwd.windows[0].pass);
  const auto [nf, nfull] = record_kinds(o.journal_path);
  EXPECT_EQ(nf, fwd.cases_run_now);
  EXPECT_GT(nf, 0);
  EXPECT_EQ(nfull, 0);

  // The same window resumed from the full records (an old journal): nothing
  // runs, and the reports are the forward-only run's, byte for byte.
  o.journal_path = dir + "/full.jsonl";
  const GateResult from_full = run_gate(o);
  EXPECT_EQ(from_full.cases_run_now, 0);
  EXPECT_EQ(md(from_full), md(fwd));
  EXPECT_EQ(js(from_full), js(fwd));

  // Resumed from its own forward-only records: nothing runs, same reports.
  o.journal_path = dir + "/fwd.jsonl";
  const GateResult again = run_gate(o);
  EXPECT_EQ(again.cases_run_now, 0);
  EXPECT_EQ(md(again), md(fwd));

  // The whole table on the forward-only journal: the backward windows'
  // cases run again in full (a forward-only record is no result for them),
  // and the reports are those of the fresh whole run.
  o.windows = "";
  const GateResult upgraded = run_gate(o);
  EXPECT_GT(upgraded.cases_run_now, 0);
  EXPECT_EQ(md(upgraded), md(whole));
  EXPECT_EQ(js(upgraded), js(whole));
  // The journal now holds both kinds for the same cases, which agree: it
  // resumes, nothing runs, the same reports; the forward window alone too.
  const auto [nf2, nfull2] = record_kinds(o.journal_path);
  EXPECT_EQ(nf2, nf);
  EXPECT_GT(nfull2, 0);
  const GateResult resumed = run_gate(o);
  EXPECT_EQ(resumed.cases_run_now, 0);
  EXPECT_EQ(resumed.cases_total, whole.cases_total);
  EXPECT_EQ(md(resumed), md(whole));
  o.windows = "op=fwd";
  EXPECT_EQ(md(run_gate(o)), md(fwd));
  std::filesystem::remove_all(dir);
}

// A backward window gated alone never runs forward only; its reports do not
// change with a journal of forward-only records of other cases.
TEST(GateForwardOnly, BackwardWindowsRunInFull) {
  const std::string dir = temp_dir("bwd");
  GateOptions o = test::grid_only_opts();
  o.windows = "op=bwd,H=64";
  const GateResult fresh = run_gate(o);
  o.journal_path = dir + "/j.jsonl";
  o.windows = "op=fwd";
  (void)run_gate(o);
  o.windows = "op=bwd,H=64";
  const GateResult bwd = run_gate(o);
  EXPECT_GT(bwd.cases_run_now, 0);
  EXPECT_EQ(md(bwd), md(fresh));
  EXPECT_EQ(js(bwd), js(fresh));
  std::filesystem::remove_all(dir);
}

ImplRecord impl_record(double y_ratio) {
  ImplRecord x;
  x.impl = "bwd_det_chunked";
  x.ran_on = "cpu model (no GPU used)";
  x.out[0] = {y_ratio, 17, 0, 1.0 / 3.0, true};
  x.out[1] = {0.25, 2, 0, 0.125, true};
  x.out[2] = {2.5e-3, 100, 0, 1e-3, true};
  x.out[3] = {0.5, 5, 0, 1e-3, true};
  x.dw_vs_fp32_worst = 0.9;
  x.dw_vs_fp32_median = 0.7;
  return x;
}

CaseRecord record(bool forward_only, double y_ratio) {
  CaseRecord r;
  r.case_id = "H=64,T=3,w=bf16,form=plain,family=cancel,seed=0";
  r.impls = {"bwd_det_chunked"};
  r.results.push_back(impl_record(y_ratio));
  r.forward_only = forward_only;
  return r;
}

TEST(GateForwardOnly, RecordFormat) {
  const CaseRecord r = record(true, 0.1 + 0.2);
  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j["outputs"], "fwd");
  EXPECT_EQ(j["results"][0].size(), 4u);  // impl, ran_on, y, rstd
  const CaseRecord b = case_record_from_json(parse_journal_line(journal_line(j)));
  EXPECT_TRUE(b.forward_only);
  ASSERT_EQ(b.results.size(), 1u);
  EXPECT_EQ(b.results[0].out[0], r.results[0].out[0]);
  EXPECT_EQ(b.results[0].out[1], r.results[0].out[1]);
  for (int k : {2, 3}) {  // not produced
    EXPECT_TRUE(std::isnan(b.results[0].out[k].ratio));
    EXPECT_EQ(b.results[0].out[k].index, -1);
    EXPECT_FALSE(b.results[0].out[k].pass);
  }
  EXPECT_TRUE(std::isnan(b.results[0].dw_vs_fp32_worst));
  // A full record has no "outputs" member (as every record written before it).
  const CaseRecord full = case_record_from_json(to_json(record(false, 0.3)));
  EXPECT_FALSE(full.forward_only);
  EXPECT_FALSE(to_json(full).contains("outputs"));
  // Malformed: another value, dx in a forward-only result, with an error.
  nlohmann::json bad = j;
  bad["outputs"] = "bwd";
  EXPECT_NE(test::error_of([&] { (void)case_record_from_json(bad); }).find("outputs"), std::string::npos);
  bad = j;
  bad["results"][0]["dx"] = nlohmann::json::array({0.1, 1, 0, 0.1, true});
  EXPECT_NE(test::error_of([&] { (void)case_record_from_json(bad); }).find("'dx'"), std::string::npos);
  bad = j;
  bad["results"] = nlohmann::json::array();
  bad["error"] = "boom";
  EXPECT_NE(test::error_of([&] { (void)case_record_from_json(bad); }).find("error"), std::string::npos);
  // An error record never carries the marker.
  CaseRecord e = record(true, 0.3);
  e.results.clear();
  e.error = "boom";
  EXPECT_FALSE(to_json(e).contains("outputs"));
}

TEST(GateForwardOnly, ForwardOnlyAndFullRecordsAgreeOnTheForward) {
  const nlohmann::json fo = to_json(record(true, 0.3))["results"][0];
  const nlohmann::json full = to_json(record(false, 0.3))["results"][0];
  const nlohmann::json full_other_y = to_json(record(false, 0.31))["results"][0];
  const nlohmann::json fo_other_y = to_json(record(true, 0.31))["results"][0];
  EXPECT_TRUE(results_agree(fo, full));
  EXPECT_TRUE(results_agree(full, fo));
  EXPECT_TRUE(results_agree(fo, fo));
  EXPECT_FALSE(results_agree(fo, full_other_y));
  EXPECT_FALSE(results_agree(fo_other_y, full));
  EXPECT_FALSE(results_agree(full, full_other_y));  // two full results: identical only
  nlohmann::json full_other_dw = full;
  full_other_dw["dw"][0] = 0.6;
  EXPECT_FALSE(results_agree(full, full_other_dw));
  EXPECT_TRUE(results_agree(fo, full_other_dw));
  EXPECT_FALSE(results_agree(fo, nlohmann::json{{"error", "boom"}}));

  // In a journal: forward-only then full (agreeing) resumes; a full record
  // contradicting an earlier full one after a forward-only one is refused.
  const std::string dir = temp_dir("agree");
  const std::string path = dir + "/j.jsonl";
  const nlohmann::json campaign{{"test", 1}};
  {
    Journal jr = Journal::open(path, campaign);
    jr.append(record(true, 0.3));
    jr.append(record(false, 0.3));
    jr.append(record(true, 0.3));
  }
  {
    const Journal jr = Journal::open(path, campaign);
    EXPECT_EQ(jr.resumed().size(), 3u);
  }
  {
    Journal jr = Journal::open(path, campaign);
    CaseRecord other = record(false, 0.3);
    other.results[0].out[3].ratio = 0.6;
    jr.append(other);
  }
  EXPECT_NE(test::error_of([&] { (void)Journal::open(path, campaign); }).find("contradicts line 3"),
            std::string::npos);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    Journal jr = Journal::open(path, campaign);
    jr.append(record(false, 0.3));
    jr.append(record(true, 0.31));  // a forward-only y that is not the full record's
  }
  EXPECT_NE(test::error_of([&] { (void)Journal::open(path, campaign); }).find("contradicts line 2"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

// An error is a failed attempt (gate --retry-errors): any later record
// replaces it, it never displaces a result, and results still contradict.
TEST(GateForwardOnly, ErrorsGiveWayToLaterRecordsAndNeverToResults) {
  const nlohmann::json fo = to_json(record(true, 0.3))["results"][0];
  const nlohmann::json full = to_json(record(false, 0.3))["results"][0];
  const nlohmann::json other = to_json(record(false, 0.31))["results"][0];
  const nlohmann::json err{{"error", "boom"}}, err2{{"error", "bang"}};
  EXPECT_EQ(resolve_duplicate(err, full), Duplicate::replace);
  EXPECT_EQ(resolve_duplicate(err, fo), Duplicate::replace);
  EXPECT_EQ(resolve_duplicate(err, err2), Duplicate::replace);  // the later attempt's message
  EXPECT_EQ(resolve_duplicate(err, err), Duplicate::keep);      // nothing new: a re-merge appends nothing
  EXPECT_EQ(resolve_duplicate(full, err), Duplicate::keep);
  EXPECT_EQ(resolve_duplicate(fo, err), Duplicate::keep);
  EXPECT_EQ(resolve_duplicate(fo, full), Duplicate::replace);
  EXPECT_EQ(resolve_duplicate(full, fo), Duplicate::keep);
  EXPECT_EQ(resolve_duplicate(full, full), Duplicate::keep);
  EXPECT_EQ(resolve_duplicate(full, other), Duplicate::contradict);
  EXPECT_EQ(resolve_duplicate(fo, other), Duplicate::contradict);
  // A determinism violation of the implementation itself, in either wording
  // (the prefix, or an older build's text): nothing replaces it, and it
  // replaces what it follows; another implementation's copy of the case's
  // error is an ordinary error.
  for (const std::string& text :
       {std::string("nondeterministic: external implementation py_k (python) is declared deterministic but two "
                    "runs on H=64,T=5 gave different bits"),
        std::string("contract broken: external implementation py_k (plugin /x/libk.so) on H=64,T=5: wrote outside "
                    "the view of y")}) {
    const nlohmann::json nd{{"error", text}};
    EXPECT_EQ(nondeterministic_impl(text), "py_k");
    EXPECT_EQ(resolve_duplicate(nd, full, "py_k"), Duplicate::keep);
    EXPECT_EQ(resolve_duplicate(nd, err, "py_k"), Duplicate::keep);
    EXPECT_EQ(resolve_duplicate(fo, nd, "py_k"), Duplicate::replace);
    EXPECT_EQ(resolve_duplicate(full, nd, "py_k"), Duplicate::replace);
    EXPECT_EQ(resolve_duplicate(nd, full, "bwd_det_chunked"), Duplicate::replace);  // not its finding
    EXPECT_EQ(resolve_duplicate(full, nd, "bwd_det_chunked"), Duplicate::keep);
  }
  EXPECT_EQ(nondeterministic_impl("boom"), "");
  // Untagged, the wording is no finding: a plugin's path (ORIGIN) may hold
  // it (found by an adversarial pass: a plugin under a folder named so had
  // every failed run counted as nondeterministic, never retried).
  EXPECT_EQ(nondeterministic_impl("external implementation py_k (python) is declared deterministic but two runs on "
                                  "H=64,T=5 gave different bits"),
            "");
  EXPECT_EQ(nondeterministic_impl("external implementation py_k (plugin /x) is declared deterministic but two runs "
                                  "on y/libk.so) failed on H=64,T=5: out of memory"),
            "");
  // An implementation's own message, which a failed run's error quotes,
  // cannot make that error a finding (found by an adversarial pass: a
  // plugin's out-of-memory text with the phrase in it was never retried).
  for (const std::string& text :
       {std::string("external implementation py_k (plugin /x/libk.so) failed on H=64,T=5: cudaMalloc: pool is "
                    "declared deterministic but two runs on this device exhausted it"),
        std::string("external implementation py_k (plugin /x/libk.so) failed on H=64,T=5: external implementation "
                    "py_k (y) is declared deterministic but two runs on it"),
        std::string("external implementation py_k (plugin /x/libk.so) failed on H=64,T=5: nondeterministic: "
                    "external implementation py_k (z)"),
        std::string("CUDA error: out of memory; contract broken: external implementation py_k (q)")})
    EXPECT_EQ(nondeterministic_impl(text), "") << text;

  // In a journal: error, then a result, then an error again, then a result
  // that contradicts the first result: refused naming the result's line.
  const std::string dir = temp_dir("errors");
  const std::string path = dir + "/j.jsonl";
  const nlohmann::json campaign{{"test", 1}};
  CaseRecord e = record(false, 0.3);
  e.results.clear();
  e.error = "boom";
  {
    Journal jr = Journal::open(path, campaign);
    jr.append(e);
    jr.append(record(false, 0.3));
    jr.append(e);
  }
  EXPECT_EQ(Journal::open(path, campaign).resumed().size(), 3u);
  {
    Journal jr = Journal::open(path, campaign);
    jr.append(record(false, 0.31));
  }
  EXPECT_NE(test::error_of([&] { (void)Journal::open(path, campaign); }).find("contradicts line 3"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
