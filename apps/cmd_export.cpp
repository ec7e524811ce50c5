// apps/cmd_export.cpp: normgate export REPORT: a report's worst cases re-run and their error maps
// written (HDF5).
#include "commands.h"

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "normgate/audit/export.h"
#include "normgate/harness/pipeline.h"
#include "normgate/kernels/registry.h"
#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate_version.h"

namespace normgate::app {

void add_export(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand(
      "export",
      "Re-run a report's worst cases and write their error maps (dw err/tol and bound per column, rstd per row, "
      "y/dx max-pooled tiles, histograms; --full: the whole dx map) with provenance to an HDF5 file");
  struct Opts {
    std::string report, out, backend = "auto", oracle = "auto";
    int keep = 0, threads = 0;  // keep 0: not given (the default depends on the report)
    int64_t tile = 256;
    bool all = false, full = false;
    std::vector<std::string> plugins;
  };
  auto o = std::make_shared<Opts>();
  sub->add_option("report", o->report, "Gate report (--report-json) or check report (--json)")->required();
  sub->add_option("-o,--output", o->out, "HDF5 file to write (atomically)")->required();
  // A gate report's window names one worst case per output (y, rstd, dx, dw,
  // h_new, dw vs FP32): by default all of them are exported, since ranking by
  // err/tol across outputs put dw's worst case (err/tol often far below y's
  // and dx's) after the cut.
  auto* keep_opt = sub->add_option("--keep", o->keep,
                                   "Gate report: per window, its N distinct worst cases with the largest "
                                   "err/tol (the dw-vs-FP32 worst case ranks last); default: all of them, "
                                   "as --all. Check report: per implementation, its N cases with the "
                                   "largest err/tol over the outputs; default: 3")
                       ->check(CLI::Range(1, 1000));
  // --all takes every case, so a --keep beside it would be ignored: refused.
  sub->add_flag("--all", o->all,
                "Every case the report names. Gate report: per window, each output's worst case and (backward "
                "windows) the dw-vs-FP32 worst case, each distinct case once: the same cases as the default. "
                "Check report: every case of every implementation (the default: its 3 worst)")
      ->excludes(keep_opt);
  sub->add_flag("--full", o->full, "Also the full [T, H] dx err/tol map (4 bytes per element)");
  sub->add_option("--tile", o->tile, "Tile edge of the pooled maps")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  add_backend_option(sub, o->backend, "Where variants run: gpu, cpu (CPU models), auto");
  add_oracle_option(sub, o->oracle, "Reference: auto, fp64, mpfr");
  add_threads_option(sub, o->threads, "OpenMP threads (0: default)");
  add_plugin_option(sub, o->plugins);
  sub->callback([&cmds, o] {
    cmds.run = [o] {
      {
        std::vector<PathArg> inputs = {{"report", o->report}};
        for (const auto& p : o->plugins) inputs.push_back({"--plugin", p});
        check_outputs({{"--output", o->out}}, inputs);
      }
      load_plugins(o->plugins);
      validators::ExportRequest req;
      req.report = o->report;
      req.out = o->out;
      req.keep = o->keep;
      req.all = o->all;
      req.opt.backend = validators::parse_backend(o->backend);
      req.opt.oracle = oracle::parse_oracle_mode(o->oracle);
      req.opt.threads = o->threads;
      req.opt.tile = o->tile;
      req.opt.full = o->full;
      req.opt.normgate_version = NORMGATE_VERSION;
      req.opt.normgate_commit = NORMGATE_GIT_COMMIT;
      // Checked, planned, run and written by the library (audit/export.h:
      // export_report, which ng_export calls too); the plan is printed
      // before the first case runs.
      const validators::ExportRun run = [&] {
        const ExitGuard exit_guard("export");
        return validators::export_report(req, [&](const validators::ExportRun& plan) {
          for (const auto& n : plan.notes) std::printf("note     %s\n", printable_line(n).c_str());
          std::printf("export   %zu (case, implementation) pairs from %s\n", plan.items.size(), o->report.c_str());
          std::fflush(stdout);
        });
      }();
      const auto& entries = run.entries;
      for (size_t i = 0; i < entries.size(); ++i) {
        const auto& e = entries[i];
        // A forward window's case re-runs through its carrier backward; the
        // window gates the forward's y and rstd, so those are listed, under
        // the forward's name (as the gate report and `plot` name it).
        const bool fwd = e.prov.window.rfind("fwd ", 0) == 0;
        const std::string who = fwd ? e.prov.fwd + " (via " + e.prov.impl + ")" : e.prov.impl;
        // A backward pair lists every output its window gates: a "fail"
        // from y alone (a biased y) read as a fail beside passing dw and dx.
        char ratios[128];
        if (fwd)
          std::snprintf(ratios, sizeof ratios, "y %.3g rstd %.3g", e.max_ratio[0], e.max_ratio[1]);
        else
          std::snprintf(ratios, sizeof ratios, "y %.3g rstd %.3g dx %.3g dw %.3g", e.max_ratio[0], e.max_ratio[1],
                        e.max_ratio[2], e.max_ratio[3]);
        // The report's strings escaped: one line each.
        std::printf("  %04zu %-12s %-20s %s  %s%s\n", i, printable_line(e.prov.verdict).c_str(),
                    printable_line(who).c_str(), ratios, printable_line(e.prov.case_id).c_str(),
                    e.prov.window.empty() ? "" : ("  [window " + printable_line(e.prov.window) + "]").c_str());
      }
      std::printf("wrote    %s\n", printable_line(o->out).c_str());
      return 0;
    };
  });
}

}  // namespace normgate::app
