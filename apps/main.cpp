// normgate: the command-line front end. Thin by design: every subcommand parses
// its arguments, calls one library function and prints its result.
// Exit codes: 0 success / pass, 1 a check or gate failed, 2 usage or input error.
#include <malloc.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "normgate_version.h"

namespace {

// A check or gate case allocates its inputs and downloaded outputs (up to
// ~1.6 GB each at [131072, 6144]) and frees them when the case ends. glibc
// serves such blocks with fresh mmap()s, so every case page-faults and zeroes
// gigabytes again, in the GPU-half thread (dev machine: 8 blocks of 512 MiB
// allocated on a worker thread cost 2.4 s, 0.33 s from one reused heap).
// Keep them in one heap instead: blocks up to 2 GiB from the heap, freed
// memory kept, one arena (a worker thread's own arena cannot hold them).
// NORMGATE_MALLOC_DEFAULTS=1 keeps glibc's defaults.
void keep_large_blocks() {
  const char* keep = std::getenv("NORMGATE_MALLOC_DEFAULTS");
  if (keep != nullptr && std::string(keep) == "1") return;
  mallopt(M_MMAP_THRESHOLD, INT_MAX);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  mallopt(M_ARENA_MAX, 1);
}

}  // namespace

int main(int argc, char** argv) {
  keep_large_blocks();
  CLI::App app{"normgate: RMSNorm training kernels for Hopper and the accuracy gate that checks them"};
  // What this binary was built with: a `pip install .` without nvcc gets the
  // CPU half, and says so here.
#ifdef NORMGATE_KERNELS_HAVE_CUDA
  const std::string built = "CUDA kernels for sm_90a";
#else
  const std::string built = "CPU half: built without CUDA, the variants run as their CPU models";
#endif
  app.set_version_flag("--version", std::string(NORMGATE_VERSION) + " (" + NORMGATE_GIT_COMMIT + "; " + built + ")");
  app.require_subcommand(1);
  normgate::app::Commands cmds;
  normgate::app::register_commands(app, cmds);
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      known += (known.empty() ? "" : ", ") + sub->get_name();
      found = found || sub->get_name() == argv[1];
    }
    if (!found) {
      std::fprintf(stderr, "normgate: error: unknown subcommand '%s' (known: %s; see normgate --help)\n", argv[1],
                   known.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {  // usage error: same prefix and exit code as the commands' own
    std::fprintf(stderr, "normgate: error: %s\nRun with --help for more information.\n", e.what());
    return 2;
  }
  try {
    normgate::app::reject_empty_values(app);
    return cmds.run();
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "normgate: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "normgate: fatal: %s\n", e.what());
    return 3;
  }
}
