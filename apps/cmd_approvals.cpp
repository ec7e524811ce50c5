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


#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/core/file_target.h"
#include "normgate/core/json_strict.h"
#include "normgate/core/report_util.h"
#include "normgate/gate/gate.h"
#include "normgate/gate/journal.h"
#include "normgate/validators/budget.h"
#include "normgate/harness/digest.h"
#include "normgate/harness/pipeline.h"
#include "normgate/kernels/device.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"
#include "normgate/kernels/registry.h"
#include "normgate/routing/policy.h"
#include "normgate/routing/rejections.h"
#include "normgate/routing/routing.h"
#include "normgate_version.h"

namespace normgate::app {

namespace {
// A file whose top-level "format" names the rejections format; anything else
// (an approvals file, or text that is not JSON) goes to load_approvals, which
// names what is wrong with it.
// Whether `path` is named like a table's rejections file (TABLE stem +
// .rejections.json; rejections_path_for's name).
bool named_rejections(std::string_view path) {
  constexpr std::string_view kSuffix = ".rejections.json";
  return path.size() > kSuffix.size() && path.ends_with(kSuffix);
}

bool is_rejections_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = parse_json_strict(text.str());  // depth-limited, as the loaders read it
  } catch (const std::exception&) {
    // Not readable as strict JSON: its name decides which loader names what
    // is wrong with it (a rejections file with a repeated key was reported
    // as approvals that are not a normgate file).
    return named_rejections(path);
  }
  if (!j.is_object()) return false;
  const auto f = j.find("format");
  return f != j.end() && f->is_string() && f->get<std::string>().rfind("normgate-rejections/", 0) == 0;
}

// The records --carry or --vouch (`verb`) refused, and the closing line;
// returns 1, their exit code (nothing is written).
int print_refused(const char* verb, const std::vector<std::string>& refused) {
  for (const auto& r : refused) std::printf("REFUSED  %s\n", r.c_str());
  std::printf("%-8s refused: %zu record%s above; nothing written\n", verb, refused.size(),
              refused.size() == 1 ? "" : "s");
  return 1;
}

// One spelling per file: its canonical path (links, ./ and .. resolved), or
// the absolute, normalized path where it cannot be resolved.
std::string resolve(const std::string& f) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path c = fs::canonical(f, ec);
  return ec ? fs::absolute(f).lexically_normal().string() : c.string();
}

// The rejections file beside an approvals file (rejections.h):
// dir/stem.rejections.json for dir/stem.approvals.json.
kernels::Rejections rejections_beside(const std::string& approvals_path) {
  const std::string table = kernels::table_path_for_approvals(approvals_path);  // "" for an unusual name
  return kernels::load_rejections(kernels::rejections_path_for(table.empty() ? approvals_path : table));
}

