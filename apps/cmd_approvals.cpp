// apps/cmd_approvals.cpp: normgate approvals FILE...: check approvals files
// record by record (routing.h, "Validation"), and --seal: give every record
// written before records carried digests its record_sha256, only when every
// record of every file passes every other check (all files written or none).
#include "commands.h"


#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "normgate/routing/routing.h"

namespace normgate::app {

void add_approvals(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand(
      "approvals",
      "Check approvals files record by record (routing/include/normgate/routing/routing.h, \"Validation\": fields, "
      "ranges, record_sha256): exit 0 when every record is valid, 1 when one is INVALID (each listed with its "
      "reason). --seal adds record_sha256 to records written before records carried it");
  struct Opts {
    std::vector<std::string> files;
    bool seal = false;
  };
  auto o = std::make_shared<Opts>();
  sub->add_option("files", o->files, "Approvals files (TABLE stem + .approvals.json)")->required();
  sub->add_flag("--seal", o->seal,
                "Seal the records that lack record_sha256 and pass every other check; refused (exit 1, nothing "
                "written) while any record of any file is invalid for another reason; every file written or none");
  sub->callback([&cmds, o] {
    cmds.run = [o]() -> int {
      namespace fs = std::filesystem;
      for (const auto& f : o->files) {
        if (f.empty()) throw std::invalid_argument("an approvals path is empty");
        if (!fs::is_regular_file(f)) throw std::invalid_argument(f + ": no such approvals file");
      }
      // Locks in one order (sorted paths), held until every file is written.
      std::vector<std::string> order = o->files;
      std::sort(order.begin(), order.end());
      order.erase(std::unique(order.begin(), order.end()), order.end());
      std::vector<std::unique_ptr<kernels::ApprovalsLock>> locks;
      if (o->seal)
        for (const auto& f : order) locks.push_back(std::make_unique<kernels::ApprovalsLock>(f));
      std::vector<kernels::Approvals> files;
      size_t bad = 0, unsealed = 0;
      for (const auto& f : order) {
        files.push_back(kernels::load_approvals(f));
        const auto& a = files.back();
        size_t n_invalid = 0, n_unsealed = 0;
        for (const auto& x : a.records) {
          if (x.invalid.empty()) continue;
          (x.unsealed ? n_unsealed : n_invalid) += 1;
        }
        std::printf("%s: %zu records, %zu valid, %zu without record_sha256, %zu INVALID\n", f.c_str(),
                    a.records.size(), a.records.size() - n_invalid - n_unsealed, n_unsealed, n_invalid);
        for (const auto& x : a.records)
          if (!x.invalid.empty() && (!x.unsealed || !o->seal))
            std::printf("  %s %s\n", x.unsealed ? "unsealed" : "INVALID ", x.invalid.c_str());
        bad += n_invalid;
        unsealed += n_unsealed;
      }
      if (!o->seal) return bad + unsealed ? 1 : 0;
      if (bad) {
        std::printf("seal     refused: %zu INVALID record%s (above); nothing written\n", bad, bad == 1 ? "" : "s");
        return 1;
      }
      // Every text first (a record the writer refuses stops everything), then
      // every temporary file, then the renames.
      std::vector<std::pair<std::string, std::string>> texts;  // path, text
      for (auto& a : files) {
        size_t n = 0;
        for (auto& x : a.records)
          if (x.unsealed) {
            x.invalid.clear();
            x.raw_json.clear();
            x.unsealed = false;
            ++n;
          }
        if (n) texts.emplace_back(a.path, kernels::approvals_to_json_text(a));
        std::printf("seal     %s: %zu record%s sealed\n", a.path.c_str(), n, n == 1 ? "" : "s");
      }
      write_files_atomic(texts);  // all files or none (apps/commands.h)
      return 0;
    };
  });
}

}  // namespace normgate::app
