// apps/cmd_mutate.cpp: normgate mutate: the mutation score of the default
// family set, which family point kills which negative control
// (gate/mutation.h).
#include "commands.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "normgate/gate/mutation.h"

namespace normgate::app {

namespace {

struct MutateOpts {
  std::string seeds = "5x1";
  std::vector<std::string> expect_fail;
  std::string json;
  int threads = 0;
};

}  // namespace

void add_mutate(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand(
      "mutate",
      "Mutation score: run the default families over every negative control (CPU models) and the real variants; "
      "print which family point kills which control");
  auto o = std::make_shared<MutateOpts>();
  sub->add_option("--seeds", o->seeds, "Seed set (5x1: the gate's default points, seed 0)")->capture_default_str();
  sub->add_option("--expect-fail", o->expect_fail,
                  "A real variant expected to fail somewhere (e.g. bwd_fp32_blocked on cancel); repeatable");
  sub->add_option("--json", o->json, "Also write the matrix as JSON (normgate-mutation/1) to this file, - for stdout");
  add_threads_option(sub, o->threads, "OpenMP threads (0: default)");
  sub->callback([&cmds, o] {
    cmds.run = [o] {
      check_outputs({{"--json", o->json}}, {}, true);
      validators::MutationOptions mo;
      mo.seeds = o->seeds;
      mo.expect_fail = o->expect_fail;
      mo.threads = o->threads;
      const int fd = stdout_to_stderr_for({{"--json", o->json}});
      const validators::MutationResult r = [&] {
        const ExitGuard exit_guard("mutate");
        return validators::run_mutation(mo);
      }();
      std::fputs(validators::format_mutation(r).c_str(), stdout);
      std::fflush(stdout);
      write_report(o->json, json_text(validators::to_json(r)), fd);
      return r.pass() ? 0 : 1;
    };
  });
}

}  // namespace normgate::app
