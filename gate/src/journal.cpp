// gate/src/journal.cpp: the gate's write-ahead journal (journal.h).
#include "normgate/gate/journal.h"

#include "normgate/core/json_number.h"
#include "normgate/core/printable.h"
#include "normgate/harness/external.h"  // kNondeterministicError
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"  // sha256_hex

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <utility>

namespace normgate::validators {

namespace {

constexpr const char* kOutNames[4] = {"y", "rstd", "dx", "dw"};

// The digest member journal_line appends: ,"sha256":"<64 hex>"}, or with a
// journal key ,"hmac_sha256":"<64 hex>"}.
constexpr std::string_view kDigestOpen = ",\"sha256\":\"";
constexpr std::string_view kHmacOpen = ",\"hmac_sha256\":\"";
constexpr size_t kDigestLen = 64;
constexpr size_t kDigestTail = kDigestOpen.size() + kDigestLen + 2;  // + "}
constexpr size_t kHmacTail = kHmacOpen.size() + kDigestLen + 2;

// The process's journal key (set_journal_key, or NORMGATE_JOURNAL_KEY_FILE
// read on first use).
std::mutex g_key_mutex;
bool g_key_known = false;
std::string g_key;

// A journal file that starts as gzip does (tools/journal_merge.py writes
// OUT.gz so): named as such, not as "no journal header".
JournalError gzip_error(const std::string& path) {
  return JournalError("'" + path + "' is gzip-compressed; the gate reads plain journal files: gunzip it "
                      "(gunzip -k FILE) and give the uncompressed file");
}

bool is_hex_digit(char ch) { return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'); }

// A JSON string of 64 lowercase hex digits: what a seal, and a "prev", is.
bool is_seal_text(const nlohmann::json& v) {
  if (!v.is_string()) return false;
  const auto& t = v.get_ref<const std::string&>();
  return t.size() == kDigestLen && std::all_of(t.begin(), t.end(), is_hex_digit);
}

// What a blank line holds: nothing else than these.
constexpr const char* kBlank = " \t\r\n";

const nlohmann::json& field(const nlohmann::json& j, const std::string& k) {
  if (!j.is_object() || !j.contains(k)) throw std::invalid_argument("missing field '" + k + "'");
  return j.at(k);
}

std::string str(const nlohmann::json& j, const std::string& k) {
  const auto& v = field(j, k);
  if (!v.is_string()) throw std::invalid_argument("field '" + k + "' must be a string");
  return v.get<std::string>();
}

// Refuse members other than `known` (a record written by normgate has no others).
void only_members(const nlohmann::json& j, std::initializer_list<const char*> known, const std::string& where) {
  for (const auto& [k, v] : j.items()) {
    bool ok = false;
    for (const char* n : known) ok = ok || k == n;
    if (!ok) throw std::invalid_argument(where + " has an unknown field '" + k + "'");
  }
}

std::string num_text(double v) { return json_number(v).dump(); }

// Element count of output k (y, rstd, dx, dw) for case c.
int64_t numel_of(const seeds::CaseId& c, int k) {
  const int64_t rows = c.rows();
  switch (k) {
    case 1: return rows;
    case 3: return c.H;
    default: return rows * c.H;
  }
}

// One output's record checked against its element count (journal.h).
void check_output(const OutputRecord& o, int64_t numel, const std::string& name) {
  const std::string at = "field '" + name + "' ";
  if (std::isnan(o.ratio)) {  // not produced
    if (o.index != -1 || o.over != 0 || !std::isnan(o.forced) || o.pass)
      throw std::invalid_argument(at + "has ratio nan (output not produced) but not index -1, over 0, forced nan, "
                                  "pass false");
    return;
  }
  if (!(o.ratio >= 0)) throw std::invalid_argument(at + "has ratio " + num_text(o.ratio) + " < 0");
  if (!(o.forced >= 0)) throw std::invalid_argument(at + "has forced " + num_text(o.forced) + " (must be >= 0)");
  if (numel == 0) {
    if (o.index != -1 || o.ratio != 0 || o.over != 0 || !o.pass)
      throw std::invalid_argument(at + "is of an empty tensor (0 elements): it must be [0, -1, 0, forced, true]");
    return;
  }
  if (o.index < 0 || o.index >= numel)
    throw std::invalid_argument(at + "has index " + std::to_string(o.index) + " outside [0, " + std::to_string(numel) +
                                ") (the case's " + std::to_string(numel) + " elements)");
  if (o.over < 0 || o.over > numel)
    throw std::invalid_argument(at + "has over " + std::to_string(o.over) + " outside [0, " + std::to_string(numel) +
                                "]");
  if ((o.over > 0) != (o.ratio > 1))
    throw std::invalid_argument(at + "has over " + std::to_string(o.over) + " with ratio " + num_text(o.ratio) +
                                " (over > 0 exactly when the worst ratio is > 1)");
  if (o.pass && o.over > 0)
    throw std::invalid_argument(at + "has pass true with over " + std::to_string(o.over));
}

// The JSON of one implementation's results (a member of a record's
// "results"); of a forward-only record: y and rstd only.
nlohmann::json impl_json(const ImplRecord& x, bool forward_only) {
  nlohmann::json o;
  o["impl"] = x.impl;
  o["ran_on"] = x.ran_on;
  for (int k = 0; k < (forward_only ? 2 : 4); ++k)
    o[kOutNames[k]] = {json_number(x.out[k].ratio), x.out[k].index, x.out[k].over, json_number(x.out[k].forced),
                       x.out[k].pass};
  if (x.h_new)
    o["h_new"] = {json_number(x.h_new->ratio), x.h_new->index, x.h_new->over, json_number(x.h_new->forced),
                  x.h_new->pass};
  if (!forward_only) o["dw_vs_fp32"] = {json_number(x.dw_vs_fp32_worst), json_number(x.dw_vs_fp32_median)};
  return o;
}

constexpr OutputRecord kNotProduced{std::numeric_limits<double>::quiet_NaN(), -1, 0,
                                    std::numeric_limits<double>::quiet_NaN(), false};

std::string clip(const std::string& s, size_t n = 300) { return s.size() <= n ? s : s.substr(0, n) + "..."; }

[[noreturn]] void sys_fail(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " '" + path + "': " + std::strerror(errno));
}

void write_all(int fd, const std::string& s, const std::string& path) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) sys_fail("cannot write journal", path);
    off += static_cast<size_t>(n);
  }
}

