// apps/cmd_digest.cpp: normgate digest APPROVALS --variant V --out FILE: run
// the campaign of each of V's approvals again (gate.h approval_cases) and
// record a digest of every output of every case (harness/digest.h) instead
// of validating it. Two such files, one from the build an approval was
// gated on and one from a changed build, let `normgate approvals --carry`
// carry the approval over when every output is bit for bit the same
// (docs/perf/routes.md D19).
#include "commands.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/core/file_target.h"
#include "normgate/core/report_util.h"
#include "normgate/gate/gate.h"
#include "normgate/harness/digest.h"
#include "normgate/harness/pipeline.h"
#include "normgate/harness/runner.h"
#include "normgate/kernels/device.h"
#include "normgate/kernels/registry.h"
#include "normgate/routing/routing.h"
#include "normgate/seeds/generate.h"
#include "normgate_version.h"

namespace normgate::app {

namespace {

struct DigestOptions {
  std::string approvals;
  std::vector<std::string> variants;
  std::string as;  // --as W: run the records' campaigns with W instead (approvals --vouch)
  std::string backend = "auto";
  std::string out;
  int threads = 0;
  double deadline = 0;  // seconds; 0: none
  std::string windows;  // gate --windows syntax: only records whose window it selects
  bool this_gpu = false;  // only gpu records gated on the GPU model this runs on
  bool current = false;   // only records keyed to this build's source of their variant
};

int run_digest(const DigestOptions& o) {
  using validators::Backend;
  // Everything checked before any case runs.
  if (o.out == "-") throw std::invalid_argument("--out -: the digests go to a file (written whole, then renamed)");
  check_outputs({{"--out", o.out}}, {{"APPROVALS", o.approvals}});
  if (!(o.deadline >= 0) || !std::isfinite(o.deadline))
    throw std::invalid_argument("--deadline " + std::to_string(o.deadline) + " must be a finite number of seconds >= 0");
  if (const std::string why = core::regular_file_problem(o.approvals); !why.empty())
    throw std::invalid_argument("APPROVALS " + o.approvals + ": " + why);
  const Backend b = validators::resolve_backend(validators::parse_backend(o.backend));
  if (b == Backend::gpu && !kernels::gpu_available())
    throw std::invalid_argument("--backend gpu: no usable CUDA device");
  const std::string backend_name(b == Backend::gpu ? kernels::kGpuBackend : kernels::kCpuModelBackend);
  std::set<std::string> names;
  for (const auto& v : o.variants) {
    const kernels::Variant& var = kernels::variant(v);  // throws, naming an unknown one
    if (var.external) throw std::invalid_argument("--variant " + v + ": an external implementation; digest runs "
                                                  "registered kernel variants only");
    names.insert(std::string(var.name));
  }
  // --as W (docs/perf/routes.md D23): one deterministic variant's records,
  // run by another deterministic variant of the same op.
  const kernels::Variant* as = nullptr;
  if (!o.as.empty()) {
    if (names.size() != 1)
      throw std::invalid_argument("--as " + o.as + ": takes one --variant (the vouching one), got " +
                                  std::to_string(names.size()));
    const kernels::Variant& v = kernels::variant(*names.begin());
    as = &kernels::variant(o.as);  // throws, naming an unknown one
    if (as->name == v.name) throw std::invalid_argument("--as " + o.as + ": the same variant as --variant");
    // Both must serve V's op deterministically (kernels::serve_gap).
    for (const auto& [who, x] : {std::pair{"--variant " + *names.begin(), &v}, std::pair{"--as " + o.as, as}}) {
      if (x->external) throw std::invalid_argument(who + ": an external implementation");
      switch (kernels::serve_gap(*x, v.op, kernels::Mode::det)) {
        case kernels::ServeGap::op:
          throw std::invalid_argument(who + ": a " + std::string(kernels::to_string(x->op)) + " variant, " +
                                      *names.begin() + " is " + std::string(kernels::to_string(v.op)));
        case kernels::ServeGap::control: throw std::invalid_argument(who + ": a negative control");
        case kernels::ServeGap::nondet:
          throw std::invalid_argument(who + ": not deterministic (its bits may differ run to run)");
        default: break;
      }
    }
  }
  const validators::WindowFilter filter = validators::parse_window_filter(o.windows);  // names a bad term
  if (o.this_gpu && b != Backend::gpu)
    throw std::invalid_argument("--this-gpu: selects gpu records by the GPU model they were gated on; it needs "
                                "--backend gpu (or auto on a CUDA machine)");
  const std::string this_gpu = o.this_gpu ? kernels::device_info().name : std::string();
  const kernels::Approvals file = kernels::load_approvals(o.approvals);
  std::vector<const kernels::Approval*> todo;
  size_t invalid = 0, repeated = 0, filtered = 0, other_gpu = 0, stale = 0;
  std::set<std::string> seen;  // a record listed twice is run once
  for (const auto& a : file.records) {
    if (!names.count(a.variant) || a.backend != backend_name) continue;
    if (!filter.terms.empty()) {
      kernels::Route r;  // the record's window as a route, for the filter
      r.op = a.op;
      r.mode = a.mode;
      r.H = a.H;
      r.w = a.w;
      r.form = a.form;
      r.t_lo = a.t_lo;
      r.t_hi = a.t_hi;
      r.variant = kernels::find_variant(a.variant);
      if (!filter.matches(r)) {
        ++filtered;
        continue;
      }
    }
    if (o.this_gpu && a.gpu != this_gpu) {
      ++other_gpu;
      continue;
    }
    if (o.current && a.source_sha256 != kernels::variant(a.variant).source_sha256) {
      ++stale;
      continue;
    }
    if (!a.invalid.empty()) {
      ++invalid;
      continue;
    }
    if (!seen.insert(a.record_sha256).second) {
      ++repeated;
      continue;
    }
    if (const kernels::CallShape shape{a.H, a.w, a.form};
        as && kernels::serve_gap(*as, a.op, kernels::Mode::det, &shape) != kernels::ServeGap::none)
      throw std::invalid_argument("--as " + o.as + ": does not run " + a.window() + " (a record of " + a.variant +
                                  "); nothing was run or written");
    todo.push_back(&a);
  }
  if (todo.empty()) {
    size_t other = 0;  // valid records of these variants on the other backend
    for (const auto& a : file.records)
      other += names.count(a.variant) && a.backend != backend_name && a.invalid.empty() ? 1 : 0;
    const std::string hint =
        other == 0 ? std::string()
                   : "; it holds " + std::to_string(other) + " " +
                         (b == Backend::gpu ? std::string(kernels::kCpuModelBackend) + " ones (--backend cpu)"
                                            : std::string(kernels::kGpuBackend) + " ones (--backend gpu, on a GPU)");
    const std::string left_out =
        (filtered ? ", " + std::to_string(filtered) + " outside --windows" : std::string()) +
        (other_gpu ? ", " + std::to_string(other_gpu) + " gated on another GPU model than " + this_gpu : std::string()) +
        (stale ? ", " + std::to_string(stale) + " of another source (--current)" : std::string());
    throw std::invalid_argument(o.approvals + " holds no valid " + backend_name + " approval of the variants asked for (" +
                                std::to_string(invalid) + " invalid" + left_out + hint + "); nothing was run or written");
  }
  // Every record's cases listed first: a record whose campaign cannot be
  // listed stops the run before any work.
  std::vector<std::vector<seeds::CaseId>> cases;
  size_t total = 0;
  for (const auto* a : todo) {
    cases.push_back(validators::approval_cases(*a));
    total += cases.back().size();
  }
  if (b == Backend::cpu) {  // the host generates every case and runs the models: its memory first
    std::vector<seeds::CaseId> all;
    for (const auto& cs : cases) all.insert(all.end(), cs.begin(), cs.end());
    require_host_memory(all, 1);
  }
  if (invalid > 0) std::printf("note: %zu invalid records of these variants left out\n", invalid);
  if (repeated > 0) std::printf("note: %zu records listed twice in the file, run once\n", repeated);
  if (filtered > 0) std::printf("note: %zu records outside --windows left out\n", filtered);
  if (other_gpu > 0)
    std::printf("note: %zu records gated on another GPU model than %s left out (--this-gpu)\n", other_gpu,
                this_gpu.c_str());
  if (stale > 0) std::printf("note: %zu records of another source than this build's left out (--current)\n", stale);
  std::printf("digest: %zu approvals, %zu cases, backend %s\n", todo.size(), total, backend_name.c_str());
  std::fflush(stdout);

  std::unique_ptr<kernels::ReuseGpuBuffers> keep_gpu;
  if (b == Backend::gpu) keep_gpu = std::make_unique<kernels::ReuseGpuBuffers>();
  nlohmann::json doc;
  doc["format"] = "normgate-digests/2";
  doc["normgate_commit"] = NORMGATE_GIT_COMMIT;
  doc["normgate_version"] = NORMGATE_VERSION;
  doc["date"] = validators::detail::utc_now();
  doc["backend"] = backend_name;
  const kernels::DeviceInfo dev = kernels::device_info();
  doc["gpu"] = b == Backend::gpu ? dev.name : std::string(kernels::kCpuModelBackend);
  doc["driver"] = b == Backend::gpu ? dev.driver : std::string("-");
  doc["approvals_file"] = o.approvals;
  nlohmann::json vs = nlohmann::json::object();
  if (as) {  // the variant that ran, and whose records' campaigns it ran
    vs[std::string(as->name)] = std::string(as->source_sha256);
    doc["ran_as"] = {{*names.begin(), std::string(as->name)}};
  } else {
    for (const auto& n : names) vs[n] = std::string(kernels::variant(n).source_sha256);
  }
  doc["variants"] = vs;
  nlohmann::json entries = nlohmann::json::array();
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&t0] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  size_t done_cases = 0, stopped = 0;
  for (size_t i = 0; i < todo.size(); ++i) {
    const kernels::Approval& a = *todo[i];
    if (o.deadline > 0 && seconds() > o.deadline) {
      stopped = todo.size() - i;
      break;
    }
    const bool fwd_only = a.op == kernels::Op::fwd;
    std::vector<std::string> lines;
    const double s0 = seconds();
    for (const auto& c : cases[i])
      lines.push_back(seeds::to_string(c) + " " +
                      validators::to_string(validators::digest_case(as ? std::string(as->name) : a.variant, c, b,
                                                                    fwd_only, o.threads)));
    done_cases += cases[i].size();
    nlohmann::json e;
    e["record_sha256"] = a.record_sha256;
    e["variant"] = a.variant;
    e["window"] = a.window();
    e["source_sha256"] = a.source_sha256;
    e["approval_cases"] = a.cases;
    e["cases"] = cases[i].size();
    e["lines_sha256"] = validators::digest_lines_sha256(lines);
    e["lines"] = lines;
    entries.push_back(std::move(e));
    const std::string says =
        static_cast<int64_t>(cases[i].size()) == a.cases
            ? std::string()
            : " (the record says " + std::to_string(a.cases) +
                  ": the campaign is rebuilt from its fields, gate.h approval_cases, and its refinement may differ)";
    std::printf("[%zu/%zu] %s -> %s%s: %zu cases%s in %.1f s\n", i + 1, todo.size(), a.window().c_str(),
                a.variant.c_str(), as ? (" run as " + std::string(as->name)).c_str() : "", cases[i].size(),
                says.c_str(), seconds() - s0);
    std::fflush(stdout);
  }
  doc["entries"] = entries;
  doc["file_sha256"] = validators::digests_file_sha256(doc);
  write_file_atomic(o.out, json_text(doc, 1));
  std::printf("wrote %s: %zu approvals, %zu cases in %.1f s%s\n", o.out.c_str(), entries.size(), done_cases, seconds(),
              stopped ? (", " + std::to_string(stopped) + " approvals not reached before --deadline").c_str() : "");
  return stopped > 0 ? 1 : 0;
}

}  // namespace

