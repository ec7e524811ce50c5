// apps/cmd_derive.cpp: normgate derive SPEC: a route table derived from
// measurements (routing/derive.h): time every candidate, gate the winners,
// write the table routing the fastest approved candidate per window and the
// derivation report.
#include "normgate/core/report_util.h"
#include "commands.h"
#include "normgate/core/temp_files.h"
#include "normgate/core/shell_quote.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>

#include "normgate/bench/candidates.h"
#include "normgate/gate/gate.h"
#include "normgate/gate/journal.h"
#include "normgate/kernels/device.h"
#include "normgate/oracle/reference.h"
#include "normgate/routing/derive.h"
#include "normgate/routing/policy.h"
#include "normgate/routing/rejections.h"
#include "normgate/routing/routing.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"  // sha256_hex
#include "normgate/seeds/seed_set.h"
#include "normgate_version.h"

namespace normgate::app {

namespace {

using kernels::BenchKey;
using kernels::BenchPoint;
using kernels::DeriveGroup;
using kernels::DeriveSpec;
using kernels::DerivedWindow;
using kernels::Exclusion;
using kernels::Op;
using kernels::Timings;
using kernels::Variant;

std::string utc_now() { return validators::detail::utc_now(); }

struct DeadlineReached : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A case of the window being gated went over budget: the window fails, and
// the rest of its cases need not run (derive only needs the rejection and
// its worst case to split the window).
struct WindowRejected : std::runtime_error {
  WindowRejected(double w, std::string c, std::string o)
      : std::runtime_error("rejected"), worst(w), worst_case(std::move(c)), worst_output(std::move(o)) {}
  double worst;
  std::string worst_case, worst_output;
};

// Candidates timed at one shape: the union of its groups' lists (det first,
// then what nondet adds), so a det variant is timed once for both modes.
std::vector<const Variant*> shape_candidates(const DeriveSpec& spec, Op op, int64_t H, WDtype w, Form form) {
  std::vector<const Variant*> out;
  for (const DeriveGroup& g : spec.groups)
    if (g.op == op && g.H == H && g.w == w && g.form == form)
      for (const Variant* v : spec.candidates(g))
        if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  return out;
}

void bench_point(kernels::CandidateBench& b, const BenchKey& k, const std::vector<const Variant*>& cands,
                 const DeriveSpec& spec, Timings& timings) {
  const auto t = b.time(k.op, k.T, cands, spec.rounds, spec.reps);
  BenchPoint p;
  p.key = k;
  p.aa_variant = std::string(cands[0]->name);
  p.aa_floor = t.aa_floor;
  p.aa_rounds_us = t.aa_rounds_us;
  for (size_t i = 0; i < cands.size(); ++i) {
    p.median_us[std::string(cands[i]->name)] = t.median_us[i];
    p.rounds_us[std::string(cands[i]->name)] = t.rounds_us[i];
  }
  timings.points[k] = std::move(p);
}

// Benchmark every shape of the spec: the grid, then crossover_steps rounds of
// bisection, one (H, w, form) at a time (its buffers freed before the next).
Timings run_bench(const DeriveSpec& spec, double deadline_s, const std::chrono::steady_clock::time_point t0) {
  const auto dev = kernels::device_info();
  Timings tm;
  tm.gpu = dev.name;
  tm.driver = dev.driver;
  tm.cuda = dev.cuda_runtime;
  tm.normgate_commit = NORMGATE_GIT_COMMIT;
  tm.rounds = spec.rounds;
  tm.reps = spec.reps;
  std::set<std::tuple<int64_t, WDtype, Form>> shapes;
  for (const DeriveGroup& g : spec.groups) shapes.insert({g.H, g.w, g.form});
  size_t done = 0;
  for (const auto& [H, w, form] : shapes) {
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (deadline_s > 0 && el > deadline_s)
      throw DeadlineReached("deadline reached while benchmarking (" + std::to_string(done) + " of " +
                            std::to_string(shapes.size()) + " shapes timed)");
    kernels::CandidateBench bench(H, w, form, spec.t_grid.back());
    DeriveSpec sub = spec;  // this shape's groups only
    sub.groups.clear();
    for (const DeriveGroup& g : spec.groups)
      if (g.H == H && g.w == w && g.form == form) sub.groups.push_back(g);
    for (Op op : {Op::fwd, Op::bwd}) {
      const auto cands = shape_candidates(spec, op, H, w, form);
      if (cands.empty()) continue;
      for (int64_t T : spec.t_grid) bench_point(bench, BenchKey{op, H, w, form, T}, cands, spec, tm);
    }
    for (int step = 0; step < spec.crossover_steps; ++step) {
      const auto more = kernels::crossover_points(sub, tm, {});
      if (more.empty()) break;
      for (const BenchKey& k : more) bench_point(bench, k, shape_candidates(spec, k.op, H, w, form), spec, tm);
    }
    ++done;
    std::printf("bench    %zu/%zu H=%lld w=%s form=%s (%.0f s)\n", done, shapes.size(), static_cast<long long>(H),
                std::string(to_string(w)).c_str(), std::string(to_string(form)).c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::fflush(stdout);
  }
  tm.date = utc_now();
  return tm;
}

// "group|variant|lo|hi": one (candidate, window), as derive tracks what it gated.
std::string window_key(const std::string& group, std::string_view variant, int64_t lo, int64_t hi) {
  return group + "|" + std::string(variant) + "|" + std::to_string(lo) + "|" + std::to_string(hi);
}

DeriveGroup group_of(const kernels::Route& r) { return DeriveGroup{r.op, r.mode, r.H, r.w, r.form}; }

kernels::Route route_of(const DerivedWindow& w, const std::string& file) {
  kernels::Route r;
  r.op = w.group.op;
  r.mode = w.group.mode;
  r.H = w.group.H;
  r.w = w.group.w;
  r.form = w.group.form;
  r.t_lo = w.t_lo;
  r.t_hi = w.t_hi;
  r.variant = w.variant;
  r.file = file;
  return r;
}

// What the gate said about one (variant, window) in this run.
struct GateNote {
  std::string group, variant;
  int64_t t_lo = 0, t_hi = 0;
  bool pass = false;
  std::string error;  ///< cases failed to run, none over budget: no verdict ("" otherwise)
  double worst = 0;
  std::string worst_output, worst_case, report;
};

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

}  // namespace

void add_derive(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand(
      "derive",
      "Derive a route table: time every candidate of every group on the GPU (CUDA-graph replay, cold L2, "
      "interleaved rounds, A/A floor), split windows at the measured crossovers, gate each window's winner, and "
      "write the table routing the fastest approved candidate per window with its derivation report; exit 0 every "
      "window's variant approved, 1 a window without an approved candidate, 2 usage or input error");
  struct Opts {
    std::string spec, out, report, timings, backend = "auto", oracle = "auto", gate = "winners", gate_windows;
    bool bench_only = false, approve = false, forget_rejections = false;
    double deadline_s = 0;
    validators::GateOptions g;
  };
  auto o = std::make_shared<Opts>();
  o->g.seeds = "3x16";
  sub->add_option("spec", o->spec, "Derivation spec (TOML), e.g. routes/sm90a.derive.toml")->required();
  sub->add_option("--out", o->out, "Route table to write (atomically), e.g. routes/sm90a.toml; the approvals "
                                   "file BESIDE IT (TABLE stem + .approvals.json; for a per-GPU table "
                                   "STEM@SLUG.toml, STEM's, and only that GPU's timings derive it) is what counts "
                                   "as approved (read, and with --approve written); not written while a window has "
                                   "no approved candidate")
      ->required();
  sub->add_option("--report", o->report,
                  "Report prefix: writes PREFIX.md, PREFIX.json, PREFIX.timings.json, each gate round's candidate "
                  "table (PREFIX.candidates-SHA.toml) and each gated window's reports (PREFIX.gate-K.{md,json}; a "
                  "round stopped at its first case over budget: PREFIX.gate-K.md only)")
      ->required();
  sub->add_option("--timings", o->timings,
                  "Use these timings (a PREFIX.timings.json of an earlier run) instead of benchmarking");
  sub->add_flag("--bench-only", o->bench_only, "Benchmark, write PREFIX.timings.json, stop");
  sub->add_option("--gate", o->gate,
                  "winners: gate each window's winner that lacks a current approval, on the parts of the window "
                  "its approvals do not cover (a rejected winner gives its window to the next candidate); none: "
                  "derive from timings and existing approvals only")
      ->check(CLI::IsMember({"winners", "none"}))
      ->capture_default_str();
  sub->add_option("--gate-windows", o->gate_windows,
                  "With --gate winners: gate only the windows (or, of a window partly approved, the uncovered "
                  "pieces) this filter selects (gate --windows syntax, e.g. variant=fwd_narrow or op=fwd,H=256); "
                  "the other windows without a current approval are left "
                  "ungated this run and routed to approved candidates, as with --gate none");
  sub->add_flag("--forget-rejections", o->forget_rejections,
                "With --gate winners: do not use the rejections remembered beside --out (TABLE stem + "
                ".rejections.json): gate those candidates again (this run's rejections are still recorded)");
  sub->add_flag("--approve", o->approve, "Write approvals of the windows the gate passes (as gate --approve)");
  sub->add_option("--seeds", o->g.seeds, "Gate seed set")->capture_default_str();
  sub->add_option("--t-per-window", o->g.t_per_window, "Gate T points per window")
      ->capture_default_str()
      ->check(CLI::Range(2, kMaxCampaignCount));
  sub->add_option("--dense-points", o->g.dense_points, "Dense-grid points each side of the worst T")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxCampaignCount));
  sub->add_option("--dense-step", o->g.dense_step, "Dense-grid spacing in rows")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, seeds::kMaxT));
  sub->add_option("--fresh-factor", o->g.fresh_factor, "Fresh seeds: this many times the seed count")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxCampaignCount));
  auto* journal_opt = sub->add_option("--journal", o->g.journal_path,
                  "Gate write-ahead journal prefix: one journal per candidate table, PREFIX.SHA.jsonl (a rerun "
                  "that derives the same table resumes it)");
  sub->add_flag("--retry-errors", o->g.retry_errors,
                "Run again the cases a resumed journal holds only as errors (gate --retry-errors)")
      ->needs(journal_opt);
  sub->add_option("--deadline-s", o->deadline_s,
                  "Stop benchmarking or gating after this many seconds (0: none); what is unfinished is reported, "
                  "and the table routes only approved candidates")
      ->check(CLI::Range(0.0, 1e9));
  add_backend_option(sub, o->backend, "Where the gate runs variants: gpu, cpu (CPU models), auto");
  add_oracle_option(sub, o->oracle, "Gate oracle");
  add_threads_option(sub, o->g.threads, "OpenMP threads for the gate (0: default)");
  sub->callback([&cmds, o] {
    cmds.run = [o]() -> int {
      const auto t0 = std::chrono::steady_clock::now();
      // Inputs and outputs checked before any work.
      const DeriveSpec spec = kernels::load_derive_spec(o->spec);
      {
        // Every output: writable, each its own file, none over an input (the
        // approvals file under --approve is the one read-modify-write). The
        // gate rounds' files (PREFIX.candidates-*, PREFIX.gate-K.*, the
        // journals) go to the folders checked here.
        const std::string ap = kernels::approvals_path_for(o->out);
        std::vector<PathArg> outputs = {{"--out", o->out},
                                        {"--report (PREFIX.md)", o->report + ".md"},
                                        {"--report (PREFIX.json)", o->report + ".json"}};
        if (o->timings.empty()) outputs.push_back({"--report (PREFIX.timings.json)", o->report + ".timings.json"});
        if (!o->g.journal_path.empty()) {
          outputs.push_back({"--journal (PREFIX.*.jsonl)", o->g.journal_path + ".jsonl"});
          (void)validators::journal_key();  // NORMGATE_JOURNAL_KEY_FILE refused: exit 2 before any timing
        }
        if (o->approve) outputs.push_back({"--approve (approvals file beside --out)", ap});
        // --gate winners reads and appends the rejections beside --out
        // (rejections.h), under the approvals lock; --gate none never
        // touches them.
        const std::string rp = kernels::rejections_path_for(o->out);
        if (o->gate == "winners") outputs.push_back({"--gate winners (rejections file beside --out)", rp});
        std::vector<PathArg> inputs = {{"spec", o->spec}, {"--timings", o->timings},
                                       {"the approval policy beside --out", kernels::policy_path_for(o->out)}};
        if (!o->approve) inputs.push_back({"the approvals file beside --out", ap});
        if (o->approve || o->gate == "winners")
          inputs.push_back({"the approvals lock file", ap + ".lock"});  // as gate --approve
        check_outputs(outputs, inputs);
        if (o->approve) {
          check_read_write(ap, "--approve (approvals file beside --out)");
          check_writable(ap, "--approve (approvals file beside --out)");  // its folder: the rename and the lock
        }
        else check_readable_if_present(ap, "the approvals file beside --out");
        if (o->gate == "winners") check_read_write(rp, "--gate winners (rejections file beside --out)");
      }
      if (o->g.t_per_window < 2) throw std::invalid_argument("--t-per-window must be >= 2");
      // A per-GPU table (routing.h, "Per-GPU tables": STEM@SLUG.toml) comes
      // from that GPU's timings only, and a spec naming `gpu` derives only
      // from that GPU's; a '@' name that is not one is refused rather than
      // taken as a table with approvals of its own.
      const std::string out_slug = kernels::gpu_table_slug(o->out);
      {
        const std::string name = std::filesystem::path(o->out).filename().string();
        if (out_slug.empty() && name.find('@') != std::string::npos)
          throw std::invalid_argument(
              "--out " + printable_line(o->out) +
              ": a '@' in a table's name makes it a per-GPU table STEM@SLUG.toml, with SLUG a GPU name's file "
              "form (lowercase letters and digits, single '-' between them, e.g. sm90a@nvidia-h100-80gb-hbm3.toml)");
      }
      // A per-GPU spec (STEM@SLUG.derive.toml) writes its own table only.
      std::string spec_name_slug;
      if (constexpr std::string_view kD = ".derive.toml";
          o->spec.size() > kD.size() && o->spec.compare(o->spec.size() - kD.size(), kD.size(), kD) == 0)
        spec_name_slug = kernels::gpu_table_slug(o->spec.substr(0, o->spec.size() - kD.size()) + ".toml");
      if (!spec_name_slug.empty() && spec_name_slug != out_slug)
        throw std::invalid_argument("spec " + printable_line(o->spec) + " is the per-GPU spec of '" + spec_name_slug +
                                    "': its table is STEM@" + spec_name_slug + ".toml, not --out " +
                                    printable_line(o->out) + " (docs/perf/routes.md, D26)");
      const std::string spec_slug = spec.gpu.empty() ? std::string() : kernels::gpu_slug(spec.gpu);
      if (!spec_slug.empty() && !out_slug.empty() && spec_slug != out_slug)
        throw std::invalid_argument("--out " + printable_line(o->out) + " is the per-GPU table of '" + out_slug +
                                    "', but spec " + printable_line(o->spec) + " names gpu '" +
                                    printable_line(spec.gpu) + "' ('" + spec_slug + "')");
      // The GPU whose timings alone may derive this table: --out's, else the spec's.
      const std::string want_slug = !out_slug.empty() ? out_slug : spec_slug;
      const std::string want_from =
          !out_slug.empty() ? "--out " + printable_line(o->out) + " is the per-GPU table of '" + out_slug + "'"
                            : "spec " + printable_line(o->spec) + " names gpu '" + printable_line(spec.gpu) + "' ('" +
                                  spec_slug + "')";
      auto check_gpu = [&](const std::string& gpu, const std::string& whose) {
        if (!want_slug.empty() && kernels::gpu_slug(gpu) != want_slug)
          throw std::invalid_argument(want_from + ", but " + whose + " '" + printable_line(gpu) + "' ('" +
                                      kernels::gpu_slug(gpu) + "'): a table is derived from one GPU model's "
                                      "timings (docs/perf/routes.md, D26)");
      };
      if (!want_slug.empty() && o->timings.empty() && kernels::gpu_available())
        check_gpu(kernels::device_info().name, "this machine's GPU (device 0) is");
      // The gate rounds' seed set, checked here (with --gate none too: a bad
      // value is a usage error whether or not a round would read it), before
      // the benchmark or a candidate table is written.
      try {
        (void)seeds::parse_seed_set(o->g.seeds);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("--seeds '" + o->g.seeds + "': " + e.what());
      }
      if (o->forget_rejections && o->gate != "winners")
        throw std::invalid_argument("--forget-rejections needs --gate winners (got --gate " + o->gate +
                                    "): --gate none neither reads nor writes rejections");
      if (!o->gate_windows.empty() && o->gate != "winners")
        throw std::invalid_argument("--gate-windows '" + o->gate_windows + "' needs --gate winners (got --gate " +
                                    o->gate + ")");
      const validators::WindowFilter gate_filter = [&] {
        try {
          return validators::parse_window_filter(o->gate_windows);
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument("--gate-windows: " + std::string(e.what()));
        }
      }();
      // --gate winners: the largest case any gate round can run within host
      // memory, before the benchmark (as `gate` checks its plan): each group
      // the filter can select, at the grid's last T (a window's upper T,
      // where its refinement may go), its inputs and one implementation's
      // outputs. A refusal here, not std::bad_alloc after the timings.
      if (o->gate == "winners") {
        std::vector<seeds::CaseId> bwd_cases, fwd_cases;
        bool any_selected = false;
        for (const DeriveGroup& g : spec.groups) {
          bool selected = false;
          for (const Variant* v : spec.candidates(g)) {
            DerivedWindow w;
            w.group = g;
            w.t_lo = 1;
            w.t_hi = spec.t_grid.back();
            w.variant = v;
            selected = selected || gate_filter.matches(route_of(w, o->out));
          }
          if (!selected) continue;
          any_selected = true;
          seeds::CaseId c;
          c.H = g.H;
          c.T = spec.t_grid.back();
          c.w = g.w;
          c.form = g.form;
          (g.op == kernels::Op::fwd ? fwd_cases : bwd_cases).push_back(c);
        }
        if (!any_selected)  // as gate --windows: a filter that selects nothing is a usage error
          throw std::invalid_argument("--gate-windows '" + printable_line(o->gate_windows) +
                                      "' selects no window of " + printable_line(o->spec) +
                                      " (no group and candidate of the spec matches it)");
        // The gate below runs on every visible GPU (derive has no --devices).
        require_gate_host_memory(
            bwd_cases, fwd_cases,
            gate_hold(validators::resolve_backend(validators::parse_backend(o->backend)), std::vector<int>{}));
      }
      o->g.backend = validators::parse_backend(o->backend);
      o->g.oracle = oracle::parse_oracle_mode(o->oracle);
      o->g.normgate_version = NORMGATE_VERSION;
      o->g.normgate_commit = NORMGATE_GIT_COMMIT;
      const auto backend = validators::resolve_backend(o->g.backend);
      const bool cpu_gate = backend != validators::Backend::gpu;
      const std::string approvals_path = kernels::approvals_path_for(o->out);
      kernels::Approvals approvals = kernels::load_approvals(approvals_path);
      // Remembered rejections (rejections.h): read, and every record checked
      // (a tampered one stops the run here, before any work), whenever the
      // run will append to the file; used unless --forget-rejections.
      const std::string rejections_path = kernels::rejections_path_for(o->out);
      const std::string gate_backend(cpu_gate ? kernels::kCpuModelBackend : kernels::kGpuBackend);
      // Of this spec's groups and this backend; superseded: stale records
      // whose claim a current one makes again (gated again, or re-proved
      // by `approvals --recheck`, D22).
      std::vector<kernels::Rejection> remembered, stale, superseded;
      if (o->gate == "winners") {
        const kernels::Rejections stored = kernels::load_rejections(rejections_path);
        std::set<std::string> groups;
        for (const DeriveGroup& g : spec.groups) groups.insert(g.key());
        for (const auto& r : stored.records) {
          if (r.backend != gate_backend || !groups.count(r.group())) continue;
          const Variant* v = kernels::find_variant(r.variant);
          if (v && v->source_sha256 == r.source_sha256) remembered.push_back(r);
          else stale.push_back(r);
        }
        {
          std::vector<kernels::Rejection> still;
          for (auto& r : stale) {
            const bool again = std::any_of(remembered.begin(), remembered.end(), [&](const kernels::Rejection& q) {
              return q.window() == r.window() && q.variant == r.variant && q.backend == r.backend;
            });
            (again ? superseded : still).push_back(std::move(r));
          }
          stale = std::move(still);
        }
        if (!stored.records.empty())
          std::printf("rejected %s: %zu record(s): %zu of this spec's groups and backend %s (%s), %zu stale "
                      "(source changed since), %zu superseded (the same claim made again for this source)\n",
                      printable_line(rejections_path).c_str(), stored.records.size(), remembered.size(), gate_backend.c_str(),
                      o->forget_rejections ? "NOT used: --forget-rejections" : "used: not gated again", stale.size(),
                      superseded.size());
        if (o->forget_rejections) remembered.clear();
      }
      if (o->approve) {
        // The output table's approval policy: a gate campaign weaker than
        // its minimum is refused here, before any work (approve() re-checks).
        validators::GateOptions req = o->g;
        req.table_path = o->out;  // named in the refusal
        validators::check_approval_request(req, backend, kernels::policy_path_for(o->out));
      }

      Timings timings;
      if (!o->timings.empty()) {
        timings = kernels::load_timings(o->timings);
        check_gpu(timings.gpu, "--timings " + printable_line(o->timings) + " were measured on");
      } else {
        if (!kernels::gpu_available())
          throw std::invalid_argument(
              "no usable CUDA device: derive times the candidates on the GPU; give --timings FILE (an earlier "
              "run's PREFIX.timings.json) to derive without one");
        try {
          timings = run_bench(spec, o->deadline_s, t0);
        } catch (const DeadlineReached& e) {
          std::fprintf(stderr, "normgate derive: %s; nothing written\n", e.what());
          return 1;
        }
        write_file_atomic(o->report + ".timings.json", kernels::timings_to_json_text(timings));
        std::printf("timings  %s.timings.json (%zu points)\n", printable_line(o->report).c_str(), timings.points.size());
      }
      if (o->bench_only) return 0;

      // Derive, gate the winners without a current approval, exclude the
      // rejected, derive again.
      std::vector<Exclusion> excl;      // rejected by the gate, or without a current approval
      std::vector<Exclusion> rejected;  // rejected by the gate in this run
      std::vector<Exclusion> recalled;  // rejected by an earlier run (remembered, source unchanged)
      for (const auto& r : remembered) {
        excl.push_back({r.group(), r.variant, r.t_lo, r.t_hi});
        recalled.push_back(excl.back());
      }
      std::vector<GateNote> notes;
      std::set<std::string> passed_now;  // "group|variant|lo|hi" the gate passed in this run
      auto wkey = [](const DerivedWindow& w) {
        return window_key(w.group.key(), w.variant->name, w.t_lo, w.t_hi);
      };
      auto derive_all = [&]() {
        std::vector<DerivedWindow> all;
        for (const DeriveGroup& g : spec.groups)
          for (auto& w : kernels::derive_group(spec, g, timings, excl)) all.push_back(std::move(w));
        return all;
      };
      auto approved = [&](const DerivedWindow& w) {
        const auto st = kernels::approval_status(route_of(w, o->out), approvals, cpu_gate);
        return st.state == kernels::ApprovalState::current;
      };
      bool stopped = false;
      bool gate_error = false;  // a gate case failed to run: exit 3 (an error is not a verdict)
      std::string stop_reason;
      // Each round gates the windows that need it ONE AT A TIME, cheapest
      // first (rows x H at the window's last T), so a deadline leaves whole
      // windows gated and approved. A round's candidate table depends only on
      // the windows (no round number in it), and its journal is named by the
      // table's hash: a rerun that derives the same table resumes it.
      int round = 0;
      int gated = 0;
      // A signal (Ctrl-C, a job's time limit) ends the derive where it is:
      // say what its journals keep (main.cpp installed the handlers).
      const core::SignalNoteScope signal_note(
          o->gate == "winners" && !o->g.journal_path.empty()
              ? "\nnormgate derive: stopped by a signal; run the same command again to resume: every case its gates "
                "finished is in the journals '" + printable_line(o->g.journal_path) + ".*.jsonl'\n"
              : std::string());
      for (; o->gate == "winners" && round < 200 && !stopped; ++round) {
        // A window without a current approval is gated only where no
        // approval of its winner covers it (uncovered_spans, routes.md D12):
        // each uncovered span, up to the next timed point, is gated as a
        // window of its own (a piece),
        // through a candidate table where only its own window is split, at
        // the piece's edges. That table depends on the derived windows and
        // the piece alone, not on what other windows' approvals cover, so a
        // rerun after other pieces were approved derives the same table and
        // resumes its journal. A window none of whose T is covered is gated
        // whole through the round's table. --gate-windows selects pieces.
        const std::vector<DerivedWindow> ws = derive_all();
        struct Need {
          DerivedWindow piece;  // the window to gate: ws[parent] or a span of it
          size_t parent = 0;    // index into ws
        };
        std::vector<Need> needs;
        for (size_t i = 0; i < ws.size(); ++i) {
          const DerivedWindow& w = ws[i];
          if (w.no_candidate || approved(w) || passed_now.count(wkey(w))) continue;
          bool left = false;
          // A piece ends at a timed point, as every derived window does
          // (w.t_hi is one): a rejection's exclusion, between the timed
          // points around the worst case, then holds one (exclusions act at
          // timed points only; one in a piece without any would exclude
          // nothing, and the piece be gated again every round). Pieces that
          // then overlap are one.
          std::vector<std::pair<int64_t, int64_t>> spans;
          for (auto [lo, hi] : kernels::uncovered_spans(route_of(w, o->out), approvals, gate_backend)) {
            for (int64_t p : w.points)
              if (p >= hi) {
                hi = p;
                break;
              }
            if (!spans.empty() && lo <= spans.back().second)
              spans.back().second = std::max(spans.back().second, hi);
            else
              spans.emplace_back(lo, hi);
          }
          for (const auto& [lo, hi] : spans) {
            Need n{w, i};
            n.piece.t_lo = lo;
            n.piece.t_hi = hi;
            n.piece.points.clear();
            n.piece.reasons.clear();
            for (size_t k = 0; k < w.points.size(); ++k)
              if (w.points[k] >= lo && w.points[k] <= hi) {
                n.piece.points.push_back(w.points[k]);
                if (k < w.reasons.size()) n.piece.reasons.push_back(w.reasons[k]);
              }
            if (passed_now.count(wkey(n.piece))) continue;
            left = true;
            if (gate_filter.matches(route_of(n.piece, o->out))) needs.push_back(std::move(n));
          }
          // Every uncovered span passed in this run (gated without
          // --approve): the window has passed, its other parts approved.
          if (!left) passed_now.insert(wkey(w));
        }
        if (needs.empty()) break;
        std::vector<const Need*> need;
        for (const Need& n : needs) need.push_back(&n);
        auto cost = [](const Need* n) {
          const DerivedWindow* w = &n->piece;
          const double heads = static_cast<double>(heads_of(w->group.form));
          return static_cast<double>(w->t_hi) * heads * static_cast<double>(w->group.H) *
                 (w->group.op == Op::bwd ? 2.0 : 1.0);
        };
        // Least accurate candidate first (the later in the spec's list, the
        // likelier a rejection), then cheapest: a rejection re-derives the
        // group, and gating the incumbent before the candidates next to it
        // are decided re-gated it on every grown window (heads4 nondet:
        // [1, 1], [1, 16], ... [1, 131072], 400 s of one GPU run).
        auto rank = [&](const Need* n) {
          const auto cs = spec.candidates(n->piece.group);
          return static_cast<int>(std::find(cs.begin(), cs.end(), n->piece.variant) - cs.begin());
        };
        std::stable_sort(need.begin(), need.end(), [&](const Need* a, const Need* b) {
          const int ra = rank(a), rb = rank(b);
          return ra != rb ? ra > rb : cost(a) < cost(b);
        });
        // A det variant winning the det and the nondet window of one shape
        // over the same piece is gated on both at once (routes.md D13): the
        // two windows hold the same cases and the gate runs each case once
        // for every window of that variant covering it, so the nondet window
        // costs no GPU time of its own. A batch is one need, or such a pair,
        // the det window first (its journal name is the one a lone det
        // window had, so a journal of that window resumes).
        std::vector<std::vector<const Need*>> batches;
        {
          std::vector<bool> used(need.size(), false);
          auto same_but_mode = [](const Need* a, const Need* b) {
            const DerivedWindow &x = a->piece, &y = b->piece;
            return x.group.op == Op::bwd && y.group.op == Op::bwd && x.group.mode != y.group.mode &&
                   x.group.H == y.group.H && x.group.w == y.group.w && x.group.form == y.group.form &&
                   x.variant == y.variant && x.variant->mode == kernels::Mode::det && x.t_lo == y.t_lo && x.t_hi == y.t_hi;
          };
          for (size_t i = 0; i < need.size(); ++i) {
            if (used[i]) continue;
            used[i] = true;
            std::vector<const Need*> b{need[i]};
            for (size_t j = i + 1; j < need.size(); ++j)
              if (!used[j] && same_but_mode(need[i], need[j])) {
                used[j] = true;
                b.push_back(need[j]);
                break;
              }
            if (b.size() == 2 && b[0]->piece.group.mode != kernels::Mode::det) std::swap(b[0], b[1]);
            batches.push_back(std::move(b));
          }
        }
        // The candidate table a batch is gated through (written once per
        // text), its path and the first 12 hex digits of its hash: each
        // member's window split at its piece's edges.
        auto candidate_table = [&](const std::vector<const Need*>& batch) {
          std::vector<DerivedWindow> tw;
          for (size_t i = 0; i < ws.size(); ++i) {
            const DerivedWindow& w = ws[i];
            const Need* n = nullptr;
            for (const Need* m : batch)
              if (m->parent == i) n = m;
            if (n == nullptr || (n->piece.t_lo == w.t_lo && n->piece.t_hi == w.t_hi)) {
              tw.push_back(w);
              continue;
            }
            if (n->piece.t_lo > w.t_lo) {
              tw.push_back(w);
              tw.back().t_hi = n->piece.t_lo - 1;
            }
            tw.push_back(n->piece);
            if (n->piece.t_hi < w.t_hi) {
              tw.push_back(w);
              tw.back().t_lo = n->piece.t_hi + 1;
            }
          }
          // No path in the text: its hash names the journal, and a rerun
          // from another folder (another machine's checkout) must resume it.
          const std::string text =
              kernels::route_table_text(spec, tw, "candidate table of a gate round of `normgate derive` (not for use)");
          const std::string sha12 = kernels::parse_route_table(text, "candidate").sha256.substr(0, 12);
          const std::string path = o->report + ".candidates-" + sha12 + ".toml";
          write_file_atomic(path, text);
          return std::make_pair(path, sha12);
        };
        std::printf("gate     round %d: %zu window(s) without a current approval, least accurate candidate first, then cheapest (%s)\n", round + 1,
                    need.size(), printable_line(candidate_table(batches.front()).first).c_str());
        std::fflush(stdout);
        bool any_failed = false;
        for (const auto& batch : batches) {
          if (any_failed) break;  // derive again first: the rejection may make cheaper windows
          const DerivedWindow* w = &batch.front()->piece;
          bool early = false;
          validators::GateOptions g = o->g;
          const auto [table_path, sha12] = candidate_table(batch);
          g.table_path = table_path;
          const std::string want = wkey(*w);
          std::set<std::string> wants;
          for (const Need* m : batch) wants.insert(wkey(m->piece));
          // One journal per (candidate table, batch), named by its first
          // window: the gate's progress then sees this batch's cases only (a
          // rejection stops the batch at its first case over budget).
          if (!o->g.journal_path.empty())
            g.journal_path = o->g.journal_path + "." + sha12 + "." +
                             seeds::sha256_hex(want.data(), want.size()).substr(0, 12) + ".jsonl";
          g.progress = [](const validators::GateProgress& p) {
            if (p.worst > 1.0) throw WindowRejected(p.worst, p.worst_case, p.worst_output);
          };
          g.select = [wants](const kernels::Route& r) {
            return wants.count(window_key(group_of(r).key(), r.variant->name, r.t_lo, r.t_hi)) > 0;
          };
          if (o->deadline_s > 0)
            g.after_case = [o, t0](int64_t) {
              if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > o->deadline_s)
                throw DeadlineReached(o->g.journal_path.empty()
                                          ? "deadline reached while gating (no --journal: this window's finished "
                                            "cases are not kept)"
                                          : "deadline reached while gating (the journal keeps the finished cases)");
            };
          validators::GateResult res;
          try {
            const ExitGuard exit_guard("derive's gate");
            res = validators::run_gate(g);
          } catch (const DeadlineReached& e) {
            stopped = true;
            stop_reason = e.what();
            break;
          } catch (const WindowRejected& e) {
            // Synthesize the batch's results: FAIL at its first case over
            // budget (a pair's windows hold the same cases of one det variant).
            for (const Need* m : batch) {
              validators::WindowResult wr;
              wr.route = route_of(m->piece, table_path);
              wr.pass = false;
              wr.worst = e.worst;
              wr.worst_case = e.worst_case;
              wr.worst_output = e.worst_output + ", stopped at the first case over budget";
              res.windows.push_back(wr);
            }
            res.backend = cpu_gate ? std::string(kernels::kCpuModelBackend) : std::string(kernels::kGpuBackend);
            early = true;
          }
          ++gated;
          const std::string stem = o->report + ".gate-" + std::to_string(gated);
          if (!early) {
            write_file_atomic(stem + ".md", validators::format_gate_markdown(res));
            write_file_atomic(stem + ".json", json_text(validators::gate_to_json(res)));
          } else {
            // The windows as reports name them (not the batch's internal key).
            std::string what;
            for (const auto& w : res.windows)
              what += (what.empty() ? "" : ", ") + w.route.window() + " -> " + std::string(w.route.variant->name);
            write_file_atomic(stem + ".md", "# Gate of " + what + ": REJECTED\n\nStopped at the first case over budget: `" +
                                                 res.windows[0].worst_case + "`, err/tol " +
                                                 fmt("%.4g", res.windows[0].worst) +
                                                 " (`normgate repro` it to see the elements).\n");
          }
          if (o->approve && !early) {
            const auto changes = validators::approve(approvals, res, g);
            for (const auto& c : changes) std::printf("  %s\n", c.c_str());
          }
          for (const auto& wr : res.windows) {
            GateNote n;
            n.group = group_of(wr.route).key();
            n.variant = std::string(wr.route.variant->name);
            n.t_lo = wr.route.t_lo;
            n.t_hi = wr.route.t_hi;
            n.pass = wr.pass;
            if (wr.errored())
              n.error = std::to_string(wr.errors) + " case" + (wr.errors == 1 ? "" : "s") + " failed to run (" +
                        (wr.error_samples.empty() ? std::string("no message") : wr.error_samples.front()) + ")";
            n.worst = wr.worst;
            n.worst_output = wr.worst_output;
            n.worst_case = wr.worst_case;
            n.report = stem + ".md";
            std::printf("  %s %s T=%lld..%lld -> %s: worst err/tol %.3g (%s), %lld cases, %.0f s\n",
                        wr.pass ? "PASS" : !n.error.empty() ? "ERROR" : "FAIL", n.group.c_str(), static_cast<long long>(n.t_lo),
                        static_cast<long long>(n.t_hi), n.variant.c_str(), wr.worst, wr.worst_output.c_str(),
                        static_cast<long long>(wr.cases),
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            std::fflush(stdout);
            if (!n.error.empty()) {
              // Cases that failed to run (std::bad_alloc, a CUDA error) and
              // none over budget: not a verdict on the candidate, so it is
              // neither excluded nor remembered; derive stops (exit 3).
              gate_error = true;
              stopped = true;
              stop_reason = "the gate of " + n.group + " T=" + std::to_string(n.t_lo) + ".." +
                            std::to_string(n.t_hi) + " -> " + n.variant + ": " + n.error +
                            ", none over budget; an error is not a verdict: nothing excluded or remembered";
              any_failed = true;  // no more batches
            } else if (wr.pass) {
              passed_now.insert(window_key(n.group, n.variant, n.t_lo, n.t_hi));
            } else {
              // Exclude the candidate only between the timed points around
              // the worst case's T: the rest of the window may be derived to
              // it again and gated on its own (every window routed to it is
              // still gated whole).
              int64_t lo = n.t_lo, hi = n.t_hi;
              try {
                const int64_t tw = seeds::parse_case(n.worst_case).T;
                for (int64_t p : kernels::timed_points(group_of(wr.route), timings)) {
                  if (p < tw && p + 1 > lo && p + 1 <= hi) lo = p + 1;
                  if (p >= tw && p < hi && p >= lo) {
                    hi = p;
                    break;
                  }
                }
              } catch (const std::exception&) {
                lo = n.t_lo;  // no parsable worst case: the whole window
                hi = n.t_hi;
              }
              excl.push_back({n.group, n.variant, lo, hi});
              rejected.push_back(excl.back());
              any_failed = true;
              // Remember it (rejections.h): only a case over budget proves a
              // rejection (not an error, INCONCLUSIVE or incomplete window).
              if (wr.worst > 1.0 && !wr.worst_case.empty()) {
                kernels::Rejection x;
                x.op = wr.route.op;
                x.mode = wr.route.mode;
                x.H = wr.route.H;
                x.w = wr.route.w;
                x.form = wr.route.form;
                x.t_lo = lo;
                x.t_hi = hi;
                x.gated_lo = n.t_lo;
                x.gated_hi = n.t_hi;
                x.variant = n.variant;
                x.source_sha256 = std::string(wr.route.variant->source_sha256);
                x.backend = gate_backend;
                x.gpu = cpu_gate ? gate_backend : kernels::device_info().name;
                if (x.gpu.empty()) x.gpu = "gpu";
                x.worst_case = wr.worst_case;
                x.worst_err_tol = wr.worst;
                x.worst_output = wr.worst_output.substr(0, wr.worst_output.find(','));
                x.date = utc_now();
                x.normgate_commit = NORMGATE_GIT_COMMIT;
                x.normgate_version = NORMGATE_VERSION;
                try {
                  if (kernels::record_rejections(rejections_path, approvals_path, {x}))
                    std::printf("  remembered in %s: %s T=%lld..%lld\n", printable_line(rejections_path).c_str(), n.variant.c_str(),
                                static_cast<long long>(lo), static_cast<long long>(hi));
                } catch (const std::exception& e) {
                  std::fprintf(stderr, "normgate derive: warning: rejection not remembered: %s\n", e.what());
                }
              }
            }
            notes.push_back(std::move(n));
          }
        }
        // A rejection changes the derivation: derive again before gating
        // more (the next round's table differs, and so does its journal).
        if (!any_failed && !stopped) {
          bool left = false;
          for (const auto& w : derive_all())
            left |= !w.no_candidate && !approved(w) && !passed_now.count(wkey(w));
          if (!left) break;
        }
      }
      // The table: every window's winner approved (or passed now); where a
      // winner is neither, it is excluded and the next candidate routed.
      std::vector<DerivedWindow> ws;
      for (int guard = 0; guard < 64; ++guard) {
        ws = derive_all();
        bool changed = false;
        for (const auto& w : ws)
          if (!w.no_candidate && !approved(w) && !passed_now.count(wkey(w))) {
            // Exclude the winner only at the timed points no approval of it
            // covers: a winner approved for part of the window (fwd_rowwise
            // approved for T = 1..5793 winning 1..131072 once fwd_wide is
            // excluded above 4467) keeps that part, instead of every
            // candidate being excluded there in turn. When every timed point
            // is covered but the window is not, the uncovered span lies
            // below its first point (the window starts right after the
            // previous window's last point, below where the approval
            // starts): the winner is excluded at that first point, which
            // moves the split up by one timed point.
            bool any = false;
            for (int64_t T : w.points) {
              DerivedWindow one = w;
              one.t_lo = one.t_hi = T;
              if (approved(one)) continue;
              excl.push_back({w.group.key(), std::string(w.variant->name), T, T});
              any = true;
            }
            if (!any)
              excl.push_back({w.group.key(), std::string(w.variant->name), w.points.front(), w.points.front()});
            changed = true;
          }
        if (!changed) break;
      }
      int unapproved = 0;
      for (const auto& w : ws) unapproved += w.no_candidate || !approved(w);

      // Report.
      // Each value as one shell word (a path with a space, a control byte:
      // quoted), so the line pastes back and, in the table's comment, holds
      // no byte TOML refuses.
      const auto word = [](const std::string& v) { return core::shell_word(v); };
      std::string cmdline =
          "normgate derive " + word(o->spec) + " --out " + word(o->out) + " --report " + word(o->report);
      if (!o->timings.empty()) cmdline += " --timings " + word(o->timings);
      if (o->gate == "none") {
        cmdline += " --gate none";
      } else {
        cmdline += " --seeds " + word(o->g.seeds) + " --t-per-window " + std::to_string(o->g.t_per_window) +
                   " --dense-points " + std::to_string(o->g.dense_points) + " --dense-step " +
                   std::to_string(o->g.dense_step) + " --fresh-factor " + std::to_string(o->g.fresh_factor);
        if (o->approve) cmdline += " --approve";
        if (o->forget_rejections) cmdline += " --forget-rejections";
        if (!o->gate_windows.empty()) cmdline += " --gate-windows " + word(o->gate_windows);
        if (o->backend != "auto") cmdline += " --backend " + word(o->backend);
        if (o->oracle != "auto") cmdline += " --oracle " + word(o->oracle);
      }
      nlohmann::ordered_json jr;
      jr["format"] = "normgate-derivation/1";
      jr["command"] = cmdline;
      jr["spec"] = o->spec;
      jr["table"] = o->out;
      jr["approvals"] = approvals_path;
      jr["timings"] = {{"gpu", timings.gpu}, {"driver", timings.driver}, {"cuda", timings.cuda},
                       {"date", timings.date}, {"normgate_commit", timings.normgate_commit},
                       {"rounds", timings.rounds}, {"reps", timings.reps}};
      jr["normgate_commit"] = NORMGATE_GIT_COMMIT;
      jr["date"] = utc_now();
      std::string md = "# Route derivation: " + o->out + "\n\n";
      md += "- spec: `" + o->spec + "`; command: `" + cmdline + "`\n";
      md += "- approvals: `" + approvals_path + "` (read" + (o->approve ? " and written" : "") + ")\n";
      // The timings file's strings escaped: one line of the report each.
      md += "- timings: " + printable_line(timings.gpu) + " (driver " + printable_line(timings.driver) + ", CUDA " +
            printable_line(timings.cuda) + "), " + printable_line(timings.date) + ", normgate " +
            printable_line(timings.normgate_commit) + "; " + std::to_string(timings.rounds) +
            " interleaved rounds x " + std::to_string(timings.reps) +
            " graph replays (cold L2) per measurement; A/A floor = the first candidate timed twice per round\n";
      if (o->gate == "none")
        md += "- gate: not run (--gate none): a window's route needs a current approval on file\n";
      else
        md += "- gate: seeds " + o->g.seeds + ", " + std::to_string(o->g.t_per_window) + " T points per window, dense " +
            std::to_string(o->g.dense_points) + " points each side every " + std::to_string(o->g.dense_step) +
            " rows, fresh seeds x" + std::to_string(o->g.fresh_factor) + "; backend " +
            (cpu_gate ? "cpu-model" : "gpu") + (stopped ? "; STOPPED: " + stop_reason : "") + "\n" +
            "- rejections: `" + rejections_path + "` (read and appended; " +
            (o->forget_rejections ? "earlier runs' NOT used: --forget-rejections"
                                  : std::to_string(remembered.size()) + " remembered used, " +
                                        std::to_string(stale.size()) + " stale") +
            ")\n";
      md += "- windows: " + std::to_string(ws.size()) + ", " + std::to_string(unapproved) +
            " without a current approval\n\n";
      md += "Per window: the routed variant, its approval (margin = 1 - worst err/tol), and every candidate's "
            "median time at the window's timed points (us; `*` the routed candidate, `x` rejected by the gate in "
            "this run, `r` rejected by an earlier run (remembered, source unchanged), `u` no current approval (not gated, or gated without --approve), `~` within the A/A floor "
            "of the fastest and listed later: a tie the more accurate candidate won; `A/A` the tie rule's floor at that "
            "T, `round by round, max M%` where the ratios and the A/A gaps are taken round by round and their "
            "medians compared, docs/perf/routes.md D1).\n\n";
      md += "| window | variant | approval | margin | candidates at timed T (us) |\n| --- | --- | --- | --- | --- |\n";
      nlohmann::ordered_json jw = nlohmann::ordered_json::array();
      for (const auto& w : ws) {
        const auto st = kernels::approval_status(route_of(w, o->out), approvals, cpu_gate);
        double worst = std::nan("");
        std::string appr = std::string(kernels::to_string(st.state));
        if (st.record) {
          worst = 0;
          for (const auto& [k, v] : st.record->max_err_tol) worst = std::max(worst, v);
          appr += " (" + st.record->backend + ", seeds " + st.record->seed_set + ", " +
                  std::to_string(st.record->cases) + " cases, " + st.record->date.substr(0, 10) + ")";
        }
        const std::string vname(w.variant->name);
        for (const auto& n : notes)
          if (n.group == w.group.key() && n.variant == vname && n.t_lo == w.t_lo && n.t_hi == w.t_hi && n.pass &&
              !st.record) {
            worst = n.worst;
            appr = "passed now, not approved (run with --approve)";
          }
        std::string cells;
        nlohmann::ordered_json jpts = nlohmann::ordered_json::array();
        for (size_t i = 0; i < w.points.size(); ++i) {
          const int64_t T = w.points[i];
          const BenchPoint* p = timings.find(BenchKey{w.group.op, w.group.H, w.group.w, w.group.form, T});
          std::string cell = "T=" + std::to_string(T) + ":";
          // Each candidate's flags; `~` (a tie the winner took, listed
          // earlier) by winner_at's own test: a live candidate measurably
          // slower than no other live one.
          struct Cand {
            const Variant* c;
            bool rej, rem, out;
          };
          std::vector<Cand> cs;
          for (const Variant* c : spec.candidates(w.group)) {
            if (!p->median_us.count(std::string(c->name))) continue;
            auto in = [&](const std::vector<Exclusion>& xs) {
              for (const auto& e : xs)
                if (e.group == w.group.key() && e.variant == c->name && T >= e.t_lo && T <= e.t_hi) return true;
              return false;
            };
            const bool rej = in(rejected), rem = !rej && in(recalled), out = !rej && !rem && in(excl);
            cs.push_back({c, rej, rem, out});
          }
          std::vector<std::string> live;
          for (const auto& x : cs)
            if (!x.rej && !x.rem && !x.out) live.emplace_back(x.c->name);
          for (const auto& x : cs) {
            const bool tie = x.c != w.variant && !x.rej && !x.rem && !x.out &&
                             kernels::slower_than_none(*p, std::string(x.c->name), live);
            cell += " " + std::string(x.c->name) + " " + fmt("%.2f", p->median_us.at(std::string(x.c->name))) +
                    (x.c == w.variant ? "*" : "") + (x.rej ? "x" : "") + (x.rem ? "r" : "") + (x.out ? "u" : "") +
                    (tie ? "~" : "");
          }
          cell += " (A/A " + fmt("%.1f", 100 * kernels::tie_floor(*p)) + "%" +
                  (kernels::paired_rounds(*p) ? " round by round, max " + fmt("%.1f", 100 * p->aa_floor) + "%" : "") +
                  ")";
          cells += (cells.empty() ? "" : "<br>") + cell;
          nlohmann::ordered_json jp = {{"T", T}, {"median_us", p->median_us}, {"aa_floor", p->aa_floor}};
          if (kernels::paired_rounds(*p)) {  // the floor the paired rule applied, and its inputs
            jp["tie_floor"] = kernels::tie_floor(*p);
            jp["rounds_us"] = p->rounds_us;
            jp["aa_rounds_us"] = p->aa_rounds_us;
          }
          jp["reason"] = w.reasons[i];
          jpts.push_back(jp);
        }
        char win[160];
        std::snprintf(win, sizeof win, "%s T=%lld..%lld", w.group.key().c_str(), static_cast<long long>(w.t_lo),
                      static_cast<long long>(w.t_hi));
        md += "| " + std::string(win) + " | " + vname + " | " + appr + " | " +
              (std::isnan(worst) ? "-" : fmt("%.3f", 1 - worst)) + " | " + cells + " |\n";
        nlohmann::ordered_json e;
        e["window"] = win;
        e["variant"] = vname;
        e["approval"] = appr;
        e["worst_err_tol"] = std::isnan(worst) ? nlohmann::ordered_json() : nlohmann::ordered_json(worst);
        e["points"] = jpts;
        jw.push_back(e);
      }
      jr["windows"] = jw;
      nlohmann::ordered_json jg = nlohmann::ordered_json::array();
      if (!notes.empty()) {
        md += "\n## Gate verdicts of this run\n\n| window | candidate | verdict | worst err/tol (output) | worst case | "
              "report |\n| --- | --- | --- | --- | --- | --- |\n";
        for (const auto& n : notes) {
          md += "| " + n.group + " T=" + std::to_string(n.t_lo) + ".." + std::to_string(n.t_hi) + " | " + n.variant +
                " | " + (n.pass ? "pass" : !n.error.empty() ? "**ERROR**: " + n.error : "**REJECTED**") + " | " +
                fmt("%.4g", n.worst) + " (" + n.worst_output +
                ") | `" + n.worst_case + "` | `" + n.report + "` |\n";
          jg.push_back({{"group", n.group}, {"variant", n.variant}, {"T", {n.t_lo, n.t_hi}}, {"pass", n.pass},
                        {"error", n.error.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(n.error)},
                        {"worst_err_tol", n.worst}, {"worst_output", n.worst_output}, {"worst_case", n.worst_case},
                        {"report", n.report}});
        }
      }
      jr["gate_verdicts"] = jg;
      // Remembered rejections: the ones this run used (`r`), and the stale
      // ones (the variant's source changed since: gated again if it wins).
      nlohmann::ordered_json jrej;
      if (o->gate == "winners") {
        auto rec_json = [](const kernels::Rejection& r) {
          nlohmann::ordered_json j{{"group", r.group()},          {"variant", r.variant},
                                   {"T", {r.t_lo, r.t_hi}},        {"gated_T", {r.gated_lo, r.gated_hi}},
                                   {"worst_err_tol", r.worst_err_tol}, {"worst_output", r.worst_output},
                                   {"worst_case", r.worst_case},  {"source_sha256", r.source_sha256},
                                   {"backend", r.backend},        {"date", r.date},
                                   {"normgate_commit", r.normgate_commit}, {"record_sha256", r.record_sha256}};
          if (r.rechecked)
            j["rechecked"] = {{"backend", r.rechecked->backend},
                              {"from_source_sha256", r.rechecked->from_source_sha256},
                              {"from_record_sha256", r.rechecked->from_record_sha256}};
          return j;
        };
        jrej["file"] = rejections_path;
        jrej["forgotten"] = o->forget_rejections;
        jrej["used"] = nlohmann::ordered_json::array();
        jrej["stale"] = nlohmann::ordered_json::array();
        jrej["superseded"] = nlohmann::ordered_json::array();
        for (const auto& r : remembered) jrej["used"].push_back(rec_json(r));
        for (const auto& r : stale) jrej["stale"].push_back(rec_json(r));
        for (const auto& r : superseded) jrej["superseded"].push_back(rec_json(r));
        if (!remembered.empty() || !stale.empty() || !superseded.empty()) {
          md += "\n## Remembered rejections (`" + rejections_path + "`)\n\nRejected by earlier runs' gates on this "
                "backend; `used` (source unchanged: not gated again, `r` above; `rechecked`: re-proved by "
                "`normgate approvals --recheck` after a source change, docs/perf/routes.md D22), `stale` (the "
                "variant's source changed since: gated again where it wins), `superseded` (stale, its claim made "
                "again for this source by a `used` record). `--forget-rejections` gates them all again.\n\n"
                "| excluded window | candidate | status | worst err/tol (output) | worst case | gated window | date | "
                "source |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n";
          auto row = [&](const kernels::Rejection& r, const char* status) {
            md += "| " + r.window() + " | " + r.variant + " | " + status + " | " + fmt("%.4g", r.worst_err_tol) +
                  " (" + r.worst_output + ") | `" + r.worst_case + "` | T=" + std::to_string(r.gated_lo) + ".." +
                  std::to_string(r.gated_hi) + " | " + r.date.substr(0, 10) + " | " + r.source_sha256.substr(0, 12) +
                  " |\n";
          };
          for (const auto& r : remembered) row(r, r.rechecked ? "used (rechecked)" : "used");
          for (const auto& r : stale) row(r, "**stale**");
          for (const auto& r : superseded) row(r, "superseded");
        }
      }
      jr["remembered_rejections"] = jrej;
      jr["stopped"] = stopped ? nlohmann::ordered_json(stop_reason) : nlohmann::ordered_json();

      const std::string header =
          // (the timings file's strings and the paths escaped: a control
          // byte in a TOML comment makes the table unreadable)
          printable_line(std::filesystem::path(o->out).filename().string()) +
          ": which kernel variant serves which RMSNorm training call.\nGENERATED by `" + cmdline + "`\n(" +
          utc_now() + ", normgate " + NORMGATE_GIT_COMMIT + "; timings " + printable_line(timings.gpu) + ", " +
          printable_line(timings.date) + "). Do not edit by hand: edit the spec and derive again.\nPer window: the "
          "fastest candidate with a current approval; the evidence (every candidate's time and verdict) is in " +
          printable_line(o->report) + ".md.\nFormat: routing/include/normgate/routing/routing.h.";
      const std::string table_text = kernels::route_table_text(spec, ws, header);
      (void)kernels::parse_route_table(table_text, o->out);  // every rule of the loader, before writing
      // A table with a window no approved candidate serves is not written:
      // it would route a variant the gate never passed (or rejected).
      // The table and its report all or none (write_files_atomic).
      write_files_atomic({{unapproved == 0 ? o->out : std::string(), table_text},
                          {o->report + ".md", md},
                          {o->report + ".json", json_text(jr)}});
      if (unapproved == 0)
        // With --backend cpu the approvals counted are the CPU models', which
        // the dispatcher does not accept by default: said, so that "every
        // route approved" is not read as a table the library will serve.
        std::printf("table    %s: %zu windows, every route with a current approval%s\nreport   %s.md, %s.json\n",
                    printable_line(o->out).c_str(), ws.size(),
                    cpu_gate ? " (cpu-model approvals, counted because this derive gates on the CPU models: "
                               "the dispatcher refuses them unless it accepts cpu-model ones, "
                               "NORMGATE_DISPATCH=accept-cpu-model; `normgate routes --accept-cpu-model` lists them "
                               "so)"
                             : "",
                    printable_line(o->report).c_str(), printable_line(o->report).c_str());
      else if (gate_error)
        // The gate stopped on cases that could not run: the advice to gate
        // again with --approve is what this run just did.
        std::fprintf(stderr,
                     "normgate derive: table NOT written: %d of %zu windows have no candidate with a current "
                     "approval in %s, and the gate stopped on cases that could not run (ERROR, above): fix the "
                     "cause (memory, the GPU) and derive again; report %s.md\n",
                     unapproved, ws.size(), printable_line(approvals_path).c_str(), printable_line(o->report).c_str());
      else
        std::fprintf(stderr,
                     "normgate derive: table NOT written: %d of %zu windows have no candidate with a current "
                     "approval in %s (the approvals beside --out); gate them (--gate winners --approve) or point "
                     "--out beside the approvals that cover them; report %s.md\n",
                     unapproved, ws.size(), printable_line(approvals_path).c_str(), printable_line(o->report).c_str());
      if (stopped) std::printf("stopped  %s\n", printable_line(stop_reason).c_str());
      if (gate_error) return 3;
      return unapproved == 0 ? 0 : 1;
    };
  });
}

}  // namespace normgate::app
