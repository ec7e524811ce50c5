// audit/src/export.cpp: a report's worst cases, re-run and mapped (export.h).
#include "normgate/audit/export.h"
#include "normgate/gate/gate.h"
#include "normgate/gate/host_memory.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <cmath>
#include <ctime>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "normgate/core/doc_format.h"
#include "normgate/core/file_target.h"
#include "normgate/core/printable.h"
#include "normgate/harness/external.h"
#include "normgate/kernels/device.h"
#include "normgate/kernels/registry.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"

namespace normgate::validators {

namespace {

double as_ratio(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) return INFINITY;  // reports spell non-finite ratios "inf" / "nan": rank them first
  return 0.0;
}

std::string str_field(const nlohmann::json& j, const char* k, const std::string& where) {
  if (!j.contains(k) || !j[k].is_string())
    throw std::invalid_argument("export: " + where + " has no string field '" + k + "'");
  return j[k].get<std::string>();
}

// Outputs in the order reports and ties use: y, rstd, dx, dw, then any other (h_new).
std::vector<std::string> output_order(const nlohmann::json& outputs) {
  std::vector<std::string> names;
  for (const char* k : {"y", "rstd", "dx", "dw"})
    if (outputs.contains(k)) names.emplace_back(k);
  for (const auto& [k, v] : outputs.items())
    if (std::find(names.begin(), names.end(), k) == names.end()) names.push_back(k);
  return names;
}

const nlohmann::json* outputs_of(const nlohmann::json& j, const std::string& where) {
  if (!j.contains("outputs")) return nullptr;
  if (!j["outputs"].is_object()) throw std::invalid_argument("report: " + where + ".outputs is not an object");
  return &j["outputs"];
}

// Strings a gate report gives export and repro (window labels, the seed
// set, case ids): what the maps file's attributes take and a reader reads
// back. Control bytes (a NUL ended the attribute's value for one reader
// and not for another) and strings over kMaxReportString bytes (beyond
// what the readers accept of an attribute) are refused by name.
constexpr size_t kMaxReportString = 4096;

void check_report_string(const std::string& s, const std::string& what) {
  if (s.size() > kMaxReportString)
    throw std::invalid_argument(what + " is " + std::to_string(s.size()) + " bytes long (at most " +
                                std::to_string(kMaxReportString) + "): not a report normgate wrote");
  if (core::has_control_bytes(s))
    throw std::invalid_argument(what + " '" + core::escape_controls(s) +
                                "' holds control bytes: not a report normgate wrote");
}

// A worst case a gate report's window names, parsed, checked against the
// window it is named in (its H, w, form and T range where the window gives
// them: the gate runs only cases inside a window, and export or repro label
// the case with that window), naming the report's window when not.
seeds::CaseId window_case(const nlohmann::json& w, const std::string& where, const std::string& label,
                          const std::string& id) {
  const std::string at = "the report's " + where + " ('" + core::escape_controls(label) + "')";
  check_report_string(id, at + " worst case");
  seeds::CaseId c;
  try {
    c = seeds::parse_case(id);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(at + ": worst case '" + id + "': " + e.what());
  }
  std::string off;
  if (w.contains("H") && w["H"].is_number_integer() && w["H"].get<int64_t>() != c.H)
    off = "H=" + std::to_string(c.H) + ", the window's H is " + std::to_string(w["H"].get<int64_t>());
  else if (w.contains("w") && w["w"].is_string() && w["w"].get<std::string>() != std::string(to_string(c.w)))
    off = "w=" + std::string(to_string(c.w)) + ", the window's w is " + core::escape_controls(w["w"].get<std::string>());
  else if (w.contains("form") && w["form"].is_string() && w["form"].get<std::string>() != std::string(to_string(c.form)))
    off = "form=" + std::string(to_string(c.form)) + ", the window's form is " +
          core::escape_controls(w["form"].get<std::string>());
  else if (w.contains("T") && w["T"].is_array() && w["T"].size() == 2 && w["T"][0].is_number_integer() &&
           w["T"][1].is_number_integer() &&
           (c.T < w["T"][0].get<int64_t>() || c.T > w["T"][1].get<int64_t>()))
    off = "T=" + std::to_string(c.T) + ", outside the window's T=" + std::to_string(w["T"][0].get<int64_t>()) + ".." +
          std::to_string(w["T"][1].get<int64_t>());
  if (!off.empty())
    throw std::invalid_argument(at + ": worst case '" + id + "' is not in the window (" + off +
                                "): not a report normgate wrote, or edited");
  return c;
}

// The implementation that re-runs a gate report window's case c: a bwd
// window's variant; for a fwd window, its variant's own run when it is not
// the default forward, else the backward run that carries the case
// (carrier_for: its forward is the default).
std::string window_impl(const nlohmann::json& w, const std::string& op, const std::string& where,
                        const seeds::CaseId& c) {
  if (op != "fwd") return str_field(w, "variant", where);
  const std::string v = w.contains("variant") && w["variant"].is_string() ? w["variant"].get<std::string>() : "";
  return v.empty() || v == kernels::default_fwd().name ? carrier_for(c) : v;
}

}  // namespace

