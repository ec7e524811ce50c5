// bench/escalation_bench.cpp: what MPFR escalation costs the oracle, per family.
//
// Usage: escalation_bench [T=131072] [H=6144] [families=normal,llm,cancel] [reps=3] [threads=0]
//   families: comma-separated family names, each optionally with ":kappa=K"
//   (cancel only), e.g. normal,llm,cancel,cancel:kappa=1e12; or ":inject=N"
//   (not a case-id key): the family's inputs, then rows r and r + T/2 made
//   exact partners (x negated, same rstd) and, in the first N columns, given
//   the same dy = +-2^(70..100): those N columns cancel exactly to dw = 0 with
//   sum|dy xhat| ~ 1e34, beyond FP64 (measures the cost of N escalated columns
//   at this shape, RstdTable over all rows included).
// For each family (weight bf16, form plain, seed 0, inputs from the project's
// generator, not timed) the oracle of one case, as `normgate check` runs it
// (Reference in RstdMode::fp64 plus the ideal kernel in RstdMode::fp32_rounded),
// is timed in OracleMode::fp64 (no escalation) and OracleMode::auto_
// (escalation), interleaved `reps` times in ABBA order; the minimum of each is reported with
// the escalation counts per tensor of both references, the escalation rate,
// and the overhead auto/fp64 - 1. Asserts nothing about speed.
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "normgate/core/bf16.h"
#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"
#include "cli_args.h"

namespace {

using clk = std::chrono::steady_clock;
double secs(clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); }
// CPU seconds of the whole process (all threads): less sensitive than wall
// time to other processes on a shared machine.
double cpu_now() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::vector<std::string> split(const std::string& s, char c) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, c))
    if (!item.empty()) out.push_back(item);
  return out;
}

namespace cli = normgate::bench_cli;

constexpr const char* kUsage =
    "usage: escalation_bench [T=131072] [H=6144] [families=normal,llm,cancel] [reps=3] [threads=0]\n"
    "  T in 1..2147483648; H in 1..16384; reps >= 1; threads >= 0 (0: every core)\n"
    "  families: comma-separated family names, each optionally with \":kappa=K\" (cancel only)\n"
    "  or \":inject=N\" (N >= 0 columns cancelling exactly), e.g. normal,llm,cancel:kappa=1e12,normal:inject=64\n";

struct FamilyRun {
  std::string spec;
  normgate::seeds::CaseId c;
  long long inject = 0;
};