void fsync_dir_of(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

std::string header_line(const nlohmann::json& campaign) {
  return journal_line(nlohmann::json{{"normgate_journal", kJournalFormat}, {"campaign", campaign}});
}

}  // namespace

CaseRecord make_case_record(const CheckReport& rep, double seconds) {
  CaseRecord r;
  r.case_id = seeds::to_string(rep.request.id);
  r.impls = rep.request.impls;
  r.seconds = seconds;
  r.forward_only = rep.request.forward_only;
  for (const auto& ir : rep.impls) {
    ImplRecord x;
    x.impl = ir.impl;
    x.ran_on = ir.ran_on;
    // An output left out of the validation (not produced by an external
    // forward implementation, harness/external.h) is NaN and failing, so
    // that no window can ever pass on it.
    auto record_of = [&ir](Output out) {
      for (const auto& s : ir.result.tensors)
        if (s.output() == out) return OutputRecord{s.worst.ratio, s.worst.index, s.over, s.worst.forced, s.pass()};
      return kNotProduced;
    };
    for (int k = 0; k < 4; ++k) x.out[k] = record_of(static_cast<Output>(k));
    // Form res: h_new is owed by every implementation (the forward's
    // output); one that did not produce it is recorded as not produced.
    if (rep.request.id.form == Form::res) x.h_new = record_of(Output::h_new);
    x.dw_vs_fp32_worst = ir.result.dw_vs_fp32_worst;
    x.dw_vs_fp32_median = ir.result.dw_vs_fp32_median;
    r.results.push_back(std::move(x));
  }
  return r;
}

nlohmann::json to_json(const CaseRecord& r) {
  nlohmann::json j;
  j["case"] = r.case_id;
  j["impls"] = r.impls;
  if (!r.error.empty()) j["error"] = r.error;
  const bool fwd = r.forward_only && r.error.empty();
  if (fwd) j["outputs"] = "fwd";
  j["results"] = nlohmann::json::array();
  for (const auto& x : r.results) j["results"].push_back(impl_json(x, fwd));
  j["seconds"] = r.seconds;
  return j;
}

