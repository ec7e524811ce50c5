// apps/cmd_check.cpp: normgate check: cases through implementations, every element validated
// against the FP64 oracle.
#include "commands.h"
#include "normgate/harness/external.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>
#include <nlohmann/json.hpp>
#include "normgate/kernels/device.h"
#include "normgate/kernels/registry.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/family_docs.h"
#include "normgate/seeds/generate.h"
#include "normgate/harness/devices.h"
#include "normgate/harness/pipeline.h"
#include "normgate_version.h"

namespace normgate::app {

namespace {

// Comma-separated items of a grid option (`what`): none empty (a trailing
// comma as well as a doubled one) and none twice (a repeated value would
// run its cases twice and count them twice). Throws std::invalid_argument
// naming the option and the text.
std::vector<std::string> split_commas(const std::string& what, const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (true) {
    const size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (item.empty())
      throw std::invalid_argument(what + " '" + text + "': an empty item (a comma too many)");
    if (std::find(out.begin(), out.end(), item) != out.end())
      throw std::invalid_argument(what + " '" + text + "': '" + item + "' given twice");
    out.push_back(item);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

// Comma-separated integers, each in lo..hi (else std::invalid_argument naming
// `what` and the value).
std::vector<int64_t> parse_int_list(const std::string& what, const std::string& text, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  for (const auto& item : split_commas(what, text)) {
    size_t pos = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos != item.size() || item.empty() || v < lo || v > hi)
      throw std::invalid_argument("bad " + what + " value '" + item + "' in '" + text + "' (an integer in " +
                                  std::to_string(lo) + ".." + std::to_string(hi) + ")");
    if (std::find(out.begin(), out.end(), v) != out.end())  // 64 and 064
      throw std::invalid_argument(what + " '" + text + "': " + std::to_string(v) + " given twice");
    out.push_back(v);
  }
  return out;
}

// The closing line of a `check` that did not pass (exit 1): who did not
// pass, and whether only the negative controls did. Nothing when all passed.
void print_exit_note(const std::vector<std::string>& not_passed) {
  if (not_passed.empty()) return;
  std::string bad, ctl;
  for (const auto& impl : not_passed) {
    // a registry variant marked control ("fp32-baseline" is not in the registry)
    const kernels::Variant* v = kernels::find_variant(impl);
    const bool control = v != nullptr && v->control;
    std::string& list = control ? ctl : bad;
    list += (list.empty() ? "" : ", ") + impl;
  }
  if (bad.empty())
    std::printf("note     exit 1 only because of the negative controls (%s), which are built to fail; "
                "every other implementation passes\n", ctl.c_str());
  else
    std::printf("note     not passed: %s%s\n", bad.c_str(), ctl.empty() ? "" : (" (and the controls " + ctl + ")").c_str());
}

}  // namespace

void add_check(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand("check", "Run cases through implementations and validate every element "
                                          "against the FP64 oracle");
  struct Opts {
    std::string id, backend = "auto", json, md, H, T, w = "bf16,fp32", seeds, forms = "plain";
    std::vector<std::string> impls{"fp32-baseline"};
    int threads = 0;
    bool quiet = false;
    std::string oracle = "auto";
    std::string devices = "all";
    std::string outputs = "all";
    std::vector<std::string> plugins;
  };
  auto o = std::make_shared<Opts>();
  auto* one = sub->add_option("--case", o->id, "One case id, e.g. H=2048,T=65537,w=bf16,form=plain,family=cancel,seed=0");
  auto* grid = sub->add_option("--seeds", o->seeds, "Grid mode: seed set (3x8, seeds=120..239, cancel:0..7); "
                                                   "with --H, --T, --w");
  auto* h_opt = sub->add_option("--H", o->H, "Grid: comma-separated H values, each once");
  auto* t_opt = sub->add_option("--T", o->T, "Grid: comma-separated T values, each once");
  auto* w_opt = sub->add_option("--w", o->w, "Grid: weight dtypes (bf16,fp32)")->capture_default_str();
  auto* form_opt = sub->add_option("--form", o->forms,
                                   "Grid: forms (plain,res,heads24,heads4); head forms take only H=256 from --H")
                       ->capture_default_str();
  // The case id names its H, T, w and form: grid options beside it are
  // refused, not ignored.
  one->excludes(grid)->excludes(h_opt)->excludes(t_opt)->excludes(w_opt)->excludes(form_opt);
  sub->add_option("--impl,--variant", o->impls,
                  "Implementations: fp32-baseline, a variant name (see 'normgate variants': a backward variant runs "
                  "after the default forward fwd_rowwise, a forward variant runs itself, then a carrier backward), "
                  "or all; repeatable")
      ->capture_default_str()
      ->delimiter(',');
  add_backend_option(sub, o->backend, "Where variants run: gpu (CUDA), cpu (their CPU models), auto");
  add_threads_option(sub, o->threads, "OpenMP threads (0: default)");
  add_devices_option(sub, o->devices);
  add_oracle_option(sub, o->oracle,
                    "Reference: auto (FP64; values whose error bound exceeds 1e-3 tol recomputed in MPFR), fp64 "
                    "(no escalation), mpfr (every value in MPFR: small cases only). A comparison the reference's "
                    "bound cannot decide makes the verdict INCONCLUSIVE (exit 1), never a pass");
  sub->add_option("--outputs", o->outputs,
                  "Outputs checked: all, or fwd (y, rstd and h_new only: the oracle skips the backward's "
                  "reference and the FP32 baseline, dx and dw are left out of the report; one --case only)")
      ->check(CLI::IsMember({"all", "fwd"}))
      ->capture_default_str();
  sub->add_option("--json", o->json, "Write every number as JSON to this file (atomically)");
  sub->add_option("--md", o->md, "Grid: write the aggregate table as Markdown to this file (atomically)");
  sub->add_flag("--quiet", o->quiet, "Grid: one line per case instead of full reports");
  add_plugin_option(sub, o->plugins);
  sub->callback([&cmds, o, sub] {
    cmds.run = [o, devices_given = sub->count("--devices") > 0] {
      load_plugins(o->plugins);
      if (!o->id.empty() && !o->md.empty())
        throw std::invalid_argument("--md writes the grid table; with --case use --json");
      {
        std::vector<PathArg> inputs;
        for (const auto& p : o->plugins) inputs.push_back({"--plugin", p});
        check_outputs({{"--json", o->json}, {"--md", o->md}}, inputs);
      }
      if (o->id.empty() && o->outputs != "all")
        throw std::invalid_argument("--outputs " + o->outputs + " checks one --case (a grid's table has every output)");
      if (o->id.empty()) {
        if (o->seeds.empty()) throw std::invalid_argument("give --case ID, or a grid: --seeds is missing");
        if (o->H.empty()) throw std::invalid_argument("grid mode: --H is missing");
        if (o->T.empty()) throw std::invalid_argument("grid mode: --T is missing");
      }
      const auto impls = validators::expand_impls(o->impls);
      // "all" holds controls of one form or H range: each case runs those that support it.
      const bool from_all = std::find(o->impls.begin(), o->impls.end(), "all") != o->impls.end();
      // What the user named besides "all" is not skipped: it must support
      // every case (checked before any work, as without "all").
      std::vector<std::string> named;
      for (const auto& n : o->impls)
        if (n != "all") named.push_back(n);
      if (!named.empty()) named = validators::expand_impls(named);
      const auto backend = validators::resolve_backend(validators::parse_backend(o->backend));
      const std::vector<int> devices = parse_devices_option(o->devices, devices_given, o->backend);
      // The note comes after the arguments are parsed: a bad one is the only output.
      auto note_backend = [&] {
        if (backend == validators::Backend::cpu && (from_all || runs_builtin_variant(impls)))
          std::printf("note     no GPU in use: kernel variants run as their CPU models\n");
      };
      if (!o->id.empty()) {
        validators::CheckRequest req{seeds::parse_case(o->id), impls, backend, o->threads,
                                     oracle::parse_oracle_mode(o->oracle), from_all, o->outputs == "fwd"};
        validators::require_supported({req.id}, named);  // before the note: a refusal is the only output
        require_host_memory({req.id}, impls, o->outputs == "fwd");
        if (from_all)  // what "all" leaves out of this case, and why (also in the report and the JSON)
          for (const auto& impl : impls)
            if (const std::string why = validators::unsupported_reason(impl, req.id); !why.empty())
              std::fprintf(stderr, "%s skipped: %s\n", impl.c_str(), why.c_str());
        note_backend();
        // One case: its GPU half on the first device of the list.
        if (backend == validators::Backend::gpu && !devices.empty()) kernels::use_device(devices.front());
        const ExitGuard exit_guard("the check");
        validators::CheckReport rep;
        try {
          rep = validators::run_check(req);
        } catch (const std::runtime_error& e) {
          // A declared deterministic external whose two runs differ, or one
          // that broke the interface: a finding about it (a gate FAILs its
          // window), not a failed run.
          const std::string what = e.what();
          if (!is_finding(what)) throw;
          std::printf("case     %s\nverdict  FAIL: %s\n", seeds::to_string(req.id).c_str(),
                      printable_line(what).c_str());
          return 1;
        }
        std::fputs(validators::format_report(rep).c_str(), stdout);
        if (!o->json.empty()) write_file_atomic(o->json, json_text(validators::to_json(rep)));
        std::vector<std::string> not_passed;
        for (const auto& ir : rep.impls)
          if (ir.result.verdict() != validators::Verdict::pass) not_passed.push_back(ir.impl);
        print_exit_note(not_passed);
        return rep.pass() ? 0 : 1;
      }
      if (o->seeds.empty() || o->H.empty() || o->T.empty())
        throw std::invalid_argument("give --case ID, or a grid with --seeds, --H and --T");
      validators::Grid g;
      g.H = parse_int_list("--H", o->H, 1, seeds::kMaxH);
      g.T = parse_int_list("--T", o->T, 0, seeds::kMaxT);
      g.w.clear();
      for (auto d : split_commas("--w", o->w)) g.w.push_back(parse_wdtype(d));
      g.forms.clear();
      for (auto f : split_commas("--form", o->forms)) g.forms.push_back(parse_form(f));
      g.seeds = seeds::parse_seed_set(o->seeds);
      const auto cases = g.cases();
      // Before any work: a named implementation must support every case of
      // the grid (exit 2 naming it, its first unsupported case and why);
      // "all" leaves out of each case the implementations that do not
      // support it, said here once per implementation.
      std::vector<validators::GridSkip> skips;
      validators::require_supported(cases, named);
      require_host_memory(cases, impls);
      if (from_all) skips = validators::grid_skips(cases, impls);
      std::string skip_lines;
      for (const auto& sk : skips) {
        const std::string line = sk.impl + " skipped on " + std::to_string(sk.cases) + " of " +
                                 std::to_string(cases.size()) + " cases (first " + sk.first_case + ": " + sk.why + ")";
        std::fprintf(stderr, "%s\n", line.c_str());
        skip_lines += "- " + line + "\n";
      }
      note_backend();
      std::printf("grid     %zu cases x %zu implementations on %s%s\n", cases.size(), impls.size(),
                  std::string(validators::to_string(backend)).c_str(),
                  skips.empty() ? "" : (", " + std::to_string(skips.size()) + " of them skipped on some cases").c_str());
      nlohmann::json all = nlohmann::json::array();
      size_t done = 0;
      const ExitGuard exit_guard("the check");
      // A finding about an external (is_finding) stops the grid at its case:
      // FAIL, exit 1, as a gate fails the window (not "fatal", exit 3).
      std::vector<validators::Aggregate> aggs;
      try {
      aggs = validators::run_campaign(cases, impls, backend, o->threads, [&](const auto& rep) {
        ++done;
        if (o->quiet) {
          double secs = rep.seconds_generate + rep.seconds_oracle;
          for (const auto& ir : rep.impls) secs += ir.seconds_impl + ir.seconds_validate;
          std::printf("[%zu/%zu %.2fs] %s", done, cases.size(), secs, seeds::to_string(rep.request.id).c_str());
          for (const auto& ir : rep.impls) {
            const auto v = ir.result.verdict();
            // dw of an implementation that produced none (an external
            // forward): "-" (get() would throw: it was not validated).
            const auto dw = std::find_if(ir.result.tensors.begin(), ir.result.tensors.end(),
                                         [](const auto& t) { return t.output() == validators::Output::dw; });
            char dwt[32];
            if (dw == ir.result.tensors.end()) std::snprintf(dwt, sizeof dwt, "-");
            else std::snprintf(dwt, sizeof dwt, "%.3g", dw->worst.ratio);
            std::printf("  %s:%s(dw %s)", ir.impl.c_str(),
                        v == validators::Verdict::pass ? "pass" : v == validators::Verdict::fail ? "FAIL" : "INCONCLUSIVE",
                        dwt);
          }
          std::printf("\n");
        } else {
          std::fputs(validators::format_report(rep).c_str(), stdout);
        }
        std::fflush(stdout);
        if (!o->json.empty()) all.push_back(validators::to_json(rep));
      }, oracle::parse_oracle_mode(o->oracle), from_all, devices);
      } catch (const std::runtime_error& e) {
        if (!is_finding(e.what())) throw;
        std::printf("verdict  FAIL: %s\n(the grid stopped at this finding; nothing written)\n",
                    printable_line(e.what()).c_str());
        return 1;
      }
      const auto table = validators::format_aggregates(aggs);
      std::printf("\n%s", table.c_str());
      if (!o->json.empty()) write_file_atomic(o->json, json_text(all, -1));
      if (!o->md.empty()) {  // say where the variants ran: a CPU-model table must not pass for an H200 one
        const std::string where =
            std::string(validators::to_string(backend)) +
            (backend == validators::Backend::gpu ? " (" + kernels::device_info().name + ")"
                                                 : " (CPU models of the variants, NOT the CUDA code)");
        write_file_atomic(o->md, "Grid: " + std::to_string(cases.size()) + " cases x " + std::to_string(impls.size()) +
                                     " implementations; backend " + where + "; normgate " + NORMGATE_VERSION + " (" +
                                     NORMGATE_GIT_COMMIT + ").\n\n" +
                                     (skip_lines.empty() ? std::string()
                                                         : "Left out of the cases they do not support (--variant all):\n\n" +
                                                               skip_lines + "\n") +
                                     table);
      }
      std::vector<std::string> not_passed;
      for (const auto& a : aggs)
        if ((a.failed || a.inconclusive) &&
            std::find(not_passed.begin(), not_passed.end(), a.impl) == not_passed.end())
          not_passed.push_back(a.impl);
      print_exit_note(not_passed);
      return not_passed.empty() ? 0 : 1;
    };
  });
}

}  // namespace normgate::app
