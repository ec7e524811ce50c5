// apps/cmd_approvals.cpp: normgate approvals FILE...: check approvals files
// record by record (routing.h, "Validation"), and rejections files
// (rejections.h: every record sealed and valid, or the file is INVALID), and
// --seal: give every approvals record
// written before records carried digests its record_sha256, only when every
// record of every file passes every other check (all files written or none).
#include "commands.h"


#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/routing/rejections.h"
#include "normgate/routing/routing.h"

namespace normgate::app {

namespace {
// A file whose top-level "format" names the rejections format; anything else
// (an approvals file, or text that is not JSON) goes to load_approvals, which
// names what is wrong with it.
bool is_rejections_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  const auto f = j.find("format");
  return f != j.end() && f->is_string() && f->get<std::string>().rfind("normgate-rejections/", 0) == 0;
}
}  // namespace

void add_approvals(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand(
      "approvals",
      "Check approvals files record by record (routing/include/normgate/routing/routing.h, \"Validation\": fields, "
      "ranges, record_sha256), and rejections files (TABLE stem + .rejections.json, rejections.h: one bad record "
      "makes the file INVALID, named with its reason): exit 0 when every record is valid, 1 when one is INVALID "
      "(each listed with its reason). --seal adds record_sha256 to approvals records written before records carried "
      "it (rejections are always sealed)");
  struct Opts {
    std::vector<std::string> files;
    bool seal = false;
  };
  auto o = std::make_shared<Opts>();
  sub->add_option("files", o->files,
                  "Approvals files (TABLE stem + .approvals.json) or rejections files (TABLE stem + "
                  ".rejections.json, told apart by their \"format\")")
      ->required();
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
        if (is_rejections_file(f)) {  // all sealed and valid, or the first bad record names the file INVALID
          try {
            const kernels::Rejections r = kernels::load_rejections(f);
            std::printf("%s: %zu rejection records, %zu valid, 0 INVALID\n", f.c_str(), r.records.size(),
                        r.records.size());
          } catch (const kernels::RouteTableError& e) {
            std::printf("%s: rejections file INVALID\n  INVALID  %s\n", f.c_str(), e.what());
            ++bad;
          }
          continue;
        }
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