int report_format_version(const nlohmann::json& report) {
  int version = 0;
  if (report.is_array()) {
    for (size_t i = 0; i < report.size(); ++i) {
      int v = 0;
      const std::string why = check_doc_format(report[i], {"normgate-check-report"}, 2, true, &v);
      if (!why.empty()) throw std::invalid_argument("report[" + std::to_string(i) + "]: " + why);
      if (i > 0 && v != version)
        throw std::invalid_argument("report[" + std::to_string(i) + "]: format version " + std::to_string(v) +
                                    " after version " + std::to_string(version) +
                                    " (a grid report's cases come from one normgate)");
      version = v;
    }
    return version;
  }
  const std::string why = check_doc_format(report, {"normgate-gate-report", "normgate-check-report"}, 2, true, &version);
  if (!why.empty()) throw std::invalid_argument(why);
  return version;
}

std::vector<ExportItem> export_plan(const nlohmann::json& report, int keep, bool all) {
  if (keep < 1) throw std::invalid_argument("export: keep = " + std::to_string(keep) + " must be >= 1");
  std::vector<ExportItem> out;
  // Check reports: per implementation (in order of first appearance), its
  // cases ranked by their largest max_ratio over the outputs.
  std::vector<std::pair<std::string, std::vector<std::pair<double, std::string>>>> by_impl;
  auto from_check = [&by_impl](const nlohmann::json& c, const std::string& where) {
    const std::string id = str_field(c, "case", where);
    check_report_string(id, where + "'s case");
    if (!c.contains("impls") || !c["impls"].is_array()) throw std::invalid_argument("export: " + where + " has no 'impls' array");
    for (const auto& i : c["impls"]) {
      const std::string impl = str_field(i, "impl", where + ".impls[]");
      check_report_string(impl, where + "'s implementation");
      double worst = 0.0;
      if (i.contains("outputs") && i["outputs"].is_object())
        for (const auto& [name, o] : i["outputs"].items())
          if (o.is_object() && o.contains("max_ratio")) worst = std::max(worst, as_ratio(o["max_ratio"]));
      auto it = std::find_if(by_impl.begin(), by_impl.end(), [&](const auto& e) { return e.first == impl; });
      if (it == by_impl.end()) it = by_impl.insert(by_impl.end(), {impl, {}});
      it->second.emplace_back(worst, id);
    }
  };
  auto check_plan = [&]() {
    for (auto& [impl, cases] : by_impl) {
      std::stable_sort(cases.begin(), cases.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      for (size_t k = 0; k < cases.size() && (all || static_cast<int>(k) < keep); ++k)
        out.push_back({cases[k].second, impl, "", ""});
    }
    return out;
  };
  if (report.is_object() && report.contains("windows")) {
    const std::string seeds = report.contains("seeds") && report["seeds"].is_string() ? report["seeds"].get<std::string>() : "";
    const auto& ws = report["windows"];
    if (!ws.is_array()) throw std::invalid_argument("export: 'windows' is not an array");
    check_report_string(seeds, "the report's seed set");
    for (size_t i = 0; i < ws.size(); ++i) {
      const auto& w = ws[i];
      const std::string where = "windows[" + std::to_string(i) + "]";
      if (!w.is_object()) throw std::invalid_argument("export: " + where + " is not an object");
      const std::string window = str_field(w, "window", where);
      check_report_string(window, "the report's " + where + " window label");
      const std::string op = str_field(w, "op", where);
      std::vector<std::pair<double, std::string>> cand;
      if (const auto* outs = outputs_of(w, where))
        for (const auto& [name, o] : outs->items())
          if (o.contains("worst_case") && o["worst_case"].is_string() && !o["worst_case"].get<std::string>().empty())
            cand.emplace_back(o.contains("max_err_tol") ? as_ratio(o["max_err_tol"]) : 0.0, o["worst_case"].get<std::string>());
      if (w.contains("dw_vs_fp32") && w["dw_vs_fp32"].contains("worst_case") && w["dw_vs_fp32"]["worst_case"].is_string() &&
          !w["dw_vs_fp32"]["worst_case"].get<std::string>().empty())
        cand.emplace_back(-1.0, w["dw_vs_fp32"]["worst_case"].get<std::string>());
      std::stable_sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      std::set<std::string> seen;
      for (const auto& [r, id] : cand) {
        if (!seen.insert(id).second) continue;
        if (!all && static_cast<int>(seen.size()) > keep) break;
        const seeds::CaseId c = window_case(w, where, window, id);
        const std::string impl = window_impl(w, op, where, c);
        ExportItem item{id, impl, window, seeds};
        // The code the window gated: its variant and source hash as the
        // report records them (export_report compares them with this
        // process's).
        if (w.contains("variant") && w["variant"].is_string()) item.variant = w["variant"].get<std::string>();
        if (w.contains("source_sha256") && w["source_sha256"].is_string())
          item.variant_sha256 = w["source_sha256"].get<std::string>();
        out.push_back(std::move(item));
      }
    }
    return out;
  }
  if (report.is_object() && report.contains("case")) {
    from_check(report, "report");
    return check_plan();
  }
  if (report.is_array()) {
    for (size_t i = 0; i < report.size(); ++i) from_check(report[i], "report[" + std::to_string(i) + "]");
    return check_plan();
  }
  throw std::invalid_argument("export: the JSON is neither a gate report (no 'windows') nor a check report (no 'case')");
}

std::vector<ReportWindow> report_windows(const nlohmann::json& report, const std::string& only_output) {
  std::vector<ReportWindow> out;
  if (report.is_object() && report.contains("windows")) {
    const auto& ws = report["windows"];
    if (!ws.is_array()) throw std::invalid_argument("report: 'windows' is not an array");
    for (size_t i = 0; i < ws.size(); ++i) {
      const auto& w = ws[i];
      const std::string where = "windows[" + std::to_string(i) + "]";
      if (!w.is_object()) throw std::invalid_argument("report: " + where + " is not an object");
      ReportWindow r;
      r.index = i;
      r.label = str_field(w, "window", where);
      check_report_string(r.label, "the report's " + where + " window label");
      if (w.contains("route") && w["route"].is_string()) r.route = w["route"].get<std::string>();
      const std::string op = str_field(w, "op", where);
      if (const auto* outs = outputs_of(w, where))
        for (const auto& name : output_order(*outs)) {
          if (!only_output.empty() && name != only_output) continue;
          const auto& o = (*outs)[name];
          if (!o.is_object() || !o.contains("worst_case") || !o["worst_case"].is_string()) continue;
          const std::string id = o["worst_case"].get<std::string>();
          const double ratio = o.contains("max_err_tol") ? as_ratio(o["max_err_tol"]) : 0.0;
          if (id.empty() || (!r.worst_case.empty() && !(ratio > r.ratio))) continue;
          r.worst_case = id;
          r.output = name;
          r.ratio = ratio;
        }
      // Ties between outputs: the gate's own choice (its "worst"), which is
      // one of the maxima when its err/tol equals theirs.
      if (!r.worst_case.empty() && w.contains("worst") && w["worst"].is_object()) {
        const auto& g = w["worst"];
        if (g.contains("case") && g["case"].is_string() && !g["case"].get<std::string>().empty() &&
            g.contains("err_tol") && as_ratio(g["err_tol"]) == r.ratio &&
            (only_output.empty() || (g.contains("output") && g["output"] == only_output))) {
          r.worst_case = g["case"].get<std::string>();
          if (g.contains("output") && g["output"].is_string()) r.output = g["output"].get<std::string>();
        }
      }
      if (w.contains("variant") && w["variant"].is_string()) r.variant = w["variant"].get<std::string>();
      if (!r.worst_case.empty()) r.impl = window_impl(w, op, where, window_case(w, where, r.label, r.worst_case));
      out.push_back(std::move(r));
    }
    return out;
  }
  std::vector<const nlohmann::json*> cases;
  if (report.is_object() && report.contains("case")) {
    cases.push_back(&report);
  } else if (report.is_array()) {
    for (const auto& c : report) cases.push_back(&c);
  } else {
    throw std::invalid_argument(
        "report: the JSON is neither a gate report (no 'windows') nor a check report (no 'case')");
  }
  for (size_t n = 0; n < cases.size(); ++n) {
    const auto& c = *cases[n];
    const std::string where = report.is_array() ? "report[" + std::to_string(n) + "]" : std::string("report");
    if (!c.is_object()) throw std::invalid_argument("report: " + where + " is not a check report (an object)");
    const std::string id = str_field(c, "case", where);
    check_report_string(id, where + "'s case");
    if (!c.contains("impls") || !c["impls"].is_array())
      throw std::invalid_argument("report: " + where + " has no 'impls' array");
    for (const auto& ji : c["impls"]) {
      const std::string impl = str_field(ji, "impl", where + ".impls[]");
      check_report_string(impl, where + "'s implementation");
      auto it = std::find_if(out.begin(), out.end(), [&](const ReportWindow& r) { return r.label == impl; });
      if (it == out.end()) {
        ReportWindow r;
        r.index = out.size();
        r.label = impl;
        r.variant = impl;
        it = out.insert(out.end(), std::move(r));
      }
      if (const auto* outs = outputs_of(ji, where + ".impls[]"))
        for (const auto& name : output_order(*outs)) {
          if (!only_output.empty() && name != only_output) continue;
          const auto& o = (*outs)[name];
          const double ratio = o.is_object() && o.contains("max_ratio") ? as_ratio(o["max_ratio"]) : 0.0;
          if (!it->worst_case.empty() && !(ratio > it->ratio)) continue;
          it->worst_case = id;
          it->output = name;
          it->ratio = ratio;
          it->impl = impl;
        }
    }
  }
  return out;
}

ReportWindow select_report_window(const nlohmann::json& report, const std::string& key,
                                  const std::string& only_output) {
  const auto ws = report_windows(report, only_output);
  const bool any = std::any_of(ws.begin(), ws.end(), [](const ReportWindow& r) { return !r.worst_case.empty(); });
  if (!any && !only_output.empty()) {
    const auto all = report_windows(report);
    if (std::any_of(all.begin(), all.end(), [](const ReportWindow& r) { return !r.worst_case.empty(); })) {
      // Which outputs its windows do name, so the choice can be corrected.
      std::string names;
      for (const std::string o : {"y", "rstd", "dx", "dw", "h_new"}) {
        const auto wo = report_windows(report, o);
        if (std::any_of(wo.begin(), wo.end(), [](const ReportWindow& r) { return !r.worst_case.empty(); }))
          names += (names.empty() ? "" : ", ") + o;
      }
      throw std::invalid_argument("no window of it names a worst case of output '" +
                                  core::escape_controls(only_output) + "'" +
                                  (names.empty() ? std::string() : " (its windows name one of " + names + ")"));
    }
  }
  if (!any)
    throw std::invalid_argument(
        ws.empty() ? std::string("it names no cases (") +
                         (report.is_object() && report.contains("windows") ? "no windows" : "no check cases") + ")"
                   : "it names no cases (none of its " + std::to_string(ws.size()) + " windows has a worst case)");
  const ReportWindow* hit = nullptr;
  for (const auto& r : ws)
    if (r.label == key || (!r.route.empty() && r.route == key)) {
      hit = &r;
      break;
    }
  if (!hit && !key.empty() && key.size() < 10 && std::all_of(key.begin(), key.end(), [](char ch) {
        return ch >= '0' && ch <= '9';
      })) {
    const size_t i = std::stoul(key);
    if (i < ws.size()) hit = &ws[i];
  }
  if (!hit) {
    std::string msg = "no window '" + core::escape_controls(key) + "'; its windows (give the label, FILE:LINE or index):";
    for (const auto& r : ws)
      msg += "\n  " + std::to_string(r.index) + "  " + core::escape_controls(r.label) +
             (r.route.empty() ? "" : "  (" + core::escape_controls(r.route) + ")");
    throw core::MultilineError(msg);
  }
  if (hit->worst_case.empty() && !only_output.empty()) {
    // Which outputs it does name, so the choice can be corrected.
    std::string names;
    for (const std::string o : {"y", "rstd", "dx", "dw", "h_new"})
      if (!report_windows(report, o)[hit->index].worst_case.empty()) names += (names.empty() ? "" : ", ") + o;
    throw std::invalid_argument("window index " + std::to_string(hit->index) + " '" +
                                core::escape_controls(hit->label) + "' names no worst case of output '" + core::escape_controls(only_output) + "'" +
                                (names.empty() ? std::string() : " (it names one of " + names + ")"));
  }
  if (hit->worst_case.empty())
    throw std::invalid_argument("window index " + std::to_string(hit->index) + " '" +
                                core::escape_controls(hit->label) +
                                "' names no worst case (did every case of it fail to run?)");
  return *hit;
}

Provenance provenance_of(const CheckReport& rep, const std::string& version, const std::string& commit) {
  if (rep.impls.size() != 1)
    throw std::invalid_argument("provenance_of: the report has " + std::to_string(rep.impls.size()) +
                                " implementations, expected 1");
  const CheckRequest& req = rep.request;
  const auto& ir = rep.impls.front();
  const bool gpu = ir.ran_on == "gpu";
  Provenance p;
  p.case_id = seeds::to_string(req.id);
  p.impl = ir.impl;
  if (ir.impl != "fp32-baseline") {
    p.impl_sha256 = std::string(kernels::variant(ir.impl).source_sha256);
    // The forward whose y, rstd (h_new) the run checked: the default forward
    // for a backward variant, the variant itself for a forward one.
    const kernels::Variant& f = *impl_variants(ir.impl, req.id).fwd;
    p.fwd = std::string(f.name);
    p.fwd_sha256 = std::string(f.source_sha256);
  } else {
    p.fwd = ir.impl;
  }
  // Where it ran, in the words of the record: a built-in variant on the GPU
  // or as its CPU model, the FP32 baseline on the CPU, an external (a plugin
  // on the host or a device, a Python or C implementation) as its own
  // ran_on says ("plugin on host (cpu)", "plugin on NVIDIA H100 ...").
  const bool external = ir.impl != "fp32-baseline" && kernels::variant(ir.impl).external;
  p.backend = gpu                       ? std::string("gpu")
              : ir.impl == "fp32-baseline" ? std::string("cpu")
              : external                ? (ir.ran_on.empty() ? std::string("external") : ir.ran_on)
                                        : std::string("cpu-model");
  p.oracle = std::string(oracle::to_string(req.oracle));
  p.escalations = oracle_line(rep);
  p.family = std::string(seeds::to_string(req.id.family));
  p.budgets = "y, dx: atol = rtol = 1e-2; rstd: rtol 1e-5; dw: atol 1e-4 + rtol 1e-4 (vs FP64)";
  p.verdict = std::string(to_string(ir.result.verdict()));
  // The device of a GPU run, or of an external that computes on one
  // (ExternalImpl::cuda_device: a device plugin, a Python callable on cuda).
  const ExternalImpl* x = external ? find_external(kernels::variant(ir.impl)) : nullptr;
  if (gpu || (x != nullptr && x->cuda_device >= 0)) {
    const auto d = gpu ? kernels::device_info() : kernels::device_info(x->cuda_device);
    p.gpu = d.name;
    p.driver = d.driver;
    p.cuda = d.cuda_runtime;
  }
  p.normgate_version = version;
  p.normgate_commit = commit;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  p.date = date;
  return p;
}

std::vector<MapsEntry> export_maps(const std::vector<ExportItem>& items, const ExportOptions& opt) {
  std::vector<MapsEntry> out;
  const Backend b = resolve_backend(opt.backend);
  for (const auto& it : items) {
    if (opt.before_case) opt.before_case();
    CheckRequest req{seeds::parse_case(it.case_id), {it.impl}, b, opt.threads, opt.oracle};
    MapsEntry e;
    const CheckReport rep = finish_check(prepare_check(req), [&](const CheckInternals& in) {
      e.maps = error_maps(in.problem, in.outs.front(), in.ref, opt.tile, opt.full, opt.threads);
    });
    // Outputs the run did not validate (dx and dw of an external forward,
    // which runs without a carrier backward) are NaN.
    for (int o = 0; o < 4; ++o) {
      e.max_ratio[o] = std::numeric_limits<double>::quiet_NaN();
      for (const auto& t : rep.impls.front().result.tensors)
        if (t.output() == static_cast<Output>(o)) e.max_ratio[o] = t.worst.ratio;
    }
    e.prov = provenance_of(rep, opt.normgate_version, opt.normgate_commit);
    e.prov.window = it.window;
    e.prov.seed_set = it.seed_set;
    out.push_back(std::move(e));
  }
  return out;
}

nlohmann::json read_report_file(const std::string& path, std::string* sha256, std::vector<std::string>* notes) {
  if (const std::string why = core::regular_file_problem(path); !why.empty())
    throw std::invalid_argument("cannot read report '" + path + "': " + why);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("cannot read report '" + path + "': " + std::strerror(errno));
  // The bytes once: what is parsed is what is hashed.
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw std::invalid_argument("cannot read report '" + path + "': " + std::strerror(errno));
  const std::string text = buf.str();
  if (sha256) *sha256 = seeds::sha256_hex(text.data(), text.size());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // The Markdown report beside the JSON one is the likely mix-up.
    const bool markdown = text.rfind("#", 0) == 0 || (path.size() > 3 && path.compare(path.size() - 3, 3, ".md") == 0);
    throw std::invalid_argument("report '" + path + "' is not JSON" +
                                (markdown ? std::string(": it is a Markdown report; give the JSON one (gate "
                                                        "--report-json, check --json)")
                                          : ": " + std::string(e.what())));
  }
  int version = 0;
  try {
    version = report_format_version(j);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("report '" + path + "': " + e.what());
  }
  if (version == 0 && notes)
    notes->push_back(path + " has no \"format\" field: a report written before normgate versioned its reports, "
                     "read as version 0 (the fields of version 1; docs/schemas.md)");
  return j;
}

