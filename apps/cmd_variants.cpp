// apps/cmd_variants.cpp: normgate variants: the registry, one variant a line.
#include "commands.h"

#include <cstdio>

#include "normgate/kernels/registry.h"

namespace normgate::app {

void add_variants(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand("variants", "List the kernel variants of the registry, one a line");
  sub->callback([&cmds] {
    cmds.run = [] {
      for (const auto& v : kernels::variants()) std::printf("%s\n", kernels::describe(v).c_str());
      return 0;
    };
  });
}

}  // namespace normgate::app