CaseRecord case_record_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("a record must be a JSON object");
  only_members(j, {"case", "impls", "error", "results", "seconds", "outputs", kJournalChainMember}, "the record");
  if (j.contains(kJournalChainMember) && !is_seal_text(j[kJournalChainMember]))
    throw std::invalid_argument(std::string("field '") + kJournalChainMember +
                                "' must be a seal: 64 lowercase hex digits");
  CaseRecord r;
  r.case_id = str(j, "case");
  seeds::CaseId c;
  try {
    c = seeds::parse_case(r.case_id);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("field 'case': ") + e.what());
  }
  if (seeds::to_string(c) != r.case_id)
    throw std::invalid_argument("field 'case' is '" + r.case_id + "', not in canonical spelling ('" +
                                seeds::to_string(c) + "')");
  const auto& impls = field(j, "impls");
  if (!impls.is_array() || impls.empty()) throw std::invalid_argument("field 'impls' must be a non-empty array");
  std::set<std::string> distinct;
  for (const auto& i : impls) {
    if (!i.is_string() || i.get<std::string>().empty())
      throw std::invalid_argument("field 'impls' must hold non-empty strings");
    r.impls.push_back(i.get<std::string>());
    if (!distinct.insert(r.impls.back()).second)
      throw std::invalid_argument("field 'impls' names " + r.impls.back() + " twice");
  }
  if (j.contains("error")) {
    r.error = str(j, "error");
    if (r.error.empty()) throw std::invalid_argument("field 'error' is empty");
  }
  if (j.contains("outputs")) {  // a forward-only record (CaseRecord::forward_only)
    if (str(j, "outputs") != "fwd")
      throw std::invalid_argument("field 'outputs' is '" + str(j, "outputs") + "' (only \"fwd\": a forward-only record)");
    if (!r.error.empty()) throw std::invalid_argument("record has both an error and 'outputs'");
    r.forward_only = true;
  }
  const int nout = r.forward_only ? 2 : 4;
  const auto& res = field(j, "results");
  if (!res.is_array()) throw std::invalid_argument("field 'results' must be an array");
  for (const auto& o : res) {
    if (!o.is_object()) throw std::invalid_argument("field 'results' must hold objects");
    if (r.forward_only)
      only_members(o, {"impl", "ran_on", "y", "rstd", "h_new"}, "a result of a forward-only record");
    else
      only_members(o, {"impl", "ran_on", "y", "rstd", "dx", "dw", "dw_vs_fp32", "h_new"}, "a result");
    ImplRecord x;
    x.impl = str(o, "impl");
    x.ran_on = str(o, "ran_on");
    if (x.ran_on.empty()) throw std::invalid_argument("field 'ran_on' of " + x.impl + " is empty");
    for (int k = nout; k < 4; ++k) x.out[k] = kNotProduced;  // forward only: dx, dw not checked
    // One output's [ratio, index, over, forced, pass], checked against the
    // element count of its tensor in this case.
    auto output_of = [&](const char* name, int64_t numel) {
      const auto& a = field(o, name);
      if (!a.is_array() || a.size() != 5 || !a[1].is_number_integer() || !a[2].is_number_integer() ||
          !a[4].is_boolean())
        throw std::invalid_argument(std::string("field '") + name + "' must be [ratio, index, over, forced, pass]");
      // An unsigned beyond int64 is out of every range check_output applies.
      auto int_of = [](const nlohmann::json& v) {
        return v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                   ? std::numeric_limits<int64_t>::min()
                   : v.get<int64_t>();
      };
      const OutputRecord rec{from_json_number(a[0], name), int_of(a[1]), int_of(a[2]), from_json_number(a[3], name),
                             a[4].get<bool>()};
      check_output(rec, numel, x.impl + "." + name);
      return rec;
    };
    for (int k = 0; k < nout; ++k) x.out[k] = output_of(kOutNames[k], numel_of(c, k));
    if (o.contains("h_new")) {  // form res only (absent in journals written before it was recorded)
      if (c.form != Form::res)
        throw std::invalid_argument("field 'h_new' of " + x.impl + " in a case of form " + std::string(to_string(c.form)) +
                                    " (only form res has h_new)");
      x.h_new = output_of("h_new", c.rows() * c.H);
    }
    if (r.forward_only) {
      x.dw_vs_fp32_worst = x.dw_vs_fp32_median = std::numeric_limits<double>::quiet_NaN();
      r.results.push_back(std::move(x));
      continue;
    }
    const auto& d = field(o, "dw_vs_fp32");
    if (!d.is_array() || d.size() != 2) throw std::invalid_argument("field 'dw_vs_fp32' must be [worst, median]");
    x.dw_vs_fp32_worst = from_json_number(d[0], "dw_vs_fp32");
    x.dw_vs_fp32_median = from_json_number(d[1], "dw_vs_fp32");
    for (double v : {x.dw_vs_fp32_worst, x.dw_vs_fp32_median})
      if (!(v >= 0) && !std::isnan(v))
        throw std::invalid_argument("field 'dw_vs_fp32' of " + x.impl + " holds " + num_text(v) + " < 0");
    r.results.push_back(std::move(x));
  }
  if (!r.error.empty() && !r.results.empty())
    throw std::invalid_argument("record has both an error and " + std::to_string(r.results.size()) + " results");
  if (r.error.empty() && r.results.size() != r.impls.size())
    throw std::invalid_argument("record has " + std::to_string(r.results.size()) + " results for " +
                                std::to_string(r.impls.size()) + " impls");
  for (size_t i = 0; i < r.results.size(); ++i)
    if (r.results[i].impl != r.impls[i])
      throw std::invalid_argument("result " + std::to_string(i + 1) + " is of " + r.results[i].impl + ", impls[" +
                                  std::to_string(i) + "] is " + r.impls[i]);
  const auto& sec = field(j, "seconds");
  if (!sec.is_number() || !(sec.get<double>() >= 0) || !std::isfinite(sec.get<double>()))
    throw std::invalid_argument("field 'seconds' must be a finite number >= 0");
  r.seconds = sec.get<double>();
  return r;
}