ExportRun export_report(const ExportRequest& req, const std::function<void(const ExportRun&)>& on_plan) {
  ExportRun run;
  if (req.keep < 0 || req.keep > 1000)
    throw std::invalid_argument("keep " + std::to_string(req.keep) + " is outside 1..1000 (0: the default)");
  if (req.all && req.keep != 0)
    throw std::invalid_argument("all and keep " + std::to_string(req.keep) + " exclude each other (all: every case)");
  if (req.opt.tile < 1 || req.opt.tile > (int64_t{1} << 20))
    throw std::invalid_argument("tile " + std::to_string(req.opt.tile) + " is outside 1..1048576");
  if (req.out.empty()) throw std::invalid_argument("no output file given");
  const nlohmann::json j = read_report_file(req.report, &run.report_sha256, &run.notes);
  const bool gate_report = j.is_object() && j.contains("windows");
  const bool every = req.all || (req.keep == 0 && gate_report);
  run.items = export_plan(j, req.keep == 0 ? 3 : req.keep, every);
  if (run.items.empty())
    throw std::invalid_argument("report '" + req.report +
                                "' names no worst case (no window or implementation with one): nothing to export");
  // export re-runs every case: an implementation the report names but this
  // process does not know (a Python one not registered, a plugin not
  // loaded) is refused before any case runs.
  for (const auto& it : run.items)
    if (kernels::find_variant(it.impl) == nullptr && it.impl != "fp32-baseline")
      throw std::invalid_argument(
          "the report's " + (it.window.empty() ? std::string("case ") + it.case_id : "window '" + it.window + "'") +
          " ran '" + core::escape_controls(it.impl) +
          "', which this process does not know (no built-in variant, loaded plugin's or registered external's "
          "name): export re-runs each case, so an implementation of your own must be registered here (--plugin "
          "LIB.so for a plugin; normgate.export(..., impls=[impl]) for a Python one)");
  // The code each window gated is the code this process runs: maps of other
  // code under the report's window (and beside its verdict in `plot`) would
  // tell a reader what the gate found about code it never ran.
  for (const auto& it : run.items) {
    if (it.variant.empty() || it.variant_sha256.empty()) continue;  // a check report, or no hash recorded
    const kernels::Variant* v = kernels::find_variant(it.variant);
    if (v == nullptr) continue;  // refused above when it runs; a forward's carrier is checked by its own hash
    if (std::string(v->source_sha256) != it.variant_sha256)
      throw std::invalid_argument(
          "the report's window '" + it.window + "' gated " + core::escape_controls(it.variant) + " of source " +
          core::escape_controls(it.variant_sha256.substr(0, 12)) + ", and this process has source " +
          std::string(v->source_sha256.substr(0, 12)) +
          ": its maps would show other code under the report's verdict. Export with the code the report "
          "gated (the same sources), or gate the code you have and export that report");
  }
  // Each case parsed, supported by its implementation and within host
  // memory, all before the first case runs (a refusal after earlier cases
  // ran wasted them, and an oversized one ended in bad_alloc). export holds
  // one case at a time; with full, every case's dx map too, until the file
  // is written (checked over all cases below).
  std::vector<seeds::CaseId> all;
  for (const auto& it : run.items) {
    const std::string where = it.window.empty() ? std::string("the report's case ") + it.case_id
                                                : "the report's window '" + it.window + "' (case " + it.case_id + ")";
    seeds::CaseId c;
    try {
      c = seeds::parse_case(it.case_id);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(where + ": " + e.what());
    }
    if (const std::string why = unsupported_reason(it.impl, c); !why.empty())
      throw std::invalid_argument(where + ": '" + core::escape_controls(it.impl) + "' does not support it (" + why +
                                  "), so export cannot re-run it");
    try {
      GateHold external;  // a plugin's staging copies and host workspace
      if (const kernels::Variant* v = kernels::find_variant(it.impl)) add_external_hold(external, *v, {c});
      require_host_memory({c}, 1, MemoryExtra::none, external);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(where + ": " + e.what());
    }
    all.push_back(c);
  }
  if (req.opt.full) require_host_memory(all, 1, MemoryExtra::full_dx_maps);
  ExportOptions eo = req.opt;
  eo.backend = resolve_backend(req.opt.backend);
  // The note is about built-in variants (an external runs as it is).
  const bool builtin = std::any_of(run.items.begin(), run.items.end(),
                                   [](const auto& it) { return kernels::builtin_variant(it.impl); });
  if (eo.backend == Backend::cpu && builtin)
    run.notes.push_back("no GPU in use: kernel variants run as their CPU models (recorded as backend cpu-model)");
  if (j.is_object() && j.contains("backend") && j["backend"] == "gpu" && eo.backend != Backend::gpu)
    run.notes.push_back("the report ran on the GPU; these maps come from the CPU models");
  if (on_plan) on_plan(run);
  run.entries = export_maps(run.items, eo);
  write_maps_file(req.out, req.report, run.entries, run.report_sha256);
  return run;
}

}  // namespace normgate::validators
