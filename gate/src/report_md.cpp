// gate/src/report_md.cpp: the gate's Markdown report (format_gate_markdown)
// and the --plan summary (format_gate_plan).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "gate_internal.h"
#include "normgate/core/printable.h"
#include "normgate/core/report_util.h"
#include "normgate/core/shell_quote.h"
#include "normgate/gate/mutation.h"
#include "normgate/kernels/registry.h"

namespace normgate::validators {

using namespace gate_detail;

namespace {

std::string ratio_cell(double v) { return std::isinf(v) ? std::string("inf") : fmt("%.3g", v); }

std::string t_list(const std::vector<int64_t>& t) {
  std::string s;
  auto add = [&s](int64_t v) { s += (s.empty() ? "" : ", ") + std::to_string(v); };
  if (t.size() <= 12) {
    for (int64_t v : t) add(v);
    return s;
  }
  for (size_t i = 0; i < 6; ++i) add(t[i]);
  s += ", ... (" + std::to_string(t.size() - 10) + " more)";
  for (size_t i = t.size() - 4; i < t.size(); ++i) add(t[i]);
  return s;
}

std::string headroom(double worst) {
  if (!(worst > 0)) return "no error at all";
  if (std::isinf(worst)) return "infinitely over";
  if (worst <= 1) return fmt("%.3g", 1.0 / worst) + "x below the budget";
  return fmt("%.3g", worst) + "x OVER the budget";
}

double kernel_excess(const OutputAgg& a) { return a.max_ratio - a.forced; }

std::string excess_cell(const OutputAgg& a) {
  const double e = kernel_excess(a);
  return std::isnan(e) ? std::string("-") : ratio_cell(e);
}

std::string kappa_levels_text() {
  std::string s;
  for (double k : seeds::kKappaLevels) s += (s.empty() ? "" : ", ") + format_headroom(k);
  return s;
}

std::string describe_seeds(const std::string& canonical) {
  try {
    const auto s = seeds::parse_seed_set(canonical);
    std::string fams;
    for (const auto& p : s.points()) fams += (fams.empty() ? "" : ", ") + seeds::to_string(p);
    return canonical + " (" + fams + " x seeds " + std::to_string(s.first) + ".." + std::to_string(s.last) + ")";
  } catch (const std::exception&) {
    return canonical;
  }
}

}  // namespace

std::string format_plan_duration(double seconds) {
  // The unit is picked on the value as printed (3 significant digits), so
  // 59.99 s reads "1 min" and 3599.9 s "1 h", never "60 s" or "60 min".
  const double shown = std::strtod(fmt("%.3g", seconds).c_str(), nullptr);
  if (shown >= 3600) return fmt("%.3g h", seconds / 3600);
  if (shown >= 60) return fmt("%.3g min", seconds / 60);
  return fmt("%.3g s", seconds);
}

std::string format_gate_plan(const GatePlan& p, double fwd_per_second, double bwd_per_second, bool fwd_rate_default,
                             bool bwd_rate_default) {
  for (const auto& [name, v] : {std::pair<const char*, double>{"forward", fwd_per_second}, {"backward", bwd_per_second}})
    if (!(v > 0) || !std::isfinite(v))
      throw std::invalid_argument(std::string("format_gate_plan: the ") + name +
                                  " rate (elements per second) must be a positive number, got " + fmt("%g", v));
  auto hours = [&](double elements, double bwd_elements) {
    return format_plan_duration((elements - bwd_elements) / fwd_per_second + bwd_elements / bwd_per_second);
  };
  auto count = [](double elements) { return fmt("%.3g", elements); };
  // A default rate matters where it prices some elements (grid or refinement).
  const bool any_fwd = p.grid_elements_distinct > p.grid_elements_distinct_bwd ||
                       p.refine_elements_max > p.refine_elements_max_bwd;
  const bool any_bwd = p.grid_elements_distinct_bwd > 0 || p.refine_elements_max_bwd > 0;
  const bool default_rates = (fwd_rate_default && any_fwd) || (bwd_rate_default && any_bwd);
  std::ostringstream o;
  o << "# Gate plan: " << core::escape_controls(p.table_path) << "\n\n"
    << "Seed set " << p.seeds << "; " << p.windows.size() << " windows gated, " << p.skipped.size()
    << " unchanged against --base, " << p.filtered_out.size() << " left out by --windows. Nothing was run.\n\n"
    << "| window | T points | grid cases | grid elements | refinement cases (at most) | refinement elements "
       "(at most) |\n"
    << "| --- | --- | --- | --- | --- | --- |\n";
  for (const auto& w : p.windows)
    o << "| " << core::escape_controls(w.window) << " | " << w.t.size() << " | " << w.grid_cases << " | " << count(w.grid_elements) << " | "
      << w.refine_cases_max << " | " << count(w.refine_elements_max) << " |\n";
  o << "\nDistinct grid cases (windows that share a case run it once): " << p.grid_cases_distinct << ", "
    << fmt("%.3g", p.grid_elements_distinct) << " elements (" << fmt("%.3g", p.grid_elements_distinct_bwd)
    << " in cases a backward window runs): " << hours(p.grid_elements_distinct, p.grid_elements_distinct_bwd)
    << " at " << fmt("%.3g", fwd_per_second) << " elements/s forward-only and " << fmt("%.3g", bwd_per_second)
    << " backward, end to end"
    << (default_rates ? " (a default rate is one measured on a 16-core H200 host; a finished gate's throughput line "
                        "on stderr gives this host's own, which for the CPU models on a few cores are far lower).\n"
                      : ".\n")
    << "Refinement (dense grid + fresh seeds; their T follow each window's worst grid point): at most "
    << p.refine_cases_max << " cases, " << fmt("%.3g", p.refine_elements_max) << " elements, "
    << hours(p.refine_elements_max, p.refine_elements_max_bwd)
    << " (the bound puts every refinement case at its window's upper T and shares none between windows).\n";
  return o.str();
}

namespace {
std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}
}  // namespace

