// bench/finish_bench.cpp: where the oracle+validation half of one check
// (validators::finish_check without the kernel) spends its time.
//
// Usage: finish_bench CASE_ID [variant=bwd_det_chunked] [reps=3] [threads=0] [impls=1]
//   e.g. finish_bench H=4096,T=16384,w=bf16,form=plain,family=normal,seed=1
// Inputs from the host generator and the variant's outputs from its CPU model
// (neither timed). Then, `reps` times: the whole CaseOracle (as finish_check
// builds it: form res's expected h_new, then the reference in
// RstdMode::fp64, the ideal kernel in RstdMode::fp32_rounded and the FP32
// baseline's rstd and dw from one Reference::compute_pair), its parts on
// the same Problem (the pair with the baseline; alone:
// the pair, the baseline, and the reference and the ideal each by its own
// Reference::compute, for comparison), and validate_cases of the variant's
// outputs (one implementation). Prints the minimum of each in seconds and the
// oracle+validation total (CaseOracle + validation), the same per element
// (CaseOracle's "rest" is what the pair with the baseline does not do: form
// res's h_new and the Problem; a difference of two minima), then for the fastest
// validation (and the fastest reference, for comparison) the process CPU
// seconds it used (user + system, all threads) and that over its wall time: "cores busy" near the thread count with CPU
// seconds near the 1-thread time says the work is spread evenly and not
// duplicated; CPU seconds growing with threads says each thread got slower
// (clock, SMT siblings, memory); cores busy well under the thread count says
// threads waited (a serial part or imbalance). With impls=N > 1 (5th
// argument), also N distinct implementations (the variant's outputs with one
// element's lowest bit flipped in y, dx (and h_new) per copy, so none is bitwise equal
// to another) validated in one validate_cases sweep (the oracle's y and dx
// rows evaluated once for all) against N sweeps of one: what a caller
// validating several implementations of one case (bench/peers.py) saves by
// batching. Also prints the pair's MPFR escalations (counts, seconds) for each
// RstdMode, so that a slow pair can be told from a pair busy in MPFR. Runs
// with the gate's heap (normgate::core::keep_large_blocks; glibc's defaults
// with NORMGATE_MALLOC_DEFAULTS=1). Asserts nothing.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "normgate/core/host_memory.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/registry.h"
#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"
#include "normgate/validators/check.h"
#include "normgate/validators/stats.h"
#include "normgate/harness/pipeline.h"
#include "cli_args.h"

namespace {

using clk = std::chrono::steady_clock;
double secs(clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); }

// CPU seconds (user + system) of every thread of this process so far.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return s(u.ru_utime) + s(u.ru_stime);
}

namespace cli = normgate::bench_cli;

constexpr const char* kUsage =
    "usage: finish_bench CASE_ID [variant=bwd_det_chunked] [reps=3] [threads=0] [impls=1]\n"
    "  e.g. finish_bench H=4096,T=16384,w=bf16,form=plain,family=normal,seed=1\n"
    "  reps >= 1; threads >= 0 (0: every core); impls >= 1\n";

