// apps/cmd_gate.cpp: normgate gate TABLE: the accuracy gate over a route table
// (validators::run_gate), its progress line, reports and approvals.
#include "commands.h"
#include "normgate/core/host_memory.h"
#include "normgate/core/report_util.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "normgate/gate/gate.h"
#include "normgate/core/temp_files.h"
#include "normgate/gate/journal.h"
#include "normgate/harness/pipeline.h"
#include "normgate/kernels/device.h"
#include "normgate/oracle/reference.h"
#include "normgate/routing/policy.h"
#include "normgate/routing/routing.h"
#include "normgate/seeds/case_id.h"
#include "normgate_version.h"

namespace normgate::app {

namespace {

std::string fmt_seconds(double s) {
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600, (static_cast<int>(s) % 3600) / 60);
  return buf;
}

int terminal_width() {
  winsize ws{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) return ws.ws_col;
  return 100;
}

// One progress line on stderr, redrawn in place (only used when stderr is a
// TTY), at most 10 times a second and always at the end of a phase.
void draw_progress(const validators::GateProgress& p) {
  static double last = -1;
  if (p.done != p.total && p.seconds - last < 0.1 && last >= 0) return;
  last = p.seconds;
  const double frac = p.total ? static_cast<double>(p.done) / static_cast<double>(p.total) : 1.0;
  const double eta = p.seconds_per_case * static_cast<double>(p.total - p.done);
  char head[160];
  std::snprintf(head, sizeof head, "[%s] %lld/%lld %5.1f%% | %s, ETA %s | worst err/tol %.3g | ", p.phase.c_str(),
                static_cast<long long>(p.done), static_cast<long long>(p.total), 100.0 * frac,
                fmt_seconds(p.seconds).c_str(), p.seconds_per_case > 0 ? fmt_seconds(eta).c_str() : "?", p.worst);
  std::string line = std::string(head) + printable_line(p.window);
  const size_t width = static_cast<size_t>(terminal_width()) - 1;
  if (line.size() > width) line.resize(width);
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  if (p.done == p.total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}


// The usage line shows the table as required ("gate [OPTIONS] table"):
// CLI11 would bracket it, since it is checked in the callback rather than
// by CLI11 (see "Required, checked in the callback" below).
class TableRequiredFormatter : public CLI::Formatter {
 public:
  std::string make_option_usage(const CLI::Option* opt) const override {
    if (opt->get_positional() && opt->get_name() == "table") return "table";
    return CLI::Formatter::make_option_usage(opt);
  }
};

}  // namespace

void add_gate(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand(
      "gate",
      "Gate a route table: run every window's cases (GPU variant, or its CPU model without a GPU), validate every "
      "element against the FP64 oracle, refine around the worst point; report per window; exit 0 all pass, 1 a "
      "window fails, is INCONCLUSIVE (the oracle's bound cannot decide a comparison) or INCOMPLETE (a --merge "
      "lacking shards' cases), 2 usage or input error, 3 a runtime failure (e.g. a CUDA error); a --shard run "
      "exits 0 once its cases are journalled");
  struct Opts {
    validators::GateOptions g;
    std::string backend = "auto", oracle = "auto", report_md, report_json, report_junit, shard, stats_json;
    std::string devices = "all";
    bool approve = false, quiet = false, plan = false;
    double rate = 0, rate_fwd = validators::kPlanRateFwd, rate_bwd = validators::kPlanRateBwd;
    std::vector<std::string> plugins;
  };
  auto o = std::make_shared<Opts>();
  // Required, checked in the callback: --merge takes every argument up to
  // the next option, a table after the journals among them, and the message
  // says so.
  sub->add_option("table", o->g.table_path, "Route table (TOML), e.g. routes/sm90a.toml (required)");
  sub->formatter(std::make_shared<TableRequiredFormatter>());
  sub->add_option("--base", o->g.base_path, "Older table: gate only windows whose bounds or variant changed");
  sub->add_option("--seeds", o->g.seeds,
                  "Seed set: 5x120 (default: 9 family points, eps and kappa sweeps), 3x120 (normal, llm, cancel), "
                  "seeds=120..239, cancel:0..7, cancel,kappa=1e4:0..7")
      ->capture_default_str();
  sub->add_option("--t-per-window", o->g.t_per_window,
                  "T points per window (at least the first/last T and both sides of every power of two inside)")
      ->capture_default_str()
      ->check(CLI::Range(2, kMaxCampaignCount));
  sub->add_option("--dense-points", o->g.dense_points,
                  "Dense-grid points each side of the worst T (0: no dense grid)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxCampaignCount));
  sub->add_option("--dense-step", o->g.dense_step, "Dense-grid spacing in rows")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, seeds::kMaxT));
  sub->add_option_function<std::string>(
         "--dense-seeds", [o](const std::string& v) { o->g.dense_all_seeds = v == "all"; },
         "Dense grid's cases at each T: worst (the worst grid case's family and seed) or all (the whole seed set)")
      ->check(CLI::IsMember({"worst", "all"}))
      ->default_str("worst");
  sub->add_option("--fresh-factor", o->g.fresh_factor,
                  "Fresh seeds at the worst (T, family): this many times the seed count (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxCampaignCount));
  sub->add_option("--windows", o->g.windows,
                  "Only windows matching all terms key=value[|value], keys op, mode, H, w, form, variant, T "
                  "(T=N or T=A..B), e.g. 'op=bwd,H=2048|4096' (quoted: | is the shell's pipe)");
  auto* journal_opt = sub->add_option("--journal", o->g.journal_path,
                  "Write-ahead journal: every finished case is on disk before the next; rerun with the same "
                  "file to resume after a crash. Each line carries its SHA-256, or with NORMGATE_JOURNAL_KEY_FILE "
                  "set its HMAC-SHA256 under that secret key, and only such lines are read back then "
                  "(docs/schemas.md, \"Journal keys\")");
  add_backend_option(sub, o->backend, "Where variants run: gpu (CUDA), cpu (their CPU models), auto");
  add_oracle_option(sub, o->oracle,
                    "Oracle: auto (FP64 with rigorous bounds, MPFR where FP64 cannot decide), fp64 (no escalation: "
                    "undecided comparisons are INCONCLUSIVE), mpfr (every element; small cases only)");
  add_threads_option(sub, o->g.threads, "OpenMP threads for generator, oracle, validation (0: default)");
  add_devices_option(sub, o->devices);
  auto* stats_opt = sub->add_option(
      "--stats-json", o->stats_json,
      "Write the run's throughput here (atomically; schema docs/schemas.md): elements/s per phase (generation, "
      "kernels, downloads, reference, validation, journal) and end to end, and the host's copy bandwidth measured "
      "at the end of the run; never part of the reports");
  auto* md_opt = sub->add_option("--report-md", o->report_md,
                                 "Write the Markdown report here (atomically); - : to stdout, everything else to stderr");
  auto* json_opt = sub->add_option("--report-json", o->report_json,
                                   "Write the JSON report here (atomically; schema docs/schemas.md); - : to stdout, "
                                   "everything else to stderr");
  auto* junit_opt = sub->add_option("--report-junit", o->report_junit,
                                    "Write a JUnit XML report here for CI systems (atomically; a testcase per "
                                    "window); - : to stdout, everything else to stderr");
  auto* approve_flag = sub->add_flag("--approve", o->approve,
                "Write approvals of passing windows next to the table (TABLE stem + .approvals.json; a "
                "per-GPU table STEM@SLUG.toml shares STEM's); the "
                "campaign must meet the table's approval policy (TABLE stem + .policy.toml), checked before "
                "any work: exit 2 naming what is missing");
  sub->add_flag("--allow-controls", o->g.allow_controls,
                "Explicit override: accept negative controls as routes (to prove the gate fails them; never "
                "approved)");
  sub->add_flag("--quiet", o->quiet, "Do not print the Markdown report on stdout");
  add_plugin_option(sub, o->plugins);
  auto* shard_opt = sub->add_option(
      "--shard", o->shard,
      "K/N: run only shard K of N of the grid cases (a hash of each case id: every case in exactly one shard, "
      "whatever the --windows filter or thread count) into --journal, then stop: no refinement, every window "
      "INCOMPLETE, exit 0 once the shard's cases are journalled. Merge the shards with --merge");
  auto* merge_opt = sub->add_option(
      "--merge", o->g.merge_paths,
      "Shard journals (--shard K/N runs of this campaign) to merge into --journal: every line checked (digest, "
      "plan, its shard; contradictions refused naming file and line), then refinement runs and the reports are "
      "an unsharded run's; a shard not given leaves its cases missing and their windows INCOMPLETE (exit 1). "
      "Takes every argument up to the next option: give the table first (gate TABLE --merge J1 J2 [options]) "
      "or after -- (gate [options] --merge J1 J2 -- TABLE)");
  merge_opt->expected(1, -1)->excludes(shard_opt);
  sub->add_flag("--retry-errors", o->g.retry_errors,
                "Run again the cases the journal holds only as errors (a GPU fault, an out-of-memory); each new "
                "record is appended and replaces the error. Without it a journalled error is the case's outcome on "
                "every resume. Not a case whose implementation, declared deterministic, gave different bits on two "
                "runs, or broke the interface (\"contract broken: \", e.g. a plugin writing outside an output's "
                "view): that is a finding (the window FAILs), kept. Not with --merge: retry in the shard "
                "(--shard K/N --retry-errors), then merge")
      ->needs(journal_opt)
      ->excludes(merge_opt);
  shard_opt->needs(journal_opt);
  shard_opt->excludes(approve_flag);
  auto* plan_flag = sub->add_flag("--plan", o->plan,
                                  "Print the campaign's size (windows, T points, cases, elements, and the gate's "
                                  "time at --rate-fwd and --rate-bwd) and exit without running anything");
  plan_flag->excludes(shard_opt)->excludes(merge_opt)->excludes(journal_opt)->excludes(md_opt)->excludes(json_opt)
      ->excludes(junit_opt)->excludes(approve_flag)->excludes(stats_opt);
  const CLI::Validator rate_check(
      [](std::string& v) {
        char* end = nullptr;
        const double d = std::strtod(v.c_str(), &end);
        return end != v.c_str() && *end == '\0' && d >= 1 && d < 1e300
                   ? std::string()
                   : "expected a number of elements per second in [1, 1e300), got '" + v + "'";
      },
      "RATE in [1, 1e300)");
  auto* rate_fwd_opt = sub->add_option("--rate-fwd", o->rate_fwd,
                                       "With --plan: end-to-end elements/s of cases only forward windows run, for "
                                       "the time estimate (default: the 16-core H200 host's forward windows, "
                                       "docs/perf/oracle-and-gate-throughput.md, Current numbers)")
                           ->capture_default_str()
                           ->check(rate_check)
                           ->needs(plan_flag);
  auto* rate_bwd_opt = sub->add_option("--rate-bwd", o->rate_bwd,
                                       "With --plan: end-to-end elements/s of cases a backward window runs (default: "
                                       "the same host's backward windows)")
                           ->capture_default_str()
                           ->check(rate_check)
                           ->needs(plan_flag);
  sub->add_option("--rate", o->rate, "With --plan: one rate (elements/s) for both, instead of --rate-fwd and --rate-bwd")
      ->check(rate_check)
      ->needs(plan_flag)
      ->excludes(rate_fwd_opt)
      ->excludes(rate_bwd_opt);
  sub->callback([&cmds, o, sub] {
    cmds.run = [o, devices_given = sub->count("--devices") > 0,
                fwd_rate_given = sub->count("--rate") + sub->count("--rate-fwd") > 0,
                bwd_rate_given = sub->count("--rate") + sub->count("--rate-bwd") > 0] {
      const std::string merge_spelling =
          "--merge takes every argument up to the next option: give the table before --merge (gate TABLE --merge "
          "J1 J2 [options]) or after -- (gate [options] --merge J1 J2 -- TABLE)";
      if (o->g.table_path.empty()) {
        const auto& m = o->g.merge_paths;
        throw std::invalid_argument("table is required" +
                                    (m.empty() ? std::string(": normgate gate TABLE [options], e.g. routes/sm90a.toml "
                                                             "(normgate gate --help)")
                                               : ": --merge took '" + m.back() + "' as a shard journal" +
                                                     // CLI11 keeps a "--" among them when it ended no journal.
                                                     (m.size() == 1 || (m.size() == 2 && m.front() == "--")
                                                          ? std::string(" (its only one: --merge needs "
                                                                                  "a shard journal before the table)")
                                                                    : std::string()) +
                                                     "; " + merge_spelling));
      }
      note_not_a_per_gpu_table(o->g.table_path);
      if (!o->shard.empty()) std::tie(o->g.shard_index, o->g.shard_count) = validators::parse_shard(o->shard);
      // The journal key (NORMGATE_JOURNAL_KEY_FILE) read before any work: a
      // file the gate refuses is a usage error naming it.
      if (!o->g.journal_path.empty() || !o->g.merge_paths.empty()) (void)validators::journal_key();
      // Each a journal (its header line read), before any work: an argument
      // meant as something else (a second table) is named here.
      for (const auto& m : o->g.merge_paths) {
        if (::access(m.c_str(), R_OK) != 0 || !std::filesystem::is_regular_file(m)) {
          if (m.size() > 1 && m[0] == '-' && !std::filesystem::exists(m))
            throw std::invalid_argument("--merge took the option '" + m +
                                        "' where a shard journal belongs: give the journals right after it; " +
                                        merge_spelling);
          throw std::invalid_argument("--merge " + m + ": no readable shard journal there");
        }
        {
          // CR LF line ends (an editor's or git's rewrite) would read as "not
          // a journal" below; name them instead.
          std::ifstream in(m, std::ios::binary);
          std::string first;
          std::getline(in, first);
          if (!in.eof() && !first.empty() && first.back() == '\r')
            throw std::invalid_argument("--merge " + m +
                                        ": its first line ends in CR LF (the file was rewritten after normgate wrote "
                                        "it, e.g. by an editor or git's autocrlf; a journal's lines end in LF alone)");
        }
        try {
          (void)validators::journal_campaign(m);
        } catch (const validators::JournalError& e) {
          // A journal, refused: of another format, or sealed otherwise than the key says.
          throw std::invalid_argument("--merge " + m + ": " + e.what());
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument("--merge " + m + ": not a shard journal (" + e.what() + "); " + merge_spelling);
        }
      }
      load_plugins(o->plugins);
      // The backend and oracle are checked before --plan answers too: a
      // caller that validates its arguments with --plan before deleting
      // anything (scripts/main) must see the refusal the run would give.
      o->g.backend = validators::parse_backend(o->backend);
      o->g.oracle = oracle::parse_oracle_mode(o->oracle);
      if (validators::resolve_backend(o->g.backend) == validators::Backend::gpu && !kernels::gpu_available())
        throw std::invalid_argument(
            "backend gpu requested but no usable CUDA device is present (backend cpu, or auto, runs the kernels' CPU "
            "models instead)");
      o->g.devices = parse_devices_option(o->devices, devices_given, o->backend);  // before --plan, as above
      if (o->plan) {
        const double fr = o->rate > 0 ? o->rate : o->rate_fwd, br = o->rate > 0 ? o->rate : o->rate_bwd;
        std::fputs(
            validators::format_gate_plan(validators::plan_gate(o->g), fr, br, !fwd_rate_given, !bwd_rate_given).c_str(),
            stdout);
        return 0;
      }
      o->g.normgate_version = NORMGATE_VERSION;
      o->g.normgate_commit = NORMGATE_GIT_COMMIT;
      // Everything this run will write is checked before any work: writable,
      // each its own file, none over a file this run reads (the approvals
      // file under --approve is the one read-modify-write).
      const std::vector<ReportPath> reports = {
          {"--report-md", o->report_md}, {"--report-json", o->report_json}, {"--report-junit", o->report_junit}};
      const std::string approvals_path = kernels::approvals_path_for(o->g.table_path);
      if (o->stats_json == "-")
        throw std::invalid_argument("--stats-json -: give a file (stdout carries the progress and the report)");
      std::vector<PathArg> outputs = {{"--journal", o->g.journal_path, true}, {"--stats-json", o->stats_json, true}};
      for (const auto& r : reports) outputs.push_back({r.option, r.path});
      const std::string rejections_path = kernels::rejections_path_for(o->g.table_path);
      if (o->approve) {
        outputs.push_back({"--approve (approvals file)", approvals_path});
        outputs.push_back({"--approve (rejections file)", rejections_path});
      }
      std::vector<PathArg> inputs = {{"table", o->g.table_path},
                                     {"--base", o->g.base_path},
                                     {"the table's approval policy", kernels::policy_path_for(o->g.table_path)}};
      if (!o->approve) inputs.push_back({"the table's approvals file", approvals_path});
      // The approvals lock (routing.h ApprovalsLock): a rename over it would
      // give it a new inode, and an approver holding the old one would no
      // longer exclude the next.
      else inputs.push_back({"the approvals lock file", approvals_path + ".lock"});
      for (const auto& p : o->plugins) inputs.push_back({"--plugin", p});
      for (const auto& m : o->g.merge_paths) inputs.push_back({"--merge", m});
      if (o->g.journal_path == "-")
        throw std::invalid_argument("--journal -: the journal is a file the gate reads back to resume, not stdout");
      check_outputs(outputs, inputs, /*dash_is_stdout=*/true);
      check_read_write(o->g.journal_path, "--journal");
      kernels::Approvals approvals;
      if (o->approve) {
        check_read_write(approvals_path, "--approve (approvals file)");
        check_writable(approvals_path, "--approve (approvals file)");  // its folder: the rename and the lock
        approvals = kernels::load_approvals(approvals_path);
        // The rejections file (routes.md D28): read before any work, so a
        // damaged one is refused now, not after the campaign.
        if (std::filesystem::exists(rejections_path) || std::filesystem::is_symlink(rejections_path)) {
          check_read_write(rejections_path, "--approve (rejections file)");
          try {
            (void)kernels::load_rejections(rejections_path);
          } catch (const std::exception& e) {
            throw std::invalid_argument("--approve: the table's rejections file cannot be read (" +
                                        std::string(e.what()) +
                                        "); gate --approve remembers its failures there (docs/perf/routes.md D28)");
          }
        }
      }
      // The largest case of every window within host memory, before any
      // work: its inputs and one implementation's outputs (what any case of
      // it holds at least), times the cases the GPU pipeline holds at once;
      // a refusal, not std::bad_alloc hours into a run.
      {
        const validators::GatePlan plan = validators::plan_gate(o->g);
        std::vector<seeds::CaseId> bwd_cases, fwd_cases;
        validators::GateHold held = gate_hold(validators::resolve_backend(o->g.backend), o->g.devices);
        for (const auto& w : plan.windows)
          if (w.largest.T > 0) (w.forward ? fwd_cases : bwd_cases).push_back(w.largest);
        validators::add_external_hold(held, plan);  // a plugin's staging and workspace
        require_gate_host_memory(bwd_cases, fwd_cases, held);
      }
      const bool tty = ::isatty(STDERR_FILENO) == 1;
      const auto backend = validators::resolve_backend(o->g.backend);  // a GPU, if asked for, is there (above)
      // The approval policy beside the table: a campaign weaker than its
      // minimum is refused here, before any case runs (approve() re-checks
      // the finished result).
      if (o->approve) validators::check_approval_request(o->g, backend);
      // Said once the table and options are accepted (the first progress
      // report), not before an input error.
      auto said = std::make_shared<bool>(false);
      const std::string backend_line =
          "backend  " +
          std::string(backend == validators::Backend::gpu ? kernels::kGpuBackend : kernels::kCpuModelBackend) + ": " +
          validators::describe_backend(backend, kernels::device_info()) + "\n";
      const char* elsewhere_are =
          o->g.merge_paths.empty() ? " of them other shards'" : " of them in no merged shard journal (missing)";
      // The phases share cases (a dense or fresh point already in the grid
      // is not run again): each line says how many it ran, so that the
      // counts add up to "run by this process so far".
      auto run_before = std::make_shared<int64_t>(0);
      o->g.progress = [tty, said, backend_line, elsewhere_are, run_before](const validators::GateProgress& p) {
        if (!*said) {
          std::fputs(backend_line.c_str(), stdout);
          *said = true;
        }
        if (tty) draw_progress(p);
        if (p.done == p.total) {
          std::printf("phase    %-5s %s done%s (%lld run in this phase, %lld by this process so far, %.1f s)\n",
                      p.phase.c_str(), validators::detail::counted(p.total, "case").c_str(),
                      p.elsewhere > 0 ? (", " + std::to_string(p.elsewhere) + elsewhere_are).c_str() : "",
                      static_cast<long long>(p.run_now - *run_before), static_cast<long long>(p.run_now), p.seconds);
          *run_before = p.run_now;
        }
        std::fflush(stdout);
      };
      // A report to "-" takes stdout; from here on the rest goes to stderr.
      const int report_fd = stdout_to_stderr_for(reports);
      std::printf("gate     %s\n", printable_line(o->g.table_path).c_str());
      std::fflush(stdout);
      // A signal (Ctrl-C, a job's time limit) ends the run where it is: say
      // what it leaves (main.cpp installed the handlers).
      // NORMGATE_RESUME_COMMAND: the command that resumes this run, where a
      // wrapper (scripts/main) runs the gate for the caller.
      const char* resume_env = std::getenv("NORMGATE_RESUME_COMMAND");
      const std::string resume = resume_env && *resume_env ? printable_line(resume_env)
                                                            : std::string("the same command again");
      const core::SignalNoteScope signal_note(
          o->g.journal_path.empty()
              ? std::string("\nnormgate gate: stopped by a signal; without --journal nothing of this run is kept "
                            "(--journal FILE makes a run resumable)\n")
              : "\nnormgate gate: stopped by a signal; run " + resume +
                    " to resume: every case finished before it is in the journal '" +
                    printable_line(o->g.journal_path) + "'\n");
      const auto t0 = std::chrono::steady_clock::now();
      const ExitGuard exit_guard("the gate");
      const auto res = validators::run_gate(o->g);
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("windows  %zu gated, %zu skipped (unchanged vs base), %zu left out by --windows\n",
                  res.windows.size(), res.skipped.size(), res.filtered_out.size());
      // --base: windows gated although bounds and variant are the base's (the
      // reports list each with its reason).
      for (const auto& s : res.source_changed)
        std::printf("base     gated with the base's bounds and variant: %s\n", printable_line(s).c_str());
      for (const auto& [shard, bytes] : res.shard_dropped)
        std::printf("merge    %s: a torn last record (%lld bytes) left out (the shard's file is unchanged)\n",
                    printable_line(shard).c_str(), static_cast<long long>(bytes));
      if (!o->g.journal_path.empty())
        std::printf("journal  %s: %s %s, %lld run now%s%s\n", printable_line(o->g.journal_path).c_str(),
                    validators::detail::counted(res.cases_resumed, "finished case").c_str(),
                    o->g.merge_paths.empty() ? "resumed" : "taken from this journal and the shards' journals",
                    static_cast<long long>(res.cases_run_now),
                    o->g.retry_errors ? (" (" + std::to_string(res.cases_retried) + " of them journalled errors run again)").c_str() : "",
                    res.journal_dropped_bytes ? (", a torn last record (" +
                                                 std::to_string(res.journal_dropped_bytes) + " bytes) dropped")
                                                    .c_str()
                                              : "");
      if (res.pipeline.cases > 0) {
        const auto& pl = res.pipeline;
        // Why the halves did not overlap (harness run_checks: a GPU backend,
        // more than one case, pipeline_overlap()).
        const char* how = pl.overlapped ? "GPU half of the next case overlapped the oracle of this one"
                          : res.backend != kernels::kGpuBackend
                              ? "no overlap: CPU models share the cores with the oracle"
                          : !validators::pipeline_overlap() ? "no overlap: NORMGATE_OVERLAP=0"
                                                         : "no overlap: one case at a time";
        // The first half runs the kernels: on the GPU, or as CPU models.
        const bool gpu = res.backend == kernels::kGpuBackend;
        std::printf("pipeline %lld cases run in %.1f s (%.1f cases/min): %s+generator half %.1f s, oracle+validation "
                    "half %.1f s, oracle side idle waiting for the %s %.1f s (%s)\n",
                    static_cast<long long>(pl.cases), pl.seconds_total,
                    pl.seconds_total > 0 ? 60.0 * static_cast<double>(pl.cases) / pl.seconds_total : 0.0,
                    gpu ? "GPU" : "CPU-model", pl.seconds_prepare, pl.seconds_finish, gpu ? "GPU" : "CPU models",
                    pl.seconds_waiting_for_prepare, how);
      }
      // Throughput per phase on stderr (and --stats-json): not in the reports,
      // which must not depend on how fast or where the cases ran. The copy
      // bandwidth is measured now, in this process, on 8 bytes per element
      // checked, at least 64 MiB and at most 1 GiB.
      std::string stats_text;
      if (res.pipeline.cases > 0 || !o->stats_json.empty()) {
        const double want = static_cast<double>(res.pipeline.elements) * validators::kBytesPerElement;
        size_t copy_bytes = static_cast<size_t>(std::clamp(want, 64.0 * (1 << 20), 1024.0 * (1 << 20)));
        // The copy allocates twice copy_bytes after every case has run: at
        // most a quarter of what the host (or ulimit -v) leaves now, and a
        // refusal only costs this measurement, never the verdict or reports.
        if (const uint64_t left = core::host_memory().usable(); left != 0)
          copy_bytes = std::min<size_t>(copy_bytes, std::max<size_t>(left / 4, size_t{1} << 20));
        validators::HostCopyBandwidth copy;
        try {
          copy = validators::measure_host_copy(copy_bytes, 3);
        } catch (const std::bad_alloc&) {
          std::fprintf(stderr, "note     host copy bandwidth not measured: 2 x %zu bytes could not be allocated\n",
                       copy_bytes);
        }
        std::fputs(validators::format_pipeline_stats(res.pipeline, copy).c_str(), stderr);
        if (!o->stats_json.empty()) stats_text = json_text(validators::to_json(res.pipeline, copy));
      }
      for (const auto& w : res.windows)
        if (w.control_passed())
          std::fprintf(stderr, "warning: negative control %s PASSED %s: controls are built to fail; this window "
                               "cannot tell a broken kernel from a good one\n",
                       std::string(w.route.variant->name).c_str(), w.route.window().c_str());
      const std::string md = validators::format_gate_markdown(res);
      if (!o->quiet && o->report_md != "-") std::printf("\n%s\n", md.c_str());
      std::fflush(stdout);
      // The report files all or none (a full disk must not leave a new .md
      // beside an old .json); the one to stdout, if any, after them. A
      // failure is exit 3 naming the file; the journal keeps every case.
      std::vector<std::pair<std::string, std::string>> files;
      std::string to_stdout;
      for (const auto& r : reports) {
        if (r.path.empty()) continue;
        const std::string opt = r.option;
        const std::string text = opt == "--report-md"     ? md
                                 : opt == "--report-json" ? json_text(validators::gate_to_json(res))
                                                          : validators::format_gate_junit(res, wall);
        if (r.path == "-") to_stdout = text;
        else files.emplace_back(r.path, text);
      }
      if (!o->stats_json.empty()) files.emplace_back(o->stats_json, stats_text);
      try {
        write_files_atomic(files);
      } catch (const std::runtime_error& e) {
        if (o->g.journal_path.empty()) throw;
        throw std::runtime_error(std::string(e.what()) + "; every finished case is in the journal '" +
                                 o->g.journal_path + "': rerun with it to write the reports without running them again");
      }
      if (!to_stdout.empty()) write_report("-", to_stdout, report_fd);
      int approvals_refused = 0;  // windows that passed but were not approved (policy, a remembered failure)
      if (o->approve) {
        const auto changes = validators::approve(approvals, res, o->g);
        for (const auto& c : changes) approvals_refused += c.rfind("refused ", 0) == 0;
        std::printf("approvals %s (backend %s):%s\n", printable_line(approvals.path).c_str(), res.backend.c_str(),
                    changes.empty() ? " no change" : "");
        for (const auto& c : changes) std::printf("  %s\n", printable_line(c).c_str());
        if (res.backend != kernels::kGpuBackend)
          std::printf("  note: cpu-model approvals count only where asked (`normgate routes --accept-cpu-model`; "
                      "calls: NORMGATE_DISPATCH=accept-cpu-model): the GPU code is what ships\n");
      }
      int failing = 0, incomplete = 0;
      for (const auto& w : res.windows) {
        failing += !w.pass;
        incomplete += w.incomplete;
      }
      if (!res.shard.empty()) {
        // A shard is no verdict; exit 0 says its cases are journalled (a job
        // array's dependent merge runs after it), whatever they found.
        std::printf("verdict  INCOMPLETE: shard %s of the grid journalled in %s (%s run now); merge every "
                    "shard's journal (--merge) for the verdicts\n",
                    res.shard.c_str(), o->g.journal_path.c_str(),
                    validators::detail::counted(res.cases_run_now, "case").c_str());
        return 0;
      }
      const std::string_view verdict = res.verdict();  // a failed window outranks INCOMPLETE and ERROR
      if (verdict == "INCOMPLETE") {
        std::string missing;
        for (const auto& k : res.shards_missing) missing += (missing.empty() ? "" : ", ") + k;
        int lacking = 0, unchecked = 0;
        for (const auto& w : res.windows) {
          lacking += w.incomplete && w.missing > 0;
          unchecked += w.incomplete && w.h_new_unchecked > 0;
        }
        std::string why;
        if (lacking > 0)
          why = std::to_string(lacking) + " of " + std::to_string(res.windows.size()) +
                " windows lack cases no merged shard holds" +
                (missing.empty() ? std::string() : " (shards not given: " + missing + ")");
        if (unchecked > 0)
          why += (why.empty() ? "" : "; ") + std::to_string(unchecked) + " of " + std::to_string(res.windows.size()) +
                 " res windows hold cases whose h_new was not checked (a journal written before h_new was recorded: "
                 "gate again into a new journal)";
        std::printf("verdict  INCOMPLETE: %s; not a pass (backend %s)\n", why.c_str(), res.backend.c_str());
        return 1;
      }
      // Windows that failed only because cases could not run (std::bad_alloc,
      // a CUDA error), none over budget: no verdict on the kernels, exit 3
      // (a runtime failure), as derive stops on them. A window over budget
      // anywhere outranks them: FAIL below.
      int errored = 0;
      std::string first_error;
      // Cases a merge lacks in windows that fail or error anyway (their
      // verdict stands), said beside that verdict.
      int64_t missing_cases = 0;
      for (const auto& w : res.windows) missing_cases += w.incomplete ? 0 : w.missing;
      std::string missing_note;
      if (missing_cases > 0) {
        std::string shards;
        for (const auto& k : res.shards_missing) shards += (shards.empty() ? "" : ", ") + k;
        missing_note = "; " + std::to_string(missing_cases) + " cases of those windows have no result" +
                       (shards.empty() ? std::string() : " (shards not given: " + shards + ")");
      }
      for (const auto& w : res.windows)
        if (w.errored()) {
          ++errored;
          if (first_error.empty() && !w.error_samples.empty()) first_error = w.error_samples.front();
        }
      if (verdict == "ERROR") {
        std::printf("verdict  ERROR: %d of %zu windows have cases that failed to run and none over budget (first: "
                    "%s); not a verdict on the kernels (backend %s)%s\n",
                    errored, res.windows.size(), printable_line(first_error).c_str(), res.backend.c_str(),
                    missing_note.c_str());
        return 3;
      }
      if (res.windows.empty())
        std::printf("verdict  PASS: no window changed against the base table\n");
      else
        std::printf("verdict  %s: %zu of %zu windows pass (backend %s)%s%s%s\n", res.pass() ? "PASS" : "FAIL",
                    res.windows.size() - failing, res.windows.size(), res.backend.c_str(),
                    incomplete > 0 ? (" and " + std::to_string(incomplete) + " INCOMPLETE (cases missing)").c_str() : "",
                    errored > 0 ? ("; " + std::to_string(errored) + " ERROR (cases that could not run)").c_str() : "",
                    missing_note.c_str());
      if (res.pass() && approvals_refused > 0) {
        // --approve asked for approvals and some were refused (the "refused"
        // lines above): the kernels passed, the request did not.
        std::printf("approval refused for %d passing window%s (above): not approved; exit 1\n", approvals_refused,
                    approvals_refused == 1 ? "" : "s");
        return 1;
      }
      return res.pass() ? 0 : 1;
    };
  });
}

}  // namespace normgate::app
