// tests/audit/report_window_test.cpp: report_windows / select_report_window (export.h): a report's windows and
// each one's worst case, for `normgate repro --from-report`.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "normgate/audit/export.h"

namespace nv = normgate::validators;

namespace {

nlohmann::json gate_window(const std::string& label, const std::string& op, const std::string& variant) {
  nlohmann::json w;
  w["route"] = "t.toml:" + std::to_string(label.size());
  w["window"] = label;
  w["op"] = op;
  w["variant"] = variant;
  return w;
}

std::string message_of(const nlohmann::json& rep, const std::string& key) {
  try {
    nv::select_report_window(rep, key);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace

// A gate report: the worst case over every output of the window ("inf"
// ranks first), the window's variant (a forward window's case runs with a
// real backward variant), selected by label, FILE:LINE or index.
TEST(ReportWindow, GateReportWorstCaseAndSelection) {
  const std::string a = "H=64,T=99,w=bf16,form=plain,family=cancel,seed=0";
  const std::string b = "H=64,T=33,w=bf16,form=plain,family=llm,seed=0";
  const std::string c = "H=64,T=7,w=bf16,form=plain,family=normal,seed=0";
  nlohmann::json w = gate_window("bwd det H=64 w=bf16 form=plain T=1..100", "bwd", "bwd_det_chunked");
  w["outputs"]["y"] = {{"max_err_tol", 0.3}, {"worst_case", b}};
  w["outputs"]["rstd"] = {{"max_err_tol", 0.01}, {"worst_case", c}};
  w["outputs"]["dx"] = {{"max_err_tol", 0.38}, {"worst_case", b}};
  w["outputs"]["dw"] = {{"max_err_tol", 0.2}, {"worst_case", a}};
  nlohmann::json inf = gate_window("bwd det H=64 w=bf16 form=plain T=101..200", "bwd", "ctl_fp32_seq");
  inf["outputs"]["y"] = {{"max_err_tol", 0.3}, {"worst_case", b}};
  inf["outputs"]["dw"] = {{"max_err_tol", "nan"}, {"worst_case", a}};
  nlohmann::json f = gate_window("fwd H=64 w=bf16 form=plain T=1..100", "fwd", "fwd_rowwise");
  f["outputs"]["y"] = {{"max_err_tol", 0.25}, {"worst_case", c}};
  f["outputs"]["rstd"] = {{"max_err_tol", 0.02}, {"worst_case", b}};
  nlohmann::json none = gate_window("bwd det H=64 w=bf16 form=plain T=201..300", "bwd", "bwd_det_chunked");
  none["outputs"]["y"] = {{"max_err_tol", 0}, {"worst_case", ""}};
  nlohmann::json rep;
  rep["windows"] = {w, inf, f, none};

  const auto ws = nv::report_windows(rep);
  ASSERT_EQ(ws.size(), 4u);
  EXPECT_EQ(ws[0].worst_case, b);
  EXPECT_EQ(ws[0].output, "dx");
  EXPECT_DOUBLE_EQ(ws[0].ratio, 0.38);
  EXPECT_EQ(ws[0].impl, "bwd_det_chunked");
  EXPECT_EQ(ws[1].worst_case, a);  // "nan" counts as inf
  EXPECT_EQ(ws[1].impl, "ctl_fp32_seq");
  EXPECT_TRUE(std::isinf(ws[1].ratio));
  EXPECT_EQ(ws[2].worst_case, c);
  EXPECT_EQ(ws[2].impl, "bwd_det_chunked");
  EXPECT_EQ(ws[2].variant, "fwd_rowwise");
  EXPECT_TRUE(ws[3].worst_case.empty());

  EXPECT_EQ(nv::select_report_window(rep, "1").worst_case, a);
  EXPECT_EQ(nv::select_report_window(rep, "fwd H=64 w=bf16 form=plain T=1..100").index, 2u);
  EXPECT_EQ(nv::select_report_window(rep, ws[1].route).index, 1u);

  // Unknown window: the message names it and lists every window.
  for (const std::string key : {"4", "bwd det", "", "99999999999999999999"}) {
    const std::string m = message_of(rep, key);
    EXPECT_NE(m.find("no window '" + key + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("0  bwd det H=64 w=bf16 form=plain T=1..100"), std::string::npos) << m;
    EXPECT_NE(m.find("3  bwd det H=64 w=bf16 form=plain T=201..300"), std::string::npos) << m;
  }
  EXPECT_NE(message_of(rep, "3").find("names no worst case"), std::string::npos);
}

// Ties between outputs go to the gate's own "worst" case.
TEST(ReportWindow, TiesFollowTheGatesWorst) {
  const std::string a = "H=64,T=99,w=bf16,form=plain,family=cancel,seed=0";
  const std::string b = "H=64,T=33,w=bf16,form=plain,family=llm,seed=0";
  nlohmann::json w = gate_window("bwd det H=64 w=bf16 form=plain T=1..100", "bwd", "bwd_det_chunked");
  w["outputs"]["y"] = {{"max_err_tol", 0.5}, {"worst_case", a}};
  w["outputs"]["dx"] = {{"max_err_tol", 0.5}, {"worst_case", b}};
  nlohmann::json rep;
  rep["windows"] = {w};
  EXPECT_EQ(nv::report_windows(rep)[0].worst_case, a);  // no "worst": the first output
  rep["windows"][0]["worst"] = {{"err_tol", 0.5}, {"output", "dx"}, {"case", b}};
  EXPECT_EQ(nv::report_windows(rep)[0].worst_case, b);
  EXPECT_EQ(nv::report_windows(rep)[0].output, "dx");
}

// A check report (one case, or a grid): one window per implementation, its
// worst case over every case and output.
TEST(ReportWindow, CheckReportWindowsAreImplementations) {
  auto check_case = [](const std::string& id, double ctl_dw) {
    nlohmann::json c;
    c["case"] = id;
    nlohmann::json real, ctl;
    real["impl"] = "bwd_det_chunked";
    real["outputs"]["dx"] = {{"max_ratio", 0.3}};
    real["outputs"]["dw"] = {{"max_ratio", 0.1}};
    ctl["impl"] = "ctl_fp32_seq";
    ctl["outputs"]["dw"] = {{"max_ratio", ctl_dw}};
    c["impls"] = {real, ctl};
    return c;
  };
  const std::string a = "H=64,T=99,w=bf16,form=plain,family=cancel,seed=0";
  const std::string b = "H=64,T=33,w=bf16,form=plain,family=cancel,seed=1";
  const nlohmann::json grid = {check_case(a, 20.0), check_case(b, 55.0)};
  const auto ws = nv::report_windows(grid);
  ASSERT_EQ(ws.size(), 2u);
  EXPECT_EQ(ws[0].label, "bwd_det_chunked");
  EXPECT_EQ(ws[0].worst_case, a);  // ties: the first case
  EXPECT_EQ(ws[0].output, "dx");
  EXPECT_EQ(nv::select_report_window(grid, "ctl_fp32_seq").worst_case, b);
  EXPECT_EQ(nv::select_report_window(grid, "ctl_fp32_seq").impl, "ctl_fp32_seq");
  EXPECT_EQ(nv::select_report_window(check_case(a, 1.0), "1").worst_case, a);  // a one-case report
}

// One output alone (repro --from-report --output): that output's worst
// case, not the window's; the gate's "worst" breaks ties only when it is of
// that output; a window without it is refused naming the outputs it has.
TEST(ReportWindow, OneOutputsWorstCase) {
  const std::string a = "H=64,T=99,w=bf16,form=plain,family=cancel,seed=0";
  const std::string b = "H=64,T=33,w=bf16,form=plain,family=llm,seed=0";
  const std::string c = "H=64,T=7,w=bf16,form=plain,family=normal,seed=0";
  nlohmann::json w = gate_window("bwd det H=64 w=bf16 form=plain T=1..100", "bwd", "bwd_det_chunked");
  w["outputs"]["y"] = {{"max_err_tol", 0.3}, {"worst_case", b}};
  w["outputs"]["dx"] = {{"max_err_tol", 0.38}, {"worst_case", b}};
  w["outputs"]["dw"] = {{"max_err_tol", 0.2}, {"worst_case", a}};
  w["outputs"]["rstd"] = {{"max_err_tol", 0.38}, {"worst_case", c}};
  w["worst"] = {{"err_tol", 0.38}, {"output", "dx"}, {"case", b}};
  nlohmann::json f = gate_window("fwd H=64 w=bf16 form=plain T=1..100", "fwd", "fwd_rowwise");
  f["outputs"]["y"] = {{"max_err_tol", 0.25}, {"worst_case", c}};
  nlohmann::json rep;
  rep["windows"] = {w, f};
  EXPECT_EQ(nv::select_report_window(rep, "0").worst_case, b);  // every output: dx (the gate's tie)
  const auto dw = nv::select_report_window(rep, "0", "dw");
  EXPECT_EQ(dw.worst_case, a);
  EXPECT_EQ(dw.output, "dw");
  EXPECT_DOUBLE_EQ(dw.ratio, 0.2);
  const auto rstd = nv::select_report_window(rep, "0", "rstd");  // ties dx's 0.38: rstd's own case
  EXPECT_EQ(rstd.worst_case, c);
  EXPECT_EQ(rstd.output, "rstd");
  std::string m;
  try {
    nv::select_report_window(rep, "1", "dw");
  } catch (const std::invalid_argument& e) {
    m = e.what();
  }
  EXPECT_NE(m.find("window index 1 'fwd H=64 w=bf16 form=plain T=1..100' names no worst case of output 'dw' (it names "
                   "one of y)"),
            std::string::npos)
      << m;
  m.clear();
  try {
    nv::select_report_window(rep, "0", "h_new");
  } catch (const std::invalid_argument& e) {
    m = e.what();
  }
  // ... naming the outputs its windows do name (it said only what was missing).
  EXPECT_NE(m.find("no window of it names a worst case of output 'h_new' (its windows name one of y, rstd, dx, dw)"),
            std::string::npos)
      << m;
}

// No cases, or not a report: std::invalid_argument with a message that says so.
TEST(ReportWindow, EmptyOrForeignReports) {
  EXPECT_NE(message_of(nlohmann::json{{"windows", nlohmann::json::array()}}, "0").find("names no cases"),
            std::string::npos);
  EXPECT_NE(message_of(nlohmann::json::array(), "0").find("names no cases"), std::string::npos);
  EXPECT_NE(message_of(nlohmann::json::object(), "0").find("neither a gate report"), std::string::npos);
  EXPECT_NE(message_of(nlohmann::json{{"windows", 3}}, "0").find("'windows' is not an array"), std::string::npos);
  EXPECT_NE(message_of(nlohmann::json{{"windows", {{{"op", "bwd"}}}}}, "0").find("'window'"), std::string::npos);
  EXPECT_NE(message_of(nlohmann::json{1, 2}, "0").find("report[0]"), std::string::npos);
}

namespace {

std::string format_error(const nlohmann::json& rep) {
  try {
    nv::report_format_version(rep);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace

// report_format_version: what `repro --from-report` and `export` accept.
// Versions 1 and 2 of either report kind; a report without "format" as version 0;
// a newer major version, another document kind or a malformed format is
// refused with the format in the message; a grid checks every case.
TEST(ReportFormat, VersionsAcceptedAndRefused) {
  nlohmann::json gate = {{"windows", nlohmann::json::array()}};
  EXPECT_EQ(nv::report_format_version(gate), 0);
  gate["format"] = "normgate-gate-report/1";
  EXPECT_EQ(nv::report_format_version(gate), 1);
  nlohmann::json check = {{"case", "H=64,T=5,w=bf16,form=plain,family=normal,seed=0"}, {"impls", nlohmann::json::array()}};
  check["format"] = "normgate-check-report/1";
  EXPECT_EQ(nv::report_format_version(check), 1);
  EXPECT_EQ(nv::report_format_version(nlohmann::json::array({check, check})), 1);
  gate["format"] = "normgate-gate-report/2";
  EXPECT_EQ(nv::report_format_version(gate), 2);
  check["format"] = "normgate-check-report/2";
  EXPECT_EQ(nv::report_format_version(check), 2);

  gate["format"] = "normgate-gate-report/3";
  std::string m = format_error(gate);
  EXPECT_NE(m.find("\"normgate-gate-report/3\": major version 3 is unknown"), std::string::npos) << m;
  EXPECT_NE(m.find("reads normgate-gate-report/2 or normgate-check-report/2"), std::string::npos) << m;
  EXPECT_NE(m.find("newer normgate"), std::string::npos) << m;
  gate["format"] = "normgate-gate-report/0";
  EXPECT_NE(format_error(gate).find("major version 0 is unknown"), std::string::npos);
  gate["format"] = "normgate-derivation/1";
  m = format_error(gate);
  EXPECT_NE(m.find("\"normgate-derivation/1\" is another kind of document"), std::string::npos) << m;
  for (const char* bad : {"normgate-gate-report", "normgate-gate-report/1.1", "normgate-gate-report/x", "/1"}) {
    gate["format"] = bad;
    m = format_error(gate);
    EXPECT_TRUE(m.find("is not NAME/MAJOR") != std::string::npos || m.find("another kind") != std::string::npos)
        << bad << ": " << m;
  }
  gate["format"] = 1;
  EXPECT_NE(format_error(gate).find("not a string"), std::string::npos);

  // A gate report inside a grid array is not a check report.
  nlohmann::json grid = nlohmann::json::array({check, check});
  grid[1]["format"] = "normgate-gate-report/1";
  m = format_error(grid);
  EXPECT_NE(m.find("report[1]: "), std::string::npos) << m;
  EXPECT_NE(m.find("another kind"), std::string::npos) << m;
  // Old and new cases mixed in one grid: refused.
  grid[1].erase("format");
  m = format_error(grid);
  EXPECT_NE(m.find("report[1]: format version 0 after version 2"), std::string::npos) << m;
  EXPECT_NE(format_error(nlohmann::json::array({1})).find("report[0]"), std::string::npos);
  EXPECT_EQ(format_error(nlohmann::json(3)).find("(no exception)"), std::string::npos);
}