bool results_agree(const nlohmann::json& a, const nlohmann::json& b) {
  if (a == b) return true;
  if (a.contains("error") || b.contains("error")) return false;
  if (a.contains("dx") && b.contains("dx")) return false;  // two full results: only identical ones agree
  for (const char* k : {"impl", "ran_on", "y", "rstd"})
    if (!a.contains(k) || !b.contains(k) || a[k] != b[k]) return false;
  return true;
}

nlohmann::json record_result(const CaseRecord& r, size_t i) {
  return r.error.empty() ? impl_json(r.results.at(i), r.forward_only) : nlohmann::json{{"error", r.error}};
}

std::string nondeterministic_impl(const std::string& error) {
  const ExternalError e = parse_external_error(error);
  return e.finding() ? e.impl : "";
}

Duplicate resolve_duplicate(const nlohmann::json& kept, const nlohmann::json& next, const std::string& impl) {
  if (kept == next) return Duplicate::keep;  // the same result or the same error: nothing new
  // Two runs of `impl`, declared deterministic, that differed: a finding no
  // later run undoes, and that undoes what an earlier run left (journal.h).
  auto violation = [&impl](const nlohmann::json& r) {
    return !impl.empty() && r.contains("error") && r["error"].is_string() &&
           nondeterministic_impl(r["error"].get<std::string>()) == impl;
  };
  if (violation(kept)) return Duplicate::keep;
  if (violation(next)) return Duplicate::replace;
  if (kept.contains("error")) return Duplicate::replace;
  if (next.contains("error")) return Duplicate::keep;
  if (!results_agree(kept, next)) return Duplicate::contradict;
  return !kept.contains("dx") && next.contains("dx") ? Duplicate::replace : Duplicate::keep;
}

