// apps/cmd_variants.cpp: normgate variants: the registry, one variant a line
// (with --plugin, the plugins' variants after the built-in ones); with
// --table, each line ends with the variant's standing in that table: the
// windows that route it (and how many lack a current approval), whether it
// is a fallback, and its records in the approvals beside the table
// (current, stale, refuted by the rejections file, invalid), as the
// dispatcher counts them (Dispatcher::from_files).
#include "commands.h"

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "normgate/core/file_target.h"
#include "normgate/kernels/registry.h"
#include "normgate/routing/rejections.h"
#include "normgate/routing/routing.h"

namespace normgate::app {

namespace {

struct Standing {
  int routes = 0, not_current = 0;
  std::vector<std::string> fallback;  // "fwd", "bwd_det", "bwd_nondet"
  int gpu = 0, cpu = 0, stale = 0, refuted = 0, invalid = 0;
};

std::string status_text(const Standing& s) {
  std::string t = "  | routes " + std::to_string(s.routes);
  if (s.not_current > 0) t += " (" + std::to_string(s.not_current) + " not current)";
  for (const auto& f : s.fallback) t += ", fallback " + f;
  t += "; records: current gpu " + std::to_string(s.gpu) + ", cpu-model " + std::to_string(s.cpu) + ", stale " +
       std::to_string(s.stale);
  if (s.refuted > 0) t += ", REFUTED " + std::to_string(s.refuted);
  if (s.invalid > 0) t += ", INVALID " + std::to_string(s.invalid);
  return t;
}

}  // namespace

void add_variants(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand("variants", "List the kernel variants of the registry, one a line");
  auto plugins = std::make_shared<std::vector<std::string>>();
  auto table = std::make_shared<std::string>();
  add_plugin_option(sub, *plugins);
  sub->add_option("--table", *table,
                  "Route table: each line ends with the variant's standing there (windows routing it, how many lack "
                  "a current approval, fallback; its records beside the table: current gpu and cpu-model, stale "
                  "(another source), REFUTED by the rejections file, INVALID), as the dispatcher counts them");
  sub->callback([&cmds, plugins, table] {
    cmds.run = [plugins, table] {
      // The table, its approvals and rejections before any output: a bad
      // one is a usage error (exit 2) naming the file.
      std::map<std::string, Standing> st;
      if (!table->empty())
        if (const std::string why = core::regular_file_problem(*table); !why.empty())
          throw std::invalid_argument("--table " + *table + ": " + why);
      load_plugins(*plugins);
      if (!table->empty()) {
        const kernels::Dispatcher d = [&] {
          try {
            return kernels::Dispatcher::from_files(*table);
          } catch (const kernels::RouteTableError& e) {
            throw std::invalid_argument(std::string("--table: ") + e.what());
          }
        }();
        for (const auto& r : d.table().routes) {
          if (!r.variant) continue;
          Standing& s = st[std::string(r.variant->name)];
          ++s.routes;
          s.not_current += d.approval_of(r).state != kernels::ApprovalState::current;
        }
        const auto& fb = d.table().fallback;
        for (const auto& [name, v] : {std::pair{"fwd", fb.fwd}, std::pair{"bwd_det", fb.bwd_det},
                                      std::pair{"bwd_nondet", fb.bwd_nondet}})
          if (v) st[std::string(v->name)].fallback.push_back(name);
        for (const auto& x : d.approvals().records) {
          Standing& s = st[x.variant];
          const kernels::Variant* v = kernels::find_variant(x.variant);
          if (!x.invalid.empty())
            ++s.invalid;
          else if (!v || x.source_sha256 != v->source_sha256)
            ++s.stale;
          else
            ++(x.backend == kernels::kGpuBackend ? s.gpu : s.cpu);
        }
        for (const auto& [x, why] : d.refuted()) ++st[x.variant].refuted;
        std::printf("table %s\n", printable_line(*table).c_str());
      }
      for (const auto& v : kernels::variants()) {
        std::string line = kernels::describe(v);
        if (!table->empty()) line += status_text(st[std::string(v.name)]);
        std::printf("%s\n", line.c_str());
      }
      // Records naming a variant this build does not have (a plugin not
      // loaded, a renamed or removed variant): said, not dropped.
      std::string unknown;
      for (const auto& [name, s] : st)
        if (!kernels::find_variant(name)) {
          const int n = s.gpu + s.cpu + s.stale + s.refuted + s.invalid;
          unknown += (unknown.empty() ? "" : ", ") + printable_line(name) + " (" + std::to_string(n) + " record" +
                     (n == 1 ? "" : "s") + ")";
        }
      if (!unknown.empty())
        std::printf("records of variants this normgate does not have (not listed above; a plugin not loaded?): %s\n",
                    unknown.c_str());
      return 0;
    };
  });
}

}  // namespace normgate::app
