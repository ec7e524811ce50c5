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
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/core/file_target.h"
#include "normgate/kernels/registry.h"
#include "normgate/routing/policy.h"
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

// One spelling per file: its canonical path (links, ./ and .. resolved), or
// the absolute, normalized path where it cannot be resolved.
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
    throw std::invalid_argument("--merge-into " + target + ": no such approvals file" +
                                (fs::exists(target) ? " (it exists and is not a regular file)" : ""));
  if (is_rejections_file(target))
    throw std::invalid_argument("--merge-into " + target + ": a rejections file, not an approvals file");
  const std::string real = core::rename_target(target);  // the file written, and whose lock is taken
  check_writable(real, "--merge-into");
  for (const auto& f : sources) {
    if (std::error_code ec; fs::equivalent(f, target, ec))  // any spelling, link or hard link of TARGET
      throw std::invalid_argument(f + " is the --merge-into file itself: nothing to merge");
    if (is_rejections_file(f))
      throw std::invalid_argument(f + ": a rejections file; --merge-into takes approvals files");
  }
  // Every record is judged against the policy of TARGET's table, as gate
  // --approve judges the campaigns it writes (gate/src/approvals.cpp).
  // TARGET's name says whose table it is; a link named otherwise than the
  // file it points to falls back to the policy beside that file.
  std::string policy_path = kernels::policy_path_for_approvals(target);
  auto policy = kernels::load_policy(policy_path);
  if (!policy && real != target) {
    const std::string beside_real = kernels::policy_path_for_approvals(real);
    if ((policy = kernels::load_policy(beside_real))) policy_path = beside_real;
  }
  if (!policy)
    throw std::invalid_argument("--merge-into " + target + " needs its table's approval policy, and there is none: " +
                                policy_path + " (as gate --approve); nothing was merged");
  std::vector<kernels::Approvals> from;
  std::set<std::string> seen;  // resolved paths: a source named twice is read once
  for (const auto& f : sources)
    if (seen.insert(resolve(f)).second) from.push_back(kernels::load_approvals(f));
  size_t bad = 0;
  auto report = [&bad](const kernels::Approvals& a, const char* role) {
    size_t n_bad = 0;
    for (const auto& x : a.records) n_bad += !x.invalid.empty();
    std::printf("%s: %zu records, %zu valid (%s)\n", a.path.c_str(), a.records.size(), a.records.size() - n_bad,
                role);
    for (const auto& x : a.records)
      if (!x.invalid.empty()) std::printf("  %s %s\n", x.unsealed ? "unsealed" : "INVALID ", x.invalid.c_str());
    bad += n_bad;
  };
  auto refuse = [&bad] {
    std::printf("merge    refused: %zu INVALID or unsealed record%s (above); nothing written\n", bad,
                bad == 1 ? "" : "s");
    return 1;
  };
  // The sources are judged before the lock is taken: a bad source is
  // refused at once, without waiting for another writer.
  for (const auto& a : from) report(a, "source");
  if (bad) return refuse();
  const kernels::ApprovalsLock lock(real);  // from the read to after the rename, as gate --approve
  if (!fs::is_regular_file(real))           // moved or removed while this waited for the lock
    throw std::invalid_argument("--merge-into " + target + ": no such approvals file (gone while waiting for " +
                                lock.path() + ")");
  kernels::Approvals into = kernels::load_approvals(real);
  into.path = real;
  report(into, "target");
  if (bad) return refuse();
  // The current source hash of a variant ("" when this build has no such
  // variant): a record of another hash is stale (routing.h, approval_status).
  auto current_hash = [](const kernels::Approval& x) {
    const kernels::Variant* v = kernels::find_variant(x.variant);
    return v ? std::string(v->source_sha256) : std::string();
  };
  auto slot_key = [](const kernels::Approval& x) {
    return x.window() + " -> " + x.variant + " (" + x.backend + ")";
  };
  std::set<std::string> digests;
  std::map<std::string, size_t> slot_at;       // slot -> index in into.records
  std::map<std::string, std::string> slot_from;  // slot -> the file its record came from
  for (size_t i = 0; i < into.records.size(); ++i) {
    digests.insert(into.records[i].record_sha256);
    slot_at.emplace(slot_key(into.records[i]), i);
    slot_from.emplace(slot_key(into.records[i]), "the target");
  }
  size_t added = 0, replaced = 0, present = 0, kept = 0, refused = 0;
  for (const auto& a : from)
    for (const auto& x : a.records) {
      if (digests.count(x.record_sha256)) {
        ++present;
        continue;
      }
      const auto gaps = policy->minimum.record_shortfalls(x);
      if (!gaps.empty()) {
        std::printf("  REFUSED  %s, %s: below %s (%s):", slot_key(x).c_str(), a.path.c_str(),
                    policy->minimum.label().c_str(), policy->path.c_str());
        for (const auto& g : gaps) std::printf(" %s;", g.c_str());
        std::printf("\n");
        ++refused;
        continue;
      }
      const std::string key = slot_key(x);
      const auto at = slot_at.find(key);
      if (at == slot_at.end()) {
        slot_at.emplace(key, into.records.size());
        slot_from.emplace(key, a.path);
        into.records.push_back(x);
        digests.insert(x.record_sha256);
        ++added;
        std::printf("  added    %s, %s of %s\n", key.c_str(), a.path.c_str(), x.date.c_str());
        continue;
      }
      kernels::Approval& y = into.records[at->second];
      const std::string& y_from = slot_from[key];
      if (x.date == y.date) {  // two different records of one slot and one time: a person decides
        std::printf("  REFUSED  %s: %s and %s hold different records of the same date %s\n", key.c_str(),
                    y_from.c_str(), a.path.c_str(), x.date.c_str());
        ++refused;
        continue;
      }
      const std::string cur = current_hash(x);
      const bool x_current = !cur.empty() && x.source_sha256 == cur;
      const bool y_current = !cur.empty() && y.source_sha256 == cur;
      // The newer record wins, but never a stale one over a current one.
      if (x_current == y_current ? x.date > y.date : x_current) {
        std::printf("  replaced %s: %s's of %s over %s's of %s%s\n", key.c_str(), a.path.c_str(), x.date.c_str(),
                    y_from.c_str(), y.date.c_str(), x_current && !y_current ? " (that one stale)" : "");
        y = x;
        slot_from[key] = a.path;
        digests.insert(x.record_sha256);
        ++replaced;
      } else {
        std::printf("  kept     %s: %s's of %s, not %s's of %s%s\n", key.c_str(), y_from.c_str(), y.date.c_str(),
                    a.path.c_str(), x.date.c_str(),
                    y_current && !x_current ? " (stale: another source hash)" : " (not newer)");
        ++kept;
      }
    }
  if (refused) {
    std::printf("merge    refused: %zu record%s (above); nothing written\n", refused, refused == 1 ? "" : "s");
    return 1;
  }
  // Records of windows the target's table does not have stay in the file,
  // but the next gate --approve or derive --approve of that table removes
  // them (gate/src/approvals.cpp, update_approvals): said here.
  {
    const std::string table = kernels::table_path_for_approvals(target);
    std::error_code ec;
    if (!table.empty() && fs::is_regular_file(table, ec)) {
      try {
        const auto t = kernels::load_route_table(table);
        size_t outside = 0;
        for (const auto& x : into.records) {
          const bool in = std::any_of(t.routes.begin(), t.routes.end(),
                                      [&](const kernels::Route& r) { return x.overlaps(r); });
          outside += !in;
        }
        if (outside)
          std::printf("note     %zu record%s of %s approve%s no window of %s: kept here, but the next gate "
                      "--approve or derive --approve of that table removes %s\n",
                      outside, outside == 1 ? "" : "s", target.c_str(), outside == 1 ? "s" : "", table.c_str(),
                      outside == 1 ? "it" : "them");
      } catch (const std::exception&) {  // a table that does not load says so where it is used
      }
    }
  }
  if (added + replaced) write_files_atomic({{into.path, kernels::approvals_to_json_text(into)}});
  std::printf("merge    %s: %zu added, %zu replaced, %zu already there, %zu kept as they were%s\n", target.c_str(),
              added, replaced, present, kept, added + replaced ? "" : " (file unchanged)");
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
                  "record_sha256 is there already is skipped; each other record must meet the minimum of TARGET's "
                  "table policy (TABLE stem + .policy.toml, as gate --approve), else the merge is refused; one of the "
                  "same window, variant and backend as a record there replaces it when it is newer (its date), "
                  "never a record of the variant's current source hash by one of another (stale); two different "
                  "records of one slot with one date are refused; the rest are appended. Refused (exit 1, nothing "
                  "written) while any record of any file or of TARGET is INVALID or unsealed. Never removes a "
                  "record: a revocation in a FILE (a window that failed there) is not carried over. Waits for and "
                  "holds TARGET.lock (of the file a link points to) from its read to the rename, as gate --approve; "
                  "written atomically");
  sub->callback([&cmds, o, merge_opt] {
    const bool merging = merge_opt->count() > 0;
    cmds.run = [o, merging]() -> int {
      namespace fs = std::filesystem;
      for (const auto& f : o->files) {
        if (f.empty()) throw std::invalid_argument("an approvals path is empty");
        if (!fs::is_regular_file(f))
          throw std::invalid_argument(f + (fs::is_directory(f) ? ": a folder, not an approvals file (give the file, "
                                                                 "e.g. FOLDER/sm90a.approvals.json)"
                                                               : ": no such approvals file"));
      }
      if (merging) return merge_approvals(o->files, o->merge_into, o->seal);
      // One entry per file, whatever its spelling (./a and a, a symlink and
      // its target: the same file checked once, and locked once: two flocks
      // of one file from this process would wait on each other forever).
      // Sorted by the resolved path, the order the locks are taken in.
      std::vector<std::pair<std::string, std::string>> resolved;  // resolved path, path as given
      for (const auto& f : o->files) resolved.emplace_back(resolve(f), f);
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