std::string load_journal_key(const std::string& path) {
  const std::string where = "journal key file '" + core::escape_controls(path) + "'";
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    throw std::invalid_argument(where + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw std::invalid_argument(where + ": not a regular file");
  if (st.st_mode & (S_IROTH | S_IWOTH))
    throw std::invalid_argument(where + ": readable or writable by every user (mode " +
                                std::to_string((st.st_mode >> 6) & 7) + std::to_string((st.st_mode >> 3) & 7) +
                                std::to_string(st.st_mode & 7) + "): a key others can read seals nothing; chmod o-rw it");
  std::ifstream f(path, std::ios::binary);
  std::string key((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (!f.good() && !f.eof()) throw std::invalid_argument(where + ": could not be read");
  if (key.size() > 4096) throw std::invalid_argument(where + ": " + std::to_string(key.size()) + " bytes; a key has at most 4096");
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) key.pop_back();
  if (key.size() < kJournalKeyMinBytes)
    throw std::invalid_argument(where + ": " + std::to_string(key.size()) + " bytes (line ends not counted); a journal key needs at least " +
                                std::to_string(kJournalKeyMinBytes) + " (e.g. openssl rand -hex 32 > FILE; chmod 600 FILE)");
  return key;
}

void set_journal_key(std::string key) {
  if (!key.empty() && key.size() < kJournalKeyMinBytes)
    throw std::invalid_argument("set_journal_key: " + std::to_string(key.size()) + " bytes; a journal key needs at least " +
                                std::to_string(kJournalKeyMinBytes));
  const std::lock_guard<std::mutex> lock(g_key_mutex);
  g_key = std::move(key);
  g_key_known = true;
}

std::string journal_key_file() {
  const char* path = std::getenv(kJournalKeyEnv);
  return path != nullptr ? std::string(path) : std::string();
}

std::string journal_key() {
  const std::lock_guard<std::mutex> lock(g_key_mutex);
  if (!g_key_known) {
    if (const std::string path = journal_key_file(); !path.empty()) {
      try {
        g_key = load_journal_key(path);
      } catch (const std::invalid_argument& e) {
        throw JournalKeyError(std::string(kJournalKeyEnv) + ": " + e.what());
      }
    }
    g_key_known = true;
  }
  return g_key;
}

std::string journal_line(const nlohmann::json& o) {
  if (!o.is_object() || o.empty()) throw std::invalid_argument("journal_line: not a JSON object with members");
  std::string s = o.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::string key = journal_key();
  const std::string digest = key.empty() ? seeds::sha256_hex(s.data(), s.size())
                                         : seeds::hmac_sha256_hex(key, s.data(), s.size());
  s.pop_back();  // the closing brace
  s.append(key.empty() ? kDigestOpen : kHmacOpen).append(digest).append("\"}");
  return s;
}

// Whether `line` ends as a whole journal line does: in its digest member
// ,"sha256":"<64 hex>"} or ,"hmac_sha256":"<64 hex>"} (no record holds
// another such key, so a write cut short never ends so). Returns the
// member's length with its digest and the closing brace, 0 when neither.
static size_t digest_tail(std::string_view line) {
  for (const auto& [open, tail] : {std::pair{kHmacOpen, kHmacTail}, std::pair{kDigestOpen, kDigestTail}}) {
    bool shaped = line.size() > tail + 1 && line.substr(line.size() - tail, open.size()) == open &&
                  line.substr(line.size() - 2) == "\"}";
    for (size_t i = shaped ? line.size() - kDigestLen - 2 : 0; shaped && i < line.size() - 2; ++i)
      shaped = is_hex_digit(line[i]);
    if (shaped) return tail;
  }
  return 0;
}
static bool digest_shaped(std::string_view line) { return digest_tail(line) != 0; }

// Whether line 1 is a format-1 header (no digests; a line that ends in a
// digest is none, whatever a flipped bit made its version).
static bool is_format_one_header(std::string_view line) {
  if (digest_shaped(line)) return false;
  const nlohmann::json old = nlohmann::json::parse(line, nullptr, false);
  return old.is_object() && old.contains("normgate_journal") && old["normgate_journal"] == 1;
}
static std::string format_one_message(const std::string& path) {
  return "journal " + path + " is format 1 (written by an older normgate): its lines carry no SHA-256 digests, so " +
         "its records cannot be checked and are not used; start a new journal (another --journal path, or move " +
         "this file away): its cases run again";
}
// A sealed header of another format than this build's.
static std::string other_format_message(const std::string& path, const nlohmann::json& version) {
  return "journal " + path + " is format " + version.dump() + "; this normgate reads format " +
         std::to_string(kJournalFormat) +
         (version == 2 ? " (format 2 lines are not chained: moved, repeated or foreign lines pass its checks)" : "") +
         "; start a new journal (a shard: run it again into a new --journal file): its cases run again";
}

std::string journal_line_seal(std::string_view line) {
  if (digest_tail(line) == 0)
    throw std::invalid_argument("the line does not end in its digest member (,\"sha256\":\"<64 hex>\"} or "
                                ",\"hmac_sha256\":\"<64 hex>\"})");
  return std::string(line.substr(line.size() - kDigestLen - 2, kDigestLen));
}

nlohmann::json parse_journal_line(std::string_view line) {
  const size_t tail = digest_tail(line);
  if (tail == 0)
    throw std::invalid_argument("the line does not end in its digest member (,\"sha256\":\"<64 hex>\"} or "
                                ",\"hmac_sha256\":\"<64 hex>\"})");
  const bool keyed = tail == kHmacTail;
  const std::string_view digest = line.substr(line.size() - kDigestLen - 2, kDigestLen);
  std::string body(line.substr(0, line.size() - tail));
  body.push_back('}');
  const std::string key = journal_key();
  if (keyed && key.empty())
    throw JournalKeyError(std::string("the line is sealed with a journal key (hmac_sha256); set ") + kJournalKeyEnv +
                          " to the file of the key it was written with");
  if (!keyed && !key.empty())
    throw JournalKeyError(std::string("the line is sealed with a plain SHA-256, which anyone can recompute, not with "
                                      "the journal key (") +
                          kJournalKeyEnv +
                          " is set): a journal written without the key, or a line rewritten; run it again with the "
                          "key");
  if (keyed && seeds::hmac_sha256_hex(key, body.data(), body.size()) != digest)
    throw JournalKeyError(std::string("the line's HMAC-SHA256 does not match its content under the key ") +
                          kJournalKeyEnv +
                          " names (it was written with another key, or changed after normgate wrote it)");
  if (!keyed && seeds::sha256_hex(body.data(), body.size()) != digest)
    throw std::invalid_argument("the line's SHA-256 digest does not match its content (it was changed after normgate "
                                "wrote it)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("the line is not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) throw std::invalid_argument("the line is not a JSON object");
  return j;
}

Journal::Journal(Journal&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(o.fd_),
      resumed_(std::move(o.resumed_)),
      lines_(std::move(o.lines_)),
      dropped_(o.dropped_),
      read_only_(o.read_only_),
      last_seal_(std::move(o.last_seal_)),
      seals_(std::move(o.seals_)) {
  o.fd_ = -1;
}

Journal& Journal::operator=(Journal&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    read_only_ = o.read_only_;
    resumed_ = std::move(o.resumed_);
    lines_ = std::move(o.lines_);
    dropped_ = o.dropped_;
    last_seal_ = std::move(o.last_seal_);
    seals_ = std::move(o.seals_);
    o.fd_ = -1;
  }
  return *this;
}

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}

Journal Journal::open(const std::string& path, const nlohmann::json& campaign, const RecordCheck& check) {
  return load(path, campaign, check, false);
}

Journal Journal::read(const std::string& path, const nlohmann::json& campaign, const RecordCheck& check) {
  return load(path, campaign, check, true);
}

nlohmann::json journal_campaign(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) sys_fail("cannot open journal", path);
  std::string line;
  std::getline(in, line);
  if (in.bad()) sys_fail("cannot read journal", path);
  if (line.size() >= 2 && line[0] == '\x1f' && line[1] == '\x8b') throw gzip_error(path);
  nlohmann::json h;
  try {
    h = parse_journal_line(line);
  } catch (const JournalKeyError& e) {
    throw JournalKeyError("journal " + path + " line 1: " + e.what());  // sealed otherwise than the key says
  } catch (const std::invalid_argument& e) {
    if (is_format_one_header(line)) throw JournalError(format_one_message(path));
    throw std::invalid_argument("'" + path + "' is not a normgate gate journal: line 1 is no journal header: " +
                                e.what());
  }
  if (!h.contains("normgate_journal") || !h.contains("campaign") || !h["campaign"].is_object())
    throw std::invalid_argument("'" + path + "' is not a normgate gate journal of format " +
                                std::to_string(kJournalFormat) + " (line 1 is no such header)");
  if (h["normgate_journal"] != kJournalFormat) throw JournalError(other_format_message(path, h["normgate_journal"]));
  return h["campaign"];
}