// normgate approvals FILES --merge-into TARGET (see the option's help).
int merge_approvals(const std::vector<std::string>& sources, const std::string& target, bool seal) {
  namespace fs = std::filesystem;
  if (target.empty()) throw std::invalid_argument("--merge-into needs an approvals file (got an empty path)");
  if (seal) throw std::invalid_argument("--merge-into and --seal do not go together: seal first, then merge");
  if (const std::string why = core::regular_file_problem(target); !why.empty())
    throw std::invalid_argument("--merge-into " + target + ": " + why + " (an approvals file is needed)");
  if (is_rejections_file(target))
    throw std::invalid_argument("--merge-into " + target + ": a rejections file, not an approvals file");
  const std::string real = core::rename_target(target);  // the file written, and whose lock is taken
  check_writable(real, "--merge-into");
  {
    // The lock file (routing.h ApprovalsLock) must be one a lock can be
    // taken on: said before any source is read, as a usage error.
    std::error_code ec;
    const auto st = fs::symlink_status(real + ".lock", ec);
    if (!ec && fs::exists(st) && !fs::is_regular_file(fs::status(real + ".lock", ec)))
      throw std::invalid_argument("--merge-into " + target + ": its lock file " + real +
                                  ".lock exists and is not a regular file (remove it; writers of the approvals "
                                  "file take their lock on it)");
  }
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
    std::printf("%s: %zu records, %zu valid (%s)\n", printable_line(a.path).c_str(), a.records.size(), a.records.size() - n_bad,
                role);
    for (const auto& x : a.records)
      if (!x.invalid.empty()) std::printf("  %s %s\n", x.unsealed ? "unsealed" : "INVALID ", printable_line(x.invalid).c_str());
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
  // The failures remembered beside TARGET (gate --approve and derive write
  // them, rejections.h): a record one of them refutes is never merged, so
  // an older copy of the file cannot bring back a revoked approval.
  // Beside TARGET as named and beside the file it resolves to (a link named
  // otherwise, or in another folder, must not escape them).
  std::vector<kernels::Rejections> rejected = {rejections_beside(target)};
  if (real != target) {
    kernels::Rejections more = rejections_beside(real);
    if (more.path != rejected[0].path) rejected.push_back(std::move(more));
  }
  struct Refuted {
    const kernels::Rejection* q = nullptr;
    std::string file;  // the rejections file holding q
  };
  auto refuted_by = [&](const kernels::Approval& x) {
    for (const auto& f : rejected)
      for (const auto& q : f.records)
        if (q.refutes(x)) return Refuted{&q, f.path};
    return Refuted{};
  };
  for (const auto& x : into.records)
    if (const Refuted f = x.invalid.empty() ? refuted_by(x) : Refuted{}; f.q)
      std::printf("  WARNING  the target's %s -> %s (%s) is refuted by the failure of %s remembered in %s (case %s, "
                  "%s err/tol %g, %s): it should not be there; gate the window again\n",
                  x.window().c_str(), x.variant.c_str(), x.backend.c_str(), f.q->window().c_str(),
                  printable_line(f.file).c_str(), f.q->worst_case.c_str(), f.q->worst_output.c_str(),
                  f.q->worst_err_tol, f.q->date.c_str());
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
      if (const Refuted f = refuted_by(x); f.q) {
        std::printf("  REFUSED  %s, %s: the gate failed this variant's source there (%s remembered in %s: case %s, "
                    "%s err/tol %g, %s); remove the record from %s\n",
                    slot_key(x).c_str(), printable_line(a.path).c_str(), f.q->window().c_str(),
                    printable_line(f.file).c_str(), f.q->worst_case.c_str(), f.q->worst_output.c_str(),
                    f.q->worst_err_tol, f.q->date.c_str(), printable_line(a.path).c_str());
        ++refused;
        continue;
      }
      const auto gaps = policy->minimum.record_shortfalls(x);
      if (!gaps.empty()) {
        std::printf("  REFUSED  %s, %s: below %s (%s):", slot_key(x).c_str(), printable_line(a.path).c_str(),
                    policy->minimum.label().c_str(), printable_line(policy->path).c_str());
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
        std::printf("  added    %s, %s of %s\n", key.c_str(), printable_line(a.path).c_str(), x.date.c_str());
        continue;
      }
      kernels::Approval& y = into.records[at->second];
      const std::string& y_from = slot_from[key];
      if (x.date == y.date) {  // two different records of one slot and one time: a person decides
        std::printf("  REFUSED  %s: %s and %s hold different records of the same date %s\n", key.c_str(),
                    y_from.c_str(), printable_line(a.path).c_str(), x.date.c_str());
        ++refused;
        continue;
      }
      const std::string cur = current_hash(x);
      const bool x_current = !cur.empty() && x.source_sha256 == cur;
      const bool y_current = !cur.empty() && y.source_sha256 == cur;
      // The newer record wins, but never a stale one over a current one.
      if (x_current == y_current ? x.date > y.date : x_current) {
        std::printf("  replaced %s: %s's of %s over %s's of %s%s\n", key.c_str(), printable_line(a.path).c_str(), x.date.c_str(),
                    y_from.c_str(), y.date.c_str(), x_current && !y_current ? " (that one stale)" : "");
        y = x;
        slot_from[key] = a.path;
        digests.insert(x.record_sha256);
        ++replaced;
      } else {
        std::printf("  kept     %s: %s's of %s, not %s's of %s%s\n", key.c_str(), y_from.c_str(), y.date.c_str(),
                    printable_line(a.path).c_str(), x.date.c_str(),
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
    // The tables sharing the file: the base table and its per-GPU tables
    // (routing.h, "Per-GPU tables"); a record any of them overlaps stays.
    const std::vector<std::string> tables = kernels::tables_sharing_approvals(target);
    if (!tables.empty()) {
      std::string table;
      for (const auto& p : tables) table += (table.empty() ? "" : " or ") + p;
      try {
        std::vector<kernels::Route> routes;
        for (const auto& p : tables) {
          const auto t = kernels::load_route_table(p);
          routes.insert(routes.end(), t.routes.begin(), t.routes.end());
        }
        size_t outside = 0;
        for (const auto& x : into.records) {
          const bool in = std::any_of(routes.begin(), routes.end(),
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
// A digests file (`normgate digest`, apps/cmd_digest.cpp), read and checked.
struct DigestEntry {
  std::string variant, window, source_sha256, lines_sha256;
  std::vector<std::string> lines;
};
struct DigestFile {
  std::string path, sha256, format, backend, gpu, commit, approvals_file;
  std::map<std::string, std::string> variants;    // name -> the build's source_sha256
  std::map<std::string, DigestEntry> entries;     // by the approval's record_sha256
  // `digest --as`: the records' variant and the variant that ran their
  // campaigns instead ("" both for a plain digest).
  std::string ran_as_of, ran_as;
};

// The outputs of one digests line, in the order core/output_digest.h's
// writer puts them (harness/digest.h to_string).
const char* const kDigestOutputs[] = {"y", "rstd", "msq", "h_new", "dx", "dw"};

// One line "CASE y=<16 hex> rstd=<16 hex> [msq=..] [h_new=..] [dx=.. dw=..]"
// parsed into output -> hex; "" in `why` when it is exactly that form (single
// spaces, lower-case hex, each output once and in that order, y and rstd
// present, dx and dw together), else what is wrong.
std::map<std::string, std::string> parse_digest_line(const std::string& line, std::string& why) {
  std::map<std::string, std::string> out;
  why.clear();
  std::vector<std::string> tok;
  size_t at = 0;
  while (true) {
    const size_t sp = line.find(' ', at);
    tok.push_back(line.substr(at, sp == std::string::npos ? std::string::npos : sp - at));
    if (sp == std::string::npos) break;
    at = sp + 1;
  }
  bool case_id = false;
  try {
    case_id = seeds::to_string(seeds::parse_case(tok[0])) == tok[0];  // the writer's spelling of a valid case
  } catch (const std::invalid_argument&) {
  }
  if (!case_id) {
    why = "does not start with a case id";
    return out;
  }
  size_t next = 0;  // index into kDigestOutputs of the earliest output allowed next
  for (size_t k = 1; k < tok.size(); ++k) {
    const std::string& t = tok[k];
    const size_t eq = t.find('=');
    const std::string name = eq == std::string::npos ? t : t.substr(0, eq);
    size_t idx = next;
    while (idx < std::size(kDigestOutputs) && name != kDigestOutputs[idx]) ++idx;
    if (eq == std::string::npos || idx == std::size(kDigestOutputs)) {
      why = "'" + t.substr(0, 40) + "' is not an output digest in its place (y rstd [msq] [h_new] [dx dw], each once)";
      return {};
    }
    const std::string hex = t.substr(eq + 1);
    if (hex.size() != 16 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
      why = "the digest of " + name + " is not 16 lower-case hex digits";
      return {};
    }
    out[name] = hex;
    next = idx + 1;
  }
  if (!out.count("y") || !out.count("rstd")) why = "no y or no rstd digest";
  else if (out.count("dx") != out.count("dw")) why = "dx and dw not both digested";
  if (!why.empty()) return {};
  return out;
}

DigestFile read_digests(const std::string& path, const std::string& opt = "--carry") {
  auto bad = [&path, &opt](const std::string& why) { return std::invalid_argument(opt + " " + path + ": " + why); };
  if (std::filesystem::is_directory(path)) throw bad("a folder, not a digests file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw bad(std::string("cannot be read (") + std::strerror(errno) + ")");
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw bad(std::string("not JSON (") + e.what() + ")");
  }
  if (!j.is_object()) throw bad("not a JSON object (a digests file of `normgate digest`?)");
  DigestFile d;
  d.path = path;
  try {
    // /1 lines have no msq (docs/schemas.md, "Digests"); /2 lines of the GPU have.
    if (!j.contains("format") || !j["format"].is_string() ||
        (j["format"].get<std::string>() != "normgate-digests/1" && j["format"].get<std::string>() != "normgate-digests/2"))
      throw bad("format is not \"normgate-digests/1\" or \"normgate-digests/2\"");
    d.format = j["format"].get<std::string>();
    // The schema's keys and kinds only, checked before the seal is computed
    // (which walks the whole document): nothing nested deeper than an
    // entry's lines.
    static const std::set<std::string> kTop = {"format", "normgate_commit", "normgate_version", "date", "backend",
                                               "gpu", "driver", "approvals_file", "variants", "entries", "file_sha256",
                                               "ran_as"};
    static const std::set<std::string> kEntry = {"record_sha256", "variant", "window", "source_sha256",
                                                 "approval_cases", "cases", "lines_sha256", "lines"};
    for (const auto& [k, v] : j.items()) {
      if (!kTop.count(k)) throw bad("unknown key '" + k.substr(0, 40) + "'");
      if (k == "variants" || k == "entries" || k == "ran_as") continue;
      if (!v.is_string()) throw bad("'" + k + "' is not a string");
    }
    for (const char* k : {"variants", "entries", "backend", "gpu", "normgate_commit", "approvals_file"})
      if (!j.contains(k)) throw bad(std::string("no '") + k + "'");
    if (!j["variants"].is_object()) throw bad("'variants' is not an object");
    for (const auto& [k, v] : j["variants"].items())
      if (!v.is_string()) throw bad("variants['" + k.substr(0, 40) + "'] is not a string");
    if (!j["entries"].is_array()) throw bad("'entries' is not an array");
    if (j.contains("ran_as") && (!j["ran_as"].is_object() || j["ran_as"].size() != 1 ||
                                 !j["ran_as"].begin().value().is_string()))
      throw bad("'ran_as' is not an object of one variant name");
    for (const auto& e : j["entries"]) {
      if (!e.is_object()) throw bad("an entry is not an object");
      for (const auto& [k, v] : e.items()) {
        if (!kEntry.count(k)) throw bad("unknown entry key '" + k.substr(0, 40) + "'");
        const bool ok = k == "lines" ? v.is_array() : (k == "approval_cases" || k == "cases") ? v.is_number_integer()
                                                                                                : v.is_string();
        if (!ok) throw bad("entry key '" + k + "' has the wrong kind");
      }
      if (!e.contains("lines")) throw bad("an entry has no lines");
      for (const auto& l : e["lines"])
        if (!l.is_string()) throw bad("an entry's line is not a string");
    }
    if (!j.contains("file_sha256") || !j["file_sha256"].is_string()) throw bad("no file_sha256");
    d.sha256 = j["file_sha256"].get<std::string>();
    j.erase("file_sha256");
    if (validators::digests_file_sha256(j) != d.sha256)
      throw bad("file_sha256 does not match its contents (changed after it was written)");
    d.backend = j.at("backend").get<std::string>();
    d.gpu = j.at("gpu").get<std::string>();
    d.commit = j.at("normgate_commit").get<std::string>();
    d.approvals_file = j.at("approvals_file").get<std::string>();
    for (const auto& [k, v] : j.at("variants").items()) d.variants[k] = v.get<std::string>();
    if (j.contains("ran_as")) {
      d.ran_as_of = j["ran_as"].begin().key();
      d.ran_as = j["ran_as"].begin().value().get<std::string>();
    }
    // Which lines hold msq: none in a /1 file or of the CPU models, every
    // line of a /2 file of the GPU.
    const bool want_msq = d.format == "normgate-digests/2" && d.backend == kernels::kGpuBackend;
    for (const auto& e : j.at("entries")) {
      DigestEntry x;
      x.variant = e.at("variant").get<std::string>();
      x.window = e.at("window").get<std::string>();
      x.source_sha256 = e.at("source_sha256").get<std::string>();
      x.lines_sha256 = e.at("lines_sha256").get<std::string>();
      x.lines = e.at("lines").get<std::vector<std::string>>();
      if (validators::digest_lines_sha256(x.lines) != x.lines_sha256)
        throw bad("entry of " + x.window + ": lines_sha256 does not match its lines");
      for (size_t k = 0; k < x.lines.size(); ++k) {
        std::string why;
        const auto outs = parse_digest_line(x.lines[k], why);
        if (!why.empty()) throw bad("entry of " + x.window + ", line " + std::to_string(k + 1) + ": " + why);
        if (outs.count("msq") != (want_msq ? 1u : 0u))
          throw bad("entry of " + x.window + ", line " + std::to_string(k + 1) + ": " +
                    (want_msq ? "no msq digest (a " + d.format + " file of the GPU has one on every line)"
                              : "an msq digest (a " + d.format + " file of backend " + d.backend + " has none)"));
      }
      if (!d.entries.emplace(e.at("record_sha256").get<std::string>(), std::move(x)).second)
        throw bad("two entries of one record");
    }
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("malformed: ") + e.what());
  }
  return d;
}

// Two well-formed digests lines of one case (read_digests checked them),
// output by output: "" when every output both hold agrees and no output
// but msq is held by one side alone (a /1 file of the GPU holds none); else
// why not ("outputs differ: ..." or "OLD and NEW digested different
// outputs: ..."). msq_one_side: msq was held by one side only.
std::string compare_digest_lines(const std::string& lo, const std::string& ln, bool& msq_one_side) {
  std::string ignored;
  const auto a = parse_digest_line(lo, ignored), b = parse_digest_line(ln, ignored);
  msq_one_side = a.count("msq") != b.count("msq");
  std::string differ, only;
  for (const auto& [name, v] : a) {
    const auto it = b.find(name);
    if (it == b.end()) {
      if (name != "msq") only += " " + name + " (OLD only)";
    } else if (it->second != v) {
      differ += " " + name;
    }
  }
  for (const auto& [name, v] : b)
    if (!a.count(name) && name != "msq") only += " " + name + " (NEW only)";
  // One-sided outputs first: a refusal whatever else differs (--partial
  // leaves a record only for differing bits).
  if (!only.empty()) return "OLD and NEW digested different outputs:" + only;
  if (!differ.empty()) return "outputs differ:" + differ;
  return "";
}

// Whether each digests side holds exactly record x's campaign (gate.h
// approval_cases), case by case in its order: "" when it does, else what
// differs (naming the side), or why the campaign cannot be listed.
std::string campaign_mismatch(const kernels::Approval& x,
                              const std::vector<std::pair<std::string, const std::vector<std::string>*>>& sides) {
  std::vector<seeds::CaseId> want;
  try {
    want = validators::approval_cases(x);
  } catch (const std::invalid_argument& e) {
    return std::string("its campaign cannot be listed (") + e.what() + ")";
  }
  auto case_of = [](const std::string& line) { return line.substr(0, line.find(' ')); };
  for (const auto& [name, lines] : sides) {
    if (lines->size() != want.size())
      return name + " holds " + std::to_string(lines->size()) + " cases, the record's campaign " +
             std::to_string(want.size());
    for (size_t k = 0; k < want.size(); ++k)
      if (case_of((*lines)[k]) != seeds::to_string(want[k]))
        return name + "'s case " + std::to_string(k + 1) + " is " + case_of((*lines)[k]) + ", the campaign's " +
               seeds::to_string(want[k]);
  }
  return "";
}

// normgate approvals FILE --carry OLD NEW (see the option's help).
int carry_approvals(const std::string& path, const std::string& old_path, const std::string& new_path,
                    bool partial) {
  const DigestFile d_old = read_digests(old_path), d_new = read_digests(new_path);
  if (d_old.sha256 == d_new.sha256) throw std::invalid_argument("--carry: OLD and NEW are the same digests file");
  for (const DigestFile* d : {&d_old, &d_new})
    if (!d->ran_as.empty())
      throw std::invalid_argument("--carry " + d->path + ": digests of " + d->ran_as_of + "'s records run as " +
                                  d->ran_as + " (`digest --as`): evidence for --vouch, not for a carry");
  if (d_old.backend != d_new.backend || d_old.gpu != d_new.gpu)
    throw std::invalid_argument("--carry: OLD ran on " + d_old.backend + " (" + d_old.gpu + "), NEW on " +
                                d_new.backend + " (" + d_new.gpu + "): the bits are compared on one kind of device");
  const bool dirty = d_old.commit.find("-dirty") != std::string::npos || d_new.commit.find("-dirty") != std::string::npos;
  if (d_old.commit == d_new.commit && !dirty)
    throw std::invalid_argument("--carry: OLD and NEW both say normgate " + d_old.commit +
                                ": one commit holds one source of each variant");
  check_writable(core::rename_target(path), "APPROVALS");
  kernels::ApprovalsLock lock(path);
  kernels::Approvals a = kernels::load_approvals(path);
  std::vector<std::string> refused, notes, done, left;  // left: outputs differ, --partial
  size_t carried = 0, compared = 0, msq_not_compared = 0, in_both = 0;
  const std::string date = validators::detail::utc_now();
  // OLD's entries by variant and window, for records carried by OLD itself:
  // a carry gives the record a new record_sha256, so the NEW digests of the
  // last carry name the record as it was; they are the record's campaign run
  // by the build it was carried to, which is what OLD must be (D19, "OLD
  // from the last carry"). A variant and window held twice is not indexed.
  std::map<std::string, const DigestEntry*> old_by_window;
  std::set<std::string> old_twice;
  for (const auto& [sha, e] : d_old.entries) {
    const std::string k = e.variant + "\n" + e.window;
    if (!old_by_window.emplace(k, &e).second) old_twice.insert(k);
  }
  for (const auto& k : old_twice) old_by_window.erase(k);
  size_t by_chain = 0;
  for (auto& x : a.records) {
    const DigestEntry* eo = nullptr;
    const DigestEntry* en = nullptr;
    if (const auto it = d_old.entries.find(x.record_sha256); it != d_old.entries.end()) eo = &it->second;
    if (const auto it = d_new.entries.find(x.record_sha256); it != d_new.entries.end()) en = &it->second;
    // The source OLD's entry must name: the record's own, or for a record
    // matched through its last carry, the source it was carried from.
    std::string old_entry_source = x.source_sha256;
    bool chain = false;
    if (!eo && x.invalid.empty() && !x.carried.empty() && x.carried.back().digests_new == d_old.sha256 &&
        x.carried.back().to_source_sha256 == x.source_sha256) {
      if (const auto it = old_by_window.find(x.variant + "\n" + x.window()); it != old_by_window.end()) {
        eo = it->second;
        old_entry_source = x.carried.back().from_source_sha256;
        chain = true;
      } else if (old_twice.count(x.variant + "\n" + x.window())) {
        notes.push_back(x.backend + " approval of " + x.window() + " -> " + x.variant + ": OLD holds two entries of "
                        "this variant and window, so its last carry's file cannot say which is its campaign");
      }
    }
    if (!x.invalid.empty()) {  // a record that fails its checks is never carried (nor written anew)
      if (eo || en)
        refused.push_back("record " + x.record_sha256.substr(0, 12) + " is INVALID (" + x.invalid +
                          "): `normgate approvals` names it; it cannot be carried");
      continue;
    }
    const std::string who = x.backend + " approval of " + x.window() + " -> " + x.variant;
    if (!eo || !en) {
      const bool in_one = eo || en;
      if (in_one) notes.push_back(who + ": in one digests file only; left as it is");
      continue;
    }
    ++in_both;
    const kernels::Variant* v = nullptr;
    try {
      v = &kernels::variant(x.variant);
    } catch (const std::invalid_argument&) {
      refused.push_back(who + ": this normgate has no variant " + x.variant);
      continue;
    }
    const std::string now(v->source_sha256);
    if (x.backend != d_new.backend) {
      refused.push_back(who + ": the digests ran on backend " + d_new.backend);
      continue;
    }
    if (x.source_sha256 == now) {
      notes.push_back(who + ": already keyed to this build's source; left as it is");
      continue;
    }
    const auto vo = d_old.variants.find(x.variant), vn = d_new.variants.find(x.variant);
    if (vo == d_old.variants.end() || vo->second != x.source_sha256) {
      // OLD's build is not this record's source (a record stale before the
      // change): the files say nothing about it.
      notes.push_back(who + ": keyed to source " + x.source_sha256.substr(0, 12) + ", OLD's build has " +
                      (vo == d_old.variants.end() ? std::string("no such variant") : vo->second.substr(0, 12)) +
                      "; left as it is");
      continue;
    }
    if (eo->source_sha256 != old_entry_source || en->source_sha256 != x.source_sha256 ||
        eo->variant != x.variant || en->variant != x.variant || eo->window != x.window() ||
        en->window != x.window()) {
      refused.push_back(who + ": an entry of OLD or NEW names another record (variant, window or source)");
      continue;
    }
    if (x.backend == kernels::kGpuBackend && d_new.gpu != x.gpu) {
      refused.push_back(who + ": gated on " + x.gpu + ", the digests ran on " + d_new.gpu +
                        " (bits are compared on the device the record was gated on)");
      continue;
    }
    if (vn == d_new.variants.end() || vn->second != now) {
      refused.push_back(who + ": NEW was not run by this build (source " + now.substr(0, 12) + ", NEW's build " +
                        (vn == d_new.variants.end() ? "none" : vn->second.substr(0, 12)) + ")");
      continue;
    }
    const auto& lo = eo->lines;
    const auto& ln = en->lines;
    if (const std::string mismatch = campaign_mismatch(x, {{"OLD", &lo}, {"NEW", &ln}}); !mismatch.empty()) {
      refused.push_back(who + ": " + mismatch);
      continue;
    }
    // Output by output: every output both lines digest must agree; only msq
    // may be missing from one side (a normgate-digests/1 file of the GPU
    // against a /2 one: read_digests holds each file to its format's msq
    // rule). Anything else digested on one side only is refused.
    size_t k = 0;
    std::string why;
    bool msq_unmatched = false;
    for (; k < lo.size(); ++k) {
      if (lo[k] == ln[k]) continue;
      bool one_side = false;
      why = compare_digest_lines(lo[k], ln[k], one_side);
      if (!why.empty()) break;
      msq_unmatched = msq_unmatched || one_side;
    }
    if (k < lo.size()) {
      const bool bits = why.rfind("outputs differ", 0) == 0;
      const size_t colon = why.find(':');
      const std::string what = who + ": " + why.substr(0, colon) + " at case " + std::to_string(k + 1) + " of " +
                               std::to_string(lo.size()) + " (" + why.substr(colon + 2) + "):\n      OLD " + printable_line(lo[k]) +
                               "\n      NEW " + printable_line(ln[k]);
      // --partial leaves a record only for differing bits of a nondet
      // variant (its atomics may round differently run to run); a
      // deterministic variant's bits must not vary, and a one-sided output in
      // any later line is still a refusal.
      const bool nondet = v->mode == kernels::Mode::nondet;
      std::string later;
      if (bits && partial && nondet)
        for (size_t k2 = k + 1; k2 < lo.size() && later.empty(); ++k2) {
          if (lo[k2] == ln[k2]) continue;
          bool one_side = false;
          const std::string w2 = compare_digest_lines(lo[k2], ln[k2], one_side);
          if (!w2.empty() && w2.rfind("outputs differ", 0) != 0)
            later = who + ": " + w2 + " at case " + std::to_string(k2 + 1) + " of " + std::to_string(lo.size());
        }
      if (!later.empty())
        refused.push_back(later);
      else if (bits && partial && nondet)
        left.push_back(what + "\n    (left as it is: stale until its window is gated again)");
      else
        refused.push_back(what + (bits ? partial ? "\n    (a change of bits of a deterministic variant: --partial "
                                                   "leaves only a nondet variant's records; gate it again)"
                                                 : "\n    (a change of bits: gate it again)"
                                       : ""));
      continue;
    }
    if (msq_unmatched) ++msq_not_compared;
    kernels::Approval::Carry c;
    c.from_source_sha256 = x.source_sha256;
    c.to_source_sha256 = now;
    c.digests_old = d_old.sha256;
    c.digests_new = d_new.sha256;
    c.cases = static_cast<int64_t>(lo.size());
    c.gpu = d_new.gpu;
    c.date = date;
    c.normgate_commit = d_new.commit;
    done.push_back(who + ": " + x.source_sha256.substr(0, 12) + " -> " + now.substr(0, 12) + ", " +
                   std::to_string(lo.size()) + " cases bit for bit" +
                   (static_cast<int64_t>(lo.size()) == x.cases
                        ? std::string()
                        : " (the record says " + std::to_string(x.cases) +
                              ": its rebuilt campaign, gate.h approval_cases)"));
    x.carried.push_back(std::move(c));
    x.source_sha256 = now;
    ++carried;
    if (chain) ++by_chain;
    compared += lo.size();
  }
  for (const auto& n : notes) std::printf("note     %s\n", n.c_str());
  if (refused.empty())
    for (const auto& d : done) std::printf("carry    %s\n", d.c_str());
  if (refused.empty())
    for (const auto& l : left) std::printf("LEFT     %s\n", l.c_str());
  if (!refused.empty()) {
    return print_refused("carry", refused);
  }
  const std::string left_line =
      left.empty() ? std::string()
                   : "carry    " + std::to_string(left.size()) + (left.size() == 1 ? " record left as it is" : " records left as they are") +
                         " (outputs differ, --partial): gate their windows again\n";
  if (carried == 0) {
    if (!left.empty()) {
      std::printf("%scarry    nothing carried in %s (file unchanged)\n", left_line.c_str(), printable_line(path).c_str());
      return 1;
    }
    if (in_both == 0)  // the files are of other records (another file, or records sealed again since)
      std::printf("note     no record of %s is in both digests files (OLD has %zu entries, NEW %zu; they were "
                  "written from %s and %s): digest this file's records\n",
                  printable_line(path).c_str(), d_old.entries.size(), d_new.entries.size(),
                  nlohmann::json(d_old.approvals_file).dump().c_str(), nlohmann::json(d_new.approvals_file).dump().c_str());
    std::printf("carry    nothing to carry in %s (file unchanged)\n", printable_line(path).c_str());
    return 0;
  }
  write_files_atomic({{a.path, kernels::approvals_to_json_text(a)}});
  std::printf("carry    %s: %zu record%s carried on %zu cases\n", printable_line(path).c_str(), carried, carried == 1 ? "" : "s",
              compared);
  if (by_chain > 0)
    std::printf("note     %zu of them found in OLD through their last carry (OLD is the NEW digests of that carry, "
                "which named each record as it was before it)\n",
                by_chain);
  if (msq_not_compared > 0)
    std::printf("note     msq was digested on one side only for %zu of them (a normgate-digests/1 file of the "
                "GPU holds none): every other output compared\n",
                msq_not_compared);
  std::fputs(left_line.c_str(), stdout);
  return left.empty() ? 0 : 1;
}

// normgate approvals FILE --vouch V_DIGESTS W_DIGESTS (see the option's help;
// docs/perf/routes.md D23).
int vouch_approvals(const std::string& path, const std::string& v_path, const std::string& w_path) {
  const DigestFile dv = read_digests(v_path, "--vouch"), dw = read_digests(w_path, "--vouch");
  if (dv.sha256 == dw.sha256) throw std::invalid_argument("--vouch: the two digests files are one");
  if (!dv.ran_as.empty())
    throw std::invalid_argument("--vouch " + v_path + ": a `digest --as` file; the first file is the vouching "
                                "variant's own digests (`digest --variant V`)");
  if (dw.ran_as.empty())
    throw std::invalid_argument("--vouch " + w_path + ": not a `digest --as` file (`digest --variant V --as W`)");
  if (dv.backend != dw.backend || dv.gpu != dw.gpu)
    throw std::invalid_argument("--vouch: the files ran on " + dv.backend + " (" + dv.gpu + ") and " + dw.backend +
                                " (" + dw.gpu + "): the bits are compared on one kind of device");
  const std::string vn = dw.ran_as_of, wn = dw.ran_as;
  if (vn == wn) throw std::invalid_argument("--vouch " + w_path + ": ran_as names " + vn + " for itself");
  const kernels::Variant* v = kernels::find_variant(vn);
  const kernels::Variant* w = kernels::find_variant(wn);
  if (!v || !w) throw std::invalid_argument("--vouch " + w_path + ": this normgate has no variant " + (v ? wn : vn));
  // Both must serve V's op deterministically (kernels::serve_gap).
  for (const kernels::Variant* x : {v, w}) {
    const kernels::ServeGap g = kernels::serve_gap(*x, v->op, kernels::Mode::det);
    if (x->external || g == kernels::ServeGap::control || g == kernels::ServeGap::nondet)
      throw std::invalid_argument("--vouch: " + std::string(x->name) +
                                  " is not a deterministic variant of this build (a nondet variant's bits may differ "
                                  "run to run; controls and external variants neither vouch nor are vouched for)");
    if (g == kernels::ServeGap::op)
      throw std::invalid_argument("--vouch: " + vn + " and " + wn + " are of different ops");
  }
  const auto sv = dv.variants.find(vn), sw = dw.variants.find(wn);
  if (sv == dv.variants.end() || sv->second != v->source_sha256)
    throw std::invalid_argument("--vouch " + v_path + ": not run by this build's " + vn + " (source " +
                                std::string(v->source_sha256).substr(0, 12) + ")");
  if (sw == dw.variants.end() || sw->second != w->source_sha256)
    throw std::invalid_argument("--vouch " + w_path + ": not run by this build's " + wn + " (source " +
                                std::string(w->source_sha256).substr(0, 12) + ")");
  check_writable(core::rename_target(path), "APPROVALS");
  kernels::ApprovalsLock lock(path);
  kernels::Approvals a = kernels::load_approvals(path);
  // W's remembered rejections beside the table (rejections.h): a current
  // one inside a window refuses the vouch there (a case over budget).
  const kernels::Rejections rej = rejections_beside(path);
  std::vector<std::string> refused, notes, done;
  std::vector<kernels::Approval> add;
  size_t compared = 0;
  const std::string date = validators::detail::utc_now();
  for (const auto& x : a.records) {
    if (x.variant != vn) continue;
    const auto ev = dv.entries.find(x.record_sha256), ew = dw.entries.find(x.record_sha256);
    const std::string who = x.backend + " approval of " + x.window() + " -> " + vn;
    if (!x.invalid.empty()) {  // never vouches (as a carry never carries one)
      if (ev != dv.entries.end() || ew != dw.entries.end())
        refused.push_back("record " + x.record_sha256.substr(0, 12) + " is INVALID (" + x.invalid +
                          "): `normgate approvals` names it; it cannot vouch");
      continue;
    }
    if (ev == dv.entries.end() || ew == dw.entries.end()) {
      if (ev != dv.entries.end() || ew != dw.entries.end()) notes.push_back(who + ": in one digests file only");
      continue;
    }
    if (x.source_sha256 != v->source_sha256) {
      notes.push_back(who + ": keyed to another source of " + vn + " than this build's (stale); left out");
      continue;
    }
    if (x.has_vouch) {  // one step only: a failure of a gated record then reaches every record resting on it
      notes.push_back(who + ": itself vouched for by " + x.vouched.variant + "; a vouched record does not vouch "
                      "(vouch from " + x.vouched.variant + "'s record); left out");
      continue;
    }
    if (x.backend != dv.backend) {
      refused.push_back(who + ": the digests ran on backend " + dv.backend);
      continue;
    }
    if (x.backend == kernels::kGpuBackend && dv.gpu != x.gpu) {
      refused.push_back(who + ": gated on " + x.gpu + ", the digests ran on " + dv.gpu);
      continue;
    }
    auto names_x = [&](const DigestEntry& e) {
      return e.variant == vn && e.window == x.window() && e.source_sha256 == x.source_sha256;
    };
    if (!names_x(ev->second) || !names_x(ew->second)) {
      refused.push_back(who + ": an entry names another record (variant, window or source)");
      continue;
    }
    if (const kernels::CallShape shape{x.H, x.w, x.form};
        kernels::serve_gap(*w, x.op, kernels::Mode::det, &shape) != kernels::ServeGap::none) {
      refused.push_back(who + ": " + wn + " does not run this window");
      continue;
    }
    // W's own current gate record of this window and backend stays.
    if (std::any_of(a.records.begin(), a.records.end(), [&](const kernels::Approval& r) {
          return r.invalid.empty() && r.variant == wn && r.backend == x.backend && r.window() == x.window() &&
                 r.source_sha256 == w->source_sha256 && !r.has_vouch;
        })) {
      notes.push_back(who + ": " + wn + " has a current record of its own gate there; left as it is");
      continue;
    }
    std::string rejected;
    for (const auto& q : rej.records)
      if (rejected.empty() && q.variant == wn && q.source_sha256 == w->source_sha256 && q.backend == x.backend &&
          q.op == x.op && (x.op == kernels::Op::fwd || q.mode == x.mode) && q.H == x.H && q.w == x.w &&
          q.form == x.form && q.t_lo <= x.t_hi && x.t_lo <= q.t_hi)
        rejected = q.worst_case + " err/tol " + std::to_string(q.worst_err_tol) + " (" + q.worst_output + ")";
    if (!rejected.empty()) {
      refused.push_back(who + ": " + wn + " is rejected inside this window (" + rej.path + ": " + rejected + ")");
      continue;
    }
    const auto& lv = ev->second.lines;
    const auto& lw = ew->second.lines;
    std::string why = campaign_mismatch(x, {{vn + "'s file", &lv}, {wn + "'s file", &lw}});
    // Bit for bit: the same build wrote both lines, so the same outputs in
    // the same spelling.
    for (size_t k = 0; why.empty() && k < lv.size(); ++k)
      if (lv[k] != lw[k]) {
        bool msq_one_side = false;
        const std::string what = compare_digest_lines(lv[k], lw[k], msq_one_side);
        why = (what.empty() ? std::string("lines differ") : what) + " at case " + std::to_string(k + 1) + " of " +
              std::to_string(lv.size()) + ":\n      " + vn + " " + printable_line(lv[k]) + "\n      " + wn + " " +
              printable_line(lw[k]);
      }
    if (!why.empty()) {
      refused.push_back(who + ": " + why);
      continue;
    }
    kernels::Approval y = x;
    y.variant = wn;
    y.source_sha256 = std::string(w->source_sha256);
    y.carried.clear();
    y.has_vouch = true;
    y.vouched.variant = vn;
    y.vouched.record_sha256 = x.record_sha256;
    y.vouched.source_sha256 = x.source_sha256;
    y.vouched.digests_v = dv.sha256;
    y.vouched.digests_w = dw.sha256;
    y.vouched.cases = static_cast<int64_t>(lv.size());
    y.vouched.gpu = dv.gpu;
    y.vouched.date = date;
    y.vouched.normgate_commit = dw.commit;
    y.record_sha256.clear();
    compared += lv.size();
    done.push_back(who + " vouches for " + wn + ": " + std::to_string(lv.size()) + " cases bit for bit");
    add.push_back(std::move(y));
  }
  for (const auto& n : notes) std::printf("note     %s\n", n.c_str());
  if (!refused.empty()) {
    return print_refused("vouch", refused);
  }
  if (add.empty()) {
    std::printf("vouch    nothing to vouch for in %s (file unchanged)\n", printable_line(path).c_str());
    return 0;
  }
  // A record of the new one's window, variant and backend (of any source)
  // gives way to it, as a gate's renewal would.
  std::vector<kernels::Approval> keep;
  for (auto& r : a.records) {
    const bool replaced = r.invalid.empty() && std::any_of(add.begin(), add.end(), [&](const kernels::Approval& y) {
      return r.variant == y.variant && r.backend == y.backend && r.window() == y.window();
    });
    if (replaced) {
      std::printf("replaced %s approval of %s -> %s (source %s)\n", r.backend.c_str(), r.window().c_str(),
                  r.variant.c_str(), r.source_sha256.substr(0, 12).c_str());
      continue;
    }
    keep.push_back(std::move(r));
  }
  for (auto& y : add) keep.push_back(std::move(y));
  a.records = std::move(keep);
  write_files_atomic({{a.path, kernels::approvals_to_json_text(a)}});
  for (const auto& d : done) std::printf("vouch    %s\n", d.c_str());
  std::printf("vouch    %s: %zu record%s of %s added on %zu cases\n", printable_line(path).c_str(), add.size(),
              add.size() == 1 ? "" : "s", wn.c_str(), compared);
  return 0;
}

// normgate approvals FILE.rejections.json --recheck (see the option's help).
int recheck_rejections(const std::string& path, const std::string& backend_name, int threads) {
  constexpr std::string_view kSuffix = ".rejections.json";
  if (!named_rejections(path))
    throw std::invalid_argument(path + ": --recheck takes a rejections file named TABLE stem + .rejections.json");
  // The approvals file (and its lock, which record_rejections takes) beside
  // the file written: through a link, beside the file it points to, as a
  // derive of that table locks it (--merge-into does the same).
  const std::string real = core::rename_target(path);
  if (!named_rejections(real))
    throw std::invalid_argument(printable_line(path) + ": --recheck through a link to '" + printable_line(real) +
                                "', which is not named TABLE stem + .rejections.json");
  const std::string approvals_path = real.substr(0, real.size() - kSuffix.size()) + ".approvals.json";
  const validators::Backend backend = validators::resolve_backend(validators::parse_backend(backend_name));
  if (backend == validators::Backend::gpu && !kernels::gpu_available())
    throw std::invalid_argument("--backend gpu: no usable CUDA device (cpu-model records recheck with --backend cpu)");
  const std::string ran_on =
      backend == validators::Backend::gpu ? std::string(kernels::kGpuBackend) : std::string(kernels::kCpuModelBackend);
  kernels::Rejections file;
  try {
    file = kernels::load_rejections(path);
  } catch (const kernels::RouteTableError& e) {
    throw std::invalid_argument(e.what());
  }
  check_writable(core::rename_target(path), "REJECTIONS");
  // The stale records this build can re-prove: a variant it has, of another
  // source, whose claim for this source is not on file yet, of the backend
  // this run uses (a variant's source hash covers its CUDA sources, not its
  // CPU model: a model run says nothing about a changed kernel).
  std::vector<const kernels::Rejection*> todo;
  size_t other_backend = 0;
  for (const auto& x : file.records) {
    const kernels::Variant* v = kernels::find_variant(x.variant);
    if (v == nullptr) {
      std::printf("note     %s -> %s: this normgate has no variant %s; left as it is\n", x.window().c_str(),
                  printable_line(x.variant).c_str(), printable_line(x.variant).c_str());
      continue;
    }
    if (x.source_sha256 == v->source_sha256) continue;
    kernels::Rejection now = x;
    now.source_sha256 = std::string(v->source_sha256);
    if (std::any_of(file.records.begin(), file.records.end(),
                    [&](const kernels::Rejection& y) { return y.same_claim(now); }))
      continue;  // re-proved already (or gated again since)
    if (x.backend != ran_on) {
      ++other_backend;
      continue;
    }
    todo.push_back(&x);
  }
  if (other_backend)
    std::printf("note     %zu stale record%s of backend %s left as %s: a record is re-proved on its own backend "
                "(the CPU models are not in a variant's source hash; --backend %s)\n",
                other_backend, other_backend == 1 ? "" : "s", ran_on == kernels::kGpuBackend ? "cpu-model" : "gpu",
                other_backend == 1 ? "it is" : "they are", ran_on == kernels::kGpuBackend ? "cpu" : "gpu");
  // One run per (variant, case, forward only): det and nondet twins share
  // their failing case. The outputs the gate judges: y and rstd, and dx and
  // dw for a backward window (a forward-only check validates no dx, dw;
  // h_new is checked bitwise and never decides a rejection here).
  struct Run {
    double worst = 0;       // the largest err/tol of a judged output
    std::string out;        // its output
    std::string verdict;    // "fail", "pass", "inconclusive", or "error: ..."
  };
  using Key = std::tuple<std::string, std::string, bool>;
  std::map<Key, Run> runs;
  std::vector<Key> order;
  for (const auto* x : todo) {
    const Key k{x->variant, x->worst_case, x->op == kernels::Op::fwd};
    if (!runs.count(k)) {
      runs[k] = Run{};
      order.push_back(k);
    }
  }
  // Every case within host memory before the first runs (its inputs and
  // one implementation's outputs): a refusal naming the largest, not a
  // std::bad_alloc per case after hours of the smaller ones. A record whose
  // case does not parse fails in its own run below.
  {
    std::vector<seeds::CaseId> bwd_cases, fwd_cases;
    for (const Key& k : order) try {
        (std::get<2>(k) ? fwd_cases : bwd_cases).push_back(seeds::parse_case(std::get<1>(k)));
      } catch (const std::invalid_argument&) {
      }
    require_host_memory(bwd_cases, 1);
    require_host_memory(fwd_cases, 1, /*forward_only=*/true);
  }
  size_t done = 0, errors = 0;
  for (const Key& k : order) {
    Run& run = runs[k];
    try {
      validators::CheckRequest req;
      req.id = seeds::parse_case(std::get<1>(k));
      req.impls = validators::expand_impls({std::get<0>(k)});
      req.backend = backend;
      req.threads = threads;
      req.forward_only = std::get<2>(k);
      const validators::CheckReport rep = [&] {
        const ExitGuard exit_guard("the recheck");
        return validators::run_check(req);
      }();
      const auto& res = rep.impls.at(0).result;
      for (const auto& t : res.tensors) {
        const validators::Output o = t.output();
        if (o == validators::Output::h_new) continue;
        if (run.out.empty() || t.worst.ratio > run.worst) {
          run.worst = t.worst.ratio;
          run.out = std::string(validators::to_string(o));
        }
      }
      run.verdict = std::string(validators::to_string(res.verdict()));
    } catch (const std::exception& e) {  // this case only: the others still run and count
      run.verdict = std::string("error: ") + e.what();
      ++errors;
    }
    std::printf("case     %zu of %zu: %s -> %s%s: err/tol %.4g (%s), %s\n", ++done, order.size(),
                std::get<1>(k).c_str(), std::get<0>(k).c_str(), std::get<2>(k) ? " (forward only)" : "", run.worst,
                run.out.c_str(), run.verdict.c_str());
    std::fflush(stdout);
  }
  std::vector<kernels::Rejection> add;
  size_t not_kept = 0;
  const std::string date = validators::detail::utc_now();
  for (const auto* x : todo) {
    const Run& run = runs.at(Key{x->variant, x->worst_case, x->op == kernels::Op::fwd});
    // Over budget again: the verdict FAIL (an element certainly over) and
    // the largest judged err/tol above 1, as the gate's rejection is.
    if (run.verdict != "fail" || !(run.worst > 1.0)) {
      ++not_kept;
      std::printf("NOT KEPT %s -> %s: %s now err/tol %.4g (%s, %s) on %s; the rejection stays stale (derive gates "
                  "it again)\n",
                  x->window().c_str(), x->variant.c_str(), x->worst_case.c_str(), run.worst, run.out.c_str(),
                  run.verdict.c_str(), ran_on.c_str());
      continue;
    }
    kernels::Rejection n = *x;
    n.source_sha256 = std::string(kernels::variant(x->variant).source_sha256);
    n.worst_err_tol = run.worst;
    n.worst_output = run.out;
    n.date = date;
    n.normgate_commit = NORMGATE_GIT_COMMIT;
    n.normgate_version = NORMGATE_VERSION;
    if (ran_on == kernels::kGpuBackend) {
      const std::string dev = kernels::device_info().name;
      if (!dev.empty()) n.gpu = dev;
    }
    n.rechecked = kernels::Rejection::Recheck{ran_on, x->source_sha256, x->record_sha256};
    std::printf("kept     %s -> %s: %s err/tol %.4g (%s) on %s, source %s -> %s\n", x->window().c_str(),
                x->variant.c_str(), x->worst_case.c_str(), n.worst_err_tol, n.worst_output.c_str(), ran_on.c_str(),
                x->source_sha256.substr(0, 12).c_str(), n.source_sha256.substr(0, 12).c_str());
    add.push_back(std::move(n));
  }
  const size_t added = add.empty() ? 0 : kernels::record_rejections(path, approvals_path, add);
  std::printf("recheck  %s: %zu stale record%s of backend %s, %zu re-proved (%zu written), %zu not (%zu case%s "
              "failed to run)\n",
              printable_line(path).c_str(), todo.size(), todo.size() == 1 ? "" : "s", ran_on.c_str(), add.size(), added, not_kept,
              errors, errors == 1 ? "" : "s");
  return errors ? 3 : (not_kept || other_backend) ? 1 : 0;
}

// normgate approvals FILE --journal J... (see the option's help).

// A journal read for the check, with its header's campaign.
struct EvidenceJournal {
  std::string path;
  nlohmann::json campaign;
  validators::Journal j;
};

// Why record `x` is not what its journal `e` says up to line `head_line`
// (the line whose seal is x.journal_head), one entry per disagreement;
// `note` gets what was not compared, `unsure` why the record can be neither
// confirmed nor refuted (more cases than it counts). Empty: every check holds.
std::vector<std::string> record_vs_journal(const kernels::Approval& x, const EvidenceJournal& e, int64_t head_line,
                                           std::string& note, std::string& unsure) {
  namespace v = normgate::validators;
  std::vector<std::string> why;
  if (head_line != x.journal_lines)
    why.push_back("its head is line " + std::to_string(head_line) + ", the record says line " +
                  std::to_string(x.journal_lines));
  // The campaign the journal's header names against the record's.
  const nlohmann::json& c = e.campaign;
  auto field = [&](const char* k, const std::string& rec_value, const std::string& what) {
    std::string jv = "(absent)";
    if (c.contains(k)) jv = c[k].is_string() ? c[k].get<std::string>() : c[k].dump();
    if (jv != rec_value) why.push_back(what + " " + rec_value + " in the record, " + jv + " in the journal's campaign");
  };
  field("backend", x.backend, "backend");
  if (x.backend == kernels::kGpuBackend) field("device", x.gpu, "gpu");
  field("seeds", x.seed_set, "seed_set");
  if (!x.has_strength)
    why.push_back("no campaign strength fields (t_per_window, dense_*, fresh_*, oracle): every gate that binds a record "
                  "to its journal writes them");
  if (x.has_strength) {
    field("oracle", x.oracle, "oracle");
    field("t_per_window", std::to_string(x.t_per_window), "t_per_window");
    field("dense_points", std::to_string(x.dense_points), "dense_points");
    field("dense_step", std::to_string(x.dense_step), "dense_step");
    field("fresh_factor", std::to_string(x.fresh_factor), "fresh_factor");
    const bool all = c.contains("dense_all_seeds") && c["dense_all_seeds"] == true;
    if (all != x.dense_all_seeds)
      why.push_back(std::string("dense_seeds ") + (x.dense_all_seeds ? "all" : "worst") + " in the record, " +
                    (all ? "all" : "worst") + " in the journal's campaign");
  }
  // The variant whose results are the record's evidence: a vouched record's
  // numbers are the vouching variant's.
  const std::string ev = x.has_vouch ? x.vouched.variant : x.variant;
  if (!c.contains("variant_sha256") || !c["variant_sha256"].is_object() || !c["variant_sha256"].contains(ev))
    why.push_back("variant " + ev + " is not among the journal campaign's variants");
  // A forward window of the default forward reads its own runs' y and rstd
  // and a backward run's (gate.h: every backward run computes the default
  // forward), never another forward variant's.
  const bool any_impl = x.op == kernels::Op::fwd && ev == kernels::default_fwd().name;
  auto evidence = [&](const std::string& impl) {
    if (impl == ev) return true;
    if (!any_impl) return false;
    const kernels::Variant* iv = kernels::find_variant(impl);
    return iv && iv->op == kernels::Op::bwd;
  };
  struct Max {
    double ratio = -1;
    std::string case_id;
    int64_t line = 0;
  };
  std::map<std::string, Max> max;  // per output of the record's max_err_tol
  std::map<std::string, bool> attained;
  std::set<std::string> cases;
  std::set<int64_t> ts;  // the T of those cases
  std::set<std::string> fresh_found;  // "family:seed" of those cases
  double dw_vs_max = -1;  // their largest dw_vs_fp32 worst (NaN left out, as the gate does)
  const double inf = std::numeric_limits<double>::infinity();
  bool worst_found = false;
  std::string largest;
  double largest_v = -1;
  for (const auto& [k, val] : x.max_err_tol)
    if (largest.empty() || val > largest_v) {
      largest = k;
      largest_v = val;
    }
  // The record's outputs and their place in a result's out[] (Output order).
  // Form res's h_new (records made since the gate checks it) is index 4:
  // the result's h_new record.
  std::vector<std::pair<std::string, int>> outs;
  for (const auto& [name, val] : x.max_err_tol) {
    for (int o = 0; o < 4; ++o)
      if (name == v::to_string(static_cast<v::Output>(o))) outs.emplace_back(name, o);
    if (name == "h_new") outs.emplace_back(name, 4);
  }
  const auto& recs = e.j.resumed();
  for (size_t i = 0; i < recs.size(); ++i) {
    const int64_t line = e.j.resumed_lines()[i];
    if (line > head_line) break;
    const auto& r = recs[i];
    if (!r.error.empty()) continue;
    seeds::CaseId cid;
    try {
      cid = seeds::parse_case(r.case_id);
    } catch (const std::invalid_argument&) {
      continue;  // Journal::read checked every id
    }
    if (cid.H != x.H || cid.w != x.w || cid.form != x.form || cid.T < x.t_lo || cid.T > x.t_hi) continue;
    for (const auto& res : r.results) {
      if (!evidence(res.impl)) continue;
      // A forward-only record holds y and rstd only: evidence for a forward window.
      if (r.forward_only && x.op == kernels::Op::bwd) continue;
      cases.insert(r.case_id);
      ts.insert(cid.T);
      fresh_found.insert(std::string(seeds::to_string(cid.family)) + ":" + std::to_string(cid.seed));
      if (!r.forward_only && !std::isnan(res.dw_vs_fp32_worst)) dw_vs_max = std::max(dw_vs_max, res.dw_vs_fp32_worst);
      for (const auto& [name, k] : outs) {
        const double val = x.max_err_tol.at(name);
        // A result without h_new (a journal written before it was recorded)
        // holds no h_new err/tol: it attains nothing.
        if (k == 4 && !res.h_new) continue;
        const double got = k == 4 ? res.h_new->ratio : res.out[k].ratio;
        const double ratio = std::isnan(got) ? inf : got;
        if (ratio == val) attained[name] = true;
        if (ratio > max[name].ratio) max[name] = {ratio, r.case_id, line};
        if (name == largest && r.case_id == x.worst_case && ratio == val) worst_found = true;
      }
    }
  }
  const std::string of = " of " + ev + (any_impl ? " (its runs' and backward runs' forward)" : "");
  if (cases.empty()) {
    why.push_back("the journal holds no result" + of + " inside the window before its head");
    return why;
  }
  const int64_t n = static_cast<int64_t>(cases.size());
  if (n < x.cases)
    why.push_back("the record counts " + std::to_string(x.cases) + " cases, the journal holds " + std::to_string(n) +
                  " inside the window" + of + " before its head");
  // More cases than the record counts: another run's into this journal (a
  // --windows slice holding this variant inside the window, or backward
  // runs inside a forward window) or an edited record. The two cannot be
  // told apart here, so neither the maxima nor the count can be checked:
  // not OK, not a contradiction either (unsure).
  if (n > x.cases)
    unsure = "the journal holds " + std::to_string(n) + " cases inside the window" + of + " before its head, the " +
             "record counts " + std::to_string(x.cases) + ": another run's into this journal (a --windows slice) or " +
             "an edited record; check it against a journal of its own run";
  std::string no_t;
  for (const int64_t t : x.t_points)
    if (!ts.count(t)) no_t += (no_t.empty() ? "" : ", ") + std::to_string(t);
  if (!no_t.empty()) why.push_back("no case inside the window" + of + " at its T points " + no_t);
  // The refinement ran before the head: the fresh seeds' cases are there.
  if (x.has_strength && !x.fresh_seeds.empty()) {
    try {
      const seeds::SeedSet fs = seeds::parse_seed_set(x.fresh_seeds);
      uint64_t missing = 0;
      for (const auto& pt : fs.points())
        for (uint64_t sd = fs.first; sd <= fs.last; ++sd)
          missing += !fresh_found.count(std::string(seeds::to_string(pt.family)) + ":" + std::to_string(sd));
      if (missing)
        why.push_back(std::to_string(missing) + " of its fresh seeds " + x.fresh_seeds + " have no case inside the "
                      "window before its head (the refinement's cases)");
    } catch (const std::invalid_argument&) {
    }  // load_approvals checked the spelling
  }
  if (!worst_found)
    why.push_back("no result of its worst case " + x.worst_case + " holds its largest err/tol (" + largest + " " +
                  v::detail::fmt("%.17g", largest_v) + ")");
  for (const auto& [name, val] : x.max_err_tol) {
    if (!attained[name]) {
      why.push_back("no result inside the window holds its " + name + " err/tol " + v::detail::fmt("%.17g", val));
      continue;
    }
    if (unsure.empty() && max[name].ratio > val)
      why.push_back("the journal holds a larger " + name + " err/tol, " + v::detail::fmt("%.17g", max[name].ratio) +
                    " (case " + max[name].case_id + ", line " + std::to_string(max[name].line) + "), than its " +
                    v::detail::fmt("%.17g", val));
  }
  if (x.op == kernels::Op::bwd && x.has_strength) {
    const double want = x.dw_vs_fp32_worst;
    const bool same = std::isnan(want) ? dw_vs_max < 0 : dw_vs_max == want;
    if (!same && unsure.empty())
      why.push_back("dw_vs_fp32_worst " + v::detail::fmt("%.17g", want) + " in the record, " +
                    (dw_vs_max < 0 ? std::string("none") : v::detail::fmt("%.17g", dw_vs_max)) + " in the journal");
  }
  // Re-keys (tools/rekey_approvals.py) and carries move source_sha256: said, not failed.
  if (c.contains("variant_sha256") && c["variant_sha256"].is_object() && c["variant_sha256"].contains(ev)) {
    const auto& js = c["variant_sha256"][ev];
    const std::string src = x.has_vouch ? x.vouched.source_sha256
                                        : (x.carried.empty() ? x.source_sha256 : x.carried.front().from_source_sha256);
    if (js.is_string() && js.get<std::string>() != src)
      note = "source_sha256 " + src.substr(0, 12) + " where the journal's campaign ran " +
             js.get<std::string>().substr(0, 12) + " (re-keyed or carried since: not compared)";
  }
  return why;
}

int check_journals(const std::string& path, const std::vector<std::string>& journals) {
  namespace v = normgate::validators;
  if (is_rejections_file(path))
    throw std::invalid_argument(path + ": a rejections file; --journal takes an approvals file");
  const kernels::Approvals a = kernels::load_approvals(path);
  const bool keyed = !v::journal_key().empty();  // refused key files: exit 2 before any reading
  std::vector<EvidenceJournal> read;
  std::vector<std::string> given;  // resolved paths: a journal named twice is read once
  size_t broken = 0;
  for (const auto& f : journals) {
    if (const std::string why = core::regular_file_problem(f); !why.empty())
      throw std::invalid_argument("--journal " + printable_line(f) + ": " + why + " (a gate journal is needed)");
    const std::string real = resolve(f);
    if (std::find(given.begin(), given.end(), real) != given.end()) {
      std::printf("journal  %s: given before (as the same file); read once\n", printable_line(f).c_str());
      continue;
    }
    given.push_back(real);
    if (is_rejections_file(f) || f == path || real == resolve(path))
      throw std::invalid_argument("--journal " + printable_line(f) + ": an approvals or rejections file, not a gate "
                                  "journal");
    // A journal a running gate holds (its flock) is still being written.
    {
      const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        const bool busy = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
        ::close(fd);
        if (busy)
          throw std::invalid_argument("--journal " + printable_line(f) + ": in use by a running normgate gate (it "
                                      "holds the file's lock): check it once that gate has ended");
      }
    }
    // A damaged journal is a verdict (exit 1); a file that is no journal, one
    // of another format, or one sealed under another key setting is usage (2).
    auto invalid = [&](const std::string& what) {
      std::printf("journal  %s: INVALID (changed after normgate wrote it, or damaged): %s\n", printable_line(f).c_str(),
                  printable_line(what).c_str());
      ++broken;
    };
    nlohmann::json campaign;
    try {
      campaign = v::journal_campaign(f);
    } catch (const v::JournalError&) {
      throw;
    } catch (const std::invalid_argument& e) {
      std::ifstream in(f, std::ios::binary);
      std::string first;
      std::getline(in, first);
      if (first.find("\"normgate_journal\":") == std::string::npos || first.rfind("{\"campaign\":", 0) != 0) throw;
      invalid(e.what());  // a journal header whose seal fails
      continue;
    }
    try {
      read.push_back({f, campaign, v::Journal::read(f, campaign)});
    } catch (const v::JournalError&) {
      throw;
    } catch (const std::invalid_argument& e) {
      invalid(e.what());
      continue;
    }
    const auto& j = read.back().j;
    std::printf("journal  %s: %zu lines, every seal and the chain hold (%s)%s\n", printable_line(f).c_str(),
                j.seals().size(),
                keyed ? "HMAC-SHA256 under the journal key" : "plain SHA-256: anyone can recompute it",
                j.dropped_bytes() ? (", a torn last line of " + std::to_string(j.dropped_bytes()) + " bytes left out").c_str()
                                  : "");
  }
  // Every line's seal -> (journal, line number).
  std::map<std::string, std::pair<size_t, int64_t>> at;
  for (size_t i = 0; i < read.size(); ++i)
    for (size_t k = 0; k < read[i].j.seals().size(); ++k)
      at.emplace(read[i].j.seals()[k], std::make_pair(i, static_cast<int64_t>(k + 1)));
  size_t ok = 0, failed = 0, unsure_n = 0, unbound = 0, invalid = 0;
  std::vector<std::string> elsewhere;
  for (const auto& x : a.records) {
    if (!x.invalid.empty()) {
      std::printf("INVALID  %s\n", printable_line(x.invalid).c_str());
      ++invalid;
      continue;
    }
    if (x.journal_head.empty()) {
      ++unbound;
      continue;
    }
    const std::string what = x.window() + " -> " + x.variant + " (" + x.backend + ")";
    const auto hit = at.find(x.journal_head);
    if (hit == at.end()) {
      elsewhere.push_back(what + ": head " + x.journal_head.substr(0, 12) + ", line " +
                          std::to_string(x.journal_lines));
      continue;
    }
    const auto& [ji, line] = hit->second;
    const EvidenceJournal& e = read[ji];
    std::string note, unsure;
    const std::vector<std::string> why = record_vs_journal(x, e, line, note, unsure);
    if (why.empty() && !unsure.empty()) {
      std::printf("UNSURE   %s: %s line %lld is its head; %s\n", what.c_str(), printable_line(e.path).c_str(),
                  static_cast<long long>(line), printable_line(unsure).c_str());
      ++unsure_n;
      continue;
    }
    if (!why.empty()) {
      std::printf("FAIL     %s: not what its journal %s says up to line %lld:\n", what.c_str(),
                  printable_line(e.path).c_str(), static_cast<long long>(line));
      for (const auto& w : why) std::printf("           - %s\n", printable_line(w).c_str());
      ++failed;
      continue;
    }
    std::printf("OK       %s: %s line %lld is its head %s; its campaign, cases, worst case and max err/tol are the "
                "journal's%s\n",
                what.c_str(), printable_line(e.path).c_str(), static_cast<long long>(line),
                x.journal_head.substr(0, 12).c_str(), note.empty() ? "" : (" (" + note + ")").c_str());
    ++ok;
  }
  for (size_t i = 0; i < elsewhere.size() && i < 5; ++i) std::printf("unchecked %s\n", printable_line(elsewhere[i]).c_str());
  if (elsewhere.size() > 5) std::printf("unchecked ... and %zu more\n", elsewhere.size() - 5);
  std::printf("checked  %s: %s checked against the journals, %zu FAIL, %zu UNSURE; %zu bound to a journal "
              "not given%s, %zu without a journal (gated without --journal, or before approvals carried one), %zu "
              "INVALID\n",
              printable_line(path).c_str(), validators::detail::counted(ok + failed + unsure_n, "record").c_str(),
              failed, unsure_n, elsewhere.size(),
              broken ? (" or INVALID (" + validators::detail::counted(broken, "journal") + " INVALID above)").c_str()
                     : "",
              unbound, invalid);
  if (ok + failed + unsure_n == 0 && !broken)
    std::printf("none     no record of %s rests on the given journal%s (a journal cut short before a record's "
                "head does not hold it)\n",
                printable_line(path).c_str(), journals.size() == 1 ? "" : "s");
  return failed || unsure_n || broken || invalid || ok == 0 ? 1 : 0;
}

}  // namespace

void add_approvals(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand(
      "approvals",
      "Check approvals files record by record (routing/include/normgate/routing/routing.h, \"Validation\": fields, "
      "ranges, record_sha256), and rejections files (TABLE stem + .rejections.json, rejections.h: one bad record "
      "makes the file INVALID, named with its reason): exit 0 when every record is valid, 1 when one is INVALID "
      "(each listed with its reason). --seal adds record_sha256 to approvals records written before records carried "
      "it (rejections are always sealed). --merge-into TARGET adds the files' approvals records to TARGET. "
      "--carry OLD NEW re-keys records to this build's source when two digests files (`normgate digest`) agree "
      "bit for bit (--partial: a nondet variant's records that agree). --vouch V_DIGESTS W_DIGESTS gives a "
      "deterministic variant W the records of another, V, whose campaigns W ran bit for bit as V did. --recheck "
      "re-proves a rejections file's stale records by running their failing cases again. --journal J... checks each "
      "record against the gate journal it came from");
  struct Opts {
    std::vector<std::string> files;
    bool seal = false;
    std::string merge_into;
    std::vector<std::string> carry;
    std::vector<std::string> vouch;
    bool partial = false;
    bool recheck = false;
    std::vector<std::string> journals;
    std::string backend = "auto";
    int threads = 0;
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
                  "records of one slot with one date are refused; a record refuted by a failure remembered in TARGET's "
                  "rejections file (TABLE stem + .rejections.json: the same variant, source and backend failed a "
                  "case over budget in an overlapping window; gate --approve remembers its failures there) is "
                  "refused; the rest are appended. Refused (exit 1, nothing "
                  "written) while any record of any file or of TARGET is INVALID or unsealed. Never removes a "
                  "record: a revocation in a FILE (a window that failed there) is not carried over. Waits for and "
                  "holds TARGET.lock (of the file a link points to) from its read to the rename, as gate --approve; "
                  "written atomically");
  auto* carry_opt =
      sub->add_option("--carry", o->carry,
                      "OLD NEW: carry each record of FILE that both digests files (`normgate digest`) ran to this "
                      "build's source of its variant, when OLD was run by the build the record names "
                      "(source_sha256), NEW by this one, on one kind of device, and every output of every case is "
                      "bit for bit the same; the record keeps its verdict and gains a 'carried' entry naming both "
                      "files' file_sha256 (docs/perf/routes.md D19). OLD may be the NEW digests of the record's last carry "
                      "(found through that carry's digests_new). Exit 0 written or nothing to carry, 1 a record refused "
                      "(nothing written) or, with --partial, left; 2 usage (OLD and NEW the same file or of one "
                      "clean commit, another kind of device, a --as file). "
                      "One approvals FILE; holds FILE.lock; written atomically")
          ->expected(2);
  auto* vouch_opt =
      sub->add_option("--vouch", o->vouch,
                      "V_DIGESTS W_DIGESTS: approval by bitwise equivalence (docs/perf/routes.md D23). V_DIGESTS is "
                      "`normgate digest FILE --variant V` and W_DIGESTS `normgate digest FILE --variant V --as W`, "
                      "both by this build of two deterministic variants of one op, on one kind of device: each "
                      "current record of V whose campaign W ran bit for bit as V did gives W a record of the same "
                      "window and verdict with a 'vouched' entry (it replaces W's record of that window and backend, "
                      "of any source). V_DIGESTS must not be a --as file, W_DIGESTS must be one naming V; a GPU record "
                      "is compared on the GPU model it was gated on. Exit 0 written or nothing to vouch for, 1 a "
                      "record refused (nothing written), 2 usage (files swapped, another device or build, a nondet "
                      "or control variant). One approvals FILE; holds FILE.lock; written atomically")
          ->expected(2);
  auto* partial_opt = sub->add_flag(
      "--partial", o->partial,
      "With --carry: a record whose outputs differ somewhere is left as it is (stale; its window is gated again) "
      "instead of refusing the whole carry, and the records that agree bit for bit are carried and written; exit 1 "
      "when one is left. Only a nondet variant's records (its atomics may round differently run to run; "
      "docs/perf/routes.md D21): a deterministic variant's differing bits, and any output digested on one side "
      "only, still refuse the whole carry, writing nothing");
  auto* recheck_opt = sub->add_flag(
      "--recheck", o->recheck,
      "One rejections FILE: run the failing case of each record whose variant's source changed since (stale) "
      "with this build's variant, once per case, on --backend, which must be the record's own (gpu records on "
      "the GPU, cpu-model records on the CPU models: a variant's source hash does not cover its CPU model); a "
      "case over budget again (FAIL, err/tol > 1 on y, rstd, dx or dw) re-proves the rejection: a record keyed "
      "to this source is appended, with a 'rechecked' entry naming the earlier record and where it ran "
      "(rejections.h, docs/perf/routes.md D22); the others stay stale and derive gates them again. Exit 0 when "
      "every stale record was re-proved, 1 when one was not (or is of the other backend), 3 when a case failed "
      "to run (the others still run and are written); holds the table's approvals lock while writing; written "
      "atomically");
  auto* journal_opt = sub->add_option(
      "--journal", o->journals,
      "JOURNAL...: check the records of one approvals FILE against the gate journals they came from. A record "
      "written by `gate --journal --approve` holds the journal's chain head then (its last line's seal) and line "
      "count (\"journal\", docs/schemas.md); each JOURNAL is read as a resume reads it (every line's seal, the "
      "chain, every record; under NORMGATE_JOURNAL_KEY_FILE's key when set), and each record whose head is a line "
      "of one is checked against it up to that line: the campaign, the T points, the fresh seeds, the cases, the "
      "worst case and every maximum (docs/schemas.md, Approvals): OK, FAIL (each disagreement named) or UNSURE "
      "(the journal holds more cases than the record counts: another run's, or an edit). Exit 0 when at least one "
      "record was checked and every one is OK; 1 for a FAIL, an UNSURE, an INVALID journal or record, or no record "
      "resting on the journals given; 2 usage (not a journal, another format, a key mismatch, a journal a running "
      "gate holds). Records of journals not given are listed, not checked");
  auto* backend_opt = sub->add_option("--backend", o->backend, "With --recheck: where the cases run: gpu, cpu (the "
                                                               "CPU models), auto (gpu when one is usable)")
                          ->check(CLI::IsMember({"auto", "cpu", "gpu"}))
                          ->capture_default_str();
  auto* threads_opt =
      sub->add_option("--threads", o->threads, "With --recheck: OpenMP threads for the generator, models and oracle "
                                               "(0: default)")
          ->check(CLI::Range(0, 4096));
  sub->callback([&cmds, o, merge_opt, carry_opt, vouch_opt, partial_opt, recheck_opt, backend_opt, threads_opt,
                 journal_opt] {
    const bool journaling = journal_opt->count() > 0;
    const bool merging = merge_opt->count() > 0;
    const bool carrying = carry_opt->count() > 0;
    const bool vouching = vouch_opt->count() > 0;
    const bool partial = partial_opt->count() > 0;
    const bool rechecking = recheck_opt->count() > 0;
    const bool recheck_args = backend_opt->count() > 0 || threads_opt->count() > 0;
    cmds.run = [o, merging, carrying, vouching, partial, rechecking, recheck_args, journaling]() -> int {
      if (partial && !carrying) throw std::invalid_argument("--partial goes with --carry only");
      if (recheck_args && !rechecking) throw std::invalid_argument("--backend and --threads go with --recheck only");
      if (journaling) {
        if (merging || carrying || vouching || rechecking || o->seal)
          throw std::invalid_argument(
              "--journal goes alone (not with --seal, --merge-into, --carry, --vouch or --recheck)");
        if (o->files.size() != 1)
          throw std::invalid_argument("--journal checks one approvals file, got " + std::to_string(o->files.size()));
        if (const std::string why = core::regular_file_problem(o->files[0]); !why.empty())
          throw std::invalid_argument(printable_line(o->files[0]) + ": " + why + ", not an approvals file");
        return check_journals(o->files[0], o->journals);
      }
      if (rechecking) {
        if (merging || carrying || o->seal)
          throw std::invalid_argument("--recheck goes alone (not with --seal, --merge-into or --carry)");
        if (o->files.size() != 1)
          throw std::invalid_argument("--recheck takes one rejections file, got " + std::to_string(o->files.size()));
        // core::regular_file_problem: "is a directory", a link loop, a FIFO
        // ... named (a loop was a filesystem_error, exit 3).
        if (const std::string why = core::regular_file_problem(o->files[0]); !why.empty())
          throw std::invalid_argument(printable_line(o->files[0]) + ": " + why +
                                      (why == "no such file" ? " (--recheck takes a rejections file)"
                                                             : ", not a rejections file"));
        if (!is_rejections_file(o->files[0]))
          throw std::invalid_argument(o->files[0] + ": not a rejections file (its \"format\" is not "
                                                    "normgate-rejections/1); --recheck takes a rejections file");
        return recheck_rejections(o->files[0], o->backend, o->threads);
      }
      // --vouch and --carry: one approvals file and two digests files.
      auto one_file_two_digests = [&o](const char* opt, const std::vector<std::string>& digests,
                                       const char* which) {
        if (o->files.size() != 1)
          throw std::invalid_argument(std::string(opt) + " takes one approvals file, got " +
                                      std::to_string(o->files.size()));
        if (digests.size() != 2) throw std::invalid_argument(std::string(opt) + " needs two digests files, " + which);
        if (const std::string why = core::regular_file_problem(o->files[0]); !why.empty())
          throw std::invalid_argument(printable_line(o->files[0]) + ": " + why + ", not an approvals file");
        if (is_rejections_file(o->files[0]))
          throw std::invalid_argument(o->files[0] + ": a rejections file; " + opt + " takes an approvals file");
      };
      if (vouching) {
        if (merging || carrying || rechecking || o->seal)
          throw std::invalid_argument("--vouch goes alone (not with --seal, --merge-into, --carry or --recheck)");
        one_file_two_digests("--vouch", o->vouch, "V's and W's");
        return vouch_approvals(o->files[0], o->vouch[0], o->vouch[1]);
      }
      if (carrying) {
        if (merging || o->seal) throw std::invalid_argument("--carry goes alone (not with --seal or --merge-into)");
        one_file_two_digests("--carry", o->carry, "OLD and NEW");
        return carry_approvals(o->files[0], o->carry[0], o->carry[1], o->partial);
      }
      namespace fs = std::filesystem;
      for (const auto& f : o->files) {
        if (f.empty()) throw std::invalid_argument("an approvals path is empty");
        if (const std::string why = core::regular_file_problem(f); !why.empty())
          throw std::invalid_argument(f + ": " + why +
                                      (why == "is a directory" ? " (give the file, e.g. FOLDER/sm90a.approvals.json)"
                                                               : " (an approvals or rejections file is needed)"));
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
            std::printf("%s: %zu rejection records, %zu valid, 0 INVALID\n", printable_line(f).c_str(), r.records.size(),
                        r.records.size());
          } catch (const kernels::RouteTableError& e) {
            std::printf("%s: rejections file INVALID\n  INVALID  %s\n", printable_line(f).c_str(), printable_line(e.what()).c_str());
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
        std::printf("%s: %zu records, %zu valid, %zu without record_sha256, %zu INVALID\n", printable_line(f).c_str(),
                    a.records.size(), a.records.size() - n_invalid - n_unsealed, n_unsealed, n_invalid);
        for (const auto& x : a.records)
          if (!x.invalid.empty() && (!x.unsealed || !o->seal))
            std::printf("  %s %s\n", x.unsealed ? "unsealed" : "INVALID ", printable_line(x.invalid).c_str());
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
        std::printf("seal     %s: %zu record%s sealed\n", printable_line(a.path).c_str(), n, n == 1 ? "" : "s");
      }
      write_files_atomic(texts);  // all files or none (apps/commands.h)
      return 0;
    };
  });
}

}  // namespace normgate::app
