// gate/src/journal.cpp: the gate's write-ahead journal (journal.h).
#include "normgate/gate/journal.h"

#include "normgate/core/json_number.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <stdexcept>

namespace normgate::validators {

namespace {

constexpr const char* kOutNames[4] = {"y", "rstd", "dx", "dw"};


const nlohmann::json& field(const nlohmann::json& j, const std::string& k) {
  if (!j.is_object() || !j.contains(k)) throw std::invalid_argument("missing field '" + k + "'");
  return j.at(k);
}

std::string str(const nlohmann::json& j, const std::string& k) {
  const auto& v = field(j, k);
  if (!v.is_string()) throw std::invalid_argument("field '" + k + "' must be a string");
  return v.get<std::string>();
}

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

nlohmann::json header_line(const nlohmann::json& campaign) {
  return nlohmann::json{{"normgate_journal", 1}, {"campaign", campaign}};
}

}  // namespace

CaseRecord make_case_record(const CheckReport& rep, double seconds) {
  CaseRecord r;
  r.case_id = seeds::to_string(rep.request.id);
  r.impls = rep.request.impls;
  r.seconds = seconds;
  for (const auto& ir : rep.impls) {
    ImplRecord x;
    x.impl = ir.impl;
    x.ran_on = ir.ran_on;
    for (int k = 0; k < 4; ++k) {
      // An output left out of the validation (not produced by an external
      // forward implementation, harness/external.h) is NaN and failing, so
      // that no window can ever pass on it.
      x.out[k] = {std::numeric_limits<double>::quiet_NaN(), -1, 0, std::numeric_limits<double>::quiet_NaN(), false};
      for (const auto& s : ir.result.tensors)
        if (s.output() == static_cast<Output>(k))
          x.out[k] = {s.worst.ratio, s.worst.index, s.over, s.worst.forced, s.pass()};
    }
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
  j["results"] = nlohmann::json::array();
  for (const auto& x : r.results) {
    nlohmann::json o;
    o["impl"] = x.impl;
    o["ran_on"] = x.ran_on;
    for (int k = 0; k < 4; ++k)
      o[kOutNames[k]] = {json_number(x.out[k].ratio), x.out[k].index, x.out[k].over, json_number(x.out[k].forced), x.out[k].pass};
    o["dw_vs_fp32"] = {json_number(x.dw_vs_fp32_worst), json_number(x.dw_vs_fp32_median)};
    j["results"].push_back(std::move(o));
  }
  j["seconds"] = r.seconds;
  return j;
}

CaseRecord case_record_from_json(const nlohmann::json& j) {
  CaseRecord r;
  r.case_id = str(j, "case");
  const auto& impls = field(j, "impls");
  if (!impls.is_array()) throw std::invalid_argument("field 'impls' must be an array");
  for (const auto& i : impls) {
    if (!i.is_string()) throw std::invalid_argument("field 'impls' must hold strings");
    r.impls.push_back(i.get<std::string>());
  }
  if (j.contains("error")) r.error = str(j, "error");
  const auto& res = field(j, "results");
  if (!res.is_array()) throw std::invalid_argument("field 'results' must be an array");
  for (const auto& o : res) {
    ImplRecord x;
    x.impl = str(o, "impl");
    x.ran_on = str(o, "ran_on");
    for (int k = 0; k < 4; ++k) {
      const auto& a = field(o, kOutNames[k]);
      if (!a.is_array() || a.size() != 5 || !a[1].is_number_integer() || !a[2].is_number_integer() ||
          !a[4].is_boolean())
        throw std::invalid_argument(std::string("field '") + kOutNames[k] +
                                    "' must be [ratio, index, over, forced, pass]");
      x.out[k] = {from_json_number(a[0], kOutNames[k]), a[1].get<int64_t>(), a[2].get<int64_t>(),
                  from_json_number(a[3], kOutNames[k]),
                  a[4].get<bool>()};
    }
    const auto& d = field(o, "dw_vs_fp32");
    if (!d.is_array() || d.size() != 2) throw std::invalid_argument("field 'dw_vs_fp32' must be [worst, median]");
    x.dw_vs_fp32_worst = from_json_number(d[0], "dw_vs_fp32");
    x.dw_vs_fp32_median = from_json_number(d[1], "dw_vs_fp32");
    r.results.push_back(std::move(x));
  }
  if (r.error.empty() && r.results.size() != r.impls.size())
    throw std::invalid_argument("record has " + std::to_string(r.results.size()) + " results for " +
                                std::to_string(r.impls.size()) + " impls");
  if (j.contains("seconds") && j["seconds"].is_number()) r.seconds = j["seconds"].get<double>();
  return r;
}

Journal::Journal(Journal&& o) noexcept
    : path_(std::move(o.path_)), fd_(o.fd_), resumed_(std::move(o.resumed_)), dropped_(o.dropped_) {
  o.fd_ = -1;
}

Journal& Journal::operator=(Journal&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    resumed_ = std::move(o.resumed_);
    dropped_ = o.dropped_;
    o.fd_ = -1;
  }
  return *this;
}

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}

