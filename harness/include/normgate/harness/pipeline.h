// normgate/harness/pipeline.h: checks end to end: generate a case, run the
// implementations under test, compute the FP64 reference (and the ideal kernel
// for the forced part of each error), validate every element.
//
// The oracle runs once per case and serves every implementation of the check.
#pragma once

#include <cstdint>
#include <functional>
#include <exception>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "normgate/core/uninit.h"
#include "normgate/harness/external.h"
#include "normgate/kernels/registry.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"
#include "normgate/seeds/seed_set.h"
#include "normgate/oracle/reference.h"
#include "normgate/validators/check.h"

namespace normgate::validators {

/// Where kernel variants run: their CUDA code on the GPU, or their CPU models
/// (models.h: the same accumulation structure, step by step). `auto_` picks
/// the GPU when one is available.
enum class Backend : uint8_t { auto_ = 0, cpu = 1, gpu = 2 };
/// "auto", "cpu", "gpu".
std::string_view to_string(Backend b);
/// Parse "auto" | "cpu" | "gpu"; std::invalid_argument naming the bad value.
Backend parse_backend(std::string_view s);

/// The implementations a check may name: "fp32-baseline" (the FP32 eager
/// yardstick, oracle::fp32_baseline) and every kernel variant of the
/// registry, external ones (external.h) included: those run through their
/// own callback, forward and backward in one step. A backward variant runs after the default forward
/// (kernels::default_fwd(), fwd_rowwise); a forward variant runs its own
/// forward, then the case's carrier backward (fwd_carrier) for dx and dw
/// (impl_variants). "all" expands to every backward variant, controls
/// included (external backward implementations too), then every forward
/// variant other than the default (whose y and rstd every backward run
/// already has). Throws std::invalid_argument
/// naming an unknown name and listing the known ones, or for an empty list.
std::vector<std::string> expand_impls(const std::vector<std::string>& names);

/// The backward variant that carries a forward variant's run of case c (the
/// forward runs inside every check): the first non-control backward variant
/// of the registry that supports c's H, weight dtype and form (never an
/// external one). Throws
/// std::invalid_argument naming the case when none does.
std::string fwd_carrier(const seeds::CaseId& c);

/// Why implementation `impl` cannot run case c, or "" when it can: what of
/// the case the variant does not take ("H = 512 outside 256..256", "weight
/// dtype fp32", "form res"), or, for a forward variant, that no backward
/// variant carries the case (fwd_carrier). "fp32-baseline" runs every case.
/// Throws std::invalid_argument for an unknown name.
std::string unsupported_reason(const std::string& impl, const seeds::CaseId& c);

/// The check of a grid before any of its work: every implementation of
/// `impls` (after expand_impls) must support every case of `cases`. Throws
/// std::invalid_argument naming the first implementation (in `impls` order)
/// that does not, its first unsupported case (in `cases` order) and why
/// (unsupported_reason), e.g. "variant fwd_narrow does not support case
/// H=512,...,seed=0 (H = 512 outside 256..256); it does not support 4 of the
/// grid's 8 cases; nothing was run".
void require_supported(const std::vector<seeds::CaseId>& cases, const std::vector<std::string>& impls);

/// An implementation left out of a grid's cases because it does not support
/// them (CheckRequest::skip_unsupported, "all"): how many, the first and why.
struct GridSkip {
  std::string impl;
  int64_t cases = 0;       ///< cases of the grid that leave it out (>= 1)
  std::string first_case;  ///< the first of them (canonical id)
  std::string why;         ///< unsupported_reason at first_case
};
/// The implementations of `impls` that some case of `cases` does not support,
/// in `impls` order (an implementation every case supports is not listed).
/// Throws as unsupported_reason.
std::vector<GridSkip> grid_skips(const std::vector<seeds::CaseId>& cases, const std::vector<std::string>& impls);

/// The two variants one kernel implementation of a check runs on case c.
struct ImplVariants {
  const kernels::Variant* fwd = nullptr;  ///< its forward step: y, rstd (msq, h_new)
  const kernels::Variant* bwd = nullptr;  ///< its backward step: dx, dw
};
/// impl a backward variant B: {default_fwd(), B}; impl a forward variant F:
/// {F, fwd_carrier(c)}; impl an external variant E (external.h): {E, E}
/// (its one step produces every output it produces). Throws std::invalid_argument for "fp32-baseline", an
/// unknown name, or a case no backward variant carries.
ImplVariants impl_variants(const std::string& impl, const seeds::CaseId& c);

struct CheckRequest {
  seeds::CaseId id;
  std::vector<std::string> impls{"fp32-baseline"};  ///< after expand_impls
  Backend backend = Backend::auto_;
  int threads = 0;  ///< OpenMP threads for generator, oracle, validation (<= 0: default)
  /// Oracle: auto (FP64 with MPFR escalation, the default), fp64 (no
  /// escalation), mpfr (everything in MPFR; small cases only, else
  /// run_check throws std::invalid_argument).
  oracle::OracleMode oracle = oracle::OracleMode::auto_;
  /// Leave out the kernel variants that do not support the case (H, weight
  /// dtype, form) instead of refusing the request: for "all" (expand_impls),
  /// whose negative controls include some of one form or H range only.
  /// prepare_check still throws when nothing is left. The implementations
  /// left out are in CheckReport::skipped.
  bool skip_unsupported = false;
  /// Check the forward outputs only: y, rstd (and h_new for form res). On
  /// the GPU the implementations run as always (a backward variant's run
  /// still includes its backward); a CPU model runs its forward only
  /// (kernels::run_model's forward_only). The oracle skips the backward's reference
  /// (oracle::Options::forward_only: no dw column pass), the FP32 baseline is
  /// not computed unless "fp32-baseline" is one of `impls`, and validation
  /// leaves dx and dw out of every CaseResult (dw_vs_fp32 NaN). y, rstd and
  /// h_new are validated to the same statistics, bit for bit, as without it.
  /// On the GPU the backward's dx and dw are not copied back
  /// (kernels::GpuRunOptions::forward_outputs_only), so CheckInternals::outs
  /// holds them empty for GPU variants.
  /// The gate sets it for a case that only forward windows need; `normgate
  /// check --outputs fwd`.
  bool forward_only = false;
};

/// An implementation a check left out (CheckRequest::skip_unsupported) and
/// why: unsupported_reason, e.g. "H = 512 outside 256..256".
struct Skipped {
  std::string impl;
  std::string why;
};

/// One implementation's result on one case.
struct ImplResult {
  std::string impl;
  std::string ran_on;  ///< e.g. "gpu NVIDIA H200", "cpu model", "cpu (FP32 baseline)"
  /// The kernel variants it ran (impl_variants): the forward whose y, rstd
  /// (h_new) and the backward whose dx, dw were checked; "" for fp32-baseline.
  std::string fwd, bwd;
  /// External implementations only: the outputs it left entirely poisoned
  /// (external.h ExternalRun::not_produced). Owed ones are still in `result`
  /// (and fail); dx, dw of a forward implementation are then left out of it.
  std::vector<std::string> not_produced;
  CaseResult result;
  double dw_worst_abs_sum = 0;  ///< sum_r |dy*xhat| of the worst dw column
  double seconds_impl = 0, seconds_validate = 0;
};

/// What a check found, with enough provenance to reproduce it.
struct CheckReport {
  CheckRequest request;  ///< as run: without the implementations in `skipped`
  std::string inputs_from;  ///< "host generator" or "GPU generator"
  std::vector<ImplResult> impls;
  /// The implementations of the request left out because they do not support
  /// the case (CheckRequest::skip_unsupported), in request order; in the
  /// text report ("skipped" lines) and the JSON ("skipped").
  std::vector<Skipped> skipped;
  double seconds_generate = 0, seconds_oracle = 0;
  /// What MPFR escalation did in the reference (RstdMode::fp64: the verdicts)
  /// and in the ideal kernel (RstdMode::fp32_rounded: the forced parts).
  oracle::Escalations escalations_ref{}, escalations_ideal{};
  /// combine() of the implementations' verdicts.
  Verdict verdict() const;
  /// Every implementation passes, every comparison certified.
  bool pass() const;
  /// verdict() == inconclusive: no certain failure, some comparison uncertified.
  bool inconclusive() const { return verdict() == Verdict::inconclusive; }
};

/// Resolve `auto_` to what this process will use (gpu if available).
Backend resolve_backend(Backend b);

/// Run one check. Throws std::invalid_argument for an unknown impl, a case
/// an implementation does not support, or backend gpu without a usable GPU.
/// Equal to finish_check(prepare_check(req)).
CheckReport run_check(const CheckRequest& req);

/// Wall-clock seconds of a check's phases (PipelineStats), each measured on
/// the host around the calls that do the work (no synchronization added that
/// delays anything; runner.h SharedGpuRun):
/// - generation: the case's inputs. Host generator: generate_host. GPU run
///   that generates them: from the run's start until the host saw the device
///   generation finish (device allocation, poison, generation); their copy
///   back is in downloads. GPU generator without a kernel run
///   (generate_inputs_on_gpu), given inputs: that call, the copy of the
///   given inputs.
/// - kernels: the implementations under test. GPU runs: their time less
///   generation and downloads (uploads, poison, forward, backward, the
///   outside-view and dx checks); CPU models (finish_check, ImplResult::ran_on
///   "cpu model..."); external implementations' runs.
/// - downloads: device-to-host copies of inputs and outputs (host time
///   inside them; each starts after a synchronization).
/// - reference: the oracle (CaseOracle: h_new, reference and ideal kernel,
///   FP32 baseline; CheckReport::seconds_oracle).
/// - validation: the validation sweep (sum of ImplResult::seconds_validate).
/// - journal: run_checks' done callback (the gate: journal append and fsync,
///   aggregates, progress).
struct PhaseSeconds {
  double generation = 0, kernels = 0, downloads = 0, reference = 0, validation = 0, journal = 0;
  PhaseSeconds& operator+=(const PhaseSeconds& o);
};

/// The first half of a check: argument checks, the inputs (GPU generator on
/// the GPU backend, host generator otherwise) and, on the GPU backend, every
/// GPU variant's outputs (kernels::run_gpu_shared: one run, one forward, for
/// the backward variants; one more run per forward variant named, that
/// forward then its carrier backward; a model-only negative control
/// (registry.h) has no GPU kernel and runs its CPU model in finish_check, on
/// the same inputs, its ImplResult::ran_on saying so), and every external implementation's
/// run (run_external). No oracle work. Throws as run_check (argument errors,
/// CUDA errors, an external implementation's failure; a Cancelled passes
/// through).
struct PreparedCheck {
  CheckRequest request;  ///< without the implementations in `skipped`
  std::vector<Skipped> skipped;  ///< CheckReport::skipped
  Backend backend = Backend::cpu;  ///< resolved
  seeds::HostInputs inputs;
  std::string inputs_from;
  std::vector<Outputs> gpu_outs;   ///< one per non-baseline impl, in request order (GPU backend);
                                   ///< one kernels::run_gpu_shared per forward variant: only the first
                                   ///< impl of each holds y, rstd (h_new)
  std::vector<size_t> gpu_dx_source;  ///< gpu_outs[k]'s dx is gpu_outs[gpu_dx_source[k]]'s
  std::vector<size_t> gpu_fwd_source; ///< gpu_outs[k]'s y, rstd, h_new are gpu_outs[gpu_fwd_source[k]]'s
  /// One per external implementation of the request, in request order: its
  /// run on `inputs` (run_external), made after the inputs and the GPU runs,
  /// on the thread that prepares the check.
  std::vector<ExternalRun> ext_runs;
  /// seconds_generate: the inputs (GPU backend with GPU variants and no
  /// given inputs: the first part of the GPU run, which generates them in its
  /// own buffers and copies them back: allocation, poison, generation,
  /// download); seconds_gpu: the GPU run (without that first part).
  double seconds_generate = 0, seconds_gpu = 0;
  /// The inputs were copied back by the GPU run (that first part):
  /// finish_check hands their vectors, with the GPU outputs', to
  /// kernels::recycle_host_buffers when it is done with them.
  bool inputs_from_run = false;
  /// This half's phases: generation, kernels (GPU runs, external runs),
  /// downloads; the others stay 0.
  PhaseSeconds phases;
};
PreparedCheck prepare_check(const CheckRequest& req);
/// As above on the caller's inputs instead of the generator's (a saved case);
/// given == nullptr generates. Throws std::invalid_argument when given->id is
/// not req.id.
PreparedCheck prepare_check(const CheckRequest& req, const seeds::HostInputs* given);

/// The oracle's side of one case, computed once and shared by every
/// implementation validated against it (finish_check; the C API's oracle
/// handle, capi/): the expected h_new (form res), the Problem the oracle sees,
/// the reference (RstdMode::fp64) and the ideal kernel (RstdMode::fp32_rounded),
/// both from one oracle::Reference::compute_pair (the bits of two
/// Reference::compute calls), and the FP32 baseline. Its views point into `in`
/// and into h_new_expected: `in` must outlive it, and it is neither copied nor
/// moved.
struct CaseOracle {
  /// Compute everything for inputs `in` with oracle mode `mode` (auto: FP64
  /// with MPFR escalation, as every check) on `threads` OpenMP threads (<= 0:
  /// default; results do not depend on it). Throws std::invalid_argument as
  /// oracle::Reference::compute (e.g. mode mpfr on a large case).
  /// baseline_rows == false: the baseline holds only rstd and dw (enough for
  /// "dw vs FP32"; validating the FP32 baseline itself as an implementation
  /// needs its y and dx).
  /// forward_only: the references in oracle::Options::forward_only (y, rstd
  /// only: their dx and dw accessors throw std::logic_error) and, unless
  /// baseline_rows, no FP32 baseline at all (`baseline` stays empty).
  CaseOracle(const seeds::HostInputs& in, oracle::OracleMode mode, int threads, bool baseline_rows = true,
             bool forward_only = false);
  CaseOracle(const CaseOracle&) = delete;
  CaseOracle& operator=(const CaseOracle&) = delete;

