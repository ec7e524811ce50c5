// normgate/gate/gate.h: the accuracy gate over a route table.
//
// For every window (route) of a table (routing.h) the gate runs cases, checks
// every element of every output against its budget (budget.h) with the FP64
// oracle, and gives the window a verdict. Method (after the seed's B200 PR):
//
// 1. Grid. The window's T points (window_t_points): its first T (lo), its last
//    T (hi), T on both sides of every power of two p in [lo, hi] (p-1 and p+1,
//    those inside the window), and, up to --t-per-window points in all, the
//    rest spread evenly over [lo, hi] (deterministic: a function of lo, hi
//    and the count alone). Each T runs every (family, seed) of the seed set
//    (default 5x120: normal, llm, cancel, epsnear at 3 eps values and cancel
//    at kappa 1e2, 1e4, 1e6 x seeds 0..119; seed_set.h) with the window's H,
//    weight dtype and form.
// 2. Dense grid. Around the window's worst grid point (the case with the
//    largest err/tol of the output that comes from the variant's long
//    reduction: dw, a sum over T rows, for bwd windows; rstd, a sum over H
//    columns, for fwd windows; dx and y are per-element roundings whose worst
//    case does not move with T; ties: first in run order), T = T_worst + k*step
//    for k = +-1..+-dense_points (default step 64, 16 points each side),
//    those inside the window and not grid T points (whose cases the grid
//    ran already), with the worst case's family and seed
//    (--dense-seeds worst, the default: the dense grid scans T, where a
//    variant's chunking changes; seed variance is the fresh seeds' job) or
//    every (family, seed) of the seed set (--dense-seeds all: what the seed's
//    PR did in its one deepest window; 48x the cases at 3x16, which at
//    T ~ 131072 puts a whole-table campaign out of reach).
// 3. Fresh seeds. The worst (T, family) over grid and dense grid (same
//    output), re-run with seeds never used before: fresh_factor (default 2)
//    times the seed set's per-family count, starting right after its last
//    seed.
// The verdict covers all three: a window PASSES when every case ran and every
// gated output passes in every case (RatioStats::pass(): no element over its
// budget). bwd windows gate y, rstd, dx, dw (the whole training step with the
// forward it ran with); fwd windows gate y and rstd. dw relative to the FP32 baseline (FP32 eager on the same
// inputs) is reported, not gated (at small T FP32 eager is sometimes more
// accurate while both are far inside the budget; docs/perf/numerics.md D6).
//
// Every case goes through run_check: the oracle runs once per case and serves
// every implementation that case needs, so det and nondet windows with the
// same bounds share their cases. The forward step of a bwd window's run is
// always the default forward, fwd_rowwise (kernels::default_fwd()), so a bwd
// window gates its variant after fwd_rowwise. A fwd window routed to
// fwd_rowwise reads y and rstd from any backward run of the same case; a fwd
// window routed to another forward variant F runs F's own runs (the check
// implementation F: forward F, then the case's carrier backward for dx and
// dw, which the window does not gate: harness/pipeline.h impl_variants).
// Records are keyed by (case, implementation), so a run of one forward
// variant never stands in for another's.
// Kernel variants run on the GPU when one is usable (backend auto), else as
// their CPU models; the report says which. A window routed to an external
// implementation (harness/external.h: a Python callable, a plugin) runs it
// through its own callback, its y and rstd included (a forward window of
// fwd_rowwise never reads its runs); the reports name its origin, where it
// ran and its declared source identity, and the journal's campaign includes
// that identity.
//
// Campaigns are resumable: with a journal (journal.h) every finished case is
// on disk before the next starts, and a re-run with the same journal skips
// them. The plan (which cases run) is a function of the table, the options and
// the results, so a resumed run reaches the same report as an uninterrupted
// one. Records are per (case, implementation), whichever window asked for
// them, so one journal also serves gates of different --windows filters (and
// --base): a long campaign can be run a filter at a time and finished by a
// gate of the whole table that only reads the journal. Reports count only
// the records their plan used. A case that throws (GPU out of memory, a kernel error) is journalled as
// an error of that case; the windows that needed it fail and the run goes on.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "normgate/kernels/device.h"
#include "normgate/routing/policy.h"
#include "normgate/routing/rejections.h"
#include "normgate/routing/routing.h"
#include "normgate/seeds/seed_set.h"
#include "normgate/harness/pipeline.h"