Journal Journal::open(const std::string& path, const nlohmann::json& campaign) {
  Journal jr;
  jr.path_ = path;
  jr.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (jr.fd_ < 0) sys_fail("cannot open journal", path);
  // One writer per journal: a second gate on the same file would interleave records.
  if (::flock(jr.fd_, LOCK_EX | LOCK_NB) != 0)
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
  // Keep only complete lines; a torn tail (no newline) is a record whose
  // write was interrupted: drop it.
  const size_t end = text.rfind('\n');
  const size_t keep = end == std::string::npos ? 0 : end + 1;
  jr.dropped_ = static_cast<int64_t>(text.size() - keep);
  if (keep == 0) {
    // New (or only a torn header): start over with the header.
    if (::ftruncate(jr.fd_, 0) != 0) sys_fail("cannot truncate journal", path);
    jr.dropped_ = static_cast<int64_t>(text.size());
    if (::lseek(jr.fd_, 0, SEEK_SET) < 0) sys_fail("cannot seek journal", path);
    write_all(jr.fd_, header_line(campaign).dump() + "\n", path);
    if (::fsync(jr.fd_) != 0) sys_fail("cannot sync journal", path);
    fsync_dir_of(path);
    return jr;
  }
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < keep) {
    const size_t nl = text.find('\n', pos);
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument("journal " + path + " line " + std::to_string(line_no) + " is not valid JSON (" +
                                  e.what() + "); the file was not written by normgate gate or was edited");
    }
    if (line_no == 1) {
      if (!j.is_object() || !j.contains("normgate_journal") || !j.contains("campaign"))
        throw std::invalid_argument("'" + path + "' is not a normgate gate journal (no header line)");
      const auto& old = j["campaign"];
      if (old != campaign) {
        std::string diff;
        for (const auto& [k, v] : campaign.items()) {
          const std::string was = old.contains(k) ? old[k].dump() : "(absent)";
          if (!old.contains(k) || old[k] != v) diff += "\n  " + k + ": journal " + was + ", this run " + v.dump();
        }
        for (const auto& [k, v] : old.items())
          if (!campaign.contains(k)) diff += "\n  " + k + ": journal " + v.dump() + ", this run (absent)";
        throw std::invalid_argument("journal " + path + " belongs to a different campaign; differing fields:" + diff +
                                    "\nresume with the same table and options, or use a new --journal file");
      }
      continue;
    }
    try {
      jr.resumed_.push_back(case_record_from_json(j));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("journal " + path + " line " + std::to_string(line_no) + ": " + e.what());
    }
  }
  if (jr.dropped_ > 0) {
    if (::ftruncate(jr.fd_, static_cast<off_t>(keep)) != 0) sys_fail("cannot truncate journal", path);
    if (::fsync(jr.fd_) != 0) sys_fail("cannot sync journal", path);
  }
  if (::lseek(jr.fd_, 0, SEEK_END) < 0) sys_fail("cannot seek journal", path);
  return jr;
}

void Journal::append(const CaseRecord& r) {
  if (fd_ < 0) return;
  write_all(fd_, to_json(r).dump() + "\n", path_);
  if (::fsync(fd_) != 0) sys_fail("cannot sync journal", path_);
}

}  // namespace normgate::validators