void add_digest(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand(
      "digest",
      "Run the campaigns of a variant's approvals again and record a digest of every output (no oracle): the "
      "evidence `approvals --carry` needs (docs/perf/routes.md D19), and with --as that `approvals --vouch` "
      "needs (D23). Exit 0 written, 1 written but stopped by "
      "--deadline, 2 usage (nothing run or written), 3 a failure while running");
  auto o = std::make_shared<DigestOptions>();
  sub->add_option("APPROVALS", o->approvals, "Approvals file whose records' campaigns are run")->required();
  sub->add_option("--variant", o->variants, "Variant whose approvals are run (repeatable)")->required();
  sub->add_option("--as", o->as,
                  "Run the campaigns of --variant V's approvals with this variant W of the same op instead; V "
                  "and W deterministic, not controls or external; one --variant; W must run the window of every "
                  "valid record of V on --backend that --windows, --this-gpu and --current keep (stale ones too "
                  "without --current), else exit 2 before any work: the evidence "
                  "`approvals --vouch` needs (docs/perf/routes.md D23)");
  add_backend_option(sub, o->backend, "Where the variants run: gpu (their kernels), cpu (their CPU models), auto");
  sub->add_option("--out", o->out, "The digests file to write (JSON, written whole or not at all)")->required();
  add_threads_option(sub, o->threads, "OpenMP threads for host generation and CPU models (0: default)");
  sub->add_option("--windows", o->windows,
                  "Only the records whose window this selects (gate --windows syntax: op, mode, H, w, form, "
                  "variant, T=N or T=A..B overlapping), e.g. \"form=plain|res|heads4\"; a bad term is exit 2");
  sub->add_flag("--this-gpu", o->this_gpu,
                "Only the gpu records gated on the GPU model this runs on (approvals --carry and --vouch compare "
                "bits on that model only: the others' campaigns would run for nothing)");
  sub->add_flag("--current", o->current,
                "Only the records keyed to this build's source of their variant: what --vouch counts (a carry's "
                "NEW run needs the records of the old source, so not there)");
  sub->add_option("--deadline", o->deadline,
                  "Start no further approval after this many seconds (0: none); the file holds those done, "
                  "and the exit status is 1");
  sub->callback([&cmds, o] { cmds.run = [o] { return run_digest(*o); }; });
}

}  // namespace normgate::app