  /// Form res: BF16(h + u) [rows, cols], one rounding of the exact sum
  /// (round_to_bf16 of the double sum, exact for BF16 operands), against
  /// which an h_new is checked bitwise. Empty for the other forms. Written
  /// once, by rows on `threads` threads, without a serial zero-fill first.
  UninitVector<uint16_t> h_new_expected;
  /// x: in.x, or h_new_expected for res; dy, w: the inputs; dx_add: dh_new
  /// for res (the backward output is then dh = dx + dh_new), else none.
  oracle::Problem problem;
  oracle::Reference ref;    ///< RstdMode::fp64: the verdicts
  oracle::Reference ideal;  ///< RstdMode::fp32_rounded: the forced parts
  /// FP32 eager's outputs (dw is the yardstick of dw_vs_fp32); for res also
  /// its h_new, RN_bf16(RN_fp32(h + u)) (the double rounding a kernel must avoid).
  Outputs baseline;
};

/// Every statistic of one tensor's validation as JSON (the per-output object
/// of to_json(CheckReport)): n, over, max_ratio, worst_index and the worst
/// element's got/ref/err/tol/bound/forced, max_forced, max_bound_over_tol,
/// p50/p99 upper bounds, histogram, uncertified, over_certified,
/// least_certain, verdict, pass. Non-finite numbers as "inf"/"nan" strings.
nlohmann::json to_json(const RatioStats& s);

/// What finish_check computed, shown to an inspector before it is freed.
struct CheckInternals {
  const oracle::Problem& problem;
  const oracle::Reference& ref;    ///< RstdMode::fp64
  const oracle::Reference& ideal;  ///< RstdMode::fp32_rounded
  /// One per impl, request order. On the GPU backend only the first GPU
  /// variant's entry is complete (later ones may lack the shared y, rstd, dx:
  /// use refs); a one-implementation check's outs.front() is complete.
  const std::vector<Outputs>& outs;
  const std::vector<OutputsRef>& refs;  ///< every impl's tensors (shared ones point to one copy)
};

/// The second half: oracle (reference, ideal kernel, FP32 baseline), CPU
/// models on the CPU backend, one validation sweep. Consumes `pc`. When
/// `inspect` is given it is called once, after validation, with the oracle and
/// every implementation's outputs (repro.h uses it); what it throws propagates.
/// Last, the GPU variants' BF16 output vectors and, when pc.inputs_from_run,
/// the input vectors go to kernels::recycle_host_buffers (kept for a later
/// case inside a kernels::ReuseHostBuffers scope, else freed).
CheckReport finish_check(PreparedCheck&& pc, const std::function<void(const CheckInternals&)>& inspect = {});

/// Time spent by run_checks (seconds, wall clock), and what it got through.
struct PipelineStats {
  int64_t cases = 0;
  bool overlapped = false;               ///< GPU backend: prepares ran during earlier cases' finish
  /// GPU backend: the device of each prepare worker (run_checks' device
  /// list); empty on the CPU backend.
  std::vector<int> devices;
  double seconds_total = 0;
  double seconds_prepare = 0;            ///< sum of prepare_check times (GPU + generator)
  double seconds_finish = 0;             ///< sum of finish_check times (oracle + validation)
  double seconds_waiting_for_prepare = 0;  ///< finish side idle, waiting for the next prepare
  /// Elements checked: the sum over the cases that gave a report (a case that
  /// threw is not counted) of rows * H of the case (CaseId::rows() * H: the
  /// elements of one [rows, H] tensor such as x; T * H for form plain and
  /// res, T * heads * H for the head forms), once per case however many
  /// implementations it validated.
  int64_t elements = 0;
  /// Per-phase seconds summed over those cases (PhaseSeconds). Phases of
  /// different cases overlap in time (GPU backend), so they may add up to
  /// more than seconds_total.
  PhaseSeconds phases;
  /// Accumulate another run's stats (the gate's phases): counts and seconds
  /// add, overlapped ors, devices are kept when already set.
  PipelineStats& operator+=(const PipelineStats& o);
};

/// Bytes per element of the memory bound the end-to-end rate is compared
/// with: each element's x, dy read and y, dx written once as BF16 (2 bytes
/// each), the least a check of a backward step moves through host memory.
inline constexpr double kBytesPerElement = 8;

/// The host's copy bandwidth (measure_host_copy): bytes copied per second
/// (each byte read once and written once) of the best of `repetitions`
/// copies of `bytes` bytes between two buffers touched beforehand, on
/// `threads` threads.
struct HostCopyBandwidth {
  size_t bytes = 0;
  int repetitions = 0, threads = 0;
  double best_seconds = 0;
  double bytes_per_second = 0;
};
/// Measure it: bytes > 0 (e.g. 1 GiB; allocates twice that), repetitions >=
/// 1, threads <= 0: every core (omp_get_num_procs). Throws
/// std::invalid_argument naming a bad argument, std::bad_alloc.
HostCopyBandwidth measure_host_copy(size_t bytes = size_t{1} << 30, int repetitions = 3, int threads = 0);

/// The "format" of to_json(PipelineStats, ...) (fields: docs/schemas.md).
inline constexpr const char* kPipelineStatsFormat = "normgate-pipeline-stats/1";

/// The stats as JSON: cases, elements (and their definition), devices,
/// seconds, per phase and end to end {seconds, elements_per_second (null
/// when seconds is 0)}, the host copy bandwidth and the end-to-end rate's
/// bytes (kBytesPerElement per element) as a fraction of it.
nlohmann::json to_json(const PipelineStats& st, const HostCopyBandwidth& copy);

/// The same as lines for a summary on stderr (each ends with a newline).
std::string format_pipeline_stats(const PipelineStats& st, const HostCopyBandwidth& copy);

/// Whether run_checks overlaps the two halves on the GPU backend, from
/// NORMGATE_OVERLAP, read at each run_checks call: "0" turns the overlap off
/// (a measurement aid: the GPU half of case i+1 starts only when case i's
/// finish_check has returned, so each half runs with the host to itself and
/// the oracle on every core; the same reports, more wall time); unset, empty
/// or "1": on (the default). Any other value is said once on stderr and taken
/// as "1" (read where failing would stop a gate). Why: the backward gate's
/// reference phase did not speed up with changes that sped up the oracle
/// alone (docs/perf/oracle-and-gate-throughput.md, Open leads); measuring
/// the halves apart tells whether the overlap costs the oracle.
bool pipeline_overlap();

/// Cases run_checks holds in host memory at once (inputs and downloaded
/// outputs), for the checks that refuse a gate before any work when its
/// largest case cannot fit (apps' require_gate_host_memory): on the GPU
/// backend with pipeline_overlap(), the case being finished and one
/// prepared ahead on each of `devices` workers (max(devices, 1) + 1);
/// otherwise 1.
/// Read with pipeline_overlap() at the call, as run_checks reads it.
size_t cases_in_host_memory(bool gpu, size_t devices);

/// Page-locked host memory the GPU backend's downloads stage through: two
/// buffers of 64 MiB, one pair per process (harness/src/host_download.h,
/// kStageBytes), allocated on the first staged download and kept.
inline constexpr uint64_t kPinnedStagingBytes = uint64_t{128} << 20;

/// Run n checks in order, request(i) giving the i-th. On the GPU backend the
/// prepare_check of request i (GPU work) runs on a worker thread for device
/// devices[i % G], G = devices.size() (empty: every visible device, 0..
/// kernels::device_count()-1; harness/devices.h parse_devices reads a list,
/// which may repeat a device: "0,0" is two workers on device 0): the worker
/// calls cudaSetDevice first. Up to G cases are prepared ahead of the one
/// being finished: while finish_check of request i runs (CPU oracle, on G
/// cores fewer when the request leaves threads to the default), the
/// prepares of i+1..i+G run or wait, so at most G+1 cases are in host
/// memory. Cases are finished strictly in order, so the reports and what
/// done() sees do not depend on G. On the CPU backend (no devices) checks
/// run one after the other on the calling thread. done(i, report, error) is
/// called in order i = 0..n-1 from the calling thread, with report ==
/// nullptr and error set when request i threw (argument or CUDA error); an
/// exception thrown by done() ends the run (after the prepares in flight
/// finish) and propagates. request(i) is called once per i, in order (one
/// call returns before the next starts), from the calling thread (i = 0)
/// or a worker. On the GPU backend the GPU runs keep their device buffers
/// from one case to the next (kernels::ReuseGpuBuffers, per device) and reuse
/// the host vectors of finished cases (kernels::ReuseHostBuffers) until
/// run_checks returns. Throws std::invalid_argument, before any work, when a
/// device of the list does not exist (index >= device_count(), or negative)
/// on the GPU backend; the list is ignored on the CPU backend. With
/// pipeline_overlap() false, one case at a time is prepared (each after the
/// previous finish_check), on devices[i % G] as above, and stats.overlapped
/// is false.
PipelineStats run_checks(size_t n, const std::function<CheckRequest(size_t)>& request,
                         const std::function<void(size_t, CheckReport*, std::exception_ptr)>& done,
                         const std::vector<int>& devices = {});

/// One line on the oracle of a report: its mode and what MPFR escalation did
/// in the reference and the ideal kernel.
std::string oracle_line(const CheckReport& rep);

/// Human-readable report: the oracle mode and its escalations, one table per
/// implementation (max err/tol, worst index, over-budget count, forced part,
/// oracle bound/tol, uncertified comparisons), the dw comparison with the FP32
/// baseline, the verdict (PASS, FAIL or INCONCLUSIVE), for each failing output
/// where it fails (index, value, reference, bound) and for each inconclusive
/// output its least certain comparison.
std::string format_report(const CheckReport& rep);

/// The "format" of to_json(CheckReport)'s document (core/doc_format.h;
/// fields: docs/schemas.md). `check --json` of a grid writes a JSON array of
/// such documents.
inline constexpr const char* kCheckReportFormat = "normgate-check-report/2";

/// Every number of the report as JSON (non-finite numbers as strings "inf",
/// "nan"), with "format" = kCheckReportFormat.
nlohmann::json to_json(const CheckReport& rep);

/// A grid of cases: every combination of H, T, weight dtype and (family,
/// seed) of the seed set, form plain, eps default.
struct Grid {
  std::vector<int64_t> H, T;
  std::vector<WDtype> w;
  seeds::SeedSet seeds;
  /// Forms; the head forms (heads24, heads4) take only H = 256 from H (the
  /// other H values apply to plain and res).
  std::vector<Form> forms{Form::plain};
  /// All case ids, in the order form, H, T, w, family, seed (outermost
  /// first). Throws std::invalid_argument naming the form when a head form is
  /// asked for and H has no 256.
  std::vector<seeds::CaseId> cases() const;
};

/// Worst results of one (implementation, family point) over a campaign.
struct Aggregate {
  std::string impl;
  seeds::Family family{};
  std::string point;  ///< the family point's label (seeds::to_string(FamilyPoint): "cancel,kappa=10000")
  double kappa = 0;   ///< cancel at the default eps: its kappa; 0 otherwise
  int64_t cases = 0, failed = 0;
  int64_t inconclusive = 0;                 ///< cases with verdict inconclusive (not counted in failed)
  double max_ratio[kNumOutputs] = {};       ///< max err/tol per output
  std::string worst_case[kNumOutputs];      ///< case id of each max
  double forced_at_worst[kNumOutputs] = {}; ///< forced part at that element
  double dw_vs_fp32_worst = 0;              ///< max over cases
};

/// Run every case of a campaign (the oracle once per case, in mode `oracle`),
/// calling `on_case` after each (for progress lines and journals). Returns one
/// Aggregate per (impl, family point) in impl-major order.
/// skip_unsupported: CheckRequest::skip_unsupported for every case (an
/// implementation that no case supports then has no aggregate; grid_skips
/// says which are left out where); without it every implementation must
/// support every case, checked before any work (require_supported throws).
/// devices: the GPU workers (run_checks).
std::vector<Aggregate> run_campaign(const std::vector<seeds::CaseId>& cases, const std::vector<std::string>& impls,
                                    Backend backend, int threads,
                                    const std::function<void(const CheckReport&)>& on_case,
                                    oracle::OracleMode oracle = oracle::OracleMode::auto_,
                                    bool skip_unsupported = false, const std::vector<int>& devices = {});

/// Markdown table of campaign aggregates (one row per impl and family
/// point), then, for implementations whose grid ran cancel at two or more
/// kappa levels, their conditioning headroom (aggregate_headroom).
std::string format_aggregates(const std::vector<Aggregate>& aggs);

/// The highest of seeds::kKappaLevels at which `impl` passes every cancel
/// case of that level and of every lower level the aggregates hold (0: it
/// fails, or is inconclusive, at 1e2; -1: not measured: no cancel level
/// ran, or it fails at the lowest level run and that is above 1e2).
double aggregate_headroom(const std::vector<Aggregate>& aggs, const std::string& impl);

}  // namespace normgate::validators
