// apps/cmd_variants.cpp: normgate variants: the registry, one variant a line
// (with --plugin, the plugins' variants after the built-in ones).
#include "commands.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "normgate/kernels/registry.h"

namespace normgate::app {

void add_variants(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand("variants", "List the kernel variants of the registry, one a line");
  auto plugins = std::make_shared<std::vector<std::string>>();
  add_plugin_option(sub, *plugins);
  sub->callback([&cmds, plugins] {
    cmds.run = [plugins] {
      load_plugins(*plugins);
      for (const auto& v : kernels::variants()) std::printf("%s\n", kernels::describe(v).c_str());
      return 0;
    };
  });
}

}  // namespace normgate::app
