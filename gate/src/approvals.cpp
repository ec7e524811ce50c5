// gate/src/approvals.cpp: approvals from a gate's result: update_approvals
// (which records change) and approve (the table reloaded, the approvals file
// written atomically beside it).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gate_internal.h"
#include "normgate/core/report_util.h"
#include "normgate/kernels/registry.h"

namespace normgate::validators {

using namespace gate_detail;

std::vector<std::string> update_approvals(kernels::Approvals& a, const GateResult& r,
                                          const std::vector<kernels::Route>& table_routes) {
  std::vector<std::string> changes;
  // A record stays while its window overlaps one of the table's (approvals
  // of wider or neighbouring windows cover the parts they hold: routing.h,
  // approval_status), whatever variant the table routes there now: a
  // derivation (derive.h) weighs every candidate's approvals.
  auto overlaps = [](const kernels::Approval& x, const Route& rt) {
    return x.op == rt.op && (x.op == Op::fwd || x.mode == rt.mode) && x.H == rt.H && x.w == rt.w &&
           x.form == rt.form && x.t_lo <= rt.t_hi && rt.t_lo <= x.t_hi;
  };
  auto in_table = [&](const kernels::Approval& x) {
    return std::any_of(table_routes.begin(), table_routes.end(), [&](const Route& rt) { return overlaps(x, rt); });
  };
  std::vector<kernels::Approval> keep;
  for (auto& x : a.records) {
    if (!in_table(x)) {
      changes.push_back("removed " + x.backend + " approval of " + x.window() + " -> " + x.variant +
                        " (window not in the table)");
      continue;
    }
    keep.push_back(std::move(x));
  }
  a.records = std::move(keep);
  for (const auto& w : r.windows) {
    std::vector<kernels::Approval> rest;
    bool had = false;
    for (auto& x : a.records) {
      if (x.same_window(w.route) && x.backend == r.backend && x.variant == w.route.variant->name) {
        had = true;
        continue;
      }
      rest.push_back(std::move(x));
    }
    a.records = std::move(rest);
    if (!w.pass || w.control) {
      if (had) changes.push_back("revoked " + r.backend + " approval of " + w.route.describe() + " (the gate failed)");
      continue;
    }
    kernels::Approval x;
    x.op = w.route.op;
    x.mode = w.route.mode;
    x.H = w.route.H;
    x.w = w.route.w;
    x.form = w.route.form;
    x.t_lo = w.route.t_lo;
    x.t_hi = w.route.t_hi;
    x.variant = std::string(w.route.variant->name);
    x.source_sha256 = std::string(w.route.variant->source_sha256);
    x.backend = r.backend;
    const bool gpu = r.backend == kernels::kGpuBackend;
    x.gpu = gpu ? r.device.name : std::string(kernels::kCpuModelBackend);
    x.driver = gpu ? r.device.driver : "-";
    x.cuda = gpu ? r.device.cuda_runtime : "-";
    x.seed_set = r.seeds;
    x.t_points = w.t_points;
    x.cases = w.cases;
    for (int k = 0; k < w.gated_outputs(); ++k) x.max_err_tol[kOut[k]] = w.out[k].max_ratio;
    x.worst_case = w.worst_case;
    x.date = r.date;
    x.normgate_commit = r.normgate_commit;
    x.normgate_version = r.normgate_version;
    changes.push_back(std::string(had ? "renewed " : "approved ") + r.backend + " " + w.route.describe());
    a.records.push_back(std::move(x));
  }
  // Stable, readable order: table order, gpu before cpu-model.
  auto rank = [&](const kernels::Approval& x) {
    for (size_t i = 0; i < table_routes.size(); ++i)
      if (overlaps(x, table_routes[i])) return std::make_pair(i, x.backend == kernels::kGpuBackend ? 0 : 1);
    return std::make_pair(table_routes.size(), 2);
  };
  std::stable_sort(a.records.begin(), a.records.end(),
                   [&](const kernels::Approval& p, const kernels::Approval& q) { return rank(p) < rank(q); });
  return changes;
}

namespace {
// flock(2) on PATH + ".lock" for the lifetime of the object: gates of the
// same table run side by side approve one at a time. (Not the table's
// .approvals.lock, which tools/campaign.sh holds with flock(1) around the
// whole gate.)
class FileLock {
 public:
  explicit FileLock(const std::string& path) : path_(path + ".lock") {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error("cannot open lock file '" + path_ + "': " + std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) {
        const int e = errno;
        ::close(fd_);
        throw std::runtime_error("cannot lock '" + path_ + "': " + std::strerror(e));
      }
  }
  ~FileLock() { ::close(fd_); }  // closing releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};
}  // namespace

std::vector<std::string> approve(kernels::Approvals& a, const GateResult& r, const GateOptions& opt) {
  const auto table = kernels::load_route_table(opt.table_path, {opt.allow_controls});
  if (table.sha256 != r.table_sha256)
    throw std::invalid_argument("route table " + opt.table_path + " changed while the gate ran (sha256 " +
                                r.table_sha256.substr(0, 12) + " gated, " + table.sha256.substr(0, 12) +
                                " now): no approval written; gate the table as it is now");
  const FileLock lock(a.path);
  // What other gates approved since this one loaded the file is kept: the
  // update applies to the file as it is now.
  a = kernels::load_approvals(a.path);
  auto changes = update_approvals(a, r, table.routes);
  kernels::save_approvals(a);
  return changes;
}

}  // namespace normgate::validators
