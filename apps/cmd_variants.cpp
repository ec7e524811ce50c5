// apps/cmd_variants.cpp: normgate variants: the registry, one variant a line.
#include "commands.h"

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
#include "normgate/harness/pipeline.h"
#include "normgate_version.h"

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
