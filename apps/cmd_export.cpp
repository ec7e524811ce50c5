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
                                   "Distinct worst cases per window of a gate report, largest err/tol first "
                                   "(default: every output's worst case), or per implementation of a check "
                                   "report (default: 3)")
                       ->check(CLI::Range(1, 1000));
  // --all takes every case, so a --keep beside it would be ignored: refused.
  sub->add_flag("--all", o->all, "Every case the report names for each window (worst per output, dw vs FP32)")
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
      std::string report_sha256;
      const nlohmann::json j = read_report(o->report, &report_sha256);
      const bool gate_report = j.is_object() && j.contains("windows");
      const bool every = o->all || (o->keep == 0 && gate_report);
      const auto items = validators::export_plan(j, o->keep == 0 ? 3 : o->keep, every);
      if (items.empty())
        throw std::invalid_argument("report '" + o->report +
                                    "' names no worst case (no window or implementation with one): nothing to export");
      // export re-runs every case: an implementation the report names but
      // this process does not know (a Python one, a plugin not loaded) is
      // refused before any case runs.
      for (const auto& it : items)
        if (kernels::find_variant(it.impl) == nullptr && it.impl != "fp32-baseline")
          throw std::invalid_argument(
              "the report's " + (it.window.empty() ? std::string("case ") + it.case_id : "window '" + it.window + "'") +
              " ran '" + printable_line(it.impl) +
              "', which this process does not know (no built-in variant, nor a loaded plugin's, has that name): "
              "export re-runs each case, so an implementation of your own must be registered here (--plugin "
              "LIB.so for a plugin; a Python one, gated with normgate.gate, is re-run from Python with "
              "normgate.check)");
      // Each case parsed, supported by its implementation and within host
      // memory, all before the first case runs (a refusal after earlier
      // cases ran wasted them, and an oversized one ended in bad_alloc).
      // export holds one case at a time; with --full, every case's dx map
      // too, until the file is written (checked over all cases below).
      std::vector<seeds::CaseId> all;
      for (const auto& it : items) {
        const std::string where =
            it.window.empty() ? std::string("the report's case ") + it.case_id
                              : "the report's window '" + it.window + "' (case " + it.case_id + ")";
        seeds::CaseId c;
        try {
          c = seeds::parse_case(it.case_id);
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument(where + ": " + e.what());
        }
        if (const std::string why = validators::unsupported_reason(it.impl, c); !why.empty())
          throw std::invalid_argument(where + ": '" + printable_line(it.impl) + "' does not support it (" + why +
                                      "), so export cannot re-run it");
        try {
          require_host_memory({c}, 1);
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument(where + ": " + e.what());
        }
        all.push_back(c);
      }
      if (o->full) require_host_memory(all, 1, MemoryExtra::full_dx_maps);
      validators::ExportOptions eo;
      eo.backend = validators::resolve_backend(validators::parse_backend(o->backend));
      if (eo.backend == validators::Backend::cpu)
        std::printf("note     no GPU in use: kernel variants run as their CPU models (recorded as backend cpu-model)\n");
      if (j.is_object() && j.contains("backend") && j["backend"] == "gpu" && eo.backend != validators::Backend::gpu)
        std::printf("note     the report ran on the GPU; these maps come from the CPU models\n");
      eo.oracle = oracle::parse_oracle_mode(o->oracle);
      eo.threads = o->threads;
      eo.tile = o->tile;
      eo.full = o->full;
      eo.normgate_version = NORMGATE_VERSION;
      eo.normgate_commit = NORMGATE_GIT_COMMIT;
      std::printf("export   %zu (case, implementation) pairs from %s\n", items.size(), o->report.c_str());
      const auto entries = [&] {
        const ExitGuard exit_guard("export");
        return validators::export_maps(items, eo);
      }();
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
      validators::write_maps_file(o->out, o->report, entries, report_sha256);
      std::printf("wrote    %s\n", printable_line(o->out).c_str());
      return 0;
    };
  });
}

}  // namespace normgate::app
