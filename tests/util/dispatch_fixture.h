// tests/util/dispatch_fixture.h: tests/data/routes/dispatch.toml copied into a
// scratch folder with approvals written beside it (the runtime dispatch's
// tests: tests/routing, tests/capi). Approvals: current (gpu) for every bf16
// window, stale (a foreign source hash) for bwd det fp32, none for bwd nondet
// fp32; optionally the current ones as cpu-model records instead.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "normgate/routing/routing.h"
#include "util/approval_fixture.h"

namespace normgate::test {

struct DispatchFixture {
  std::string dir;    ///< scratch folder (removed by the destructor)
  std::string table;  ///< dir + "/dispatch.toml"

  /// backend: "gpu" or "cpu-model", of the current records.
  explicit DispatchFixture(const std::string& tag, const std::string& backend = "gpu") {
    namespace fs = std::filesystem;
    dir = std::string(NORMGATE_BINARY_DIR) + "/dispatch_fixture_" + tag + "_" + std::to_string(::getpid());
    fs::create_directories(dir);
    table = dir + "/dispatch.toml";
    fs::copy_file(std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/dispatch.toml", table,
                  fs::copy_options::overwrite_existing);
    const kernels::RouteTable t = kernels::load_route_table(table);
    kernels::Approvals a;
    a.path = kernels::approvals_path_for(table);
    for (const kernels::Route& r : t.routes) {
      const bool fp32 = r.w == WDtype::fp32;
      if (fp32 && r.mode == kernels::Mode::nondet) continue;  // missing
      // fp32: stale (a foreign source hash)
      kernels::Approval x = valid_approval(r, fp32 ? std::string(64, 'e') : std::string(), fp32 ? "gpu" : backend);
      a.records.push_back(x);
    }
    kernels::save_approvals(a);
  }
  ~DispatchFixture() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  DispatchFixture(const DispatchFixture&) = delete;
  DispatchFixture& operator=(const DispatchFixture&) = delete;
};

}  // namespace normgate::test
