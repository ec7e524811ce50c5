// gate/src/approvals.cpp: approvals from a gate's result: update_approvals
// (which records change), the approval policy's checks (before the run:
// check_approval_request; after it: approve's re-check) and approve (the
// table reloaded, the approvals file written atomically beside it).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "gate_internal.h"
#include "normgate/core/printable.h"
#include "normgate/core/report_util.h"
#include "normgate/kernels/registry.h"
#include "normgate/routing/rejections.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/seed_set.h"

namespace normgate::validators {

using namespace gate_detail;

std::vector<std::string> update_approvals(kernels::Approvals& a, const GateResult& r,
                                          const std::vector<kernels::Route>& table_routes,
                                          const std::vector<std::string>& refused, bool remove_unrelated) {
  std::vector<std::string> changes;
  // A det record of a deterministic variant answers for the nondet window of
  // that variant too (routing.h, approval_status).
  auto answers_nondet = [](const kernels::Approval& x) {
    const kernels::Variant* v = kernels::find_variant(x.variant);
    return x.op == kernels::Op::bwd && x.mode == kernels::Mode::det && v && v->mode == kernels::Mode::det;
  };
  auto in_mode = [](const Route& rt, kernels::Mode m) {
    Route q = rt;
    q.mode = m;
    return q;
  };
  // A record stays while its window overlaps one of the table's, whatever
  // variant the table routes there now: one whose window contains a table
  // window approves it (routing.h, approval_status), and a derivation
  // (derive.h) weighs every candidate's approvals.
  auto in_table = [&](const kernels::Approval& x) {
    return std::any_of(table_routes.begin(), table_routes.end(), [&](const Route& rt) {
      return x.overlaps(rt) || (rt.op == kernels::Op::bwd && rt.mode == kernels::Mode::nondet && answers_nondet(x) &&
                                x.overlaps(in_mode(rt, kernels::Mode::det)));
    });
  };
  // Invalid records (routing.h, "Validation") are kept as they are, in
  // place: never dropped, renewed, revoked or re-sealed here.
  std::vector<kernels::Approval> keep;
  for (auto& x : a.records) {
    if (remove_unrelated && x.invalid.empty() && !in_table(x)) {
      changes.push_back("removed " + x.backend + " approval of " + x.window() + " -> " + x.variant +
                        " (its window overlaps none of the table's, nor of any table sharing its approvals)");
      continue;
    }
    keep.push_back(std::move(x));
  }
  a.records = std::move(keep);
  std::vector<size_t> contradicting;  // windows that failed or were refused
  for (size_t wi = 0; wi < r.windows.size(); ++wi) {
    const auto& w = r.windows[wi];
    const std::string why_refused = wi < refused.size() ? refused[wi] : std::string();
    if (w.incomplete) {  // not gated to the end (a shard missing): no evidence either way
      changes.push_back("kept " + r.backend + " approvals of " + w.route.describe() +
                        " as they were (the window is INCOMPLETE)");
      continue;
    }
    std::vector<kernels::Approval> rest;
    bool had = false;
    int64_t had_cases = 0;  // the replaced record's campaign size (the largest, were there several)
    std::string had_seeds;
    for (auto& x : a.records) {
      if (x.invalid.empty() && x.same_window(w.route) && x.backend == r.backend &&
          x.variant == w.route.variant->name) {
        had = true;
        if (x.cases > had_cases) {
          had_cases = x.cases;
          had_seeds = x.seed_set;
        }
        continue;
      }
      rest.push_back(std::move(x));
    }
    a.records = std::move(rest);
    const bool fails = !w.pass || w.control;
    // Its contradiction of wider records is applied after every window
    // (below): a wider window of this run that passes must not bring back
    // a record this one refutes.
    if (fails || !why_refused.empty()) contradicting.push_back(wi);
    if (fails) {
      if (had) changes.push_back("revoked " + r.backend + " approval of " + w.route.describe() + " (the gate failed)");
      continue;
    }
    if (!why_refused.empty()) {
      changes.push_back("refused " + r.backend + " " + w.route.describe() + ": " + why_refused +
                        (had ? "; its earlier " + r.backend + " approval is revoked" : std::string()));
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
    // Form res: h_new, checked bit for bit (a passing window's is 0), so the
    // record says its gate checked it (Approval::h_new_gated).
    if (w.gates_h_new()) x.max_err_tol["h_new"] = w.h_new.max_ratio;
    x.worst_case = w.worst_case;
    x.date = r.date;
    x.normgate_commit = r.normgate_commit;
    x.normgate_version = r.normgate_version;
    x.has_strength = true;
    x.t_per_window = r.t_per_window;
    x.dense_points = r.dense_points;
    x.dense_step = r.dense_step;
    x.dense_all_seeds = r.dense_all_seeds;
    x.fresh_factor = r.fresh_factor;
    x.fresh_seeds = w.fresh.seeds;
    x.oracle = r.oracle;
    x.dw_vs_fp32_worst = w.route.op == kernels::Op::bwd ? w.dw_vs_fp32_worst : std::numeric_limits<double>::quiet_NaN();
    x.journal_head = r.journal_head;  // the evidence: "" without --journal
    x.journal_lines = r.journal_lines;
    // A renewal by a smaller campaign than the record it replaces is said:
    // the policy minimum allows it, but the approval now rests on less.
    const std::string weaker =
        had && had_cases > x.cases
            ? " (a smaller campaign than the approval it replaces: " + std::to_string(x.cases) + " cases, seeds " +
                  x.seed_set + ", against " + std::to_string(had_cases) + " cases, seeds " + had_seeds + ")"
            : std::string();
    changes.push_back(std::string(had ? "renewed " : "approved ") + r.backend + " " + w.route.describe() + weaker);
    a.records.push_back(std::move(x));
  }
  for (const size_t wi : contradicting) {
    const auto& w = r.windows[wi];
    const bool fails = !w.pass || w.control;
    // A wider record of this backend, variant and source approves this
    // window too (routing.h: containment), whether it was on file or
    // written by a wider window of this run; what was found here
    // contradicts it, so it goes. A deterministic variant's bits do not
    // depend on the mode, so its records of both modes go (the det record
    // answers for the nondet window, and a failure in either mode is one of
    // the same outputs).
    // A failure also contradicts a narrower or overlapping record that
    // holds a failing case's T: records that together cover a window
    // approve it as parts (routing.h, ApprovalStatus::parts), so a failed
    // window [1, 16] left records [1, 8] and [9, 16] approving the T it
    // failed at. A record sharing only passing T with the window stays (the
    // gate found its T good). Without the failing T (a control window) every
    // overlapping record goes. A window the policy refused (no failure)
    // contradicts only the records that contain it.
    const bool det_variant = w.route.op == kernels::Op::bwd && w.route.variant->mode == kernels::Mode::det;
    auto holds_failed_t = [&](const kernels::Approval& x) {
      const auto it = std::lower_bound(w.failed_t.begin(), w.failed_t.end(), x.t_lo);
      return it != w.failed_t.end() && *it <= x.t_hi;
    };
    auto hits = [&](const kernels::Approval& x, const kernels::Route& route) {
      if (!fails || x.contains(route)) return x.contains(route);
      return x.overlaps(route) && (w.failed_t.empty() || holds_failed_t(x));
    };
    auto contradicted = [&](const kernels::Approval& x) {
      if (hits(x, w.route)) return true;
      return det_variant && x.op == kernels::Op::bwd && x.mode != w.route.mode && hits(x, in_mode(w.route, x.mode));
    };
    // The failing variant's own records of this source, and the records it
    // vouched for (routes.md D23: the same bits on its campaign, so the same
    // verdict stands or falls), whatever source of it vouched (its record may
    // have been carried since, and the failing case may lie outside the
    // campaign).
    const std::string vname(w.route.variant->name), vsource(w.route.variant->source_sha256);
    auto of_variant = [&](const kernels::Approval& x) {
      return (x.variant == vname && x.source_sha256 == vsource) || (x.has_vouch && x.vouched.variant == vname);
    };
    std::vector<kernels::Approval> kept;
    for (auto& x : a.records) {
      if (x.invalid.empty() && x.backend == r.backend && contradicted(x) && of_variant(x)) {
        changes.push_back("revoked " + r.backend + " approval of " + x.window() + " -> " + x.variant + " (" +
                          (fails ? "the gate failed" : "the policy refuses") + " on " + w.route.window() +
                          (x.contains(w.route) || x.contains(in_mode(w.route, x.mode)) ? " inside it)"
                                                                                           : ", which overlaps it)"));
        continue;
      }
      kept.push_back(std::move(x));
    }
    a.records = std::move(kept);
  }
  // Stable, readable order: table order, gpu before cpu-model.
  auto rank = [&](const kernels::Approval& x) {
    if (!x.invalid.empty()) return std::make_pair(table_routes.size(), 3);  // last, in file order
    for (size_t i = 0; i < table_routes.size(); ++i)
      if (x.overlaps(table_routes[i])) return std::make_pair(i, x.backend == kernels::kGpuBackend ? 0 : 1);
    return std::make_pair(table_routes.size(), 2);
  };
  std::stable_sort(a.records.begin(), a.records.end(),
                   [&](const kernels::Approval& p, const kernels::Approval& q) { return rank(p) < rank(q); });
  for (const auto& x : a.records)
    if (!x.invalid.empty())
      changes.push_back("kept INVALID " + x.invalid + " as it is (it approves nothing; delete it by hand once its "
                        "window is re-gated)");
  return changes;
}

kernels::CampaignStrength requested_strength(const GateOptions& opt, Backend resolved) {
  kernels::CampaignStrength c;
  try {
    c.seed_set = seeds::to_string(seeds::parse_seed_set(opt.seeds));
  } catch (const std::invalid_argument&) {
    c.seed_set = opt.seeds;
  }
  c.t_per_window = opt.t_per_window;
  c.dense_points = opt.dense_points;
  c.dense_step = opt.dense_step;
  c.dense_all_seeds = opt.dense_all_seeds;
  c.fresh_factor = opt.fresh_factor;
  c.backend = backend_name(resolved);
  return c;
}

kernels::CampaignStrength result_strength(const GateResult& r) {
  kernels::CampaignStrength c;
  c.seed_set = r.seeds;
  c.t_per_window = r.t_per_window;
  c.dense_points = r.dense_points;
  c.dense_step = r.dense_step;
  c.dense_all_seeds = r.dense_all_seeds;
  c.fresh_factor = r.fresh_factor;
  c.backend = r.backend;
  return c;
}

kernels::ApprovalPolicy required_policy(const std::string& policy_path) {
  auto p = kernels::load_policy(policy_path);
  if (!p)
    throw std::invalid_argument("--approve needs an approval policy, and there is none: write " + policy_path +
                                " (the minimum campaign an approval needs; format: routing/include/normgate/routing/"
                                "policy.h, example: routes/sm90a.policy.toml); nothing was run or written");
  return std::move(*p);
}

namespace {
std::string bullet_list(const std::vector<std::string>& xs) {
  std::string s;
  for (const auto& x : xs) s += "\n  - " + core::escape_controls(x);
  return s;
}
}  // namespace

void check_approval_request(const GateOptions& opt, Backend resolved, const std::string& policy_path) {
  const kernels::ApprovalPolicy p =
      required_policy(policy_path.empty() ? kernels::policy_path_for(opt.table_path) : policy_path);
  const auto missing = p.minimum.shortfalls(requested_strength(opt, resolved));
  if (!missing.empty())
    throw core::MultilineError("--approve refused: this campaign is weaker than the policy minimum of " +
                               core::escape_controls(opt.table_path) + " (" + core::escape_controls(p.path) + ": " +
                               core::escape_controls(p.minimum.describe()) + "):" +
                                bullet_list(missing) +
                                "\n  nothing was run or written: run the campaign the policy asks for (on its "
                                "backends), or gate without --approve to see the verdicts only");
}

std::vector<std::string> approval_refusals(const kernels::ApprovalPolicy& p, const GateResult& r) {
  std::vector<std::string> out;
  for (const auto& w : r.windows)
    out.push_back(w.pass && !w.control ? p.minimum.window_shortfall(w.route.op, w.route.w, w.dw_vs_fp32_worst)
                                       : std::string());
  return out;
}

std::vector<kernels::Rejection> rejections_of(const GateResult& r) {
  std::vector<kernels::Rejection> out;
  for (const auto& w : r.windows) {
    // Only a case over budget proves a rejection (rejections.h): not an
    // error, a nondeterministic run, an uncertified case or an incomplete
    // window; a control is meant to fail.
    if (w.pass || w.control || w.incomplete || !(w.worst > 1.0) || w.worst_case.empty()) continue;
    kernels::Rejection x;
    x.op = w.route.op;
    x.mode = w.route.mode;
    x.H = w.route.H;
    x.w = w.route.w;
    x.form = w.route.form;
    // The proof is the worst case: its T alone is excluded (a window whose
    // parts pass elsewhere stays approvable there); the gated window beside.
    x.gated_lo = w.route.t_lo;
    x.gated_hi = w.route.t_hi;
    x.t_lo = w.route.t_lo;
    x.t_hi = w.route.t_hi;
    try {
      const int64_t t = seeds::parse_case(w.worst_case).T;
      if (t >= w.route.t_lo && t <= w.route.t_hi) x.t_lo = x.t_hi = t;
    } catch (const std::exception&) {  // no parsable worst case: the whole window
    }
    x.variant = std::string(w.route.variant->name);
    x.source_sha256 = std::string(w.route.variant->source_sha256);
    x.backend = r.backend;
    x.gpu = r.backend == kernels::kGpuBackend ? (r.device.name.empty() ? std::string("gpu") : r.device.name)
                                              : std::string(kernels::kCpuModelBackend);
    x.worst_case = w.worst_case;
    x.worst_err_tol = w.worst;
    x.worst_output = w.worst_output.substr(0, w.worst_output.find(','));
    x.date = r.date;
    x.normgate_commit = r.normgate_commit;
    x.normgate_version = r.normgate_version;
    if (kernels::validate_rejection(x).empty()) out.push_back(std::move(x));
  }
  return out;
}

std::vector<std::string> approve(kernels::Approvals& a, const GateResult& r, const GateOptions& opt) {
  const auto table = kernels::load_route_table(opt.table_path, {opt.allow_controls});
  if (table.sha256 != r.table_sha256)
    throw std::invalid_argument("route table " + opt.table_path + " changed while the gate ran (sha256 " +
                                r.table_sha256.substr(0, 12) + " gated, " + table.sha256.substr(0, 12) +
                                " now): no approval written; gate the table as it is now");
  const kernels::ApprovalPolicy policy = required_policy(kernels::policy_path_for_approvals(a.path));
  const auto missing = policy.minimum.shortfalls(result_strength(r));
  if (!missing.empty())
    throw std::invalid_argument("approval refused: the campaign that ran is weaker than the policy minimum of " +
                                opt.table_path + " (" + policy.path + "):" + bullet_list(missing) +
                                "\nno approval written");
  auto refused = approval_refusals(policy, r);
  refused.resize(r.windows.size());
  std::vector<std::string> changes;
  // Failures are remembered first (routes.md D28), in the table's rejections
  // file (rejections.h; record_rejections takes the approvals lock itself,
  // so before this function takes it): a run killed between the two steps
  // leaves a remembered failure beside a record not yet revoked (`routes`
  // leaves such a record out), never a revoked record with nothing
  // remembered, which an older copy of the approvals file could bring back.
  const std::string rejections_path = kernels::rejections_path_for(opt.table_path);
  kernels::Rejections remembered;
  bool rejections_read = true;
  try {
    remembered = kernels::load_rejections(rejections_path);
  } catch (const std::exception& e) {
    rejections_read = false;
    changes.push_back("NOT checked against the remembered failures: " + std::string(e.what()));
  }
  const std::vector<kernels::Rejection> failed = rejections_of(r);
  if (!failed.empty() && rejections_read) {
    try {
      (void)kernels::record_rejections(rejections_path, a.path, failed);
      for (const auto& x : failed) {
        const bool known = std::any_of(remembered.records.begin(), remembered.records.end(),
                                       [&](const kernels::Rejection& q) { return q.same_claim(x); });
        changes.push_back((known ? "already remembered: the failure of " : "remembered the failure of ") + x.window() +
                          " -> " + x.variant + " in " + rejections_path + " (case " + x.worst_case + ")");
        if (!known) remembered.records.push_back(x);
      }
    } catch (const std::exception& e) {
      changes.push_back("NOT remembered in " + rejections_path + " (" + e.what() +
                        "): an older copy of the approvals file could bring back what this gate revokes");
    }
  }
  // A passing window that a remembered failure refutes (the same variant,
  // source and backend failed a case over budget at a T inside it) is not
  // approved: `normgate routes` and derive would not count it either.
  for (size_t wi = 0; wi < r.windows.size(); ++wi) {
    const auto& w = r.windows[wi];
    if (!w.pass || w.control || w.incomplete || !refused[wi].empty() || !w.route.variant) continue;
    for (const auto& q : remembered.records)
      if (q.refutes(w.route, r.backend)) {
        refused[wi] = "a failure remembered in " + rejections_path + " refutes it (" + q.window() + ": case " +
                      q.worst_case + ", " + q.worst_output + " err/tol " + std::to_string(q.worst_err_tol) + ", " +
                      q.date + ")";
        break;
      }
  }
  {
  // flock(2) on PATH.lock from the re-read to after the rename: gates of the
  // same table approve one at a time. (Not the table's .approvals.lock, which
  // tools/campaign.sh holds with flock(1) around the whole gate.)
  const kernels::ApprovalsLock lock(a.path);
  // What other gates approved since this one loaded the file is kept: the
  // update applies to the file as it is now.
  a = kernels::load_approvals(a.path);
  // The file may be shared by a base table and its per-GPU tables (routing.h,
  // "Per-GPU tables"): a record stays while any of them overlaps it, and
  // none is removed when one of them does not load.
  std::vector<kernels::Route> routes = table.routes;
  bool keep_all = false;
  for (const std::string& p : kernels::tables_sharing_approvals(a.path)) {
    std::error_code ec;
    if (std::filesystem::equivalent(p, opt.table_path, ec)) continue;
    try {
      const auto other = kernels::load_route_table(p, {true});
      routes.insert(routes.end(), other.routes.begin(), other.routes.end());
    } catch (const std::exception&) {
      keep_all = true;
    }
  }
  const std::string before = kernels::approvals_to_json_text(a);
  auto updates = update_approvals(a, r, routes, refused, !keep_all);
  changes.insert(changes.end(), updates.begin(), updates.end());
  // Written only when something changed: a gate that approves nothing
  // leaves the file as it was, and creates none where there was none.
  if (kernels::approvals_to_json_text(a) != before) kernels::save_approvals(a);
  }
  return changes;
}

}  // namespace normgate::validators
