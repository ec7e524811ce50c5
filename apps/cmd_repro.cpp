// `normgate repro`: re-run one case for one implementation and explain it.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate/harness/pipeline.h"
#include "normgate/audit/repro.h"
#include "normgate/audit/case_file.h"
#include "normgate/audit/export.h"
#include "normgate_version.h"

namespace normgate::app {

namespace {
// A report (`gate --report-json` or `check --json`) as JSON; a missing,
// unreadable or unparsable file is an input error (exit 2) naming it.
nlohmann::json read_report(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw std::invalid_argument("cannot read report '" + path + "': " +
                                (std::filesystem::exists(path, ec) ? "not a regular file" : "no such file"));
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read report '" + path + "'");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument("report '" + path + "' is not JSON: " + e.what());
  }
}
}  // namespace

void add_repro_commands(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand(
      "repro",
      "Re-run one case for one implementation: verdict, the k worst elements of every output, the worst dw "
      "columns' conditioning and top rows, and a command that reproduces it; exit 0 pass, 1 fail/inconclusive, "
      "4 a replay (--file) whose outputs differ from the recorded ones (3: a runtime failure)");
  struct Opts {
    std::string id, impl, backend = "auto", oracle = "auto", save, file, report, window;
    int k = 10, threads = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* id = sub->add_option("case", o->id, "Case id, e.g. 'H=4096,T=16256,w=bf16,form=plain,family=cancel,seed=1'");
  auto* file = sub->add_option("--file", o->file,
                               "Replay a saved case (normgate-case/1 HDF5): its stored inputs, digest-checked, "
                               "instead of the generator; with the recorded variant, the outputs are compared "
                               "with the recorded ones bit for bit (exit 4 when they differ; a non-deterministic "
                               "variant's dw may)");
  auto* report = sub->add_option("--from-report", o->report,
                                 "Take the case from a report (gate --report-json, or check --json): the worst case "
                                 "of the window --window selects (largest err/tol over its outputs) and the "
                                 "window's variant (--variant overrides it)");
  auto* window = sub->add_option("--window", o->window,
                                 "With --from-report: the window, as the report labels it ('bwd det H=2048 w=bf16 "
                                 "form=plain T=1..128'), its route FILE:LINE, or its 0-based index; in a check "
                                 "report, an implementation (its worst case over every case)");
  id->excludes(file);
  report->excludes(id);
  report->excludes(file);
  report->needs(window);
  window->needs(report);
  sub->add_option("--save", o->save,
                  "Write the case (inputs as stored bits, outputs, references, error maps, provenance) to this "
                  "HDF5 file, or into this directory as <case id>.h5 (e.g. datasets/cases/)");
  sub->add_option("--variant,--impl", o->impl,
                  "One implementation: a backward variant (normgate variants), controls included, or fp32-baseline "
                  "(required, except with --from-report)");
  sub->add_option("--k", o->k, "Worst elements to list per output")->capture_default_str()->check(CLI::Range(1, 100000));
  add_backend_option(sub, o->backend, "Where the variant runs: gpu (CUDA), cpu (its CPU model), auto");
  add_oracle_option(sub, o->oracle, "Reference: auto (FP64, MPFR where FP64 cannot decide), fp64, mpfr (small cases)");
  add_threads_option(sub, o->threads, "OpenMP threads (0: default)");
  sub->callback([&cmds, o] {
    cmds.run = [o] {
      if (o->id.empty() && o->file.empty() && o->report.empty())
        throw std::invalid_argument("give a case id, --file FILE or --from-report REPORT --window W");
      // --from-report: the window's worst case and variant; then exactly `repro CASE --variant V`.
      std::string case_text = o->id, impl = o->impl;
      std::string from_line;
      bool report_on_gpu = false;
      if (!o->report.empty()) {
        const nlohmann::json j = read_report(o->report);
        report_on_gpu = j.is_object() && j.contains("backend") && j["backend"] == "gpu";
        validators::ReportWindow w;
        try {
          w = validators::select_report_window(j, o->window);
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument("report '" + o->report + "': " + e.what());
        }
        case_text = w.worst_case;
        if (impl.empty()) impl = w.impl;
        char ratio[32];
        std::snprintf(ratio, sizeof ratio, "%.4g", w.ratio);
        from_line = "from     " + o->report + ", window " + std::to_string(w.index) + " '" + w.label + "'" +
                    (w.route.empty() ? "" : " (" + w.route + ")") + ": worst case " + w.worst_case + " (" +
                    w.output + " err/tol " + ratio + "); variant " + impl +
                    (impl != w.impl ? " (--variant; the window's is " + w.impl + ")"
                     : impl != w.variant ? " (a backward run; it runs the window's forward " + w.variant + ")"
                                         : "") +
                    "\n";
      }
      if (impl.empty()) throw std::invalid_argument("--variant is required (one implementation; see normgate variants)");
      const auto impls = validators::expand_impls({impl});
      if (impls.size() != 1) throw std::invalid_argument("--variant must name one implementation, not '" + impl + "'");
      const auto backend = validators::resolve_backend(validators::parse_backend(o->backend));
      // The notes come once the case is known (parsed, or its file read): a bad argument is the only output.
      auto notes = [&] {
        if (backend == validators::Backend::cpu)
          std::printf("note     no GPU in use: kernel variants run as their CPU models\n");
        if (report_on_gpu && backend != validators::Backend::gpu)
          std::printf("note     the report ran on the GPU; this repro runs the CPU models\n");
        std::fputs(from_line.c_str(), stdout);
      };
      validators::ReproOptions ro;
      ro.k = o->k;
      ro.keep_case = !o->save.empty();
      ro.normgate_version = NORMGATE_VERSION;
      ro.normgate_commit = NORMGATE_GIT_COMMIT;
      std::optional<validators::SavedCase> replay;
      seeds::CaseId c;
      if (!o->file.empty()) {
        try {
          replay = validators::read_case_file(o->file);  // throws on a digest mismatch or corruption
        } catch (const std::runtime_error& e) {
          throw std::invalid_argument(e.what());  // a bad input file: exit 2
        }
        std::printf("replay   %s: %s, inputs SHA-256 %s verified; recorded verdict of %s: %s\n", o->file.c_str(),
                    replay->prov.case_id.c_str(), replay->inputs_sha256.substr(0, 16).c_str(),
                    replay->prov.impl.c_str(), replay->prov.verdict.c_str());
        if (const std::string stale = validators::changed_sources(replay->prov); !stale.empty())
          std::printf("note     the sources changed since this was recorded (%s): this build runs; "
                      "\"recorded outputs\" below says whether its outputs changed too\n",
                      stale.c_str());
        c = replay->inputs.id;
        ro.inputs = &replay->inputs;
        ro.replay_file = o->file;
        ro.recorded = &replay->outputs;
        ro.recorded_impl = replay->prov.impl;
        ro.recorded_backend = replay->prov.backend;
      } else {
        c = seeds::parse_case(case_text);
      }
      std::string save = o->save;
      // A path ending in '/' names a folder: create it (with parents) if missing.
      if (!save.empty() && save.back() == '/' && !std::filesystem::exists(save)) {
        std::error_code ec;
        std::filesystem::create_directories(save, ec);
        if (ec) throw std::invalid_argument("--save '" + save + "': cannot create the folder: " + ec.message());
      }
      if (!save.empty() && std::filesystem::is_directory(save))
        save = (std::filesystem::path(save) / (seeds::to_string(c) + "," + impls.front() + ".h5")).string();
      if (!save.empty()) check_writable(save);
      const validators::CheckRequest req{c, impls, backend, o->threads, oracle::parse_oracle_mode(o->oracle)};
      notes();
      const auto r = validators::repro(req, ro);
      std::fputs(validators::format_repro(r).c_str(), stdout);
      if (!save.empty()) {
        validators::write_case_file(save, *r.saved);
        std::printf("saved    %s (%.1f MB)\n", save.c_str(),
                    static_cast<double>(std::filesystem::file_size(save)) / 1e6);
        std::printf("replay   normgate repro --file '%s' --variant %s   (the stored inputs, no generator)\n",
                    save.c_str(), impls.front().c_str());
      }
      if (r.recorded_mismatch()) {
        std::printf("replay   MISMATCH: the outputs differ from the ones %s recorded (exit 4)\n",
                    o->file.c_str());
        return 4;
      }
      return r.check.pass() ? 0 : 1;
    };
  });
}

void add_export(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand(
      "export",
      "Re-run a report's worst cases and write their error maps (dw err/tol and bound per column, rstd per row, "
      "y/dx max-pooled tiles, histograms; --full: the whole dx map) with provenance to an HDF5 file");
  struct Opts {
    std::string report, out, backend = "auto", oracle = "auto";
    int keep = 3, threads = 0;
    int64_t tile = 256;
    bool all = false, full = false;
  };
  auto o = std::make_shared<Opts>();
  sub->add_option("report", o->report, "Gate report (--report-json) or check report (--json)")->required();
  sub->add_option("-o,--output", o->out, "HDF5 file to write (atomically)")->required();
  sub->add_option("--keep", o->keep, "Worst cases per window (up to this many distinct cases)")->capture_default_str()->check(CLI::Range(1, 1000));
  sub->add_flag("--all", o->all, "Every case the report names for each window (worst per output, dw vs FP32)");
  sub->add_flag("--full", o->full, "Also the full [T, H] dx err/tol map (4 bytes per element)");
  sub->add_option("--tile", o->tile, "Tile edge of the pooled maps")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  add_backend_option(sub, o->backend, "Where variants run: gpu, cpu (CPU models), auto");
  add_oracle_option(sub, o->oracle, "Reference: auto, fp64, mpfr");
  add_threads_option(sub, o->threads, "OpenMP threads (0: default)");
  sub->callback([&cmds, o] {
    cmds.run = [o] {
      check_writable(o->out);
      const nlohmann::json j = read_report(o->report);
      const auto items = validators::export_plan(j, o->keep, o->all);
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
      const auto entries = validators::export_maps(items, eo);
      for (size_t i = 0; i < entries.size(); ++i)
        std::printf("  %04zu %-12s %-20s dw %.3g dx %.3g  %s%s\n", i, entries[i].prov.verdict.c_str(),
                    entries[i].prov.impl.c_str(), entries[i].max_ratio[3], entries[i].max_ratio[2],
                    entries[i].prov.case_id.c_str(),
                    entries[i].prov.window.empty() ? "" : ("  [window " + entries[i].prov.window + "]").c_str());
      validators::write_maps_file(o->out, o->report, entries);
      std::printf("wrote    %s\n", o->out.c_str());
      return 0;
    };
  });
}

namespace {
// Run argv with stdout/stderr discarded; its exit status, or -1.
int run_quiet(std::vector<std::string> args) {
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}
}  // namespace

void add_plot(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand(
      "plot", "PNG pictures of a case or maps file and OUTPUT/index.html (plot_maps.py beside the binary: python3 with h5py, "
              "numpy, matplotlib): per case the outputs its window gates (forward: y tile heatmap, rstd per row; "
              "backward: dx tile heatmap, dw per column) and their err/tol histograms; the index lists the windows "
              "in the report's order, verdict first, with their pictures");
  struct Opts {
    std::string file, out, report;
    int dpi = 0;
  };
  auto o = std::make_shared<Opts>();
  sub->add_option("file", o->file, "HDF5 file (normgate-case/1 or normgate-maps/1)")->required();
  sub->add_option("-o,--output", o->out, "Folder for the PNGs and index.html (created if missing)")->required();
  sub->add_option("--dpi", o->dpi, "Resolution (default: the script's)")->check(CLI::Range(20, 1200));
  sub->add_option("--report", o->report,
                  "Gate report the maps were exported from, for the index's window order and verdicts (default: "
                  "the file's recorded source, when it is there and matches)");
  sub->callback([&cmds, o] {
    cmds.run = [o] {
      // The script reads only the maps: check the whole file first, as inspect
      // does (every dataset's Fletcher-32 checksum, a case's inputs digest), so
      // a corrupted file is refused (exit 2, file and dataset named), not drawn.
      try {
        (void)validators::inspect_file(o->file);
      } catch (const std::runtime_error& e) {  // a bad file is bad input (exit 2), as in inspect
        throw std::invalid_argument(e.what());
      }
      const char* script_env = std::getenv("NORMGATE_PLOT_SCRIPT");
      // The script is installed beside this binary (audit/plot_maps.py; apps/CMakeLists.txt
      // copies it into the build folder and installs it next to normgate).
      const std::string script =
          script_env ? script_env
                     : (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "plot_maps.py").string();
      // $PYTHON, else the first of python3 and /usr/bin/python3 (Debian's
      // python3-h5py and python3-matplotlib, scripts/bootstrap) that imports them.
      const char* py_env = std::getenv("PYTHON");
      std::string py = py_env ? py_env : "";
      if (py.empty()) {
        for (const char* cand : {"python3", "/usr/bin/python3"})
          if (run_quiet({cand, "-c", "import h5py, matplotlib, numpy"}) == 0) {
            py = cand;
            break;
          }
        if (py.empty())
          throw std::invalid_argument("no python3 with h5py, numpy and matplotlib found (scripts/bootstrap installs "
                                      "them; or set PYTHON=/path/to/python)");
      }
      if (!std::filesystem::is_regular_file(script))
        throw std::invalid_argument("plot script '" + script + "' not found (set NORMGATE_PLOT_SCRIPT)");
      std::vector<std::string> args = {py, script, o->file, "-o", o->out};
      if (o->dpi > 0) args.insert(args.end(), {"--dpi", std::to_string(o->dpi)});
      if (!o->report.empty()) args.insert(args.end(), {"--report", o->report});
      std::fflush(stdout);
      const pid_t pid = ::fork();
      if (pid < 0) throw std::runtime_error("plot: fork failed");
      if (pid == 0) {
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execvp(argv[0], argv.data());
        std::fprintf(stderr, "normgate: error: cannot run '%s' (set PYTHON)\n", py.c_str());
        ::_exit(2);
      }
      int status = 0;
      if (::waitpid(pid, &status, 0) < 0) throw std::runtime_error("plot: waitpid failed");
      if (!WIFEXITED(status)) throw std::runtime_error("plot: " + script + " was killed");
      return WEXITSTATUS(status);  // 0 ok, 2 bad input (the script names it)
    };
  });
}

void add_inspect(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand("inspect", "Summarize a normgate HDF5 file (a saved case or exported maps); "
                                            "a saved case's input digest is verified");
  auto path = std::make_shared<std::string>();
  sub->add_option("file", *path, "HDF5 file")->required();
  sub->callback([&cmds, path] {
    cmds.run = [path] {
      try {
        std::fputs(validators::inspect_file(*path).c_str(), stdout);
      } catch (const std::runtime_error& e) {
        throw std::invalid_argument(e.what());  // a missing, corrupted or foreign file: exit 2
      }
      return 0;
    };
  });
}

}  // namespace normgate::app
