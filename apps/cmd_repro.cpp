// `normgate repro`: re-run one case for one implementation and explain it.
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate/validators/pipeline.h"
#include "normgate/validators/repro.h"

namespace normgate::app {

void add_repro_commands(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand(
      "repro",
      "Re-run one case for one implementation: verdict, the k worst elements of every output, the worst dw "
      "columns' conditioning and top rows, and a command that reproduces it; exit 0 pass, 1 fail/inconclusive");
  struct Opts {
    std::string id, impl, backend = "auto", oracle = "auto";
    int k = 10, threads = 0;
  };
  auto o = std::make_shared<Opts>();
  sub->add_option("case", o->id, "Case id, e.g. 'H=4096,T=16256,w=bf16,form=plain,family=cancel,seed=1'")
      ->required();
  sub->add_option("--variant,--impl", o->impl,
                  "One implementation: a backward variant (normgate variants), controls included, or fp32-baseline")
      ->required();
  sub->add_option("--k", o->k, "Worst elements to list per output")->capture_default_str()->check(CLI::Range(1, 100000));
  sub->add_option("--backend", o->backend, "Where the variant runs: gpu (CUDA), cpu (its CPU model), auto")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}));
  sub->add_option("--oracle", o->oracle, "Reference: auto (FP64, MPFR where FP64 cannot decide), fp64, mpfr (small cases)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "fp64", "mpfr"}));
  sub->add_option("--threads", o->threads, "OpenMP threads (0: default)")->check(CLI::Range(0, 4096));
  sub->callback([&cmds, o] {
    cmds.run = [o] {
      const auto impls = validators::expand_impls({o->impl});
      if (impls.size() != 1) throw std::invalid_argument("--variant must name one implementation, not '" + o->impl + "'");
      const auto backend = validators::resolve_backend(validators::parse_backend(o->backend));
      if (backend == validators::Backend::cpu)
        std::printf("note     no GPU in use: kernel variants run as their CPU models\n");
      const validators::CheckRequest req{seeds::parse_case(o->id), impls, backend, o->threads,
                                         oracle::parse_oracle_mode(o->oracle)};
      const auto r = validators::repro(req, o->k);
      std::fputs(validators::format_repro(r).c_str(), stdout);
      return r.check.pass() ? 0 : 1;
    };
  });
}

}  // namespace normgate::app