namespace normgate::validators {

/// T points of a window [lo, hi] (1 <= lo <= hi), `target` points in all
/// unless the mandatory ones (lo, hi, p-1 and p+1 of every power of two p in
/// [lo, hi]) are more; then exactly the mandatory ones. The extra points are
/// lo + round((hi - lo) * k / (m + 1)), k = 1..m (m = target - mandatory),
/// each moved to the nearest free T (upward first) if taken. Sorted,
/// distinct. Throws std::invalid_argument when lo < 1, lo > hi or target < 2.
std::vector<int64_t> window_t_points(int64_t lo, int64_t hi, int target);

/// The cases of approval a's campaign as far as its record gives them, in
/// phase order: the grid (a.t_points x a.seed_set), the dense grid around
/// a.worst_case (T = worst T + k * dense_step, 1 <= |k| <= dense_points,
/// inside the window; the worst case's family point and seed, or the whole
/// seed set when dense_seeds is "all"), then a.fresh_seeds at the worst
/// case's T. The gate (run.cpp) centres the dense grid on the worst grid
/// case and the fresh seeds on the worst of grid and dense, which a record
/// does not keep: where its worst case is a grid case the list is the
/// gate's, else it differs in the dense and fresh points only. Dense points
/// that fall on a grid T stay in the list, repeating grid cases (the gate
/// lists them once, as grid cases), so a digest of an older build lists the
/// same cases. `normgate
/// digest` runs it (docs/perf/routes.md D19). Throws std::invalid_argument
/// for an invalid record, one without campaign strength, or a seed set,
/// fresh seed set or worst case that does not parse or lies outside the
/// window.
std::vector<seeds::CaseId> approval_cases(const kernels::Approval& a);

/// The run that carries a forward window's case (the forward runs inside
/// every check): the first non-control backward variant of the registry that
/// supports the case's H, weight dtype and form (pipeline.h fwd_carrier).
/// Used by the gate and by export. Throws std::invalid_argument naming the
/// case when none does.
std::string carrier_for(const seeds::CaseId& c);

/// One sentence saying where kernel variants run for a resolved backend (gpu:
/// the device, driver and CUDA runtime; cpu: that CPU models run, not CUDA
/// code, and whether a GPU was present). Never throws.
std::string describe_backend(Backend resolved, const kernels::DeviceInfo& d);

/// Selects windows: comma-separated terms key=value, all of which must hold.
/// Keys: op (fwd|bwd), mode (det|nondet; fwd windows have no mode and never
/// match a mode term), H, w (bf16|fp32), form, variant, and T (T=N: windows
/// holding N; T=A..B: windows overlapping [A, B]). A value may list
/// alternatives with '|': "H=2048|4096". Empty text selects every window.
struct WindowFilter {
  struct Term {
    std::string key;
    std::vector<std::string> values;
  };
  std::vector<Term> terms;
  /// True when every term holds for r.
  bool matches(const kernels::Route& r) const;
};

/// Parse a filter. Throws std::invalid_argument naming the bad term (unknown
/// key, missing '=', empty value, bad number or range, unknown op/mode/w/form).
WindowFilter parse_window_filter(std::string_view text);

/// Progress of a running gate (GateOptions::progress).
struct GateProgress {
  std::string phase;           ///< "grid", "dense", "fresh"
  int64_t done = 0;            ///< cases of this phase finished (journalled ones included)
  int64_t total = 0;           ///< cases of this phase
  int64_t elsewhere = 0;       ///< of them, cases not run here: other shards' (--shard), or in no merged journal (--merge)
  int64_t run_now = 0;         ///< cases run by this process so far (all phases)
  double seconds = 0;          ///< wall time of this process so far
  double seconds_per_case = 0; ///< mean over the cases this process ran (0 before the first)
  std::string window;          ///< first window the current case serves
  double worst = 0;            ///< largest gated err/tol seen so far (all windows)
  std::string worst_case;      ///< case id of that largest err/tol ("" before the first)
  std::string worst_output;    ///< its output: "y", "rstd", "dx" or "dw" ("" before the first)
};

/// Upper limit of the gate's campaign counts (t_per_window, dense_points,
/// fresh_factor; `--t-per-window`, `--dense-points`, `--fresh-factor` of
/// gate and derive, and ng_gate's fields): about a million T points or seed
/// multiples per window, each at least one case: more than any campaign can
/// run (`gate --plan` sizes one), and far from the int and int64 arithmetic
/// that counts them. check_options (every entry point) refuses more.
inline constexpr int kMaxCampaignCount = 1 << 20;

/// What to gate and how.
struct GateOptions {
  std::string table_path;              ///< route table (TOML)
  std::string base_path;               ///< "" or an older table: gate only changed windows
  std::string seeds = "5x120";         ///< seed-set spelling (seed_set.h): the default set, 9 points
  int t_per_window = 8;                ///< target T points per window (>= 2)
  int dense_points = 16;               ///< dense-grid points each side of the worst T (0: none)
  int64_t dense_step = 64;             ///< dense-grid spacing in rows (>= 1)
  /// Dense grid's seeds: false (default) the worst grid case's family and
  /// seed only; true every (family, seed) of the seed set.
  bool dense_all_seeds = false;
  int fresh_factor = 2;                ///< fresh seeds = factor x per-family seed count (0: none)
  std::string windows;                 ///< window filter ("" = all)
  /// In-process selection on top of `windows` (empty: every window the
  /// filter keeps); `normgate derive` gates only the windows whose winner
  /// lacks a current approval with it.
  std::function<bool(const kernels::Route&)> select;
  std::string journal_path;            ///< "" = no journal
  /// --retry-errors: a case that the journal held only as an error when the
  /// run started (a GPU fault, an out-of-memory, an external that threw)
  /// runs again, once, and its new record, appended, replaces the error
  /// (journal.h resolve_duplicate); an error this run makes is not retried
  /// within it. Off (the default): a journalled error is the case's outcome
  /// on every resume. Not part of the campaign: the same journal resumes
  /// with or without it. The CLI refuses it with --merge (a merge runs no
  /// grid case: retry in the shard, then merge).
  bool retry_errors = false;
  /// When set, the external implementations this gate runs, by name, and no
  /// others (ng_gate's `externals`, which normgate.gate() fills with the
  /// implementations it was given): a gated window routed to an external
  /// not listed, a built-in variant's name, and a listed one the table
  /// routes no window to are input errors before any work (one routed only
  /// in windows --windows leaves out is taken and not run). Unset: any
  /// registered external a gated window routes runs (the CLI, whose
  /// --plugin registers them).
  std::optional<std::vector<std::string>> externals;
  Backend backend = Backend::auto_;    ///< auto: GPU when usable, else CPU models
  bool allow_controls = false;         ///< load tables that route negative controls (explicit override)
  int threads = 0;                     ///< OpenMP threads for run_check (<= 0: default)
  /// GPU backend: the devices the cases' GPU halves are spread over
  /// (validators::run_checks; harness/devices.h parse_devices); empty: every
  /// visible device. Reports do not depend on it.
  std::vector<int> devices;
  std::string normgate_version;        ///< provenance for reports and approvals
  std::string normgate_commit;
  /// Oracle for every case (pipeline.h CheckRequest::oracle): auto (FP64
  /// with MPFR escalation, the default), fp64, or mpfr (small cases only).
  oracle::OracleMode oracle = oracle::OracleMode::auto_;
  std::function<void(const GateProgress&)> progress;  ///< called after every case (may be empty)
  /// Called before a case runs, inside the case's error handling: what it
  /// throws is journalled as that case's error, exactly like a GPU fault
  /// (tests inject faults with it; may be empty).
  std::function<void(const seeds::CaseId&, const std::vector<std::string>& impls)> before_case;
  /// Called after every case is journalled, with the number of cases this
  /// process ran so far; what it throws leaves run_gate (tests simulate a
  /// crash with it; may be empty).
  std::function<void(int64_t cases_run_now)> after_case;
  /// --shard K/N (shard_count 0: not sharded; else 1 <= shard_index <=
  /// shard_count): run only the grid cases of shard K (shard_of), into the
  /// journal (required; its campaign gets "shard": "K/N"), and stop: no
  /// refinement, every window INCOMPLETE (WindowResult::incomplete).
  int shard_index = 0;
  int shard_count = 0;
  /// --merge J...: journals of shards of this campaign (same campaign but
  /// "shard"; one N, each K at most once). Their records are checked (digest,
  /// fields, the plan, the shard of every case) and copied into the journal
  /// (journal_path; in memory when ""), which may hold records already (a
  /// merge resumed); then the grid runs nothing (a grid case no shard holds
  /// is missing: its windows are INCOMPLETE, no refinement), and refinement
  /// (dense grid, fresh seeds) runs for every window whose grid is complete.
  /// Given every shard, the result equals an unsharded run's.
  std::vector<std::string> merge_paths;
};

/// The shard (1..n) that runs the grid case `case_id` under --shard K/n: 1 +
/// (the first 8 bytes of the SHA-256 of the canonical case-id string, read
/// as a big-endian unsigned integer) mod n. A function of the case alone, so
/// every case is in exactly one shard whatever the thread count, the backend
/// or the --windows filter, and cases of every size spread evenly over the
/// shards. Throws std::invalid_argument when n < 1.
int shard_of(std::string_view case_id, int n);

/// Parse "K/N" (decimal integers, 1 <= K <= N <= 65536) into {K, N}. Throws
/// std::invalid_argument naming the value and what is wrong.
std::pair<int, int> parse_shard(std::string_view text);

/// Worst value of one output over a window's cases.
struct OutputAgg {
  double max_ratio = 0;     ///< max err/tol over every element of every case
  std::string worst_case;   ///< case id of that maximum ("" when no case ran)
  int64_t worst_index = -1; ///< flat element index in that case
  double forced = 0;        ///< part of the maximum the interface forces
  int64_t cases_over = 0;   ///< cases where this output does not pass (an element over budget,
                            ///< or, where comparisons are certified, one not certified)
  int64_t cases_inconclusive = 0;  ///< of those, cases with no element over budget: only
                                   ///< uncertified comparisons (the oracle's bound straddles 1)
};

/// One refinement step of a window.
struct PhaseSummary {
  std::vector<int64_t> t;   ///< T values run in this phase
  std::string seeds;        ///< seed-set spelling of this phase ("" when skipped)
  int64_t cases = 0;        ///< cases of this phase (before de-duplication with earlier phases)
  double worst = 0;         ///< largest err/tol of the refinement output in this phase's cases
  std::string worst_output; ///< the refinement output: "dw" (bwd windows) or "rstd" (fwd windows)
  std::string worst_case;   ///< case id of that maximum ("" when no case of the phase ran)
};

/// Verdict and numbers of one window.
struct WindowResult {
  kernels::Route route;            ///< the route (window + variant, file:line)
  std::string impl;                ///< implementation run: the variant (bwd; fwd of a non-default forward:
                                   ///< its own runs), or "any backward run" (fwd of fwd_rowwise)
  std::string fwd;                 ///< the forward variant whose y and rstd the window's cases ran: the
                                   ///< route's variant (fwd), the default forward fwd_rowwise (bwd)
  bool control = false;            ///< the variant is a negative control (routed by override)
  std::vector<int64_t> t_points;   ///< grid T
  int64_t cases = 0;               ///< distinct cases of all phases with a result or an error (not `missing`)
  int64_t errors = 0;              ///< cases that threw
  std::vector<std::string> error_samples;  ///< up to 3 "case id: message"
  std::array<OutputAgg, 4> out{};  ///< y, rstd, dx, dw (dx, dw unused for fwd windows)
  /// Form res windows: h_new, bitwise exact against BF16(x + u), over the
  /// same cases: any difference fails the window. A case whose record lacks
  /// h_new (a journal written before it was recorded) is counted in
  /// h_new_unchecked, and the window is INCOMPLETE unless it fails anyway.
  /// Unused for the other forms.
  OutputAgg h_new;
  int64_t h_new_unchecked = 0;
  /// Of `errors`: cases whose implementation, declared deterministic, gave
  /// different bits on two runs (harness/external.h kNondeterministicError):
  /// a finding, so the window is FAIL, not ERROR, whatever else it holds.
  int64_t nondeterministic = 0;
  /// Of `errors`: cases whose implementation broke the interface (a write
  /// outside an output's view: harness/external.h kContractError), a
  /// finding as well.
  int64_t contract_broken = 0;
  bool gates_h_new() const { return route.form == Form::res; }
  double dw_vs_fp32_worst = 0;     ///< bwd: max over cases of CaseResult::dw_vs_fp32_worst (NaN: none)
  std::string dw_vs_fp32_worst_case;
  double dw_vs_fp32_median = 0;    ///< bwd: median over cases of CaseResult::dw_vs_fp32_median (NaN: none)
  double worst = 0;                ///< largest gated err/tol of the window
  std::string worst_output;        ///< its output
  std::string worst_case;          ///< its case
  /// Per family point (first-seen order): distinct cases, and cases where a
  /// gated output does not pass. `family` is the point's label
  /// (seeds::to_string(FamilyPoint)): the family name, then ",eps=E" /
  /// ",kappa=K" when not the case id defaults (e.g. "cancel,kappa=10000").
  struct FamilyCount {
    std::string family;
    int64_t cases = 0, failed = 0;
  };
  std::vector<FamilyCount> families;
  /// The T of every case that failed the window (an output over budget or
  /// not certified, h_new not bit for bit or not checked) or threw, in
  /// increasing order: where a failure contradicts approvals of narrower or
  /// neighbouring windows (update_approvals). Not in the reports.
  std::vector<int64_t> failed_t;
  /// Conditioning headroom (kappa_headroom(families)): the highest kappa of
  /// seeds::kKappaLevels whose cancel cases, and those of every lower level
  /// run, all pass; 0 when it fails at the lowest level, 1e2; -1 when not
  /// measured: no cancel case at a level ran, or the lowest level run is
  /// above 1e2 and fails.
  double kappa_headroom = -1;
  PhaseSummary grid, dense, fresh;
  /// Cases of other windows' phases inside this window (same H, w, form, T in
  /// range; none of its own), run with this window's variant too and counted
  /// in its verdict (e.g. a forward window's fresh seeds, for the backward
  /// window over the same T). `seeds` is "" (theirs vary).
  PhaseSummary others;
  int64_t dense_center = 0;        ///< T the dense grid is centred on (0: no dense grid)
  std::string fresh_family;        ///< family of the fresh-seed re-run ("" when none)
  int64_t fresh_t = 0;             ///< T of the fresh-seed re-run
  /// Grid cases (and other windows' cases inside it) with no result because
  /// their shard was not run or not merged (--shard, --merge); 0 otherwise.
  int64_t missing = 0;
  /// INCOMPLETE: a shard's window (--shard: grid cases of one shard, no
  /// refinement), or a merged window with missing cases (no refinement)
  /// whose cases so far pass (a merged window whose known cases already
  /// fail, over budget or an error, is FAIL: more cases cannot pass it).
  /// Never passes: pass is false, verdict fail, and the reports say
  /// "incomplete", not "fail".
  bool incomplete = false;
  bool pass = false;
  /// pass; fail (an element over budget, or a case threw); inconclusive (no
  /// failure, but some comparison could not be certified against the
  /// oracle's bound: not approved, re-run with --oracle mpfr on the case).
  Verdict verdict = Verdict::fail;
  /// Outputs gated in this window: 4 (y, rstd, dx, dw) for bwd, 2 (y, rstd) for fwd.
  int gated_outputs() const { return route.op == kernels::Op::bwd ? 4 : 2; }
  /// A negative control that PASSED the window: the window is too easy to
  /// catch the defect the control is built with (e.g. ctl_fp32_seq on
  /// T = 1..3: too few rows for cancellation to cost an FP32 sum anything). The
  /// reports flag it (JSON "control_passed", a Markdown line; `normgate gate`
  /// warns on stderr); the verdict stands.
  bool control_passed() const { return control && pass; }
  /// Failed only because cases could not run (errors: std::bad_alloc, a
  /// CUDA error), none over budget and none missing: no verdict on the
  /// variant. `normgate gate` says ERROR (exit 3) when every failing window
  /// is one (or INCOMPLETE); `normgate derive` stops on one, excluding and
  /// remembering nothing.
  bool errored() const {
    return !pass && !incomplete && errors > 0 && nondeterministic == 0 && contract_broken == 0 && !(worst > 1.0) &&
           h_new.cases_over == 0;
  }
};

/// Everything a gate found.
struct GateResult {
  std::string table_path, table_sha256;
  std::string base_path, base_sha256;  ///< "" without --base
  std::string backend;                 ///< "gpu" or "cpu-model"
  std::string backend_detail;          ///< one sentence for humans (device, or why CPU models)
  kernels::DeviceInfo device;
  std::string seeds;                   ///< canonical seed set
  std::string oracle;                  ///< "auto", "fp64" or "mpfr"
  int t_per_window = 0, dense_points = 0, fresh_factor = 0;
  int64_t dense_step = 0;
  bool dense_all_seeds = false;        ///< GateOptions::dense_all_seeds
  std::string windows_filter;
  bool allow_controls = false;
  std::vector<WindowResult> windows;   ///< gated windows, table order
  std::vector<std::string> skipped;    ///< "FILE:LINE window -> variant" unchanged against --base
  std::vector<std::string> removed;    ///< windows of --base that the table no longer has
  /// --base: windows with the base's bounds and variant, gated because no
  /// current approval (the base's approvals, else the table's own) proves the
  /// variant's sources unchanged: "FILE:LINE window -> variant: why".
  std::vector<std::string> source_changed;
  std::vector<std::string> filtered_out;  ///< windows the filter left out (count only in reports)
  /// External implementations (harness/external.h) the gated windows route,
  /// in window order: what ran and whose code the verdicts are about.
  struct External {
    std::string name, op, origin, ran_on, source_sha256, description;
  };
  std::vector<External> externals;
  std::string shard;                   ///< "K/N" for a --shard run, else ""
  /// --merge: shard count N of the journals merged (0 without --merge), and
  /// the shards of 1..N no journal was given for ("K/N").
  int merged_shard_count = 0;
  std::vector<std::string> shards_missing;
  int64_t cases_total = 0;             ///< distinct (case, implementations) runs of the campaign
  int64_t cases_run_now = 0;           ///< run by this process
  int64_t cases_resumed = 0;           ///< taken from the journal
  int64_t cases_retried = 0;           ///< of cases_run_now: journalled errors run again (retry_errors)
  int64_t journal_dropped_bytes = 0;   ///< torn record dropped on resume (the --journal's own)
  /// --journal: the chain's head when the gate finished (the seal of the
  /// journal's last line, Journal::seals) and the journal's line count,
  /// header included; "" and 0 without a journal. `--approve` puts both in
  /// every record it writes (routing.h, Approval::journal_head).
  std::string journal_head;
  int64_t journal_lines = 0;
  /// --merge: each shard journal whose torn last record was left out, and its
  /// bytes (the shard's file is not changed; that case counts as missing).
  std::vector<std::pair<std::string, int64_t>> shard_dropped;
  std::string date;                    ///< UTC ISO 8601, when the gate finished
  std::string normgate_version, normgate_commit;
  /// How this process's cases ran (not part of the reports: a resumed run
  /// differs). GPU backend: the GPU half of a case overlapped the oracle of
  /// the one before.
  PipelineStats pipeline;
  /// True when every gated window passes; with --base and no changed window
  /// (nothing gated, some skipped) also true.
  bool pass() const;
  /// The run's verdict, as `normgate gate` prints it and the Markdown
  /// report heads it: "PASS" (pass()); "INCOMPLETE" when every window that
  /// does not pass only lacks cases (WindowResult::incomplete); "ERROR" when
  /// every such window is INCOMPLETE or WindowResult::errored() and one is
  /// errored; "FAIL" otherwise (a window over budget outranks both).
  const char* verdict() const;
};

/// The conditioning headroom of a window's family counts (WindowResult::kappa_headroom).
double kappa_headroom(const std::vector<WindowResult::FamilyCount>& families);

/// For a window without a measured headroom (kappa_headroom -1): the lowest
/// cancel kappa level it ran when its cases failed there and no level below
/// it ran (a seed set without the kappa sweep, 3xN: 1e8); 0 otherwise (a
/// measured headroom, or no failing level). The reports list such a window
/// below that level (Markdown "<1e+08 ...", JSON null).
double kappa_failed_below(const WindowResult& w);

/// Run the gate. Throws std::invalid_argument (kernels::RouteTableError
/// included) for input errors: a bad table or base table (FILE:LINE), bad
/// seeds, filter or numeric options, a filter selecting no window, backend
/// gpu without a usable GPU, a journal of another campaign. Case failures
/// and case errors are verdicts, not exceptions. std::runtime_error when the
/// journal cannot be written.
GateResult run_gate(const GateOptions& opt);

/// One window of a gate plan (plan_gate).
struct PlanWindow {
  std::string window;             ///< "FILE:LINE window -> variant"
  std::vector<int64_t> t;         ///< grid T points
  int64_t grid_cases = 0;         ///< grid cases of this window (T points x seed set)
  double grid_elements = 0;       ///< sum over them of rows*H (rows = T*heads)
  int64_t refine_cases_max = 0;   ///< dense grid + fresh seeds, at most (their T follow the grid's worst point)
  double refine_elements_max = 0; ///< their rows*H, at most (every refinement case at the window's upper T)
  /// The largest case the window can run (its last grid case at the
  /// window's upper T, where refinement may go), for the host-memory check
  /// before any work; T = 0 when the window has no grid case.
  seeds::CaseId largest{};
  bool forward = false;  ///< a forward window (its cases check y and rstd only)
  const kernels::Variant* variant = nullptr;  ///< the routed variant (never null in a plan)
};

/// The size of a gate campaign, known before any case runs: which windows,
/// how many cases, how many elements the oracle must check. Cases that
/// several windows share (the det and nondet windows of one (H, w, form, T)
/// run their variants on one generation, one forward and one oracle; forward
/// windows ride on backward runs) count once in the distinct totals.
struct GatePlan {
  std::string table_path, seeds;
  std::vector<PlanWindow> windows;        ///< gated windows, table order
  std::vector<std::string> skipped;       ///< unchanged against --base
  std::vector<std::string> filtered_out;  ///< left out by --windows
  int64_t grid_cases_distinct = 0;        ///< distinct grid case ids over all windows
  double grid_elements_distinct = 0;      ///< their rows*H
  /// Of grid_elements_distinct, those of cases a backward window of the plan
  /// covers (same H, w, form; T inside), which the gate runs in full (dx and
  /// dw checked too), whichever window listed them; the rest are forward-only.
  double grid_elements_distinct_bwd = 0;
  int64_t refine_cases_max = 0;           ///< sum over windows (an upper bound: no sharing assumed)
  double refine_elements_max = 0;
  /// Of refine_elements_max, the backward windows' and the forward windows'
  /// that a backward window of the plan overlaps (same H, w, form).
  double refine_elements_max_bwd = 0;
};

/// The end-to-end gate rates (elements/s) `normgate gate --plan` assumes
/// unless told (--rate, --rate-fwd, --rate-bwd): forward-only and backward
/// windows as measured on the 16-core one-GPU H200 host, `--devices 0,0`
/// (forward 8.9e8-1.09e9, backward 6.58e8-6.65e8: the lower ends, rounded;
/// docs/perf/oracle-and-gate-throughput.md, Current numbers). A host with
/// fewer or slower cores, or the CPU models, runs far slower.
inline constexpr double kPlanRateFwd = 9e8;
inline constexpr double kPlanRateBwd = 6.5e8;

/// Plan a gate without running anything (no GPU, no journal): the same
/// window selection (--base, --windows) and grid T points as run_gate, and
/// upper bounds for the refinement phases, whose T depend on results.
/// Throws std::invalid_argument for the same input errors as run_gate
/// (table, base table, seeds, filter, numeric options).
GatePlan plan_gate(const GateOptions& opt);

/// The plan as Markdown: one row per window (T points, grid cases and
/// elements, refinement bound), totals, and the time the gate needs for the
/// distinct grid and for the refinement bound: forward-only elements at
/// `fwd_per_second`, those of cases a backward window runs at
/// `bwd_per_second` (elements/s end to end, each > 0 and finite; e.g.
/// kPlanRateFwd, kPlanRateBwd). Element counts are plain numbers (%.3g).
/// `fwd_rate_default`, `bwd_rate_default`: that rate is the default
/// (kPlanRateFwd, kPlanRateBwd), not the caller's; where a default prices
/// some of the plan's elements, the text says where the defaults come from
/// and that the CPU models run far slower. Throws std::invalid_argument naming a rate that
/// is not.
std::string format_gate_plan(const GatePlan& p, double fwd_per_second, double bwd_per_second,
                             bool fwd_rate_default = true, bool bwd_rate_default = true);

/// A duration in seconds as the plan prints it: 3 significant digits in
/// h at 3600 s and above, min at 60 s and above, else s; the unit is picked
/// on the value rounded to those digits, so 59.99 s is "1 min", never "60 s".
/// NaN or infinity print as "nan s" / "inf h".
std::string format_plan_duration(double seconds);

/// The Markdown report: header (table, backend, seeds, method, provenance),
/// one row per window (window, variant, max err/tol of y, rstd, dx, dw, dw
/// vs FP32, kappa headroom, worst case, cases, verdict), the conditioning
/// headroom per variant, the closest approach to the budget (with the
/// kernel's excess over the forced part),
/// refinement per window, failures and errors, skipped windows. Deterministic:
/// two runs with the same results differ only in the "date" line.
std::string format_gate_markdown(const GateResult& r);

/// The "format" of gate_to_json's document (core/doc_format.h; fields:
/// docs/schemas.md).
inline constexpr const char* kGateReportFormat = "normgate-gate-report/2";

/// Every number of the result as JSON (non-finite numbers as "inf"/"nan"),
/// with "format" = kGateReportFormat; only the "date" field depends on when
/// it ran.
nlohmann::json gate_to_json(const GateResult& r);

/// The result as JUnit XML for CI systems: <testsuites> holding one
/// <testsuite> named after the table (tests, failures, errors, skipped, time
/// = wall_seconds, timestamp = r.date, and <properties>: table SHA-256,
/// backend, device, seeds, oracle, filter, base, version, commit) with one
/// <testcase> per gated window: classname "normgate.bwd.det",
/// "normgate.bwd.nondet" or "normgate.fwd", name the window and its variant
/// (Route::describe), file its FILE:LINE, time wall_seconds shared out by
/// the windows' case counts (windows share cases: an estimate). A failing
/// window has <failure type="over budget"> whose message names the worst
/// output, err/tol and case; a window whose cases threw has <error
/// type="case error">, an INCONCLUSIVE one <error type="inconclusive">;
/// their text and every testcase's <system-out> list each output's max
/// err/tol, cases over budget and worst case, the families and a repro
/// command. Windows unchanged against --base are <skipped/> testcases of
/// classname "normgate.unchanged". Text is XML-escaped (control characters
/// XML 1.0 cannot carry, and DEL, become the text \xNN). Never throws but
/// std::bad_alloc.
std::string format_gate_junit(const GateResult& r, double wall_seconds);

/// Update approvals `a` from a gate result: every passing non-control window
/// gets a record for (window, backend) replacing older records of that
/// window and backend, with the campaign's strength (Approval::has_strength
/// and the fields after it; dw_vs_fp32_worst from the window); a failing
/// window, and a passing one that `refused` names, loses its records of that
/// backend, and so does every wider record of that backend, variant and
/// source hash that contains it (it approved this window too, and the gate
/// or the policy now says otherwise); records whose window overlaps none of
/// table_routes are removed when remove_unrelated (a record whose window
/// contains a table window approves it: routing.h; one that overlaps is kept
/// for derivations, derive.h; approve() passes the routes of every table
/// sharing the file: routing.h, "Per-GPU tables"). refused: empty, or one entry per
/// r.windows (same order), "" for a window the policy accepts, else why it
/// does not (approval_refusals). Returns one line per change ("approved
/// ...", "revoked ...", "refused ...", "removed ..."). Never throws.
std::vector<std::string> update_approvals(kernels::Approvals& a, const GateResult& r,
                                          const std::vector<kernels::Route>& table_routes,
                                          const std::vector<std::string>& refused = {},
                                          bool remove_unrelated = true);

/// The campaign strength that `opt` asks for, run on backend `resolved`
/// (gpu or cpu; resolve_backend's result): opt.seeds in canonical spelling
/// (as written when it does not parse), t_per_window, dense_points,
/// dense_step, dense_all_seeds, fresh_factor, backend name. Never throws.
kernels::CampaignStrength requested_strength(const GateOptions& opt, Backend resolved);
/// The campaign strength of a finished gate (its seeds, options and backend).
/// Never throws.
kernels::CampaignStrength result_strength(const GateResult& r);

/// The approval policy at `policy_path` (a table's: kernels::policy_path_for;
/// an approvals file's: kernels::policy_path_for_approvals). Throws
/// std::invalid_argument saying that `--approve` needs one, and where to
/// write it, when there is no policy file; kernels::PolicyError when it is
/// invalid or unreadable.
kernels::ApprovalPolicy required_policy(const std::string& policy_path);

/// `gate --approve` before any work: the requested campaign (requested_strength)
/// against the policy minimum at `policy_path` ("" : the policy of
/// opt.table_path, kernels::policy_path_for; `normgate derive` passes its
/// output table's, since it gates candidate tables written elsewhere).
/// Throws std::invalid_argument listing every missing requirement, one per
/// line ("  - seeds 3x1 below the policy minimum 3x16
/// (routes/sm90a.policy.toml:7)", "  - no dense refinement (...)"), when the
/// campaign falls short; as required_policy when the policy is missing or
/// invalid.
void check_approval_request(const GateOptions& opt, Backend resolved, const std::string& policy_path = "");

/// The policy minimum's window requirements on a finished gate: one entry
/// per r.windows, "" when the window may be approved, else why not (today:
/// dw worse than FP32 eager on an FP32-weight backward window, when the
/// policy asks for it). Failing windows and controls get "" (they are not
/// approved anyway). Never throws.
std::vector<std::string> approval_refusals(const kernels::ApprovalPolicy& p, const GateResult& r);

/// `gate --approve`: the table of opt.table_path reloaded (opt.allow_controls)
/// and required to be the one gated (sha256 == r.table_sha256); the policy
/// of the approvals file (required_policy at
/// kernels::policy_path_for_approvals(a.path): the table's policy for a
/// table's approvals) re-checked against the finished campaign
/// (result_strength: every shortfall refuses the whole run) and per window
/// (approval_refusals: such a window is refused, its record of this backend
/// revoked); then, under an exclusive flock(2) on a.path + ".lock", the
/// approvals file reloaded into `a` (keeping what other gates approved
/// meanwhile), updated from `r` (update_approvals) and written atomically
/// (kernels::save_approvals: temp file, then rename) when that changed a
/// byte of it (a run that approves and revokes nothing writes nothing, and
/// creates no file where there was none). `a.path` names the
/// approvals file beside the table, loaded once before the gate ran so that
/// a damaged file is refused before any work. Returns update_approvals'
/// lines. Throws std::invalid_argument when the table no longer loads or
/// changed during the run, or the policy is missing or not met by the
/// campaign (nothing written); kernels::PolicyError when the policy is
/// invalid; kernels::RouteTableError when the approvals file is damaged;
/// std::runtime_error when the lock or the file cannot be written.
/// Before the approvals lock is taken, each window that failed over budget
/// (rejections_of) is remembered in the table's rejections file
/// (kernels::rejections_path_for(opt.table_path), record_rejections, which
/// locks the approvals itself), so an older copy of the approvals file
/// cannot bring back what this gate revokes (`approvals --merge-into`
/// refuses such records, `routes` does not count them); and a passing
/// window that a remembered failure refutes (kernels::Rejection::refutes)
/// is refused, not approved. A rejections file that cannot be read or
/// written is a returned line starting "NOT", not an exception.
std::vector<std::string> approve(kernels::Approvals& a, const GateResult& r, const GateOptions& opt);

/// The rejection records (normgate/routing/rejections.h) that `r` proves:
/// one per window that failed with a case over budget (worst err/tol > 1
/// and a worst case; not a control, not an incomplete window, not a window
/// failed only by errors, nondeterminism or an uncertified case), excluding
/// the worst case's T alone (the whole window when the case id does not
/// parse), gated_T the window, dated r.date, of r.backend. Never throws.
std::vector<kernels::Rejection> rejections_of(const GateResult& r);

}  // namespace normgate::validators