int bench(const cli::Args& a) {
  namespace no = normgate::oracle;
  const long long T = cli::int_arg<long long>(a, 1, "T", 131072, 1, normgate::seeds::kMaxT);
  const long long H = cli::int_arg<long long>(a, 2, "H", 6144, 1, normgate::seeds::kMaxH);
  const std::string fams = a.has(3) ? a.at(3) : "normal,llm,cancel";
  const int reps = cli::int_arg(a, 4, "reps", 3, 1);
  const int threads = cli::int_arg(a, 5, "threads", 0, 0);
  std::vector<FamilyRun> runs;  // every family's case id checked before any work
  for (const std::string& spec : split(fams, ',')) {
    std::string id = "H=" + std::to_string(H) + ",T=" + std::to_string(T) + ",w=bf16,form=plain,seed=0,family=";
    const auto parts = split(spec, ':');
    if (parts.empty()) throw cli::UsageError("families: no family name in '" + spec + "'");
    id += parts.at(0);
    long long inject = 0;
    for (size_t i = 1; i < parts.size(); ++i) {
      if (parts[i].rfind("inject=", 0) == 0)
        inject = cli::parse_int<long long>("families: inject", parts[i].substr(7), 0);
      else
        id += "," + parts[i];
    }
    runs.push_back({spec, cli::as_usage("families", [&] { return normgate::seeds::parse_case(id); }), inject});
  }
  if (runs.empty()) throw cli::UsageError("families must name at least one family, got '" + fams + "'");
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  std::printf("escalation_bench: [T=%lld, H=%lld], %d threads (%d cores), min of %d interleaved runs\n", T, H, nt,
              omp_get_num_procs(), reps);
  std::printf("%-22s %9s %9s %8s %9s %9s %8s | %-26s | %-26s | %s\n", "family", "fp64 s", "auto s", "overhead",
              "fp64 cpu", "auto cpu", "cpu ovh", "ref: rstd/y/dx rows, dw", "ideal: rstd/y/dx rows, dw",
              "rate, MPFR s, bits");
  for (const FamilyRun& run : runs) {
    const std::string& spec = run.spec;
    const normgate::seeds::CaseId& c = run.c;
    const long long inject = run.inject;
    normgate::seeds::HostInputs in = normgate::seeds::generate_host(c, nt);
    if (inject > 0) {
      const long long half = T / 2, nc = std::min(inject, H);
      uint64_t st = 0x9E3779B97F4A7C15ull;
      for (long long r = 0; r < half; ++r) {
        uint16_t* x0 = in.x.data() + r * H;
        uint16_t* x1 = in.x.data() + (r + half) * H;
        uint16_t* d0 = in.dy.data() + r * H;
        uint16_t* d1 = in.dy.data() + (r + half) * H;
        for (long long j = 0; j < H; ++j) x1[j] = static_cast<uint16_t>(x0[j] ^ 0x8000u);  // -x: same rstd
        for (long long j = 0; j < nc; ++j) {
          st = st * 6364136223846793005ull + 1442695040888963407ull;
          const int e = 70 + static_cast<int>((st >> 33) % 31);
          const float big = std::ldexp((st >> 63) ? -1.0f : 1.0f, e);
          d0[j] = d1[j] = normgate::bf16_from_float(big);
        }
      }
    }
    const no::Problem p{in.x_view(), in.dy_view(), in.w_view(), c.eps};
    double best[2] = {1e30, 1e30}, best_cpu[2] = {1e30, 1e30};
    no::Escalations er, ei;
    for (int rep = 0; rep < reps; ++rep) {
      for (int kk = 0; kk < 2; ++kk) {
        const int k = (rep % 2 == 0) ? kk : 1 - kk;  // ABBA order: drift hits both modes alike
        const no::OracleMode m = k == 0 ? no::OracleMode::fp64 : no::OracleMode::auto_;
        no::Options o;
        o.threads = nt;
        o.oracle = m;
        const auto t0 = clk::now();
        const double c0 = cpu_now();
        o.rstd = no::RstdMode::fp64;
        const no::Reference ref = no::Reference::compute(p, o);
        o.rstd = no::RstdMode::fp32_rounded;
        const no::Reference ideal = no::Reference::compute(p, o);
        best[k] = std::min(best[k], secs(t0));
        best_cpu[k] = std::min(best_cpu[k], cpu_now() - c0);
        if (k == 1) {
          er = ref.escalations();
          ei = ideal.escalations();
        }
      }
    }
    const double rows = static_cast<double>(c.rows()), cols = static_cast<double>(H);
    const double rate_rows = static_cast<double>(std::max(er.rows, ei.rows)) / rows;
    const double rate_cols = static_cast<double>(std::max(er.dw, ei.dw)) / cols;
    char a[64], b[64];
    std::snprintf(a, sizeof a, "%lld/%lld/%lld, %lld", (long long)er.rstd, (long long)er.y, (long long)er.dx,
                  (long long)er.dw);
    std::snprintf(b, sizeof b, "%lld/%lld/%lld, %lld", (long long)ei.rstd, (long long)ei.y, (long long)ei.dx,
                  (long long)ei.dw);
    std::printf("%-22s %9.3f %9.3f %7.2f%% %9.3f %9.3f %7.2f%% | %-26s | %-26s | rows %.2g, cols %.2g, %.3f s, %d\n",
                spec.c_str(), best[0], best[1], 100.0 * (best[1] / best[0] - 1.0), best_cpu[0], best_cpu[1],
                100.0 * (best_cpu[1] / best_cpu[0] - 1.0), a, b, rate_rows, rate_cols, er.seconds + ei.seconds,
                std::max(er.max_bits, ei.max_bits));
    std::fflush(stdout);
  }
  std::printf("fp64 s / auto s: wall time of Reference::compute in RstdMode::fp64 + RstdMode::fp32_rounded (the\n"
              "oracle part of one check, FP32 baseline excluded), OracleMode::fp64 vs auto; overhead = auto/fp64 - 1;\n"
              "cpu: the same in process CPU seconds (all threads); rate = escalated rows / rows and dw columns /\n"
              "columns (max of the two references); MPFR s = Escalations::seconds of both references.\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return cli::run_main("escalation_bench", kUsage, argc, argv, 5, bench); }
