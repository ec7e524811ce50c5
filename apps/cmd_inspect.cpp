// apps/cmd_inspect.cpp: normgate inspect FILE: a normgate HDF5 file summarized, checksums and
// input digest verified.
#include "commands.h"

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "normgate/audit/case_file.h"

namespace normgate::app {

void add_inspect(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand("inspect", "Summarize a normgate HDF5 file (a saved case or exported maps); "
                                            "a saved case's input digest is verified");
  auto path = std::make_shared<std::string>();
  sub->add_option("file", *path, "HDF5 file")->required();
  sub->callback([&cmds, path] {
    cmds.run = [path] {
      try {
        std::fputs(validators::inspect_file(*path).c_str(), stdout);
      } catch (const std::runtime_error& e) {
        throw std::invalid_argument(e.what());  // a missing, corrupted or foreign file: exit 2
      }
      return 0;
    };
  });
}

}  // namespace normgate::app
