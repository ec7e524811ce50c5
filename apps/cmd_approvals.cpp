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
      // One entry per file, whatever its spelling (./a and a, a symlink and
      // its target: the same file checked once, and locked once: two flocks
      // of one file from this process would wait on each other forever).
      // Sorted by the resolved path, the order the locks are taken in.
      std::vector<std::pair<std::string, std::string>> resolved;  // resolved path, path as given
      for (const auto& f : o->files) {
        std::error_code ec;
        fs::path c = fs::canonical(f, ec);
        resolved.emplace_back(ec ? fs::absolute(f).lexically_normal().string() : c.string(), f);
      }
      std::stable_sort(resolved.begin(), resolved.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      resolved.erase(std::unique(resolved.begin(), resolved.end(),
                                 [](const auto& a, const auto& b) { return a.first == b.first; }),
                     resolved.end());
      std::vector<std::string> order;
      std::vector<bool> rejections;
      for (const auto& [c, f] : resolved) {
        order.push_back(f);
        rejections.push_back(is_rejections_file(f));
      }
      // Locks, held until every file is written: approvals files only (a
      // rejections file is never written here; its writers hold its table's
      // approvals lock, rejections.h).
      std::vector<std::unique_ptr<kernels::ApprovalsLock>> locks;
      if (o->seal)
        for (size_t i = 0; i < order.size(); ++i)
          if (!rejections[i]) locks.push_back(std::make_unique<kernels::ApprovalsLock>(order[i]));
      std::vector<kernels::Approvals> files;
      size_t bad = 0, unsealed = 0, bad_files = 0;  // INVALID approvals records; INVALID rejections files
      for (size_t i = 0; i < order.size(); ++i) {
        const std::string& f = order[i];
        if (rejections[i]) {  // all sealed and valid, or the first bad record names the file INVALID
          try {
            const kernels::Rejections r = kernels::load_rejections(f);
            std::printf("%s: %zu rejection records, %zu valid, 0 INVALID\n", f.c_str(), r.records.size(),
                        r.records.size());
          } catch (const kernels::RouteTableError& e) {
            std::printf("%s: rejections file INVALID\n  INVALID  %s\n", f.c_str(), e.what());
            ++bad_files;
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
      if (!o->seal) return bad + unsealed + bad_files ? 1 : 0;
      if (bad || bad_files) {
        std::string what;
        if (bad) what = std::to_string(bad) + " INVALID record" + (bad == 1 ? "" : "s");
        if (bad_files)
          what += (what.empty() ? "" : ", ") + std::to_string(bad_files) + " INVALID rejections file" +
                  (bad_files == 1 ? "" : "s");
        std::printf("seal     refused: %s (above); nothing written\n", what.c_str());
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
