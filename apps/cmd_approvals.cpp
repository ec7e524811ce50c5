// apps/cmd_approvals.cpp: normgate approvals FILE...: check approvals files
// record by record (routing.h, "Validation"), and rejections files
// (rejections.h: every record sealed and valid, or the file is INVALID), and
// --seal: give every approvals record
// written before records carried digests its record_sha256, only when every
// record of every file passes every other check (all files written or none);
// --merge-into TARGET: add the files' records to TARGET (an approvals file
// gated in a folder of its own, docs/perf/routes.md D8), only when every
// record of every file and of TARGET is valid.
#include "commands.h"


#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
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

// The same window (op, mode for bwd, H, w, form, T range), variant and
// backend: the key under which gate --approve keeps one record
// (gate/src/approvals.cpp, update_approvals).
bool same_slot(const kernels::Approval& a, const kernels::Approval& b) {
  return a.op == b.op && (a.op == kernels::Op::fwd || a.mode == b.mode) && a.H == b.H && a.w == b.w &&
         a.form == b.form && a.t_lo == b.t_lo && a.t_hi == b.t_hi && a.variant == b.variant &&
         a.backend == b.backend;
}

std::string resolve(const std::string& f) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path c = fs::canonical(f, ec);
  return ec ? fs::absolute(f).lexically_normal().string() : c.string();
}
// normgate approvals FILES --merge-into TARGET (see the option's help).
int merge_approvals(const std::vector<std::string>& sources, const std::string& target, bool seal) {
  namespace fs = std::filesystem;
  if (target.empty()) throw std::invalid_argument("--merge-into needs an approvals file (got an empty path)");
  if (seal) throw std::invalid_argument("--merge-into and --seal do not go together: seal first, then merge");
  if (!fs::is_regular_file(target))
    throw std::invalid_argument("--merge-into " + target + ": no such approvals file");
  if (is_rejections_file(target))
    throw std::invalid_argument("--merge-into " + target + ": a rejections file, not an approvals file");
  const std::string target_c = resolve(target);
  for (const auto& f : sources) {
    if (resolve(f) == target_c)
      throw std::invalid_argument(f + " is the --merge-into file itself: nothing to merge");
    if (is_rejections_file(f))
      throw std::invalid_argument(f + ": a rejections file; --merge-into takes approvals files");
  }
  const kernels::ApprovalsLock lock(target);  // from the read to after the rename, as gate --approve
  kernels::Approvals into = kernels::load_approvals(target);
  std::vector<kernels::Approvals> from;
  std::set<std::string> seen;  // resolved paths: a source named twice is read once
  for (const auto& f : sources)
    if (seen.insert(resolve(f)).second) from.push_back(kernels::load_approvals(f));
  size_t bad = 0;
  auto report = [&bad](const kernels::Approvals& a) {
    size_t n_bad = 0;
    for (const auto& x : a.records)
      if (!x.invalid.empty()) {
        std::printf("  %s %s\n", x.unsealed ? "unsealed" : "INVALID ", x.invalid.c_str());
        ++n_bad;
      }
    std::printf("%s: %zu records, %zu valid\n", a.path.c_str(), a.records.size(), a.records.size() - n_bad);
    bad += n_bad;
  };
  for (const auto& a : from) report(a);
  report(into);
  if (bad) {
    std::printf("merge    refused: %zu INVALID or unsealed record%s (above); nothing written\n", bad,
                bad == 1 ? "" : "s");
    return 1;
  }
  size_t added = 0, replaced = 0, present = 0, older = 0;
  for (const auto& a : from)
    for (const auto& x : a.records) {
      auto same_digest = std::find_if(into.records.begin(), into.records.end(),
                                      [&](const kernels::Approval& y) { return y.record_sha256 == x.record_sha256; });
      if (same_digest != into.records.end()) {
        ++present;
        continue;
      }
      auto slot = std::find_if(into.records.begin(), into.records.end(),
                               [&](const kernels::Approval& y) { return same_slot(x, y); });
      if (slot == into.records.end()) {
        into.records.push_back(x);
        ++added;
        std::printf("  added    %s -> %s (%s, %s)\n", x.window().c_str(), x.variant.c_str(), x.backend.c_str(),
                    x.date.c_str());
      } else if (x.date > slot->date) {  // ISO 8601 UTC: the string order is the time order
        std::printf("  replaced %s -> %s (%s, %s; the file's of %s)\n", x.window().c_str(), x.variant.c_str(),
                    x.backend.c_str(), x.date.c_str(), slot->date.c_str());
        *slot = x;
        ++replaced;
      } else {
        std::printf("  kept     %s -> %s (%s): the file's record of %s is not older than %s's of %s\n",
                    slot->window().c_str(), slot->variant.c_str(), slot->backend.c_str(), slot->date.c_str(),
                    a.path.c_str(), x.date.c_str());
        ++older;
      }
    }
  if (added + replaced) write_files_atomic({{into.path, kernels::approvals_to_json_text(into)}});
  std::printf("merge    %s: %zu added, %zu replaced, %zu already there, %zu not newer than the file's%s\n",
              target.c_str(), added, replaced, present, older, added + replaced ? "" : " (file unchanged)");
  return 0;
}
}  // namespace

void add_approvals(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand(
      "approvals",
      "Check approvals files record by record (routing/include/normgate/routing/routing.h, \"Validation\": fields, "
      "ranges, record_sha256), and rejections files (TABLE stem + .rejections.json, rejections.h: one bad record "
      "makes the file INVALID, named with its reason): exit 0 when every record is valid, 1 when one is INVALID "
      "(each listed with its reason). --seal adds record_sha256 to approvals records written before records carried "
      "it (rejections are always sealed). --merge-into TARGET adds the files' approvals records to TARGET");
  struct Opts {
    std::vector<std::string> files;
    bool seal = false;
    std::string merge_into;
  };
  auto o = std::make_shared<Opts>();
  sub->add_option("files", o->files,
                  "Approvals files (TABLE stem + .approvals.json) or rejections files (TABLE stem + "
                  ".rejections.json, told apart by their \"format\")")
      ->required();
  sub->add_flag("--seal", o->seal,
                "Seal the records that lack record_sha256 and pass every other check; refused (exit 1, nothing "
                "written) while any record of any file is invalid for another reason; every file written or none");
  auto* merge_opt = sub->add_option("--merge-into", o->merge_into,
                  "Add every record of the FILES (approvals files) to this approvals file: a record whose "
                  "record_sha256 is there already is skipped; one of the same window, variant and backend as a "
                  "record there replaces it when its date is later (else the file's is kept); the rest are "
                  "appended. Refused (exit 1, nothing written) while any record of any file or of TARGET is "
                  "INVALID or unsealed. Never removes a record: a revocation in a FILE (a window that failed there) "
                  "is not carried over. Written atomically under TARGET.lock (as gate --approve)");
  sub->callback([&cmds, o, merge_opt] {
    const bool merging = merge_opt->count() > 0;
    cmds.run = [o, merging]() -> int {
      namespace fs = std::filesystem;
      for (const auto& f : o->files) {
        if (f.empty()) throw std::invalid_argument("an approvals path is empty");
        if (!fs::is_regular_file(f)) throw std::invalid_argument(f + ": no such approvals file");
      }
      if (merging) return merge_approvals(o->files, o->merge_into, o->seal);
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