Journal Journal::load(const std::string& path, const nlohmann::json& campaign, const RecordCheck& check,
                      bool read_only) {
  (void)journal_key();  // a refused key file: an error before the journal file is made
  Journal jr;
  jr.path_ = path;
  jr.read_only_ = read_only;
  jr.fd_ = read_only ? ::open(path.c_str(), O_RDONLY | O_CLOEXEC) : ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (jr.fd_ < 0) sys_fail("cannot open journal", path);
  // One writer per journal: a second gate on the same file would interleave
  // records; a reader waits for no writer either (it would see a journal
  // still growing).
  if (::flock(jr.fd_, (read_only ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0)
    throw std::invalid_argument("journal " + path + " is in use by another running normgate gate");
  struct stat st{};
  if (::fstat(jr.fd_, &st) != 0) sys_fail("cannot stat journal", path);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::pread(jr.fd_, text.data() + got, text.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) sys_fail("cannot read journal", path);
    got += static_cast<size_t>(n);
  }
  if (text.size() >= 2 && text[0] == '\x1f' && text[1] == '\x8b') throw gzip_error(path);
  const std::string header = header_line(campaign);
  // Blank lines (only spaces, tabs, CRs) after the last newline-ended line
  // are formatting (an editor's or `echo >>`'s newline), not records: not
  // read, and cut off before this journal is appended to (a record after a
  // blank line would make it a blank line between records: damage, refused
  // in read_line). A file of nothing but blanks has no last line: as before.
  size_t blank_tail = 0;
  if (const size_t last = text.find_last_not_of(kBlank); last != std::string::npos)
    if (const size_t nl = text.find('\n', last); nl != std::string::npos) blank_tail = text.size() - (nl + 1);
  text.resize(text.size() - blank_tail);
  // Complete lines end in a newline. What follows the last newline is a line
  // whose write was interrupted: dropped, unless its digest shows it complete
  // (a write cut just before the newline).
  const size_t end = text.rfind('\n');
  const size_t keep = end == std::string::npos ? 0 : end + 1;
  const std::string_view tail = std::string_view(text).substr(keep);
  auto is_line = [](std::string_view l) {
    try {
      (void)parse_journal_line(l);
      return true;
    } catch (const std::invalid_argument&) {
      return false;
    }
  };
  const bool tail_complete = !tail.empty() && is_line(tail);
  // A last line without its newline that ends in a digest is whole: a torn
  // write stops before the digest's end. Its digest failing is a change
  // made after normgate wrote it, not a write cut short: refused, not
  // dropped and run again. But a NUL byte (normgate writes none) is a crash
  // that left a page unwritten under a later one: torn.
  if (!tail_complete && digest_shaped(tail) && tail.find('\0') == std::string_view::npos) {
    std::string why;
    try {
      (void)parse_journal_line(tail);
    } catch (const std::invalid_argument& e) {
      why = e.what();
    }
    throw std::invalid_argument("journal " + path + " line " +
                                std::to_string(std::count(text.begin(), text.begin() + keep, '\n') + 1) +
                                ", the last (whole, without its newline): " + why +
                                (read_only ? "" : "; start a new --journal file (its cases run again)"));
  }
  // A torn write is a prefix of one line: a tail holding a whole line and
  // more (a newline turned into another byte, bytes glued on) is damage.
  for (size_t p = tail.find("\"}"); !tail_complete && p != std::string_view::npos && p + 2 < tail.size();
       p = tail.find("\"}", p + 1)) {
    // A whole line (it ends in its digest member) whose digest fails, with
    // bytes after it: changed, whatever follows (a torn write is a prefix).
    const std::string_view whole = tail.substr(0, p + 2);
    if (digest_shaped(whole) && !is_line(whole) && whole.find('\0') == std::string_view::npos)
      throw std::invalid_argument("journal " + path + " line " +
                                  std::to_string(std::count(text.begin(), text.begin() + keep, '\n') + 1) +
                                  ": a whole line whose digest does not match its content, followed by " +
                                  std::to_string(tail.size() - p - 2) +
                                  " bytes where its newline belongs (the file was changed after normgate wrote it)" +
                                  (read_only ? "" : "; start a new --journal file"));
    if (is_line(whole))
      throw std::invalid_argument("journal " + path + " line " +
                                  std::to_string(std::count(text.begin(), text.begin() + keep, '\n') + 1) +
                                  ": a complete line is followed by " + std::to_string(tail.size() - p - 2) +
                                  " stray bytes where its newline belongs (the file was changed after normgate "
                                  "wrote it)" +
                                  (read_only ? "" : "; start a new --journal file"));
  }
  if (keep == 0 && !tail_complete && read_only)
    throw std::invalid_argument("'" + path + "' holds no complete journal header line (" + std::to_string(text.size()) +
                                " bytes): nothing to read");
  if (keep == 0 && !tail_complete) {
    // New, or only a torn header of this campaign: start over with the header.
    // Anything else is not this campaign's journal: left as it is.
    if (!tail.empty() && header.compare(0, tail.size(), tail) != 0)
      throw std::invalid_argument("'" + path + "' is not a normgate gate journal of this campaign (its only line is " +
                                  "incomplete and not this campaign's header); use a new --journal file");
    if (::ftruncate(jr.fd_, 0) != 0) sys_fail("cannot truncate journal", path);
    jr.dropped_ = static_cast<int64_t>(text.size());
    if (::lseek(jr.fd_, 0, SEEK_SET) < 0) sys_fail("cannot seek journal", path);
    write_all(jr.fd_, header + "\n", path);
    if (::fsync(jr.fd_) != 0) sys_fail("cannot sync journal", path);
    fsync_dir_of(path);
    jr.last_seal_ = journal_line_seal(header);
    jr.seals_.push_back(jr.last_seal_);
    return jr;
  }
  const std::string restart =
      read_only ? ""  // Journal::read: what to do is the caller's to say (gate --merge: run that shard again)
                : "; a journal that fails its checks cannot be resumed: move it away and start a new --journal "
                  "file (its cases run again)";
  auto at = [&](int64_t n) { return "journal " + path + " line " + std::to_string(n) + ": "; };
  auto check_header = [&](std::string_view line) {
    nlohmann::json h;
    try {
      h = parse_journal_line(line);
    } catch (const JournalKeyError& e) {
      throw JournalKeyError("journal " + path + " line 1: " + e.what());  // the journal may be fine: no restart
    } catch (const std::invalid_argument& e) {
      // Format 1 had no digests: say so, and what to do.
      if (is_format_one_header(line)) throw JournalError(format_one_message(path));
      throw std::invalid_argument("'" + path + "' is not a normgate gate journal: line 1 is no journal header: " +
                                  e.what());
    }
    if (!h.contains("normgate_journal") || !h.contains("campaign") || h.size() != 2 || !h["campaign"].is_object())
      throw std::invalid_argument("'" + path + "' is not a normgate gate journal (line 1 is no journal header)");
    if (h["normgate_journal"] != kJournalFormat) throw JournalError(other_format_message(path, h["normgate_journal"]));
    const auto& old = h["campaign"];
    if (old != campaign) {
      std::string diff;
      for (const auto& [k, v] : campaign.items()) {
        const std::string was = old.contains(k) ? old[k].dump() : "(absent)";
        if (!old.contains(k) || old[k] != v)
          diff += "\n  " + core::escape_controls(k) + ": journal " + core::escape_controls(was) + ", this run " +
                  core::escape_controls(v.dump());
      }
      for (const auto& [k, v] : old.items())
        if (!campaign.contains(k))
          diff += "\n  " + core::escape_controls(k) + ": journal " + core::escape_controls(v.dump()) +
                  ", this run (absent)";
      throw core::MultilineError("journal " + core::escape_controls(path) +
                                 " belongs to a different campaign; differing fields:" + diff +
                                 "\nresume with the same table and options, or use a new --journal file (journal= in "
                                 "Python)");
    }
  };
  // (case, implementation) -> the first line holding it and its result (or error).
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, nlohmann::json>> seen;
  int64_t line_no = 0;
  auto read_line = [&](std::string_view line) {
    ++line_no;
    if (line_no == 1) {
      check_header(line);
      jr.last_seal_ = journal_line_seal(line);
      jr.seals_.push_back(jr.last_seal_);
      return;
    }
    if (line.find_first_not_of(kBlank) == std::string_view::npos)
      throw std::invalid_argument(at(line_no) + "the line is blank and records follow it (blank lines may only end "
                                  "the file: the file was changed after normgate wrote it)" + restart);
    nlohmann::json j;
    try {
      j = parse_journal_line(line);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(at(line_no) + e.what() + restart);
    }
    if (j.contains("normgate_journal"))
      throw std::invalid_argument(at(line_no) + "a second journal header (only line 1 is one)" + restart);
    // The chain: a line's "prev" is the seal of the line before it, so a
    // line moved, repeated, left out (not the last) or copied in from
    // another journal is refused, though its own seal holds.
    const auto prev = j.find(kJournalChainMember);
    if (prev == j.end() || !prev->is_string() || prev->get_ref<const std::string&>() != jr.last_seal_)
      throw std::invalid_argument(
          at(line_no) +
          (prev == j.end()
               ? std::string("the record has no \"") + kJournalChainMember + "\" member (the seal of the line before it)"
               : std::string("its \"") + kJournalChainMember + "\" is not the seal of line " +
                     std::to_string(line_no - 1) +
                     " (lines were moved, repeated or left out, or the line was copied in from another journal)") +
          restart);
    jr.last_seal_ = journal_line_seal(line);
    jr.seals_.push_back(jr.last_seal_);
    CaseRecord r;
    try {
      r = case_record_from_json(j);
      if (check) check(r);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(at(line_no) + e.what());
    }
    for (size_t i = 0; i < r.impls.size(); ++i) {
      nlohmann::json what = record_result(r, i);
      auto [it, fresh] = seen.try_emplace({r.case_id, r.impls[i]}, line_no, what);
      if (fresh) continue;
      // Later records are compared with the one a reader keeps (a full result
      // after a forward-only one, a result or a retry after an error).
      const Duplicate d = resolve_duplicate(it->second.second, what, r.impls[i]);
      if (d == Duplicate::replace)
        it->second = {line_no, what};
      else if (d == Duplicate::contradict)
        throw std::invalid_argument("journal " + path + " line " + std::to_string(line_no) + " contradicts line " +
                                    std::to_string(it->second.first) + ": case " + r.case_id + ", implementation " +
                                    r.impls[i] + ": line " + std::to_string(it->second.first) + " has " +
                                    clip(it->second.second.dump()) + ", line " + std::to_string(line_no) + " has " +
                                    clip(what.dump()) + restart);
    }
    jr.resumed_.push_back(std::move(r));
    jr.lines_.push_back(line_no);
  };
  for (size_t pos = 0; pos < keep;) {
    const size_t nl = text.find('\n', pos);
    read_line(std::string_view(text).substr(pos, nl - pos));
    pos = nl + 1;
  }
  if (read_only) {
    if (tail_complete) read_line(tail);
    else jr.dropped_ = static_cast<int64_t>(tail.size());
    return jr;
  }
  if (tail_complete) {
    read_line(tail);
    if (::lseek(jr.fd_, 0, SEEK_END) < 0) sys_fail("cannot seek journal", path);
    write_all(jr.fd_, "\n", path);
    if (::fsync(jr.fd_) != 0) sys_fail("cannot sync journal", path);
  } else if (!tail.empty() || blank_tail > 0) {
    jr.dropped_ = static_cast<int64_t>(tail.size());  // a torn record; blank lines are no loss
    if (::ftruncate(jr.fd_, static_cast<off_t>(keep)) != 0) sys_fail("cannot truncate journal", path);
    if (::fsync(jr.fd_) != 0) sys_fail("cannot sync journal", path);
  }
  if (::lseek(jr.fd_, 0, SEEK_END) < 0) sys_fail("cannot seek journal", path);
  return jr;
}

void Journal::append(const CaseRecord& r) {
  if (read_only_) throw std::logic_error("journal " + path_ + " was opened read-only (Journal::read)");
  if (fd_ < 0) return;
  nlohmann::json o = to_json(r);
  o[kJournalChainMember] = last_seal_;
  const std::string line = journal_line(o);
  write_all(fd_, line + "\n", path_);
  if (::fsync(fd_) != 0) sys_fail("cannot sync journal", path_);
  last_seal_ = journal_line_seal(line);
  seals_.push_back(last_seal_);
}

}  // namespace normgate::validators