int bench(const cli::Args& a) {
  // The gate's heap (apps/main.cpp): a case's large blocks (form res's
  // h_new, the inputs) reused by the next instead of faulted in again.
  const bool kept_heap = normgate::core::keep_large_blocks();
  namespace nv = normgate::validators;
  namespace no = normgate::oracle;
  const normgate::seeds::CaseId id =
      cli::as_usage("CASE_ID", [&] { return normgate::seeds::parse_case(a.required(1, "CASE_ID")); });
  const std::string variant = a.has(2) ? a.at(2) : "bwd_det_chunked";
  cli::as_usage("variant", [&] { return &normgate::kernels::variant(variant); });
  const int reps = cli::int_arg(a, 3, "reps", 3, 1);
  const int threads = cli::int_arg(a, 4, "threads", 0, 0);
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  const int impls = cli::int_arg(a, 5, "impls", 1, 1);

  const normgate::seeds::HostInputs in = normgate::seeds::generate_host(id, threads);
  const bool res = id.form == normgate::Form::res;
  std::vector<double> t_co, t_pair, t_fused, t_ref, t_ideal, t_base, t_val, cpu_ref, cpu_val;
  no::Escalations esc_ref, esc_ideal;  // the pair's, last rep (the same every rep)
  normgate::Outputs got;
  double elements = 0;  // rows * cols of the problem (T * heads rows)
  for (int rep = 0; rep < reps; ++rep) {
    auto t0 = clk::now();
    const nv::CaseOracle co(in, no::OracleMode::auto_, threads, false);
    t_co.push_back(secs(t0));
    const no::Problem& p = co.problem;
    elements = static_cast<double>(p.x.rows()) * static_cast<double>(p.x.cols);
    if (rep == 0) {
      const normgate::RowView<uint16_t> u =
          res ? normgate::RowView<uint16_t>::plain(in.u.data(), in.rows, in.cols) : normgate::RowView<uint16_t>{};
      got = normgate::kernels::run_model(normgate::kernels::variant(variant), in.x_view(), p.dy, p.w,
                                         static_cast<float>(id.eps), threads, u, p.dx_add);
    }
    t0 = clk::now();
    {
      const auto r =
          no::Reference::compute_pair(p, nv::oracle_options(no::RstdMode::fp64, no::OracleMode::auto_, threads));
      esc_ref = r.ref.escalations();
      esc_ideal = r.ideal.escalations();
    }
    t_pair.push_back(secs(t0));
    t0 = clk::now();
    {
      normgate::Outputs b;
      const auto r = no::Reference::compute_pair(
          p, nv::oracle_options(no::RstdMode::fp64, no::OracleMode::auto_, threads), &b);
    }
    t_fused.push_back(secs(t0));
    double c0 = cpu_seconds();
    t0 = clk::now();
    { const auto r = no::Reference::compute(p, nv::oracle_options(no::RstdMode::fp64, no::OracleMode::auto_, threads)); }
    t_ref.push_back(secs(t0));
    cpu_ref.push_back(cpu_seconds() - c0);
    t0 = clk::now();
    {
      const auto r =
          no::Reference::compute(p, nv::oracle_options(no::RstdMode::fp32_rounded, no::OracleMode::auto_, threads));
    }
    t_ideal.push_back(secs(t0));
    t0 = clk::now();
    { const auto b = no::fp32_baseline(p, threads, false); }
    t_base.push_back(secs(t0));
    c0 = cpu_seconds();
    t0 = clk::now();
    const auto results = nv::validate_cases(p, std::vector<const normgate::Outputs*>{&got}, co.ref, co.ideal,
                                            &co.baseline, threads, co.h_new_expected);
    t_val.push_back(secs(t0));
    cpu_val.push_back(cpu_seconds() - c0);
  }
  auto mn = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
  std::vector<double> t_batch, t_each;
  if (impls > 1 && !got.y.empty() && !got.dx.empty()) {
    const nv::CaseOracle co(in, no::OracleMode::auto_, threads, false);
    std::vector<normgate::Outputs> copies(static_cast<size_t>(impls), got);
    std::vector<const normgate::Outputs*> ptrs;
    for (size_t k = 0; k < copies.size(); ++k) {
      const size_t at = (k * 7919) % copies[k].y.size();
      copies[k].y[at] ^= 1u;
      copies[k].dx[at] ^= 1u;
      if (!copies[k].h_new.empty()) copies[k].h_new[at] ^= 1u;  // res: h_new distinct too
      ptrs.push_back(&copies[k]);
    }
    for (int rep = 0; rep < reps; ++rep) {
      auto t0 = clk::now();
      { const auto r = nv::validate_cases(co.problem, ptrs, co.ref, co.ideal, &co.baseline, threads, co.h_new_expected); }
      t_batch.push_back(secs(t0));
      t0 = clk::now();
      for (const normgate::Outputs* q : ptrs) {
        const auto r = nv::validate_cases(co.problem, std::vector<const normgate::Outputs*>{q}, co.ref, co.ideal,
                                          &co.baseline, threads, co.h_new_expected);
      }
      t_each.push_back(secs(t0));
    }
  }
  std::printf("finish_bench %s, %s, %d threads (%d cores), min of %d\n", normgate::seeds::to_string(id).c_str(),
              variant.c_str(), nt, omp_get_num_procs(), reps);
  std::printf("heap: %s\n", kept_heap ? "large blocks kept, as the gate's (normgate::core::keep_large_blocks)"
                                       : "glibc's defaults (NORMGATE_MALLOC_DEFAULTS=1)");
#ifdef NORMGATE_NO_AVX512_CLONES
  std::printf("host code: AVX2 and baseline clones only (NORMGATE_HOST_AVX512=OFF)\n");
#else
  std::printf("host code: AVX-512 where the CPU has it (block scan: %s)\n",
              normgate::validators::block_scan_avx512() ? "AVX-512" : "clones");
#endif
  // CaseOracle computes the baseline's rstd and dw in the pair's pass (D22):
  // "pair+baseline" is that pass; "pair" and "baseline" are each alone.
  std::printf("CaseOracle %.3f s (pair+baseline %.3f [alone: pair %.3f, baseline %.3f, ref %.3f, ideal %.3f]) | "
              "validation %.3f s | total %.3f s\n",
              mn(t_co), mn(t_fused), mn(t_pair), mn(t_base), mn(t_ref), mn(t_ideal), mn(t_val), mn(t_co) + mn(t_val));
  if (elements > 0)
    std::printf("ns per element: CaseOracle %.2f = pair+baseline %.2f + rest %.2f (alone: pair %.2f, baseline %.2f, "
                "ref %.2f, ideal %.2f)\n",
                1e9 * mn(t_co) / elements, 1e9 * mn(t_fused) / elements, 1e9 * (mn(t_co) - mn(t_fused)) / elements,
                1e9 * mn(t_pair) / elements, 1e9 * mn(t_base) / elements, 1e9 * mn(t_ref) / elements,
                1e9 * mn(t_ideal) / elements);
  // The pair's MPFR work (Reference::escalations): what of the pair's time
  // is escalation, and how many units it had to spread over the threads.
  for (const auto& [what, e] : {std::pair<const char*, const no::Escalations&>{"reference", esc_ref},
                                std::pair<const char*, const no::Escalations&>{"ideal", esc_ideal}})
    std::printf("pair's %s: MPFR %.3f s: rstd %lld rows, y %lld, dx %lld, rows %lld, dw %lld columns, "
                "unmet %lld, skipped %lld, max bits %d\n",
                what, e.seconds, static_cast<long long>(e.rstd), static_cast<long long>(e.y),
                static_cast<long long>(e.dx), static_cast<long long>(e.rows), static_cast<long long>(e.dw),
                static_cast<long long>(e.unmet), static_cast<long long>(e.skipped), e.max_bits);
  auto cpu_line = [elements](const char* what, const std::vector<double>& t, const std::vector<double>& cpu) {
    const size_t b = static_cast<size_t>(std::min_element(t.begin(), t.end()) - t.begin());
    std::printf("%s CPU %.3f s, %.1f cores busy, %.1f CPU ns per element\n", what, cpu[b],
                t[b] > 0 ? cpu[b] / t[b] : 0.0, elements > 0 ? 1e9 * cpu[b] / elements : 0.0);
  };
  cpu_line("validation", t_val, cpu_val);
  cpu_line("reference", t_ref, cpu_ref);
  if (!t_batch.empty())
    std::printf("%d implementations: one sweep %.3f s, %d sweeps of one %.3f s (%.2fx)\n", impls, mn(t_batch), impls,
                mn(t_each), mn(t_each) / mn(t_batch));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return cli::run_main("finish_bench", kUsage, argc, argv, 5, bench); }
