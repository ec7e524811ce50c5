// apps/cmd_routes.cpp: normgate routes TABLE: a table's routes, their approval state, the
// approval's campaign strength and whether it meets the table's approval policy (minimum and
// target, policy.h), or the dispatcher's pick for a call (--pick).
#include "commands.h"

#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/core/file_target.h"
#include "normgate/routing/dispatch_cache.h"
#include "normgate/routing/policy.h"
#include "normgate/routing/rejections.h"
#include "normgate/routing/routing.h"

namespace normgate::app {

namespace {

// "op=bwd,mode=det,H=2048,w=bf16,T=5000[,form=plain]" -> CallKey. A
// backward call needs its mode (deterministic or not picks different
// routes); a forward call may give one (one forward route serves both).
// Each key at most once.
kernels::CallKey parse_call(const std::string& text) {
  kernels::CallKey k;
  bool have_op = false, have_mode = false, have_h = false, have_w = false, have_t = false;
  std::map<std::string, int> seen;
  std::stringstream ss(text);
  std::string term;
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("--pick '" + text + "': " + why +
                                 " (expected op=fwd|bwd,H=N,w=bf16|fp32,T=N, mode=det|nondet for op=bwd, "
                                 "[form=plain|res|heads24|heads4], e.g. op=bwd,mode=det,H=2048,w=bf16,T=5000)");
  };
  // Decimal digits only (no sign, no spaces), at most 2^63 - 1.
  auto number = [&](const std::string& key, const std::string& v) {
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
      throw bad("bad " + key + " '" + v + "' (decimal digits only)");
    size_t pos = 0;
    long long n = -1;
    try {
      n = std::stoll(v, &pos);
    } catch (const std::exception&) {
      throw bad(key + " '" + v + "' is larger than 2^63 - 1");
    }
    return static_cast<int64_t>(n);
  };
  if (!text.empty() && text.back() == ',') throw bad("a trailing ','");
  while (std::getline(ss, term, ',')) {
    const auto eq = term.find('=');
    if (eq == std::string::npos) throw bad("term '" + term + "' has no '='");
    const std::string key = term.substr(0, eq), v = term.substr(eq + 1);
    if (seen[key]++) throw bad(key + " given twice");
    if (key == "op") {
      if (v != "fwd" && v != "bwd") throw bad("bad op '" + v + "'");
      k.op = v == "fwd" ? kernels::Op::fwd : kernels::Op::bwd;
      have_op = true;
    } else if (key == "mode") {
      if (v != "det" && v != "nondet") throw bad("bad mode '" + v + "'");
      k.mode = v == "det" ? kernels::Mode::det : kernels::Mode::nondet;
      have_mode = true;
    } else if (key == "H") {
      k.H = number(key, v);
      have_h = true;
    } else if (key == "w") {
      try {
        k.w = parse_wdtype(v);
      } catch (const std::invalid_argument& e) {
        throw bad(e.what());
      }
      have_w = true;
    } else if (key == "form") {
      try {
        k.form = parse_form(v);
      } catch (const std::invalid_argument& e) {
        throw bad(e.what());
      }
    } else if (key == "T") {
      k.T = number(key, v);
      have_t = true;
    } else {
      throw bad("unknown key '" + key + "'");
    }
  }
  if (!have_op || !have_h || !have_w || !have_t) throw bad("op, H, w and T are required");
  if (k.op == kernels::Op::bwd && !have_mode)
    throw bad("op=bwd needs mode=det or mode=nondet (deterministic=True or False route differently)");
  if (k.op == kernels::Op::fwd && have_mode)
    throw bad("op=fwd takes no mode (one forward serves both modes)");
  return k;
}

}  // namespace

