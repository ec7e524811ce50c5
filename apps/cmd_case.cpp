// apps/cmd_case.cpp: normgate case ID: the canonical case id and SHA-256 of its generated inputs.
#include "commands.h"

#include <cstdio>
#include <memory>
#include <string>

#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"

namespace normgate::app {

void add_case(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand("case", "Parse a case id, print its canonical form and the SHA-256 of its inputs");
  auto id = std::make_shared<std::string>();
  auto no_digest = std::make_shared<bool>(false);
  auto threads = std::make_shared<int>(0);
  sub->add_option("id", *id, "Case id, e.g. H=4096,T=65537,w=bf16,form=plain,family=cancel,seed=17")->required();
  sub->add_flag("--no-digest", *no_digest, "Only parse and print; do not generate the inputs");
  add_threads_option(sub, *threads, "OpenMP threads for generation (0: default)");
  sub->callback([&cmds, id, no_digest, threads] {
    cmds.run = [id, no_digest, threads] {
      const auto c = seeds::parse_case(*id);
      // The inputs it generates, before anything is printed: a refusal is
      // the only output, not std::bad_alloc after the case's lines.
      if (!*no_digest) require_host_memory({c}, 0);
      std::printf("case    %s\n", seeds::to_string(c).c_str());
      std::printf("shape   T=%lld rows x H=%lld, %lld normalized rows, weight %s, form %s, eps %g\n",
                  static_cast<long long>(c.T), static_cast<long long>(c.H), static_cast<long long>(c.rows()),
                  std::string(to_string(c.w)).c_str(), std::string(to_string(c.form)).c_str(), c.eps);
      if (*no_digest) return 0;
      const double values = static_cast<double>(c.rows()) * static_cast<double>(c.H) * (c.form == Form::res ? 4 : 2);
      if (values > 1e8)  // large cases take a while on few cores: say so before going quiet
        std::fprintf(stderr, "generating and hashing %.0f M input values on the CPU (--no-digest skips it)...\n",
                     values / 1e6);
      std::fflush(stdout);
      const auto in = seeds::generate_host(c, *threads);
      const auto d = seeds::digest(in);
      std::printf("sha256  x      %s\n        dy     %s\n        w      %s\n", d.x.c_str(), d.dy.c_str(),
                  d.w.c_str());
      if (!d.u.empty()) std::printf("        u      %s\n        dh_new %s\n", d.u.c_str(), d.dh_new.c_str());
      std::printf("        all    %s\n", d.all.c_str());
      return 0;
    };
  });
}

}  // namespace normgate::app