namespace {

// Where flat element `index` of output k (kOut order) lies: " (row R, col
// C)" for y and dx ([rows, H], rows = T, or T x heads for the per-head
// views), " (row R)" for rstd, " (col C)" for dw; "" for no element.
std::string element_place(int k, int64_t index, int64_t H) {
  if (index < 0 || H < 1) return "";
  if (k == 1) return " (row " + std::to_string(index) + ")";
  if (k == 3) return " (col " + std::to_string(index) + ")";
  return " (row " + std::to_string(index / H) + ", col " + std::to_string(index % H) + ")";
}

// How to run a failing window's worst case again. A built-in variant (or
// the default forward, through a backward variant that computes it) with
// `normgate check`; a plugin's with its library loaded (--plugin); a
// Python implementation with normgate.check in the process that defines it,
// since no other process can load a Python callable; any other external
// (registered through the C API) likewise by its own process's ng_check.
std::string rerun_hint(const GateResult& r, const WindowResult& w, const std::string& worst_case) {
  const std::string name(w.route.variant->name);
  const auto ext = std::find_if(r.externals.begin(), r.externals.end(),
                                [&](const GateResult::External& e) { return e.name == name; });
  const std::string case_word = core::shell_word(worst_case);
  if (ext == r.externals.end())
    return "rerun it with: normgate check --case " + case_word + " --variant " +
           (w.route.op == Op::bwd || w.route.variant != &kernels::default_fwd() ? name
                                                                               : std::string("bwd_det_chunked"));
  const std::string plugin = "plugin ";
  if (ext->origin.rfind(plugin, 0) == 0)
    return "rerun it with: normgate check --plugin " + core::shell_word(ext->origin.substr(plugin.size())) +
           " --case " + case_word + " --variant " + core::shell_word(name);
  if (ext->origin == "python")
    return "rerun it in Python with: normgate.check(impl, \"" + worst_case + "\") (impl: the Implementation named " +
           core::escape_controls(name) + "; `normgate check` cannot load a Python callable)";
  return "rerun it with ng_check in the process that registered " + core::escape_controls(name) + " (origin " +
         core::escape_controls(ext->origin) + "; `normgate check` cannot load it)";
}

}  // namespace

