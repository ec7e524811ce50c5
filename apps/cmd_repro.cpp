// apps/cmd_repro.cpp.new: normgate repro ID: one case explained element by element (k worst, dw
// columns), saved or replayed.
#include "commands.h"
#include "normgate/core/printable.h"
#include "normgate/core/shell_quote.h"

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
#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate/harness/pipeline.h"
#include "normgate/audit/repro.h"
#include "normgate/audit/case_file.h"
#include "normgate/audit/export.h"
#include "normgate_version.h"

namespace normgate::app {

void add_repro(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand(
      "repro",
      "Re-run one case for one implementation: verdict, the k worst elements of every output, the worst dw "
      "columns' conditioning and top rows, and a command that reproduces it; exit 0 pass, 1 fail/inconclusive, "
      "2 usage or input error, 3 a runtime failure, 4 a replay (--file) whose outputs differ from the recorded "
      "ones");
  struct Opts {
    std::string id, impl, backend = "auto", oracle = "auto", save, file, report, window, output;
    int k = 10, threads = 0;
    std::vector<std::string> plugins;
  };
  auto o = std::make_shared<Opts>();
  auto* id = sub->add_option("case", o->id, "Case id, e.g. 'H=4096,T=16256,w=bf16,form=plain,family=cancel,seed=1'");
  auto* file = sub->add_option("--file", o->file,
                               "Replay a saved case (normgate-case/2 HDF5): its stored inputs, digest-checked, "
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
  window->needs(report);  // --from-report without --window: checked below, listing the report's windows
  sub->add_option("--output", o->output,
                  "With --from-report: the worst case of this output alone (y, rstd, dx, dw, h_new) instead of "
                  "the largest err/tol over every output, e.g. dw, which the gate's refinement follows, where "
                  "the largest is an interface rounding of y or dx")
      ->check(CLI::IsMember({"y", "rstd", "dx", "dw", "h_new"}))
      ->needs(report);
  sub->add_option("--save", o->save,
                  "Write the case (inputs as stored bits, outputs, references, error maps, provenance) to this "
                  "HDF5 file, or into this directory as <case id>.h5 (e.g. datasets/cases/)");
  sub->add_option("--variant,--impl", o->impl,
                  "One implementation: a variant (normgate variants; a backward one runs after the default forward "
                  "fwd_rowwise, a forward one runs itself, then a carrier backward), controls included, or "
                  "fp32-baseline (required, except with --from-report, which takes the window's, and --file, "
                  "which takes the recorded one)");
  sub->add_option("--k", o->k, "Worst elements to list per output")->capture_default_str()->check(CLI::Range(1, 100000));
  add_backend_option(sub, o->backend, "Where the variant runs: gpu (CUDA), cpu (its CPU model), auto");
  add_oracle_option(sub, o->oracle, "Reference: auto (FP64, MPFR where FP64 cannot decide), fp64, mpfr (small cases)");
  add_threads_option(sub, o->threads, "OpenMP threads (0: default)");
  add_plugin_option(sub, o->plugins);
  sub->callback([&cmds, o] {
    cmds.run = [o] {
      load_plugins(o->plugins);
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
          w = validators::select_report_window(j, o->window, o->output);  // an empty one: "no window ''", the windows listed
        } catch (const std::invalid_argument& e) {
          const std::string hint =
              o->window.empty() ? "--from-report needs --window W, the window whose worst case to run: " : "";
          // A MultilineError (the windows listed, one a line) stays one, its
          // path escaped as its thrower escaped the rest.
          if (dynamic_cast<const core::MultilineError*>(&e) != nullptr)
            throw core::MultilineError("report '" + core::escape_controls(o->report) + "': " + hint + e.what());
          throw std::invalid_argument("report '" + o->report + "': " + hint + e.what());
        }
        case_text = w.worst_case;
        if (impl.empty()) impl = w.impl;
        char ratio[32];
        std::snprintf(ratio, sizeof ratio, "%.4g", w.ratio);
        from_line = "from     " + o->report + ", window index " + std::to_string(w.index) + " '" + w.label + "'" +
                    (w.route.empty() ? "" : " (" + w.route + ")") + ": worst case " +
                    (o->output.empty() ? "" : "of " + o->output + " ") + w.worst_case + " (" +
                    w.output + " err/tol " + ratio + "); variant " + impl +
                    (impl != w.impl ? " (--variant; the window's is " + w.impl + ")"
                     : impl != w.variant ? " (a backward run; it runs the window's forward " + w.variant + ")"
                                         : "");
      }
      // --file: the saved case, read (and digest-checked) now; its recorded
      // implementation is the default for --variant.
      std::optional<validators::SavedCase> replay;
      if (!o->file.empty()) {
        try {
          replay = validators::read_case_file(o->file);  // throws on a digest mismatch or corruption
        } catch (const std::runtime_error& e) {
          throw std::invalid_argument(e.what());  // a bad input file: exit 2
        }
        if (impl.empty()) {
          impl = replay->prov.impl;
          // The recorded name, not an option the user gave: say so when it is unusable.
          const std::string from = "'" + o->file + "' records implementation '" + printable_line(impl) + "'";
          if (impl.empty()) throw std::invalid_argument(from + ": give one with --variant");
          std::vector<std::string> expanded;
          try {
            expanded = validators::expand_impls({impl});
          } catch (const std::invalid_argument& e) {
            throw std::invalid_argument(from + ", which this process does not know (" + e.what() +
                                        "); a plugin's implementation needs --plugin LIB.so; or give one with --variant");
          }
          if (expanded.size() != 1) throw std::invalid_argument(from + ": not one implementation; give one with --variant");
        }
      }
      if (impl.empty()) throw std::invalid_argument("--variant is required (one implementation; see normgate variants)");
      std::vector<std::string> impls;
      try {
        impls = validators::expand_impls({impl});
      } catch (const std::invalid_argument& e) {
        if (o->report.empty() || !o->impl.empty()) throw;
        // The window's implementation, from the report: one of the user's own.
        throw std::invalid_argument(
            "the report's window ran '" + printable_line(impl) +
            "', which this process does not know (no built-in variant, nor a loaded plugin's, has that name): "
            "repro re-runs the case, so an implementation of your own must be registered here (--plugin LIB.so "
            "for a plugin; a Python one, gated with normgate.gate, is re-run from Python with normgate.check on "
            "the case " + case_text + ")");
      }
      if (impls.size() != 1) throw std::invalid_argument("--variant must name one implementation, not '" + impl + "'");
      const auto backend = validators::resolve_backend(validators::parse_backend(o->backend));
      // The notes come once the case is known (parsed, or its file read): a bad argument is the only output.
      auto notes = [&] {
        if (backend == validators::Backend::cpu && runs_builtin_variant(impls))
          std::printf("note     no GPU in use: kernel variants run as their CPU models\n");
        if (report_on_gpu && backend != validators::Backend::gpu)
          std::printf("note     the report ran on the GPU; this repro runs the CPU models\n");
        // One line: the report's strings (label, route, case) escaped.
        if (!from_line.empty()) std::printf("%s\n", printable_line(from_line).c_str());
      };
      validators::ReproOptions ro;
      ro.k = o->k;
      ro.keep_case = !o->save.empty();
      ro.normgate_version = NORMGATE_VERSION;
      ro.normgate_commit = NORMGATE_GIT_COMMIT;
      seeds::CaseId c;
      std::string replay_lines;  // printed once the memory check has passed: a refusal is the only output
      if (replay) {
        // The file's strings escaped: a control byte there must not reach the terminal.
        replay_lines = "replay   " + printable_line(o->file) + ": " + printable_line(replay->prov.case_id) +
                       ", inputs SHA-256 " + replay->inputs_sha256.substr(0, 16) + " verified; recorded verdict of " +
                       printable_line(replay->prov.impl) + ": " + printable_line(replay->prov.verdict) + "\n";
        if (const std::string stale = validators::changed_sources(replay->prov); !stale.empty())
          replay_lines += "note     the sources changed since this was recorded (" + printable(stale) +
                          "): this build runs; \"recorded outputs\" below says whether its outputs changed too\n";
        c = replay->inputs.id;
        ro.inputs = &replay->inputs;
        ro.replay_file = o->file;
        ro.recorded = &replay->outputs;
        ro.recorded_impl = replay->prov.impl;
        ro.recorded_backend = replay->prov.backend;
      } else {
        c = seeds::parse_case(case_text);
      }
      // Before the --save folder is made: nothing done on a refusal.
      {
        validators::GateHold external;  // a plugin's staging copies and host workspace
        for (const auto& name : impls)
          if (const kernels::Variant* v = kernels::find_variant(name);
              v != nullptr && validators::unsupported_reason(name, c).empty())  // else refused below, naming why
            validators::add_external_hold(external, *v, {c});
        require_host_memory({c}, impls.size(), o->save.empty() ? MemoryExtra::none : MemoryExtra::case_file,
                            external);
      }
      std::fputs(replay_lines.c_str(), stdout);
      std::string save = o->save;
      // A path ending in '/' names a folder: create it (with parents) if
      // missing. The folders made here are removed again (when still empty)
      // if the run is refused or fails before the case file is written: a
      // refused repro leaves nothing behind.
      std::vector<std::filesystem::path> made;  // outermost first
      struct UndoFolders {
        std::vector<std::filesystem::path>& made;
        bool keep = false;
        ~UndoFolders() {
          if (keep) return;
          std::error_code ec;
          for (auto it = made.rbegin(); it != made.rend(); ++it) std::filesystem::remove(*it, ec);  // empty ones only
        }
      } undo{made};
      if (!save.empty() && save.back() == '/' && !std::filesystem::exists(save)) {
        std::error_code ec;
        // The folder as the file system resolves it (weakly_canonical: "x/../z"
        // is z, a link is followed), made as such, so that only a folder this
        // run creates is listed for removal (and no stray "x" is made).
        std::filesystem::path dir = std::filesystem::weakly_canonical(
            std::filesystem::absolute(std::filesystem::path(save).parent_path(), ec), ec);
        if (ec) dir = std::filesystem::path(save).parent_path();  // unresolvable: as given, nothing removed later
        std::vector<std::filesystem::path> missing;  // outermost first
        for (std::filesystem::path q = dir; !ec && !q.empty() && q != q.root_path() && !std::filesystem::exists(q, ec);
             q = q.parent_path())
          missing.insert(missing.begin(), q);
        std::error_code mk;
        if (ec) {
          std::filesystem::create_directories(dir, mk);  // as given; nothing listed for removal
        } else {
          // One level at a time: create_directory says whether this run made
          // the folder, so that a repro --save running at the same time into
          // the same new folder is not taken for ours (its folder removed
          // under it when this run fails).
          for (const auto& q : missing) {
            const bool mine = std::filesystem::create_directory(q, mk);
            if (mk) break;
            if (mine) made.push_back(q);
          }
        }
        if (mk) throw std::invalid_argument("--save '" + save + "': cannot create the folder: " + mk.message());
        if (!std::filesystem::is_directory(save)) save = dir.string() + "/";  // "x/../z/new/" without an x
      }
      if (!save.empty() && std::filesystem::is_directory(save))
        save = (std::filesystem::path(save) / (seeds::to_string(c) + "," + impls.front() + ".h5")).string();
      if (!save.empty()) {
        std::vector<PathArg> inputs = {{"--file", o->file}, {"--from-report", o->report}};
        for (const auto& p : o->plugins) inputs.push_back({"--plugin", p});
        check_outputs({{"--save", save}}, inputs);
      }
      const validators::CheckRequest req{c, impls, backend, o->threads, oracle::parse_oracle_mode(o->oracle)};
      notes();
      validators::ReproReport r;
      try {
        const ExitGuard exit_guard("repro");
        r = validators::repro(req, ro);
      } catch (const std::runtime_error& e) {
        // A finding about an external (two runs of a declared deterministic
        // implementation differed; it broke the interface): FAIL, exit 1, as
        // a gate fails the window; nothing saved (the folders made are
        // removed again).
        if (!is_finding(e.what())) throw;
        std::printf("case     %s\nverdict  FAIL: %s\n", seeds::to_string(c).c_str(), printable_line(e.what()).c_str());
        return 1;
      }
      // The printed commands load the same plugins, so that pasted back they
      // find the plugin's variant (they named none: "unknown implementation").
      std::string plugin_args;
      for (const auto& p : o->plugins) plugin_args += " --plugin " + core::shell_quote(p);
      r.command += plugin_args;
      std::fputs(printable(validators::format_repro(r)).c_str(), stdout);  // recorded strings escaped
      if (!save.empty()) {
        validators::write_case_file(save, *r.saved);
        undo.keep = true;
        std::printf("saved    %s (%.1f MB)\n", printable_line(save).c_str(),
                    static_cast<double>(std::filesystem::file_size(save)) / 1e6);
        std::printf("replay   normgate repro --file %s%s   (the stored inputs, no generator; the variant %s)\n",
                    core::shell_quote(save).c_str(), plugin_args.c_str(), printable_line(impls.front()).c_str());
      }
      if (r.recorded_mismatch()) {
        std::printf("replay   MISMATCH: the outputs differ from the ones %s recorded (exit 4)\n",
                    printable_line(o->file).c_str());
        return 4;
      }
      return r.check.pass() ? 0 : 1;
    };
  });
}

}  // namespace normgate::app
