// apps/cmd_inspect.cpp: normgate inspect FILE: a normgate HDF5 file summarized, checksums, content
// and input digests verified; --upgrade NEW rewrites a file of an older schema with a content digest.
#include "commands.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "normgate/audit/case_file.h"

namespace normgate::app {

void add_inspect(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand("inspect", "Summarize a normgate HDF5 file (a saved case or exported maps); "
                                            "a saved case's input digest is verified");
  auto path = std::make_shared<std::string>();
  auto upgrade = std::make_shared<std::string>();
  sub->add_option("file", *path, "HDF5 file")->required();
  sub->add_option("--upgrade", *upgrade,
                  "Rewrite FILE, a normgate-case/1 or normgate-maps/1 file (no content digest), as the current "
                  "schema at this path: read with the old schema's checks (Fletcher-32, shapes, inputs SHA-256), "
                  "written with a content digest and /@upgraded saying so. Only for a file whose history you trust "
                  "(e.g. committed): its attributes were covered by no digest before");
  sub->callback([&cmds, path, upgrade] {
    cmds.run = [path, upgrade] {
      if (!upgrade->empty()) {
        // Before any work: exit 2 naming it (a path in /dev or /proc, such as
        // /dev/stdout appended to a log, included: the rename would replace it).
        check_outputs({{"--upgrade", *upgrade}}, {{"file", *path}});
        std::error_code ec;
        if (std::filesystem::exists(*upgrade, ec) && std::filesystem::equivalent(*path, *upgrade, ec))
          throw std::invalid_argument("--upgrade '" + *upgrade + "' is the file being read: give another path");
        std::string schema;
        try {
          schema = validators::upgrade_file(*path, *upgrade);
        } catch (const std::runtime_error& e) {
          // A damaged or foreign input is bad input (exit 2); a failed write names its path (exit 3).
          if (std::string(e.what()).rfind(*upgrade + ":", 0) == 0) throw;
          throw std::invalid_argument(e.what());
        }
        std::printf("upgraded %s -> %s (%s)\n", path->c_str(), upgrade->c_str(), schema.c_str());
        return 0;
      }
      try {
        // Strings from the file (implementation, GPU, paths) may hold control
        // bytes: escaped, never sent to the terminal.
        std::fputs(printable(validators::inspect_file(*path)).c_str(), stdout);
      } catch (const std::runtime_error& e) {
        throw std::invalid_argument(e.what());  // a missing, corrupted or foreign file: exit 2
      }
      return 0;
    };
  });
}

}  // namespace normgate::app