std::string format_gate_markdown(const GateResult& r) {
  std::ostringstream o;
  int failing = 0, inconclusive = 0, incomplete = 0, h_new_unchecked = 0;
  int64_t missing = 0;
  for (const auto& w : r.windows) {
    failing += !w.pass;
    inconclusive += w.verdict == Verdict::inconclusive;
    incomplete += w.incomplete && w.missing > 0;
    h_new_unchecked += w.incomplete && w.h_new_unchecked > 0;
    missing += w.missing;
  }
  o << "# normgate gate: " << core::escape_controls(r.table_path) << "\n\n";
  if (!r.shard.empty())
    o << "- **shard " << r.shard << "**: this run ran only the grid cases of its shard (`--shard`), no "
      << "refinement: every window is INCOMPLETE. The verdicts come from merging every shard's journal "
      << "(`normgate gate ... --merge`).\n";
  else if (incomplete > 0)
    o << "- **INCOMPLETE**: " << incomplete << " of " << r.windows.size() << " windows lack " << missing
      << " cases (counted per window) that no merged shard journal holds"
      << (r.shards_missing.empty() ? std::string() : " (shards not given: " + joined(r.shards_missing) + ")")
      << "; those windows had no refinement and are not passed: run the missing shards and merge again.\n";
  if (r.shard.empty() && h_new_unchecked > 0)
    o << "- **INCOMPLETE**: " << h_new_unchecked << " of " << r.windows.size()
      << " windows (form res) hold cases whose h_new was not checked (records of a journal written before h_new "
         "was recorded): not passed; gate them again into a new journal.\n";
  if (r.shard.empty() && incomplete == 0 && missing > 0)  // only windows that already fail or error lack cases
    o << "- **cases missing**: " << missing << " cases (counted per window) have no result in a merged shard journal"
      << (r.shards_missing.empty() ? std::string() : " (shards not given: " + joined(r.shards_missing) + ")")
      << "; the windows they belong to already fail or could not run, so those verdicts stand without them: "
      << "run the missing shards and merge again for a complete report.\n";
  // The run's verdict as `normgate gate` says it (GateResult::verdict).
  int errored = 0;
  for (const auto& w : r.windows) errored += w.errored() ? 1 : 0;
  o << "- verdict: **" << r.verdict() << "**: "
    << (r.windows.size() - failing) << " of " << r.windows.size() << " gated windows pass";
  if (errored > 0)
    o << "; " << errored << " ERROR (cases that could not run, e.g. out of memory, and none over budget: no "
      << "verdict on the variant; run them again)";
  if (inconclusive > 0)
    o << "; " << inconclusive << " INCONCLUSIVE (no element over budget, but some comparison is within the "
      << "oracle's error bound of the budget: not approved; re-check those cases with --oracle mpfr)";
  o << "\n";
  o << "- backend: **" << r.backend << "**. " << r.backend_detail << "\n";
  for (const auto& e : r.externals)
    o << "- external implementation `" << core::escape_controls(e.name) << "` (" << e.op
      << "): " << core::escape_controls(e.origin) << ", ran as " << core::escape_controls(e.ran_on) << ", declared source sha256 " << e.source_sha256.substr(0, 12)
      << (e.description.empty() ? std::string() : "; " + core::escape_controls(e.description)) << "\n";
  o << "- table: `" << core::escape_controls(r.table_path) << "` (sha256 " << r.table_sha256.substr(0, 12) << ")";
  if (!r.base_path.empty())
    o << "; gated against base `" << core::escape_controls(r.base_path) << "` (sha256 " << r.base_sha256.substr(0, 12)
      << "): only new or changed windows";
  o << "\n";
  if (!r.windows_filter.empty())
    o << "- window filter: `" << r.windows_filter << "` (" << r.filtered_out.size() << " windows left out)\n";
  if (r.allow_controls) o << "- **negative controls allowed by explicit override** (--allow-controls)\n";
  for (const auto& w : r.windows)
    if (w.control_passed())
      o << "- **WARNING: negative control " << w.route.variant->name << " PASSED " << w.route.window()
        << "**: controls are built to fail, so this window cannot tell a broken kernel from a good one (too few "
           "rows, or too small an H, for the control's defect to show)\n";
  // --t-per-window is a floor: the first and last T and both sides of every
  // power of two inside are always run, spread points fill up to it. Say how
  // many the windows got, so that a reader does not take the option for it.
  size_t tmin = 0, tmax = 0;
  for (const auto& w : r.windows) {
    if (w.t_points.empty()) continue;
    tmin = tmin == 0 ? w.t_points.size() : std::min(tmin, w.t_points.size());
    tmax = std::max(tmax, w.t_points.size());
  }
  o << "- seeds: " << describe_seeds(r.seeds) << "; T points per window: at least " << r.t_per_window
    << " (--t-per-window: first and last T and both sides of every power of two inside, always; spread evenly "
       "up to that count)";
  if (tmax > 0)
    o << ", " << (tmin == tmax ? std::to_string(tmax) : std::to_string(tmin) + " to " + std::to_string(tmax))
      << " here";
  o << "\n";
  o << "- refinement: ";
  if (r.dense_points > 0)
    o << "dense grid every " << r.dense_step << " rows, " << detail::counted(r.dense_points, "point")
      << " each side of the worst T ("
      << (r.dense_all_seeds ? "every family and seed of the set" : "the worst case's family and seed") << ")";
  else
    o << "no dense grid";
  o << "; ";
  if (r.fresh_factor > 0)
    o << "fresh seeds: " << r.fresh_factor << "x the seed count at the worst (T, family)\n";
  else
    o << "no fresh seeds\n";
  o << "- oracle: " << (r.oracle == "auto"   ? "FP64 with rigorous per-element bounds, escalating to MPFR where FP64 "
                                               "cannot decide a comparison (--oracle auto)"
                        : r.oracle == "fp64" ? "FP64 with rigorous per-element bounds, no escalation (--oracle fp64): "
                                               "comparisons the bound cannot decide are INCONCLUSIVE"
                                             : "MPFR for every element (--oracle mpfr)")
    << "\n";
  o << "- budgets (err/tol, pass <= 1): y, dx atol = rtol = 1e-2; rstd rtol 1e-5; dw atol 1e-4 + rtol 1e-4 vs "
       "the FP64 oracle (rigorous per-element error bounds). bwd windows gate y, rstd, dx, dw (the step with its "
       "forward); fwd windows gate y, rstd. dw vs FP32 (FP32 eager on the same inputs; <= 1: not worse) is "
       "reported, not gated\n";
  // The forward variants the windows ran (bwd windows: the default forward).
  {
    // A backward external's w.fwd is itself (it runs its own step): listed
    // apart, not as a forward variant.
    std::vector<std::string> fwds, own_step;
    for (const auto& w : r.windows) {
      const bool own = w.route.op == kernels::Op::bwd && w.fwd == w.route.variant->name;
      auto& list = own ? own_step : fwds;
      if (std::find(list.begin(), list.end(), w.fwd) == list.end()) list.push_back(w.fwd);
    }
    if (!fwds.empty() || !own_step.empty()) {
      o << "- forward step: bwd windows of a built-in variant run the default forward " << kernels::default_fwd().name
        << " before their variant; a fwd window runs its own variant (fwd_rowwise: y and rstd of any backward "
           "run of the case; another built-in forward: its own runs, then a carrier backward whose dx, dw are not "
           "gated; an external forward: its own runs only).";
      if (!fwds.empty()) {
        o << " Forward variants run here:";
        for (size_t i = 0; i < fwds.size(); ++i) o << (i ? ", " : " ") << fwds[i];
        o << ".";
      }
      if (!own_step.empty()) {
        o << " Backward implementations that run their own forward step (their y and rstd are theirs):";
        for (size_t i = 0; i < own_step.size(); ++i) o << (i ? ", " : " ") << own_step[i];
        o << ".";
      } else if (!r.externals.empty()) {
        o << " A window routed to an external implementation runs its own step (its y and rstd too).";
      }
      o << "\n";
    }
  }
  // closest approach over all windows
  const WindowResult* top = nullptr;
  for (const auto& w : r.windows)
    if (!top || w.worst > top->worst) top = &w;
  if (top && top->worst_case.empty()) {
    o << "- closest to the budget: not measured: no case of any window gave results (Failures)\n";
  } else if (top) {
    o << "- closest to the budget: " << ratio_cell(top->worst) << " of it (" << top->worst_output << ", "
      << top->route.window() << ", case " << top->worst_case << "): " << headroom(top->worst);
    for (int k = 0; k < top->gated_outputs(); ++k)
      if (top->worst_output == kOut[k])
        o << "; of it forced by the interface " << ratio_cell(top->out[k].forced) << ", the kernel's own excess "
          << excess_cell(top->out[k]);
    o << "\n";
  }
  // the closest approach of the kernels themselves (err/tol minus forced at each output's worst element)
  {
    const WindowResult* kw = nullptr;
    int kk = 0;
    for (const auto& w : r.windows)
      for (int k = 0; k < w.gated_outputs(); ++k)
        if (!w.out[k].worst_case.empty() && (!kw || kernel_excess(w.out[k]) > kernel_excess(kw->out[kk]))) {
          kw = &w;
          kk = k;
        }
    if (kw)
      o << "- the kernels' own closest approach (err/tol minus the forced part, at each output's worst element): "
        << excess_cell(kw->out[kk]) << " (" << kOut[kk] << ", " << kw->route.window() << ", case "
        << kw->out[kk].worst_case << ")\n";
  }
  o << "- cases: " << r.cases_total << " runs of a case (each: inputs generated once, the oracle once, every "
       "implementation it needed; a case run again without a failing external implementation counts again)\n";
  o << "- normgate " << r.normgate_version << " (commit " << r.normgate_commit << ")\n";
  o << "- date: " << r.date << "\n\n";

  o << "## Windows\n\n"
    << "Max err/tol per output over every case of the window (grid, dense grid, fresh seeds).\n\n"
    << "| window | variant | y | rstd | dx | dw | dw vs FP32 worst / median | worst case (output) | cases | verdict |\n"
    << "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& w : r.windows) {
    const bool bwd = w.route.op == Op::bwd;
    // No case of the window gave results (each an error or a finding): no
    // err/tol to show ("0" read like a perfect result).
    const bool none = w.cases > 0 && w.errors >= w.cases;
    auto cell = [none](double v) { return none ? std::string("-") : ratio_cell(v); };
    o << "| " << w.route.window() << " | " << w.route.variant->name << (w.control ? " (CONTROL)" : "") << " | "
      << cell(w.out[0].max_ratio) << " | " << cell(w.out[1].max_ratio) << " | "
      << (bwd ? cell(w.out[2].max_ratio) : "-") << " | " << (bwd ? cell(w.out[3].max_ratio) : "-")
      << " | "
      << (bwd ? (std::isnan(w.dw_vs_fp32_worst) ? std::string("-") : ratio_cell(w.dw_vs_fp32_worst)) + " / " +
                    (std::isnan(w.dw_vs_fp32_median) ? std::string("-") : ratio_cell(w.dw_vs_fp32_median))
              : std::string("-"))
      << " | " << (w.worst_case.empty() ? "-" : w.worst_case + " (" + w.worst_output + ")") << " | " << w.cases
      << " | "
      << (w.pass                                ? "PASS"
          : w.incomplete                        ? "**INCOMPLETE**"
          : w.errored()                         ? "**ERROR**"
          : w.verdict == Verdict::inconclusive ? "**INCONCLUSIVE**"
                                                : "**FAIL**")
      << " |\n";
  }
  // Form res: h_new, bitwise exact, is gated beside the outputs above.
  {
    int64_t res_windows = 0;
    std::vector<const WindowResult*> bad;
    for (const auto& w : r.windows)
      if (w.gates_h_new()) {
        ++res_windows;
        if (w.h_new.cases_over > 0 || w.h_new_unchecked > 0) bad.push_back(&w);
      }
    if (res_windows > 0) {
      o << "\nh_new (form res: bitwise equal to BF16(x + u), gated in each res window): ";
      if (bad.empty())
        o << "equal in every case of the " << res_windows << " res window" << (res_windows == 1 ? "" : "s") << ".\n";
      else
        o << "**differs** in:\n";
      for (const WindowResult* w : bad) {
        o << "- " << w->route.window() << ": " << w->h_new.cases_over << " of " << w->cases << " cases differ";
        if (w->h_new.cases_over > 0) o << " (e.g. " << w->h_new.worst_case << ")";
        if (w->h_new_unchecked > 0)
          o << "; " << w->h_new_unchecked << " not checked (records of a journal written before h_new was recorded: "
            << "INCOMPLETE; gate again into a new journal)";
        o << "\n";
      }
    }
  }

  o << "\n## Refinement and margin\n\n"
    << "The refinement follows the output of the variant's long reduction: dw (a sum over T rows) in bwd "
       "windows, rstd (a sum over H columns) in fwd windows. \"worst\" columns: that output's largest err/tol in "
       "each step (T of the case). \"other windows' cases\": cases the other gated windows ran inside this "
       "window (same H, w, form), run with this window's variant too and counted in its verdict. \"closest to "
       "1\": the largest err/tol of every gated output, all steps.\n\n"
    << "| window | grid T | grid worst | dense grid | dense worst | fresh seeds | fresh worst | other windows' cases "
       "| closest to 1 |\n"
    << "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& w : r.windows) {
    auto worst_cell = [](const PhaseSummary& p) {
      if (p.worst_case.empty()) return std::string("-");
      std::string t = "?";
      try {
        t = std::to_string(seeds::parse_case(p.worst_case).T);
      } catch (const std::exception&) {
      }
      return p.worst_output + " " + ratio_cell(p.worst) + " (T=" + t + ")";
    };
    std::string dense = "-";
    // Grid T the dense grid's steps landed on: run by the grid, not again.
    std::string on_grid;
    int n_on_grid = 0;
    if (w.dense_center != 0 && r.dense_step > 0)
      for (const int64_t t : w.t_points) {
        const int64_t d = t - w.dense_center;
        if (d != 0 && d % r.dense_step == 0 && std::abs(d / r.dense_step) <= r.dense_points) {
          on_grid += (on_grid.empty() ? "" : ", ") + std::to_string(t);
          ++n_on_grid;
        }
      }
    const std::string grid_note =
        on_grid.empty() ? "" : (n_on_grid == 1 ? "; T=" + on_grid + " is a grid T" : "; T=" + on_grid + " are grid T");
    // "above" or "below" when all dense T lie on one side: the window's edge
    // cut the other off, or its steps there were grid T (grid_note names them).
    const char* side = w.dense.t.empty() || (w.dense.t.front() < w.dense_center && w.dense.t.back() > w.dense_center)
                           ? " around "
                       : w.dense.t.front() > w.dense_center ? " above "
                                                            : " below ";
    if (w.dense.t.size() == 1)
      dense = "T=" + std::to_string(w.dense.t.front()) + " (step " + std::to_string(r.dense_step) + side +
              std::to_string(w.dense_center) + grid_note + ")";
    else if (!w.dense.t.empty())
      dense = std::to_string(w.dense.t.front()) + ".." + std::to_string(w.dense.t.back()) + " step " +
              std::to_string(r.dense_step) + side + std::to_string(w.dense_center) + " (" +
              std::to_string(w.dense.t.size()) + " T" + grid_note + ")";
    else if (w.dense_center)
      dense = (on_grid.empty() ? "none inside the window around " : "none new around ") +
              std::to_string(w.dense_center) + (on_grid.empty() ? "" : " (" + grid_note.substr(2) + ")");
    std::string fresh = "-";
    if (!w.fresh.seeds.empty()) fresh = w.fresh.seeds + " at T=" + std::to_string(w.fresh_t);
    o << "| " << w.route.window() << " | " << t_list(w.t_points) << " | " << worst_cell(w.grid) << " | " << dense
      << " | " << worst_cell(w.dense) << " | " << fresh << " | " << worst_cell(w.fresh) << " | "
      << (w.others.cases == 0 ? std::string("-") : std::to_string(w.others.cases) + ": " + worst_cell(w.others))
      << " | " << (w.worst_case.empty() ? std::string("-") : w.worst_output + " " + ratio_cell(w.worst) + ": " + headroom(w.worst))
      << " |\n";
  }

  o << "\n## Margins: forced and kernel\n\n"
    << "At each output's worst element: err/tol, the part an ideal kernel gets there (forced: exact arithmetic on "
       "the FP32 rstd, one rounding to the output dtype; the interface's own rounding) and the kernel's excess "
       "over it (err/tol minus forced; negative: the kernel's rounding landed nearer the reference than the ideal "
       "kernel's).\n\n"
    << "| window | variant | y | rstd | dx | dw |\n| --- | --- | --- | --- | --- | --- |\n";
  for (const auto& w : r.windows) {
    o << "| " << w.route.window() << " | " << w.route.variant->name << (w.control ? " (CONTROL)" : "");
    for (int k = 0; k < 4; ++k) {
      if (k >= w.gated_outputs() || w.out[k].worst_case.empty()) {
        o << " | -";
        continue;
      }
      o << " | " << ratio_cell(w.out[k].max_ratio) << " = forced " << ratio_cell(w.out[k].forced) << " + kernel "
        << excess_cell(w.out[k]);
    }
    o << " |\n";
  }

  // Conditioning headroom: per variant, the lowest of its windows'. A
  // window that failed at the lowest cancel level it ran, with no level
  // below that run (kappa_headroom -1: a seed set without the kappa sweep,
  // 3xN, fails at 1e8), is listed as below that level rather than left out
  // (a new-user pass found the section gone for a failing kernel).
  // Order of headroom: below a level < any measured headroom.
  auto key = [](const WindowResult& w) { return w.kappa_headroom >= 0 ? w.kappa_headroom : -1.0; };
  auto shown = [&](const WindowResult& w) {
    if (w.kappa_headroom >= 0) return format_headroom(w.kappa_headroom);
    return "<" + format_headroom(kappa_failed_below(w)) + " (the lowest level run; none below it ran)";
  };
  {
    std::vector<std::pair<std::string, std::vector<const WindowResult*>>> by_var;
    for (const auto& w : r.windows) {
      if (w.kappa_headroom < 0 && kappa_failed_below(w) == 0) continue;
      const std::string v(w.route.variant->name);
      auto it = std::find_if(by_var.begin(), by_var.end(), [&](const auto& e) { return e.first == v; });
      if (it == by_var.end()) it = by_var.insert(by_var.end(), {v, {}});
      it->second.push_back(&w);
    }
    if (!by_var.empty()) {
      o << "\n## Conditioning headroom\n\n"
        << "The highest cancel kappa (of " << kappa_levels_text()
        << ") at which the variant passes every cancel case of that level and of every lower level run (a level "
           "not run counts for nothing: a seed set without the kappa sweep, such as 3xN, runs cancel at 1e8 "
           "only): per variant the lowest over its windows (\"" << format_headroom(0)
        << "\": it fails at the lowest level of the sweep; \"<1e+08 (the lowest level run; ...)\": it fails at "
           "the only level run).\n\n"
        << "| variant | windows | kappa headroom | lowest at |\n| --- | --- | --- | --- |\n";
      for (const auto& [v, ws] : by_var) {
        const WindowResult* low = ws.front();
        for (const auto* w : ws)
          if (key(*w) < key(*low)) low = w;
        o << "| " << v << " | " << ws.size() << " | " << shown(*low) << " | " << low->route.window() << " |\n";
      }
    }
  }

  if (failing) {
    o << "\n## Failures\n\n";
    for (const auto& w : r.windows) {
      if (w.pass) continue;
      o << "- " << core::escape_controls(w.route.where()) << " `" << w.route.describe() << "`"
        << (w.control ? " (a NEGATIVE CONTROL, routed by explicit override)" : "") << ":\n";
      if (w.incomplete)
        o << "  - INCOMPLETE: "
          << (w.missing == 0       ? std::string()
              : !r.shard.empty() ? detail::counted(w.missing, "case") + " of other shards; "
                                 : detail::counted(w.missing, "case") +
                                       " without a result (their shard was not run, not merged, or cut short); ")
          << "no refinement" << (r.shard.empty() ? "" : " (a shard runs only grid cases)") << "\n";
      for (int k = 0; k < w.gated_outputs(); ++k) {
        const auto& a = w.out[k];
        if (a.cases_over == 0 && a.max_ratio <= 1) continue;
        o << "  - " << kOut[k] << " does not pass (over budget, or not certified) in " << a.cases_over << " of "
          << w.cases
          << " cases; worst err/tol " << ratio_cell(a.max_ratio) << " at element " << a.worst_index
          << element_place(k, a.worst_index, w.route.H) << " of "
          << a.worst_case << " (an ideal kernel on the FP32 rstd would have " << ratio_cell(a.forced)
          << "); " << rerun_hint(r, w, a.worst_case) << "\n";
      }
      if (!w.families.empty()) {
        o << "  - failing cases by family:";
        for (size_t i = 0; i < w.families.size(); ++i)
          o << (i ? ", " : " ") << w.families[i].family << " " << w.families[i].failed << " of " << w.families[i].cases;
        o << "\n";
      }
      if (w.errors) {
        // A declared deterministic implementation that gave two bit patterns
        // is a finding about it (FAIL, journal.h), not a run that failed.
        const int64_t other = w.errors - w.nondeterministic - w.contract_broken;
        if (w.nondeterministic > 0)
          o << "  - " << w.nondeterministic << " cases: " << w.route.variant->name
            << " is declared deterministic but two runs on one case gave different bits (a finding: the window "
               "FAILs; no later run of such a case replaces it)\n";
        if (w.contract_broken > 0)
          o << "  - " << w.contract_broken << " cases: " << w.route.variant->name
            << " broke the implementation interface (e.g. wrote outside an output's view; a finding: the window "
               "FAILs; no later run of such a case replaces it)\n";
        if (other > 0)
          o << "  - " << other << " cases could not run (the window does not pass; with none over budget and no "
            << "finding it is ERROR, no verdict on the variant)\n";
        o << "  - the first " << (w.error_samples.size() == 1 ? "one" : std::to_string(w.error_samples.size()))
          << ":\n";
        for (const auto& e : w.error_samples) o << "    - " << core::escape_controls(e) << "\n";
        if (!w.error_samples.empty()) {
          const std::string& e = w.error_samples.front();
          o << "    - " << rerun_hint(r, w, e.substr(0, e.find(": "))) << "\n";
        }
      }
      if (w.cases == 0) o << "  - no case ran\n";
    }
  }
  if (!r.source_changed.empty()) {
    o << "\n## Gated although the base table routes the same window and variant: sources changed or unproven\n\n";
    for (const auto& s : r.source_changed) o << "- " << core::escape_controls(s) << "\n";
  }
  if (!r.skipped.empty()) {
    o << "\n## Skipped: unchanged against the base table\n\n";
    for (const auto& s : r.skipped) o << "- " << core::escape_controls(s) << "\n";
  }
  if (!r.removed.empty()) {
    o << "\n## Windows of the base table that this table no longer has\n\n";
    for (const auto& s : r.removed) o << "- " << core::escape_controls(s) << "\n";
  }
  return o.str();
}

}  // namespace normgate::validators