void add_routes(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand("routes",
                                 "Load a route table (errors name FILE:LINE), list its routes with their approval "
                                 "state, the approving campaign's strength and whether it meets the table's approval "
                                 "policy (minimum and target), or show which variant the dispatcher picks for a call. "
                                 "Exit 1 when a route has no current approval (the dispatcher refuses its calls; "
                                 "not with --allow-unapproved), a current approval is below the policy minimum, "
                                 "the approvals file holds an INVALID record (listed with its reason; it approves "
                                 "nothing) or a --pick is refused or falls back. A record that a failure remembered in "
                                 "the table's rejections file refutes (the same variant, source and backend failed a "
                                 "case over budget at a T inside it) is listed as REFUTED and not counted; a damaged "
                                 "rejections file is exit 2. With --files: the table's file paths as JSON, "
                                 "exit 0, no approval check");
  struct Opts {
    std::string table;
    std::string approvals;  // "": the file next to the table
    std::vector<std::string> picks;
    kernels::DispatchPolicy policy;
    std::vector<std::string> plugins;
    bool files = false;
    std::string gpu;
  };
  auto o = std::make_shared<Opts>();
  sub->add_option("table", o->table, "Route table (TOML)")->required();
  sub->add_flag("--files", o->files,
                "Print, as JSON, the paths of the files that belong to TABLE by name, reading none, and exit 0 "
                "(no approval check): keys table, stem (TABLE's path without .toml and @SLUG), gpu_slug (\"\" for "
                "a base table), approvals, policy, rejections (a per-GPU table STEM@SLUG.toml shares STEM's) and "
                "derive_spec (TABLE with .toml replaced by .derive.toml: a per-GPU table's own). Exit 2, naming it, "
                "for a TABLE not named STEM.toml or STEM@SLUG.toml (a malformed '@' included), a TABLE or --gpu "
                "that is not UTF-8, or any of --pick, --approvals, --plugin, --accept-cpu-model, "
                "--allow-unapproved. The one rule scripts ask instead of restating it (routes.md D26)");
  sub->add_option("--gpu", o->gpu,
                  "With --files: a CUDA device name (e.g. \"NVIDIA H100 80GB HBM3\"); adds gpu_slug_of_device and "
                  "gpu_table, the per-GPU table of that device beside TABLE (STEM@SLUG.toml, whether or not it "
                  "exists) and gpu_table_exists (the only file --files looks at: whether that path is a regular "
                  "file). Exit 2 for a per-GPU TABLE or a NAME with no ASCII letter or digit");
  sub->add_option("--pick", o->picks,
                  "A call to dispatch: op=bwd,mode=det,H=2048,w=bf16,T=5000[,form=plain|res|heads24|heads4] "
                  "(repeatable; per-head forms are rows of 256: H=256). Says what the dispatcher runs for it, as at "
                  "run time without strict mode: the window's variant, or the table's fallback for a call outside "
                  "every window. Exit 1 when a pick is refused (no current approval) or falls back (no approved "
                  "window holds the call)");
  sub->add_option("--approvals", o->approvals,
                  "Approvals file to read instead of the one next to the table (TABLE's stem + "
                  ".approvals.json; a per-GPU table STEM@SLUG.toml's is STEM's), e.g. a derive folder's or a branch's, to see what it would approve; it must "
                  "exist (a missing one: exit 2)");
  sub->add_flag("--accept-cpu-model", o->policy.accept_cpu_model, "Count approvals of CPU-model gates");
  sub->add_flag("--allow-unapproved", o->policy.allow_unapproved,
                "Explicit override: dispatch routes without a current approval");
  add_plugin_option(sub, o->plugins);
  sub->callback([&cmds, o] {
    cmds.run = [o] {
      if (!o->gpu.empty() && !o->files) throw std::invalid_argument("--gpu '" + o->gpu + "' needs --files");
      if (o->files) {
        // What --files does not take (it reads no file and dispatches nothing), named as given.
        if (!o->picks.empty()) throw std::invalid_argument("--files takes no --pick (got '" + printable_line(o->picks[0]) + "')");
        if (!o->approvals.empty())
          throw std::invalid_argument("--files takes no --approvals (got '" + printable_line(o->approvals) + "')");
        if (!o->plugins.empty())
          throw std::invalid_argument("--files takes no --plugin (got '" + printable_line(o->plugins[0]) + "')");
        if (o->policy.accept_cpu_model) throw std::invalid_argument("--files takes no --accept-cpu-model");
        if (o->policy.allow_unapproved) throw std::invalid_argument("--files takes no --allow-unapproved");
        const std::string& t = o->table;
        // JSON text is UTF-8: a path that is not would come back as another
        // path (U+FFFD for its bad bytes), which a script would then use.
        for (const std::string* v : {&o->table, &o->gpu}) {
          try {
            (void)nlohmann::json(*v).dump();
          } catch (const nlohmann::json::exception&) {
            std::string esc;
            for (const unsigned char c : *v) {
              char hex[8];
              std::snprintf(hex, sizeof hex, "\\x%02x", c);
              esc += (c >= 0x80 || c < 0x20 || c == 0x7f) ? std::string(hex) : std::string(1, static_cast<char>(c));
            }
            throw std::invalid_argument(std::string(v == &o->table ? "--files: table '" : "--gpu '") + esc +
                                        "' is not valid UTF-8: JSON cannot carry it");
          }
        }
        if (t.size() <= 5 || t.compare(t.size() - 5, 5, ".toml") != 0 || kernels::table_file_stem(t).empty())
          throw std::invalid_argument("--files: table '" + t + "' is not named STEM.toml or STEM@SLUG.toml");
        const std::string slug = kernels::gpu_table_slug(t);
        const std::string name = std::filesystem::path(t).filename().string();
        if (slug.empty() && name.find('@') != std::string::npos)
          throw std::invalid_argument("--files: table '" + t +
                                      "': a '@' makes it a per-GPU table STEM@SLUG.toml, SLUG lowercase ASCII "
                                      "letters and digits with single '-' between them (gpu_slug)");
        nlohmann::json j;
        j["table"] = t;
        j["stem"] = kernels::table_file_stem(t);
        j["gpu_slug"] = slug;
        j["approvals"] = kernels::approvals_path_for(t);
        j["policy"] = kernels::policy_path_for(t);
        j["rejections"] = kernels::rejections_path_for(t);
        j["derive_spec"] = t.substr(0, t.size() - 5) + ".derive.toml";
        if (!o->gpu.empty()) {
          if (!slug.empty())
            throw std::invalid_argument("--gpu '" + o->gpu + "': table '" + t +
                                        "' is a per-GPU table already; give its base table STEM.toml");
          const std::string gs = kernels::gpu_slug(o->gpu);
          if (gs.empty())
            throw std::invalid_argument("--gpu '" + o->gpu + "': the name holds no ASCII letter or digit");
          const std::string g = kernels::gpu_table_path(t, o->gpu);  // t is a base STEM.toml, gs non-empty
          std::error_code ec;
          j["gpu_slug_of_device"] = gs;
          j["gpu_table"] = g;
          j["gpu_table_exists"] = std::filesystem::is_regular_file(g, ec);
        }
        std::fputs(json_text(j).c_str(), stdout);
        return 0;
      }
      note_not_a_per_gpu_table(o->table);
      load_plugins(o->plugins);
      std::error_code ec;
      if (!o->approvals.empty())
        if (const std::string why = core::regular_file_problem(o->approvals); !why.empty())
          throw std::invalid_argument("--approvals '" + o->approvals + "': " + why);
      const std::string approvals_path = o->approvals.empty() ? kernels::approvals_path_for(o->table) : o->approvals;
      // A missing file next to the table approves nothing (load_approvals).
      const bool approvals_exist = std::filesystem::exists(approvals_path, ec);
      // Records a failure remembered beside the table refutes (a failed gate
      // --approve or derive, rejections.h; routes.md D28) count for nothing:
      // left out here and listed (after the header, or before the picks), so
      // a hand copy of an older approvals file cannot make a refuted
      // approval current again.
      kernels::Approvals approvals = kernels::load_approvals(approvals_path);
      const size_t records_on_file = approvals.records.size();
      std::vector<std::string> refuted_lines;
      const std::string rej_path = kernels::rejections_path_for(o->table);
      kernels::Rejections rej;
      {
        try {
          rej = kernels::load_rejections(rej_path);
        } catch (const std::exception& e) {
          throw std::invalid_argument("the rejections file beside the table cannot be read, so the approvals its "
                                      "failures refute cannot be told (docs/perf/routes.md D28): " +
                                      std::string(e.what()));
        }
        for (const auto& [x, why] : kernels::take_refuted(approvals, rej))
          refuted_lines.push_back("REFUTED   " + x.backend + " approval of " + printable_line(x.window()) + " -> " +
                                  x.variant + ", not counted: " + why);
      }
      auto print_refuted = [&refuted_lines] {
        for (const auto& l : refuted_lines) std::printf("%s\n", l.c_str());
      };
      // A remembered failure of a route's variant (this build's source) at a
      // T inside its window: no gate of that source approves the window
      // (gate --approve refuses it), so the route needs another variant or a
      // changed source. "" when none.
      auto failed_inside = [&](const kernels::Route& r) -> std::string {
        if (const kernels::Rejection* q = kernels::failure_inside(rej, r, true))
          return "    failed: " + std::string(r.variant->name) + " (this source) failed a " + q->backend +
                   " gate at " + printable_line(q->window()) + " (case " + q->worst_case + ", remembered in " +
                   printable_line(rej.path) + "): no gate of this source approves the window; route another "
                   "variant there, or change its source";
        return {};
      };
      const kernels::Dispatcher d(kernels::load_route_table(o->table), std::move(approvals), o->policy);
      if (o->picks.empty()) {
        const size_t n_invalid = kernels::invalid_count(d.approvals());
        // `normgate approvals` counts records INVALID only for want of a
        // seal apart ("without record_sha256"): said here too.
        auto unsealed_note = [&d]() -> std::string {
          size_t n = 0;
          for (const auto& x : d.approvals().records) n += x.unsealed;
          return n ? ", " + std::to_string(n) + " of them only for want of record_sha256 (normgate approvals)" : "";
        };
        const std::string what =
            approvals_exist ? std::to_string(records_on_file) + " records" +
                                  (refuted_lines.empty() ? std::string()
                                                         : ", " + std::to_string(refuted_lines.size()) +
                                                               " REFUTED by a remembered failure, not counted") +
                                  (n_invalid ? ", " + std::to_string(n_invalid) + " INVALID" + unsealed_note()
                                             : std::string())
                            : std::string("no such file: no route is approved");
        // The policy is read before anything is printed: a bad one is the
        // only output (exit 2), not the table's lines and then an error.
        const std::string policy_path = kernels::policy_path_for(o->table);
        const auto policy = kernels::load_policy(policy_path);
        std::printf("table     %s (%zu routes, arch %s, sha256 %s)\napprovals %s (%s)\n", printable_line(o->table).c_str(),
                    d.table().routes.size(), d.table().arch.c_str(), d.table().sha256.substr(0, 12).c_str(),
                    printable_line(d.approvals().path).c_str(), what.c_str());
        if (!rej.records.empty())
          std::printf("rejections %s (%zu remembered failures)\n", printable_line(rej.path).c_str(), rej.records.size());
        if (!policy) {
          std::printf("policy    no policy (%s does not exist): strength listed without a policy check; "
                      "`gate --approve` refuses until one is written\n",
                      printable_line(policy_path).c_str());
        } else {
          auto level = [](const kernels::PolicyLevel& L) {
            return (L.name.empty() ? std::string() : "\"" + L.name + "\": ") + L.describe();
          };
          std::printf("policy    %s\n  minimum %s\n  target  %s\n", printable_line(policy->path).c_str(),
                      printable(level(policy->minimum)).c_str(),
                      policy->target ? printable(level(*policy->target)).c_str() : "none");
        }
        print_refuted();
        std::map<std::string, int> states;  // approval state -> routes, for the closing count
        // A policy verdict's shortfalls are the same sentence on most routes
        // (every approval of one campaign misses the target the same way):
        // each distinct one is printed once at the end as P1, P2, ... and
        // the routes cite it.
        std::vector<std::pair<std::string, int>> shortfalls;  // text, routes citing it
        auto cite = [&shortfalls](const std::vector<std::string>& miss) {
          std::string text;
          for (size_t i = 0; i < miss.size(); ++i) text += (i ? "; " : "") + miss[i];
          for (size_t i = 0; i < shortfalls.size(); ++i)
            if (shortfalls[i].first == text) {
              ++shortfalls[i].second;
              return "P" + std::to_string(i + 1);
            }
          shortfalls.emplace_back(text, 1);
          return "P" + std::to_string(shortfalls.size());
        };
        auto verdict = [&cite](const std::vector<std::string>& miss) {
          return miss.empty() ? std::string("met") : "NOT met (" + cite(miss) + ")";
        };
        int current = 0, meet_min = 0, meet_target = 0, refused = 0, cpu_only = 0, no_h_new = 0;
        for (const auto& r : d.table().routes) {
          const auto s = kernels::approval_status(r, d.approvals(), o->policy.accept_cpu_model);
          // A current form res approval resting on a record whose gate did
          // not check h_new (Approval::h_new_gated; any part of it).
          no_h_new += s.state == kernels::ApprovalState::current && !s.h_new_gated();
          std::printf("%s  %s  [%s] %s\n", printable_line(r.where()).c_str(), printable_line(r.describe()).c_str(),
                      std::string(kernels::to_string(s.state)).c_str(), printable_line(s.detail).c_str());
          if (s.state != kernels::ApprovalState::current)
            if (const std::string f = failed_inside(r); !f.empty()) std::printf("%s\n", f.c_str());
          ++states[std::string(kernels::to_string(s.state))];
          const bool cur = s.state == kernels::ApprovalState::current;
          current += cur;
          refused += !cur;
          cpu_only += s.state == kernels::ApprovalState::cpu_model_only;
          if (!s.record) continue;
          std::printf("    strength: %s\n", kernels::describe_strength(*s.record).c_str());
          if (!policy) continue;
          // Every record the approval rests on (a window approved as parts
          // meets a level only where each part does).
          const auto min_miss = policy->minimum.status_shortfalls(s);
          meet_min += cur && min_miss.empty();
          std::string line = "    policy: minimum " + verdict(min_miss);
          if (policy->target) {
            const auto tgt_miss = policy->target->status_shortfalls(s);
            meet_target += cur && tgt_miss.empty();
            line += ", target " + verdict(tgt_miss);
          }
          // A record that does not approve the route (CPU-model only without
          // --accept-cpu-model, stale) is measured but not counted.
          if (!cur) line += " (not counted: " + std::string(kernels::to_string(s.state)) + ")";
          std::printf("%s\n", line.c_str());
        }
        for (size_t i = 0; i < shortfalls.size(); ++i)
          std::printf("P%zu        %s (%d route%s)\n", i + 1, shortfalls[i].first.c_str(), shortfalls[i].second,
                      shortfalls[i].second == 1 ? "" : "s");
        std::string count;
        for (const auto& [state, n] : states) count += (count.empty() ? "" : ", ") + std::to_string(n) + " " + state;
        std::printf("routes    %zu: %s\n", d.table().routes.size(), count.empty() ? "none" : count.c_str());
        auto meet = [](int n) { return std::to_string(n) + (n == 1 ? " meets" : " meet"); };
        if (policy)
          std::printf("strength  of %d current approval%s: %s the policy minimum, %s\n", current,
                      current == 1 ? "" : "s", meet(meet_min).c_str(),
                      policy->target ? (meet(meet_target) + " the target").c_str() : "no target");
        if (no_h_new)
          std::printf("h_new     %d current form res approval%s rest%s on a gate that did not check h_new (made before "
                      "it was gated): `gate --base` gates %s again (docs/schemas.md, Approvals)\n",
                      no_h_new, no_h_new == 1 ? "" : "s", no_h_new == 1 ? "s" : "", no_h_new == 1 ? "its window" : "their windows");
        // Invalid records approve nothing; a file holding one was damaged or
        // written by something other than normgate: exit 1 (README).
        for (const auto& x : d.approvals().records)
          if (!x.invalid.empty()) std::printf("INVALID   %s\n", printable_line(x.invalid).c_str());
        if (n_invalid)
          std::printf("verdict   %zu INVALID record%s in %s: never current, never dispatched (exit 1)\n", n_invalid,
                      n_invalid == 1 ? "" : "s", printable_line(d.approvals().path).c_str());
        // A route without a current approval is one the dispatcher refuses
        // (README, "Approvals"): exit 1, so that a CI step running
        // `normgate routes TABLE` fails on a stale table, unless the
        // override that makes the dispatcher run it anyway is given.
        const size_t n_routes = d.table().routes.size();
        if (refused && !o->policy.allow_unapproved)
          std::printf("verdict   %d of %zu route%s without a current approval%s: the dispatcher refuses %s calls "
                      "(exit 1)\n",
                      refused, n_routes, n_routes == 1 ? "" : "s",
                      cpu_only ? (" (" + std::to_string(cpu_only) +
                                  " approved by CPU-model gates only, not counted without --accept-cpu-model)")
                                     .c_str()
                               : "",
                      refused == 1 ? "its" : "their");
        else if (refused)
          std::printf("verdict   %d of %zu route%s without a current approval, dispatched by explicit override "
                      "(--allow-unapproved)\n",
                      refused, n_routes, n_routes == 1 ? "" : "s");
        // A current approval below the table's policy minimum (the policy was
        // raised after the gate): the dispatcher runs it, but gate --approve
        // would not write it today, so the table does not meet its own rule.
        const int below_min = policy ? current - meet_min : 0;
        if (below_min)
          std::printf("verdict   %d current approval%s below the policy minimum of %s: gate %s windows again "
                      "(exit 1)\n",
                      below_min, below_min == 1 ? "" : "s", policy->path.c_str(), below_min == 1 ? "its" : "their");
        const bool ok = !n_invalid && !(refused && !o->policy.allow_unapproved) && !below_min;
        if (ok && !refused)
          std::printf("verdict   every route current%s\n",
                      policy ? ", every approval at the policy minimum" : " (no policy to check the approvals against)");
        return ok ? 0 : 1;
      }
      // Every --pick parsed, then inspected, before any is answered: a bad
      // one is exit 2 with nothing printed for the others (a call no launch
      // accepts, e.g. H outside 1..16384, a per-head form at H != 256 or
      // T*heads over 2^32, is std::invalid_argument from inspect).
      std::vector<kernels::CallKey> keys;
      for (const auto& text : o->picks) keys.push_back(parse_call(text));
      // What the run-time dispatcher (DispatchCache, not strict) does with
      // each call; its warnings are this listing's lines instead.
      kernels::DispatchCacheOptions copts;
      copts.warn = [](const std::string&) {};
      copts.notice = [](const std::string&) {};
      copts.override_hint = "pass --allow-unapproved (experiments only)";
      const kernels::DispatchCache cache(d, copts);
      std::vector<kernels::Pick> picks;
      for (const auto& key : keys) picks.push_back(cache.inspect(key, false));
      print_refuted();
      int rc = 0;
      for (size_t i = 0; i < keys.size(); ++i) {
        const kernels::CallKey& key = keys[i];
        const kernels::Pick& p = picks[i];
        switch (p.kind) {
          case kernels::PickKind::routed:
          case kernels::PickKind::unapproved:
            std::printf("%s -> %s (route %s, window T=%lld..%lld; approval %s%s)\n", kernels::to_string(key).c_str(),
                        std::string(p.variant->name).c_str(), printable_line(p.route->where()).c_str(),
                        static_cast<long long>(p.route->t_lo), static_cast<long long>(p.route->t_hi),
                        std::string(kernels::to_string(p.state)).c_str(),
                        p.kind == kernels::PickKind::unapproved ? ", dispatched by explicit override" : "");
            // Why: the approval behind the route, as the listing says it.
            std::printf("  %s\n",
                        printable_line(kernels::approval_status(*p.route, d.approvals(), d.policy().accept_cpu_model).detail).c_str());
            if (key.T == 0)
              std::printf("  T = 0: no rows; looked up as T = 1 (RouteTable::find: such a call launches nothing but "
                          "dw = 0)\n");
            break;
          case kernels::PickKind::fallback:
            std::printf("FALLBACK %s -> %s (no window of %s holds the call: the table's fallback runs it, with a "
                        "one-time warning; strict mode refuses it)\n",
                        kernels::to_string(key).c_str(), std::string(p.variant->name).c_str(), printable_line(o->table).c_str());
            rc = 1;
            break;
          default:
            std::printf("REFUSED %s\n", printable_line(p.reason).c_str());
            // A remembered failure inside the window: the gate the reason
            // suggests cannot approve this source there.
            if (p.route)
              if (const std::string f = failed_inside(*p.route); !f.empty()) std::printf("%s\n", f.c_str());
            rc = 1;
            break;
        }
      }
      // The picks' exit status is theirs; a damaged approvals file is still
      // said (the listing exits 1 on it).
      if (const size_t n_invalid = kernels::invalid_count(d.approvals()))
        std::printf("note      %s holds %zu INVALID record%s (they approve nothing; `normgate routes %s` lists "
                    "them and exits 1)\n",
                    printable_line(d.approvals().path).c_str(), n_invalid, n_invalid == 1 ? "" : "s",
                    printable_line(o->table + (o->approvals.empty() ? "" : " --approvals " + o->approvals)).c_str());
      return rc;
    };
  });
}

}  // namespace normgate::app
