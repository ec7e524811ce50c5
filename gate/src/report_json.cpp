// gate/src/report_json.cpp: the gate's JSON report (gate_to_json).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "gate_internal.h"
#include "normgate/core/report_util.h"
#include "normgate/kernels/registry.h"

namespace normgate::validators {

using namespace gate_detail;

nlohmann::json gate_to_json(const GateResult& r) {
  nlohmann::json j;
  j["format"] = kGateReportFormat;
  j["table"] = r.table_path;
  j["table_sha256"] = r.table_sha256;
  j["base"] = r.base_path;
  j["base_sha256"] = r.base_sha256;
  j["pass"] = r.pass();
  j["verdict"] = r.verdict();
  j["backend"] = r.backend;
  j["backend_detail"] = r.backend_detail;
  j["device"] = {{"present", r.device.present},
                 {"name", r.device.name},
                 {"cc", r.device.cc},
                 {"driver", r.device.driver},
                 {"cuda_runtime", r.device.cuda_runtime}};
  j["seeds"] = r.seeds;
  j["oracle"] = r.oracle;
  j["t_per_window"] = r.t_per_window;
  j["dense_points"] = r.dense_points;
  j["dense_step"] = r.dense_step;
  j["dense_seeds"] = r.dense_all_seeds ? "all" : "worst";
  j["fresh_factor"] = r.fresh_factor;
  j["windows_filter"] = r.windows_filter;
  j["allow_controls"] = r.allow_controls;
  j["cases"] = r.cases_total;
  j["normgate_version"] = r.normgate_version;
  j["normgate_commit"] = r.normgate_commit;
  j["date"] = r.date;
  if (!r.shard.empty()) j["shard"] = r.shard;
  if (std::any_of(r.windows.begin(), r.windows.end(),
                  [](const WindowResult& w) { return w.incomplete || w.missing > 0; }) &&
      r.merged_shard_count > 0)
    j["shards_missing"] = r.shards_missing;
  j["skipped"] = r.skipped;
  j["removed"] = r.removed;
  j["source_changed"] = r.source_changed;
  j["filtered_out"] = r.filtered_out;
  j["externals"] = nlohmann::json::array();
  for (const auto& e : r.externals)
    j["externals"].push_back({{"name", e.name},
                              {"op", e.op},
                              {"origin", e.origin},
                              {"ran_on", e.ran_on},
                              {"source_sha256", e.source_sha256},
                              {"description", e.description}});
  // Conditioning headroom per variant: the lowest of its windows' (those with cancel cases at a level).
  j["kappa_levels"] = std::vector<double>(std::begin(seeds::kKappaLevels), std::end(seeds::kKappaLevels));
  j["kappa_headroom"] = nlohmann::json::object();
  // null: a window of the variant fails at the lowest level run with none
  // below it run (kappa_failed_below), lower than any measured headroom.
  for (const auto& w : r.windows) {
    const std::string v(w.route.variant->name);
    if (w.kappa_headroom < 0) {
      if (kappa_failed_below(w) > 0) j["kappa_headroom"][v] = nullptr;
      continue;
    }
    auto& h = j["kappa_headroom"];
    if (!h.contains(v) || (!h[v].is_null() && w.kappa_headroom < h[v].get<double>())) h[v] = w.kappa_headroom;
  }
  j["windows"] = nlohmann::json::array();
  for (const auto& w : r.windows) {
    nlohmann::json x;
    x["route"] = w.route.where();
    x["window"] = w.route.window();
    x["op"] = kernels::to_string(w.route.op);
    if (w.route.op == Op::bwd) x["mode"] = kernels::to_string(w.route.mode);
    x["H"] = w.route.H;
    x["w"] = to_string(w.route.w);
    x["form"] = to_string(w.route.form);
    x["T"] = {w.route.t_lo, w.route.t_hi};
    x["variant"] = w.route.variant->name;
    x["source_sha256"] = w.route.variant->source_sha256;
    x["control"] = w.control;
    x["control_passed"] = w.control_passed();
    x["impl"] = w.impl;
    x["fwd"] = w.fwd;  // the forward variant whose y, rstd the window's cases ran
    x["t_points"] = w.t_points;
    x["cases"] = w.cases;
    x["errors"] = w.errors;
    // Of errors: the findings about the implementation (FAIL, not ERROR).
    x["nondeterministic"] = w.nondeterministic;
    x["contract_broken"] = w.contract_broken;
    x["error_samples"] = w.error_samples;
    for (int k = 0; k < w.gated_outputs(); ++k) {
      const auto& a = w.out[k];
      x["outputs"][kOut[k]] = {{"max_err_tol", num(a.max_ratio)},
                               {"worst_case", a.worst_case},
                               {"worst_index", a.worst_index},
                               {"forced", num(a.forced)},
                               {"kernel_excess", num(a.max_ratio - a.forced)},
                               {"cases_over", a.cases_over}};
    }
    if (w.gates_h_new()) {  // form res: bitwise exact against BF16(x + u)
      const auto& a = w.h_new;
      x["outputs"]["h_new"] = {{"max_err_tol", num(a.max_ratio)},
                               {"worst_case", a.worst_case},
                               {"worst_index", a.worst_index},
                               {"cases_over", a.cases_over},
                               {"cases_unchecked", w.h_new_unchecked}};
    }
    if (w.route.op == Op::bwd)
      x["dw_vs_fp32"] = {{"worst", num(w.dw_vs_fp32_worst)},
                         {"worst_case", w.dw_vs_fp32_worst_case},
                         {"median", num(w.dw_vs_fp32_median)}};
    x["worst"] = {{"err_tol", num(w.worst)}, {"output", w.worst_output}, {"case", w.worst_case}};
    auto phase = [](const PhaseSummary& p) {
      return nlohmann::json{{"t", p.t},
                            {"seeds", p.seeds},
                            {"cases", p.cases},
                            {"worst", num(p.worst)},
                            {"worst_output", p.worst_output},
                            {"worst_case", p.worst_case}};
    };
    x["grid"] = phase(w.grid);
    x["dense"] = phase(w.dense);
    x["dense"]["center"] = w.dense_center;
    x["fresh"] = phase(w.fresh);
    x["fresh"]["family"] = w.fresh_family;
    x["others"] = phase(w.others);
    x["families"] = nlohmann::json::array();
    for (const auto& f : w.families)
      x["families"].push_back({{"family", f.family}, {"cases", f.cases}, {"failed", f.failed}});
    x["kappa_headroom"] = w.kappa_headroom < 0 ? nlohmann::json(nullptr) : nlohmann::json(w.kappa_headroom);
    x["pass"] = w.pass;
    x["verdict"] = std::string(to_string(w.verdict));
    if (w.errored()) {  // only then: cases that could not run, none over budget (WindowResult::errored)
      x["verdict"] = "error";
      x["errored"] = true;
    }
    if (w.incomplete) {  // only then: a complete report is the same with or without shards
      x["verdict"] = "incomplete";
      x["incomplete"] = true;
    }
    // A window lacking cases (a shard not merged) says how many, whatever
    // its verdict: one that already fails or errors is not INCOMPLETE.
    if (w.missing > 0) x["missing_cases"] = w.missing;
    j["windows"].push_back(std::move(x));
  }
  return j;
}

}  // namespace normgate::validators
