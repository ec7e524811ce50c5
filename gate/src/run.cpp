// gate/src/run.cpp: run_gate: every window's grid cases through the harness
// (GPU variant or its CPU model, one oracle per case), refinement around the
// worst point (dense grid, fresh seeds), the journal, and the verdicts.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
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
#include "normgate/gate/journal.h"
#include "normgate/harness/external.h"
#include "normgate/harness/runner.h"

namespace normgate::validators {

using namespace gate_detail;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- results store: (case id, impl) -> record or error ----------------------

// Whether a record of implementation v holds the default forward's y and
// rstd: a backward variant's run (its forward step is always default_fwd())
// or a run of default_fwd() itself. A run of another forward variant (its own
// forward, then a carrier backward) never stands in for the default's, nor
// the default's for it: records are keyed by implementation, and a forward
// window of variant F reads only F's records.
// An external implementation's run is its own forward (harness/external.h):
// never the default's.
bool default_forward_run(const kernels::Variant& v) {
  // A model-only control may fault its forward (models.h run_model): its y
  // and rstd are not the default forward's.
  return (v.op == Op::bwd && !v.external && !v.model_only) || &v == &kernels::default_fwd();
}

// A forward-only record (CaseRecord::forward_only: y and rstd checked, dx and
// dw not) serves forward windows only: a backward window's need of the same
// (case, impl) is not done by it (the case runs again, in full), and a full
// record that arrives later replaces it.
struct Store {
  std::map<std::string, std::map<std::string, ImplRecord>> ok;
  std::map<std::string, std::map<std::string, std::string>> err;
  std::set<std::pair<std::string, std::string>> fwd_only;  // (case, impl) whose record is forward-only
  int64_t records = 0;
  double worst = 0;  // largest err/tol of any output seen (progress only)
  std::string worst_case;  // its case id
  std::string worst_output;  // its output ("y", "rstd", "dx", "dw")
  // Record number holding (case, impl), and the records this campaign's plan
  // used (a journal may hold cases of other window filters: not counted).
  std::map<std::string, std::map<std::string, int64_t>> rec_of;
  std::set<int64_t> used;
  // gate --retry-errors: a (case, impl) known only by an error from a
  // journal (its record number below retry_below: records this run made
  // come after) is not done; it runs again and its new record replaces the
  // error. An error this run made stays done (it is not retried within the run).
  bool retry_errors = false;
  int64_t retry_below = 0;

  void add(const CaseRecord& r) {
    const int64_t id = records++;
    const bool fwd = r.forward_only && r.error.empty();
    for (size_t i = 0; i < r.impls.size(); ++i) {
      const std::string& impl = r.impls[i];
      const std::pair<std::string, std::string> key{r.case_id, impl};
      auto& of = rec_of[r.case_id];
      if (of.count(impl)) {
        // resolve_duplicate (journal.h): an error is replaced by any later
        // record (a result, or a retry's error), a forward-only record by a
        // full one; otherwise the first record of (case, impl) stays (and
        // a later error never displaces a result).
        const bool kept_error = errored(r.case_id, impl);
        if (kept_error && err.at(r.case_id).at(impl) == r.error) continue;  // the same error again: nothing new
        if (kept_error && nondeterministic(err.at(r.case_id).at(impl), impl)) continue;  // a finding: kept
        // A determinism violation of impl replaces even a result (resolve_duplicate).
        if (!kept_error && !nondeterministic(r.error, impl) && (fwd || !r.error.empty() || !fwd_only.count(key)))
          continue;
        of.erase(impl);
        ok[r.case_id].erase(impl);
        err[r.case_id].erase(impl);
        fwd_only.erase(key);
      }
      of.emplace(impl, id);
      if (fwd) fwd_only.insert(key);
      if (!r.error.empty()) {
        err[r.case_id].emplace(impl, r.error);
        continue;
      }
      const ImplRecord& x = r.results[i];
      ok[r.case_id].emplace(x.impl, x);
      for (size_t k = 0; k < (fwd ? size_t{2} : x.out.size()); ++k)  // a forward-only record holds y, rstd
        if (!(x.out[k].ratio <= worst)) {
          worst = x.out[k].ratio;
          worst_case = r.case_id;
          worst_output = kOut[k];
        }
    }
  }
  bool forward_only(const std::string& c, const std::string& impl) const { return fwd_only.count({c, impl}) > 0; }
  // e is a determinism violation of impl itself (journal.h nondeterministic_impl).
  static bool nondeterministic(const std::string& e, const std::string& impl) {
    if (e.empty()) return false;
    const std::string named = nondeterministic_impl(e);
    return !named.empty() && named == impl;
  }
  bool errored(const std::string& c, const std::string& impl) const {
    auto b = err.find(c);
    return b != err.end() && b->second.count(impl) > 0;
  }
  void use(const std::string& c, const std::string& impl) {
    auto a = rec_of.find(c);
    if (a == rec_of.end()) return;
    if (auto b = a->second.find(impl); b != a->second.end()) used.insert(b->second);
  }
  // Mark the record get(c, "") reads (a case of a forward window of the
  // default forward).
  void use_any(const std::string& c) {
    auto a = ok.find(c);
    if (a == ok.end()) return;
    for (const auto& v : kernels::variants())
      if (default_forward_run(v) && a->second.count(std::string(v.name))) {
        use(c, std::string(v.name));
        return;
      }
  }
  // bwd: a backward window needs the record (a forward-only one does not do).
  bool done(const std::string& c, const std::string& impl, bool bwd) const {
    if (bwd && forward_only(c, impl)) return false;
    auto a = ok.find(c);
    if (a != ok.end() && a->second.count(impl)) return true;
    auto b = err.find(c);
    return b != err.end() && b->second.count(impl) && !retryable(c, impl);
  }
  // An error from a journal that --retry-errors runs again.
  bool retryable(const std::string& c, const std::string& impl) const {
    if (!retry_errors || !errored(c, impl)) return false;
    if (nondeterministic(err.at(c).at(impl), impl)) return false;  // a finding about the kernel, not a failure to run
    return rec_of.at(c).at(impl) < retry_below;
  }
  bool any_ok(const std::string& c) const {
    auto a = ok.find(c);
    if (a == ok.end()) return false;
    for (const auto& [impl, rec] : a->second)
      if (const kernels::Variant* v = kernels::find_variant(impl); v != nullptr && default_forward_run(*v)) return true;
    return false;
  }
  // The record for (case, impl); impl "" = any run whose forward was the
  // default forward (default_forward_run, registry order): what a forward
  // window of fwd_rowwise reads. Returns nullptr and sets *error when only
  // an error is known. bwd (a backward window's read): a forward-only record
  // is no record (nullptr, no error: the case is missing).
  const ImplRecord* get(const std::string& c, const std::string& impl, std::string* error, bool bwd) const {
    if (bwd && forward_only(c, impl)) return nullptr;
    auto a = ok.find(c);
    if (a != ok.end()) {
      if (impl.empty()) {
        for (const auto& v : kernels::variants())
          if (default_forward_run(v))
            if (auto it = a->second.find(std::string(v.name)); it != a->second.end()) return &it->second;
      } else if (auto it = a->second.find(impl); it != a->second.end()) {
        return &it->second;
      }
    }
    auto b = err.find(c);
    if (b != err.end()) {
      if (impl.empty()) {
        for (const auto& [name, e] : b->second)
          if (const kernels::Variant* v = kernels::find_variant(name); v != nullptr && default_forward_run(*v)) {
            *error = e;
            break;
          }
      } else if (auto it = b->second.find(impl); it != b->second.end()) {
        *error = it->second;
      }
    }
    return nullptr;
  }
};

// ---- per-window state -----------------------------------------------------------

struct Phase {
  std::vector<int64_t> t;
  std::string seeds;
  std::vector<seeds::CaseId> cases;
};

struct Win {
  const Route* route = nullptr;
  bool fwd = false;
  // bwd: the variant (after the default forward); fwd of the default forward:
  // "" (any run of the case with the default forward: every backward run);
  // fwd of another forward variant: that variant (its own runs: the forward,
  // then the case's carrier backward).
  std::string impl;
  std::vector<int64_t> tpts;
  Phase grid, dense, fresh;
  // Cases of the other windows' phases that fall inside this window (same H,
  // w, form; T in range) and are none of its own: evidence about its variant
  // too. Every case runs every backward variant whose window covers it
  // (Runner::run_phase), so these count in the verdict like the window's own.
  Phase others;
  int64_t dense_center = 0;
  std::string fresh_family;
  int64_t fresh_t = 0;
  bool refine = true;  // every grid case has a result (--shard, --merge: not always)

  bool covers(const seeds::CaseId& c) const {
    return c.H == route->H && c.w == route->w && c.form == route->form && c.T >= route->t_lo && c.T <= route->t_hi;
  }
};

// The output the refinement follows: the one whose error comes from the
// variant's long reduction (dw: over T rows; rstd: over H columns). dx and y
// are per-element roundings whose worst case does not move with T.
std::vector<int> focus_outputs(const Win& w) { return w.fwd ? std::vector<int>{1} : std::vector<int>{3}; }
int gated_count(const Win& w) { return w.fwd ? 2 : 4; }


int registry_rank(const std::string& impl) {
  int k = 0;
  for (const auto& v : kernels::variants()) {
    if (v.name == impl) return k;
    ++k;
  }
  return k;
}

// ---- resumed records against the campaign -------------------------------------

// The journal's RecordCheck (journal.h) for this campaign: a resumed record
// must be a case some run of this campaign could have made, run by
// implementations the table's windows holding the case route. The journal
// belongs to the whole table (slices of --windows or --base share it), so
// the plan is the whole table's:
//   - (family, eps, kappa) one of the seed set's points (SeedSet::points:
//     5xN has epsnear at several eps and cancel at several kappa);
//   - seed from the seed set, or one of its fresh seeds (last+1 ..
//     last+fresh seeds);
//   - a window of the table (same H, w, form; T inside) whose plan has T: a
//     grid T point, or a dense point (grid point + k * dense_step, 1 <= |k|
//     <= dense_points; refinement centres on a grid point, fresh seeds on a
//     grid or dense point);
//   - impls: each the variant of a window holding the case, or the carrier
//     backward of a forward window of the default forward; a record holds a
//     subset, not the full list, since a slice runs only its windows'
//     variants and a resumed case only what was missing (their order is not
//     checked: external variants rank in registration order, which another
//     process may change);
//   - an output recorded as not produced (ratio nan) only for dx, dw of an
//     external forward implementation (harness/external.h), or of a
//     forward-only record (which has no dx, dw).
RecordCheck plan_check(const kernels::RouteTable& table, const seeds::SeedSet& set, const GateOptions& opt,
                       uint64_t fresh_seeds) {
  std::vector<std::vector<int64_t>> tpts;
  for (const Route& r : table.routes) tpts.push_back(window_t_points(r.t_lo, r.t_hi, opt.t_per_window));
  const std::string set_name = seeds::to_string(set);
  const std::vector<seeds::FamilyPoint> points = set.points();
  return [&table, &set, &opt, fresh_seeds, tpts, set_name, points](const CaseRecord& rec) {
    const seeds::CaseId c = seeds::parse_case(rec.case_id);
    const std::string at = "case " + rec.case_id + " ";
    // The case's (family, eps, kappa) must be one of the seed set's points
    // (5xN: epsnear at several eps, cancel at several kappa).
    const seeds::FamilyPoint point{c.family, c.eps, c.kappa};
    if (std::find(points.begin(), points.end(), point) == points.end())
      throw std::invalid_argument(at + "is at family point " + seeds::to_string(point) +
                                  ", not one of the campaign's seed set " + set_name);
    const bool grid_seed = c.seed >= set.first && c.seed <= set.last;
    const bool fresh_seed = opt.fresh_factor > 0 && c.seed > set.last && c.seed - set.last <= fresh_seeds;
    if (!grid_seed && !fresh_seed)
      throw std::invalid_argument(at + "has seed " + std::to_string(c.seed) + ", neither in the seed set " + set_name +
                                  " nor one of its " + std::to_string(fresh_seeds) + " fresh seeds");
    auto planned = [&](const std::vector<int64_t>& ts) {
      for (int64_t t : ts) {
        if (t == c.T) return true;
        const int64_t d = c.T > t ? c.T - t : t - c.T;
        if (opt.dense_points > 0 && opt.dense_step > 0 && d % opt.dense_step == 0 &&
            d / opt.dense_step <= opt.dense_points)
          return true;
      }
      return false;
    };
    std::set<std::string> allowed;
    std::string holders;
    bool in_window = false, in_plan = false;
    for (size_t i = 0; i < table.routes.size(); ++i) {
      const Route& r = table.routes[i];
      if (r.H != c.H || r.w != c.w || r.form != c.form || c.T < r.t_lo || c.T > r.t_hi) continue;
      in_window = true;
      in_plan = in_plan || planned(tpts[i]);
      const bool default_fwd_window = r.op == Op::fwd && r.variant == &kernels::default_fwd();
      allowed.insert(default_fwd_window ? carrier_for(c) : std::string(r.variant->name));
      holders += (holders.empty() ? "" : ", ") + r.describe();
    }
    if (!in_window) throw std::invalid_argument(at + "is in no window of the table");
    if (!in_plan)
      throw std::invalid_argument(at + "is in no plan of this campaign: T=" + std::to_string(c.T) +
                                  " is neither a grid T point of a window holding it (" + holders +
                                  ") nor a dense point near one (--dense-points " + std::to_string(opt.dense_points) +
                                  ", --dense-step " + std::to_string(opt.dense_step) + ")");
    for (const auto& impl : rec.impls)
      if (!allowed.count(impl))
        throw std::invalid_argument(at + "names implementation " + impl + ", which no window holding the case runs (" +
                                    holders + ")");
    for (const auto& x : rec.results) {
      const kernels::Variant& v = kernels::variant(x.impl);
      for (int k = 0; k < (rec.forward_only ? 2 : 4); ++k)  // forward only: dx, dw not produced
        if (std::isnan(x.out[k].ratio) && !(v.external && v.op == Op::fwd && k >= 2))
          throw std::invalid_argument(at + "records output " + kOut[k] + " of " + x.impl +
                                      " as not produced; only an external forward implementation leaves out dx or "
                                      "dw");
    }
  };
}

// The external implementation among `impls` whose own run `err` reports
// ("[nondeterministic: |contract broken: ]external implementation NAME
// (ORIGIN) ...", harness/external.h run_external), or "".
std::string failing_external(const std::string& err, const std::vector<std::string>& impls) {
  const std::string name = parse_external_error(err).impl;
  if (name.empty()) return "";
  const kernels::Variant* v = kernels::find_variant(name);
  if (v == nullptr || !v->external || std::find(impls.begin(), impls.end(), name) == impls.end()) return "";
  return name;
}

// Runs one phase: every case the windows' phase lists need, once, with every
// implementation it needs that is not in the store yet.
class Runner {
 public:
  Runner(const GateOptions& opt, Backend backend, Store& store, Journal& journal)
      : opt_(opt), backend_(backend), store_(store), journal_(journal), t0_(Clock::now()) {}

  // take (may be empty: every case): whether this process runs the case of
  // that id (--shard: its shard's cases; --merge: none of the grid's).
  void run_phase(const std::string& name, std::vector<Win>& wins, Phase Win::*phase,
                 const std::function<bool(const std::string&)>& take = {}) {
    struct Need {
      seeds::CaseId c;
      std::vector<std::string> impls;
      bool any = false;
      bool bwd = false;  // a backward window of this gate covers the case: its dx, dw are read
      std::string window;
    };
    std::vector<Need> needs;
    std::map<std::string, size_t> index;
    for (auto& w : wins)
      for (const auto& c : (w.*phase).cases) {
        const std::string id = seeds::to_string(c);
        auto [it, fresh] = index.emplace(id, needs.size());
        if (fresh) needs.push_back({c, {}, false, false, w.route->window()});
        if (w.impl.empty()) needs[it->second].any = true;
      }
    // Every window with an implementation of its own (backward windows; forward
    // windows of a non-default forward variant) covering a case runs it on the
    // case, whichever window listed the case (a window covers every case it
    // lists): a result a window did not ask for is still a result of its
    // variant inside its window (summarize() counts it), and one oracle serves
    // them all. Without any backward run, a case of a default-forward window
    // is carried by carrier_for (when nothing journalled has it yet).
    for (auto& n : needs)
      for (const auto& w : wins)
        if (!w.impl.empty() && w.covers(n.c) && std::find(n.impls.begin(), n.impls.end(), w.impl) == n.impls.end())
          n.impls.push_back(w.impl);
    // Forward only: a case no backward window of this gate covers has its dx
    // and dw read by no window (summarize reads y, rstd of forward windows),
    // so its check skips the backward's oracle and validation
    // (CheckRequest::forward_only) and its record says so; a later gate
    // with a backward window over it runs it again in full (Store::done).
    for (auto& n : needs)
      for (const auto& w : wins)
        if (!w.fwd && w.covers(n.c)) n.bwd = true;
    // A default-forward window counts every case inside it (its `others`:
    // summarize), so a case it covers but did not list needs a run with the
    // default forward too: a refinement case of a backward window routed to
    // an external (which runs its own forward) had none, and the forward
    // window was ERROR on "no result" (found by an adversarial pass).
    for (auto& n : needs)
      for (const auto& w : wins)
        if (w.impl.empty() && w.covers(n.c)) n.any = true;
    auto default_forward_impl = [](const std::string& impl) {
      const kernels::Variant* v = kernels::find_variant(impl);
      return v != nullptr && default_forward_run(*v);
    };
    for (auto& n : needs)
      if (n.any && std::none_of(n.impls.begin(), n.impls.end(), default_forward_impl) &&
          !store_.any_ok(seeds::to_string(n.c)))
        n.impls.push_back(carrier_for(n.c));
    GateProgress p;
    p.phase = name;
    p.total = static_cast<int64_t>(needs.size());
    // What each need still lacks (journalled results are not redone).
    std::vector<std::vector<std::string>> missing(needs.size());
    std::vector<size_t> todo;  // needs with something to run, in order
    for (size_t i = 0; i < needs.size(); ++i) {
      const std::string id = seeds::to_string(needs[i].c);
      if (needs[i].any && std::none_of(needs[i].impls.begin(), needs[i].impls.end(), default_forward_impl))
        store_.use_any(id);
      for (const auto& impl : needs[i].impls) {
        if (!store_.done(id, impl, needs[i].bwd)) missing[i].push_back(impl);
        else store_.use(id, impl);
      }
      std::sort(missing[i].begin(), missing[i].end(),
                [](const std::string& a, const std::string& b) { return registry_rank(a) < registry_rank(b); });
      if (!missing[i].empty() && take && !take(id)) ++p.elsewhere;
      if (!missing[i].empty() && (!take || take(id))) {
        todo.push_back(i);
        // --retry-errors: a case journalled as an error runs again.
        if (std::any_of(missing[i].begin(), missing[i].end(),
                        [&](const std::string& impl) { return store_.retryable(id, impl); }))
          ++retried_;
      }
    }
    size_t reported = 0;  // needs[0..reported) are counted in the progress
    size_t wanted = 0;    // the furthest progress_to asked for
    // Needs to be run again without a failing external implementation (the
    // batches below), not yet journalled: the progress stops before them.
    std::set<size_t> pending;
    auto progress_to = [&](size_t end) {
      wanted = std::max(wanted, end);
      for (; reported < wanted && pending.count(reported) == 0; ++reported) {
        ++p.done;
        if (opt_.progress) {
          p.run_now = run_now_;
          p.seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
          p.seconds_per_case = run_now_ ? seconds_run_ / static_cast<double>(run_now_) : 0.0;
          p.window = needs[reported].window;
          p.worst = store_.worst;
          p.worst_case = store_.worst_case;
          p.worst_output = store_.worst_output;
          opt_.progress(p);
        }
      }
    };
    // The GPU half of case k+1 overlaps the oracle of case k (run_checks);
    // each result is journalled, in order, before the next one is taken.
    // A case that failed because one external implementation's run did (an
    // error naming it) is journalled as that implementation's error alone
    // and run again, in a later batch, without it: the other
    // implementations' results are not lost with it (a built-in variant's
    // window beside a failing plugin was ERROR on the plugin's message).
    std::vector<std::pair<size_t, std::vector<std::string>>> batch;  // (need, implementations)
    for (size_t i : todo) batch.emplace_back(i, missing[i]);
    while (!batch.empty()) {
      std::vector<std::pair<size_t, std::vector<std::string>>> redo;
      std::vector<Clock::time_point> started(batch.size());
      const PipelineStats st = run_checks(
          batch.size(),
          [&](size_t k) {
            const Need& n = needs[batch[k].first];
            started[k] = Clock::now();
            if (opt_.before_case) opt_.before_case(n.c, batch[k].second);
            return CheckRequest{n.c, batch[k].second, backend_, opt_.threads, opt_.oracle, false, !n.bwd};
          },
          [&](size_t k, CheckReport* rep, std::exception_ptr err) {
            progress_to(batch[k].first);
            const double secs = std::chrono::duration<double>(Clock::now() - started[k]).count();
            // A cancellation (an external implementation's, or a hook's) ends the
            // gate without journalling the case: a resumed run redoes it.
            if (!rep && err) {
              try {
                std::rethrow_exception(err);
              } catch (const Cancelled&) {
                throw;
              } catch (...) {
              }
            }
            CaseRecord rec;
            if (rep) {
              rec = make_case_record(*rep, secs);
            } else {
              rec.case_id = seeds::to_string(needs[batch[k].first].c);
              rec.impls = batch[k].second;
              try {
                std::rethrow_exception(err);
              } catch (const std::exception& e) {
                rec.error = e.what();
              } catch (...) {
              }
              if (rec.error.empty()) rec.error = "unknown error";
              rec.seconds = secs;
              if (const std::string x = failing_external(rec.error, rec.impls); !x.empty() && rec.impls.size() > 1) {
                std::vector<std::string> others;
                for (const auto& impl : rec.impls)
                  if (impl != x) others.push_back(impl);
                rec.impls = {x};
                redo.emplace_back(batch[k].first, std::move(others));
                pending.insert(batch[k].first);
              }
            }
            journal_.append(rec);  // on disk (fsynced) before the next case is taken
            store_.add(rec);
            for (const auto& impl : rec.impls) store_.use(rec.case_id, impl);
            ++run_now_;
            seconds_run_ += rec.seconds;
            if (opt_.after_case) opt_.after_case(run_now_);
            // Journalled for every implementation it needed (not run again):
            // the progress may pass it.
            if (redo.empty() || redo.back().first != batch[k].first) pending.erase(batch[k].first);
            progress_to(batch[k].first + 1);
          },
          opt_.devices);
      pipeline_ += st;
      batch = std::move(redo);
    }
    progress_to(needs.size());
  }

  const PipelineStats& pipeline() const { return pipeline_; }

  int64_t run_now() const { return run_now_; }
  int64_t retried() const { return retried_; }

 private:
  const GateOptions& opt_;
  Backend backend_;
  Store& store_;
  Journal& journal_;
  Clock::time_point t0_;
  int64_t run_now_ = 0;
  int64_t retried_ = 0;  // cases queued again whose journalled record is an error
  double seconds_run_ = 0;
  PipelineStats pipeline_;
};

// Worst case of a window over the given phases by its focus outputs.
struct Pick {
  double ratio = -1;
  seeds::CaseId c;
};
Pick worst_of(const Win& w, const Store& s, std::initializer_list<const Phase*> phases) {
  Pick best;
  for (const Phase* ph : phases)
    for (const auto& c : ph->cases) {
      std::string e;
      const ImplRecord* r = s.get(seeds::to_string(c), w.impl, &e, !w.fwd);
      if (!r) continue;
      for (int k : focus_outputs(w)) {
        const double v = std::isnan(r->out[k].ratio) ? std::numeric_limits<double>::infinity() : r->out[k].ratio;
        if (v > best.ratio) {
          best.ratio = v;
          best.c = c;
        }
      }
    }
  return best;
}

// partial (--shard, --merge): a case with neither a result nor an error is
// missing (its shard did not run or was not merged), not an error; any
// missing case, and every window of a shard, makes the window INCOMPLETE.
void summarize(const Win& w, const Store& s, WindowResult& wr, bool partial, bool shard) {
  wr.t_points = w.tpts;
  wr.dense_center = w.dense_center;
  wr.fresh_family = w.fresh_family;
  wr.fresh_t = w.fresh_t;
  std::set<std::string> seen;
  std::set<int64_t> failed_t;  // -> wr.failed_t
  std::vector<double> medians;
  bool any_dw_vs = false;
  wr.dw_vs_fp32_worst = kNaN;
  wr.dw_vs_fp32_median = kNaN;
  wr.worst = 0;
  const int ng = gated_count(w);
  const int focus = focus_outputs(w).front();
  // One case's record of an output into its window aggregate: the largest
  // ratio (NaN, not produced, as inf) with its case, and, the first time
  // the window meets the case, whether it fails there. Returns that ratio.
  auto fold = [](OutputAgg& a, const OutputRecord& o, const std::string& id, bool first) {
    const double ratio = std::isnan(o.ratio) ? std::numeric_limits<double>::infinity() : o.ratio;
    if (a.worst_case.empty() || ratio > a.max_ratio) {
      a.max_ratio = ratio;
      a.worst_case = id;
      a.worst_index = o.index;
      a.forced = o.forced;
    }
    if (first && (o.over > 0 || !o.pass)) ++a.cases_over;
    return ratio;
  };
  auto do_phase = [&](const Phase& ph, PhaseSummary& sum) {
    sum.worst_output = kOut[focus];
    sum.t = ph.t;
    sum.seeds = ph.seeds;
    sum.cases = static_cast<int64_t>(ph.cases.size());
    for (const auto& c : ph.cases) {
      const std::string id = seeds::to_string(c);
      std::string err;
      const ImplRecord* r = s.get(id, w.impl, &err, !w.fwd);
      const bool first = seen.insert(id).second;
      if (!r) {
        if (partial && err.empty()) {
          wr.missing += first;
          continue;
        }
        if (first) {
          ++wr.errors;
          failed_t.insert(c.T);
          if (Store::nondeterministic(err, w.impl))
            ++(parse_external_error(err).kind == ExternalError::Kind::contract_broken ? wr.contract_broken
                                                                                        : wr.nondeterministic);
          if (wr.error_samples.size() < 3)
            wr.error_samples.push_back(id + ": " + (err.empty() ? std::string("no result") : err));
        }
        continue;
      }
      for (int k = 0; k < ng; ++k) {
        const OutputRecord& o = r->out[k];
        const double ratio = fold(wr.out[k], o, id, first);
        if (first && o.over == 0 && !o.pass) ++wr.out[k].cases_inconclusive;
        if (k == focus && (sum.worst_case.empty() || ratio > sum.worst)) {
          sum.worst = ratio;
          sum.worst_case = id;
        }
        if (wr.worst_case.empty() || ratio > wr.worst) {
          wr.worst = ratio;
          wr.worst_output = kOut[k];
          wr.worst_case = id;
        }
      }
      bool h_new_failed = false;
      if (first && wr.gates_h_new()) {
        if (!r->h_new) {
          ++wr.h_new_unchecked;
          h_new_failed = true;
        } else {
          const OutputRecord& o = *r->h_new;
          (void)fold(wr.h_new, o, id, true);
          h_new_failed = o.over > 0 || !o.pass || !(o.ratio <= 1.0);
        }
      }
      if (first) {
        const std::string fam = seeds::to_string(seeds::FamilyPoint{c.family, c.eps, c.kappa});  // its point
        auto it = std::find_if(wr.families.begin(), wr.families.end(),
                               [&](const WindowResult::FamilyCount& f) { return f.family == fam; });
        if (it == wr.families.end()) it = wr.families.insert(wr.families.end(), {fam, 0, 0});
        ++it->cases;
        bool failed = h_new_failed;
        for (int k = 0; k < ng; ++k)
          failed = failed || r->out[k].over > 0 || !r->out[k].pass || !(r->out[k].ratio <= 1.0);
        it->failed += failed;
        if (failed) failed_t.insert(c.T);
      }
      if (!w.fwd && first) {
        if (!std::isnan(r->dw_vs_fp32_worst) && (!any_dw_vs || r->dw_vs_fp32_worst > wr.dw_vs_fp32_worst)) {
          wr.dw_vs_fp32_worst = r->dw_vs_fp32_worst;
          wr.dw_vs_fp32_worst_case = id;
          any_dw_vs = true;
        }
        if (!std::isnan(r->dw_vs_fp32_median)) medians.push_back(r->dw_vs_fp32_median);
      }
    }
  };
  do_phase(w.grid, wr.grid);
  do_phase(w.dense, wr.dense);
  do_phase(w.fresh, wr.fresh);
  do_phase(w.others, wr.others);
  wr.failed_t.assign(failed_t.begin(), failed_t.end());
  // Cases with a result or an error; a missing one (a shard's other cases,
  // an incomplete merge) is counted in wr.missing only.
  wr.cases = static_cast<int64_t>(seen.size()) - wr.missing;
  if (!medians.empty()) {
    std::sort(medians.begin(), medians.end());
    const size_t n = medians.size();
    wr.dw_vs_fp32_median = n % 2 ? medians[n / 2] : 0.5 * (medians[n / 2 - 1] + medians[n / 2]);
  }
  bool fails = wr.cases == 0 || wr.errors > 0, inconclusive = false;
  for (int k = 0; k < ng; ++k) {
    const OutputAgg& a = wr.out[k];
    fails = fails || a.cases_over > a.cases_inconclusive || !(a.max_ratio <= 1.0);
    inconclusive = inconclusive || a.cases_inconclusive > 0;
  }
  // h_new is bitwise exact: any difference fails. A case whose record
  // lacks h_new (a journal written before it was recorded) was not checked:
  // no verdict on the kernel, so the window is INCOMPLETE (below), never
  // PASS, and not a FAIL that derive would remember as a rejection.
  if (wr.gates_h_new()) fails = fails || wr.h_new.cases_over > 0 || !(wr.h_new.max_ratio <= 1.0);
  wr.verdict = fails ? Verdict::fail : inconclusive ? Verdict::inconclusive : Verdict::pass;
  wr.pass = wr.verdict == Verdict::pass;
  wr.kappa_headroom = kappa_headroom(wr.families);
  // Cases missing (a merge without every shard) or a shard's own run: not
  // a verdict, INCOMPLETE; except in a merge whose cases already fail the
  // window (over budget, an error): more cases cannot pass it, so it is
  // FAIL. A shard's run is INCOMPLETE whatever it found (its exit 0 lets
  // the dependent merge run).
  const bool known_fail = !shard && wr.cases > 0 && fails;
  if ((wr.missing > 0 || shard || wr.h_new_unchecked > 0) && !known_fail) {
    wr.incomplete = true;
    wr.pass = false;
    wr.verdict = Verdict::fail;
  }
}

// --merge: the shards' journals into `journal` and `store`. Each journal must
// be a shard's of this campaign (its header's campaign equal to `campaign`
// but "shard": "K/N"; one N for all, each K once), every line must pass the
// journal's checks (digest, fields, `in_plan`) and hold only cases of its
// shard. A (case, implementation) already known (from the journal being
// resumed or an earlier shard) must have the same result, else the merge
// stops naming both places, before anything is written; then the records
// bringing anything new are appended to the journal (fsynced) and the store.
void merge_shards(const GateOptions& opt, const nlohmann::json& campaign, const RecordCheck& in_plan,
                  Journal& journal, Store& store, GateResult& res) {
  std::map<std::pair<std::string, std::string>, std::pair<std::string, nlohmann::json>> known;
  auto learn = [&](const CaseRecord& r, const std::string& where) {
    bool fresh = false;
    for (size_t i = 0; i < r.impls.size(); ++i) {
      nlohmann::json what = record_result(r, i);
      auto [it, added] = known.try_emplace({r.case_id, r.impls[i]}, where, what);
      fresh = fresh || added;
      if (added) continue;
      // A full result where only a forward-only one was known brings dx, dw;
      // a result (or a later attempt) where an error was known replaces it.
      const Duplicate d = resolve_duplicate(it->second.second, what, r.impls[i]);
      if (d == Duplicate::replace) {
        it->second = {where, what};
        fresh = true;
      } else if (d == Duplicate::contradict)
        throw std::invalid_argument("--merge: " + where + " contradicts " + it->second.first + ": case " + r.case_id +
                                    ", implementation " + r.impls[i] + ": " + it->second.first + " has " +
                                    it->second.second.dump() + ", " + where + " has " + what.dump() +
                                    " (which one is right cannot be known: rerun that shard into a new journal)");
    }
    return fresh;
  };
  const std::string own = opt.journal_path.empty() ? std::string("(in memory)") : opt.journal_path;
  for (size_t i = 0; i < journal.resumed().size(); ++i)
    learn(journal.resumed()[i], "journal " + own + " line " + std::to_string(journal.resumed_lines()[i]));
  std::map<int, std::string> given;  // K -> path
  std::vector<CaseRecord> add;        // records that bring something new, in shard and line order
  int n = 0;
  std::string n_from;
  for (const std::string& path : opt.merge_paths) {
    const nlohmann::json c = journal_campaign(path);
    if (!c.contains("shard") || !c["shard"].is_string())
      throw std::invalid_argument("--merge " + path + ": not a shard's journal (its campaign names no shard; "
                                  "a journal of a whole campaign is resumed with --journal, not merged)");
    std::pair<int, int> kn;
    try {
      kn = parse_shard(c["shard"].get<std::string>());
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("--merge " + path + ": its campaign's shard: " + e.what());
    }
    const auto [k, nk] = kn;
    if (n == 0) {
      n = nk;
      n_from = path;
    } else if (nk != n) {
      throw std::invalid_argument("--merge " + path + " is shard " + c["shard"].get<std::string>() + " of " +
                                  std::to_string(nk) + ", but " + n_from + " is one of " + std::to_string(n) +
                                  " shards: merge the shards of one split");
    }
    if (auto [it, added] = given.emplace(k, path); !added)
      throw std::invalid_argument("--merge: shard " + c["shard"].get<std::string>() + " given twice: " + it->second +
                                  " and " + path);
    nlohmann::json sc = campaign;
    sc["shard"] = c["shard"];
    const int kk = k, nn = n;
    const Journal sj = [&] {
      try {
        return Journal::read(path, sc, [&in_plan, kk, nn](const CaseRecord& r) {
          in_plan(r);
          if (const int at = shard_of(r.case_id, nn); at != kk)
            throw std::invalid_argument("case " + r.case_id + " belongs to shard " + std::to_string(at) + "/" +
                                        std::to_string(nn) + ", not to this journal's shard " + std::to_string(kk) + "/" +
                                        std::to_string(nn));
        });
      } catch (const JournalError&) {
        throw;  // another format or key: the journal itself may be fine
      } catch (const core::MultilineError& e) {
        // Another campaign's journal (its differing fields, one a line): the
        // lines kept, the resume advice (about --journal) replaced by the
        // merge's.
        std::string m = e.what();
        if (const size_t at = m.find("\nresume with"); at != std::string::npos) m.resize(at);
        throw core::MultilineError(m + "\nmerge the shard journals of this campaign only (the same table and "
                                       "options as this run), or run that shard again into a new journal file");
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string(e.what()) +
                                    "; a shard journal that fails its checks cannot be merged: run that shard again "
                                    "into a new journal file");
      }
    }();
    if (sj.dropped_bytes() > 0) res.shard_dropped.emplace_back(path, sj.dropped_bytes());
    for (size_t i = 0; i < sj.resumed().size(); ++i)
      if (learn(sj.resumed()[i], "journal " + path + " line " + std::to_string(sj.resumed_lines()[i])))
        add.push_back(sj.resumed()[i]);
  }
  // Every shard checked: only now is the journal written to.
  for (const CaseRecord& r : add) {
    journal.append(r);
    store.add(r);
  }
  res.merged_shard_count = n;
  for (int k = 1; k <= n; ++k)
    if (!given.count(k)) res.shards_missing.push_back(std::to_string(k) + "/" + std::to_string(n));
}

}  // namespace

GateResult run_gate(const GateOptions& opt) {
  // No external (re-)registration while the gate runs (registry.h).
  const kernels::ExternalRegistrationsHeld held("a gate runs (normgate gate, ng_gate or normgate.gate)");
  const GateInputs in = load_gate_inputs(opt);
  const seeds::SeedSet& seed_set = in.seed_set;
  const WindowFilter& filter = in.filter;
  const kernels::LoadOptions& lo = in.lo;
  const kernels::RouteTable& table = in.table;

  GateResult res;
  res.table_path = opt.table_path;
  res.table_sha256 = table.sha256;
  res.seeds = seeds::to_string(seed_set);
  // Checked before any case runs, not after the grid.
  const uint64_t fresh_seeds = fresh_seed_count(seed_set, opt.fresh_factor, res.seeds);
  res.oracle = std::string(oracle::to_string(opt.oracle));
  res.t_per_window = opt.t_per_window;
  res.dense_points = opt.dense_points;
  res.dense_step = opt.dense_step;
  res.dense_all_seeds = opt.dense_all_seeds;
  res.fresh_factor = opt.fresh_factor;
  res.windows_filter = opt.windows;
  res.allow_controls = opt.allow_controls;
  res.normgate_version = opt.normgate_version;
  res.normgate_commit = opt.normgate_commit;

  // Which windows: --base, then --windows.
  Selection sel = select_windows(opt, table, filter, lo);
  const std::vector<const Route*>& gated = sel.gated;
  if (!opt.base_path.empty()) {
    res.base_path = opt.base_path;
    res.base_sha256 = sel.base_sha256;
  }
  res.skipped = std::move(sel.skipped);
  res.removed = std::move(sel.removed);
  res.source_changed = std::move(sel.source_changed);
  res.filtered_out = std::move(sel.filtered_out);

  // External implementations the gated windows route: each must have a run
  // (a table may name one registered only in the kernel registry), and be
  // one this gate was given (opt.externals: a callable registered by an
  // earlier gate of the process ran in a later one it was not given to;
  // one given but routed nowhere would read as passed without a run; both
  // found by an adversarial pass of the Python API).
  // A given one the table routes only in windows the filter leaves out is
  // taken (the table cannot load without it: a table routing two
  // implementations is gated one at a time so).
  if (opt.externals) {
    for (const Route* r : gated)
      if (r->variant->external &&
          std::find(opt.externals->begin(), opt.externals->end(), r->variant->name) == opt.externals->end())
        throw std::invalid_argument(r->describe() + ": routed to external implementation " +
                                    std::string(r->variant->name) +
                                    ", which this gate was not given (one registered earlier in this process is "
                                    "not run by a later gate): pass it too, or leave its windows out with the "
                                    "windows filter");
    for (const std::string& name : *opt.externals) {
      const kernels::Variant* v = kernels::find_variant(name);
      if (v != nullptr && !v->external)
        throw std::invalid_argument("'" + core::escape_controls(name) +
                                    "' is a built-in variant, not an external implementation: list only the "
                                    "externals this gate runs");
      if (std::none_of(table.routes.begin(), table.routes.end(),
                       [&](const kernels::Route& r) { return r.variant->name == name; }))
        throw std::invalid_argument("the table routes no window to external implementation '" +
                                    core::escape_controls(name) +
                                    "': nothing of it would run, and the gate of the table's windows would read as "
                                    "its pass; route windows to it by name, or leave it out");
    }
  }
  for (const Route* r : gated) {
    if (!r->variant->external) continue;
    const ExternalImpl* x = find_external(*r->variant);
    if (x == nullptr)
      throw std::invalid_argument(r->describe() + ": external variant " + std::string(r->variant->name) +
                                  " has no registered implementation to run");
    if (std::none_of(res.externals.begin(), res.externals.end(),
                     [&](const GateResult::External& e) { return e.name == x->name; }))
      res.externals.push_back({x->name, std::string(kernels::to_string(x->op)), x->origin, x->ran_on,
                               std::string(r->variant->source_sha256), x->description});
  }

  // Backend.
  const Backend backend = resolve_backend(opt.backend);
  if (backend == Backend::gpu && !kernels::gpu_available())
    throw std::invalid_argument(
        "backend gpu requested but no usable CUDA device is present (backend cpu, or auto, runs the kernels' CPU "
        "models instead)");
  res.device = kernels::device_info();
  res.backend = backend_name(backend);
  res.backend_detail = describe_backend(backend, res.device);
  if (!res.externals.empty())
    res.backend_detail += std::string(!res.backend_detail.empty() && res.backend_detail.back() == '.' ? " " : ". ") +
                          "External implementations ran through their own callbacks, each where its "
                          "registration says (reports: ran_on), whatever the backend.";

  // Windows and their grids.
  std::vector<Win> wins;
  for (const Route* r : gated) {
    Win w;
    w.route = r;
    w.fwd = r->op == Op::fwd;
    w.impl = w.fwd && r->variant == &kernels::default_fwd() ? std::string() : std::string(r->variant->name);
    w.tpts = window_t_points(r->t_lo, r->t_hi, opt.t_per_window);
    w.grid.t = w.tpts;
    w.grid.seeds = res.seeds;
    w.grid.cases = expand(*r, w.tpts, seed_set);
    wins.push_back(std::move(w));
  }

  // Journal: the campaign is everything the plan and the numbers depend on.
  nlohmann::json campaign;
  campaign["table_sha256"] = table.sha256;
  campaign["seeds"] = res.seeds;
  campaign["oracle"] = res.oracle;
  campaign["t_per_window"] = opt.t_per_window;
  campaign["dense_points"] = opt.dense_points;
  campaign["dense_step"] = opt.dense_step;
  if (opt.dense_all_seeds) campaign["dense_all_seeds"] = true;  // absent: the default (worst case's seed)
  campaign["fresh_factor"] = opt.fresh_factor;
  campaign["allow_controls"] = opt.allow_controls;
  campaign["backend"] = res.backend;
  campaign["device"] = backend == Backend::gpu ? res.device.name : std::string("cpu");
  // The sources the journalled numbers depend on: every variant the table
  // routes, the default forward (every backward variant's run uses it), and
  // the backward variants that carry forward windows' cases. (Runs of
  // different forward variants never share records: they are keyed by
  // implementation, Store.) Not the rest of the registry, so a variant added
  // later (a new route in the making) leaves a running campaign's journal
  // valid; and the whole table, not the --windows slice, so that slices share
  // one journal.
  nlohmann::json hashes = nlohmann::json::object();
  auto add_hash = [&](const kernels::Variant& v) { hashes[std::string(v.name)] = std::string(v.source_sha256); };
  add_hash(kernels::default_fwd());
  for (const Route& r : table.routes) {
    add_hash(*r.variant);
    if (r.op == Op::fwd) {
      seeds::CaseId c;
      c.H = r.H;
      c.w = r.w;
      c.form = r.form;
      add_hash(kernels::variant(carrier_for(c)));
    }
  }
  campaign["variant_sha256"] = hashes;
  const bool sharded = opt.shard_count > 0, merging = !opt.merge_paths.empty();
  if (sharded) {
    // A shard's journal says which shard it is: resuming it as another
    // shard, or as the whole campaign, is refused; --merge reads it.
    res.shard = std::to_string(opt.shard_index) + "/" + std::to_string(opt.shard_count);
    campaign["shard"] = res.shard;
  }
  // Every resumed record is checked against this campaign's plan (plan_check);
  // Journal::open checks its digest and fields first.
  const RecordCheck in_plan = plan_check(table, seed_set, opt, fresh_seeds);
  const RecordCheck check =
      !sharded ? in_plan : RecordCheck([&in_plan, &opt](const CaseRecord& r) {
        in_plan(r);
        if (const int k = shard_of(r.case_id, opt.shard_count); k != opt.shard_index)
          throw std::invalid_argument("case " + r.case_id + " belongs to shard " + std::to_string(k) + "/" +
                                      std::to_string(opt.shard_count) + ", not to this journal's shard " +
                                      std::to_string(opt.shard_index) + "/" + std::to_string(opt.shard_count));
      });
  // --merge: every shard journal checked first, against each other and the
  // plan, into a scratch journal, so that a refused merge creates no
  // --journal file (one left behind would then refuse the corrected run as
  // another campaign's); then again below, against the journal's own records.
  if (merging) {
    Journal scratch;
    Store scratch_store;
    GateResult scratch_res;
    merge_shards(opt, campaign, in_plan, scratch, scratch_store, scratch_res);
  }
  Journal journal = opt.journal_path.empty() ? Journal() : Journal::open(opt.journal_path, campaign, check);
  Store store;
  for (const auto& rec : journal.resumed()) store.add(rec);
  res.journal_dropped_bytes = journal.dropped_bytes();
  if (merging) merge_shards(opt, campaign, in_plan, journal, store, res);
  // Records 0..journal_records-1 came from journals (this one's, the shards').
  const int64_t journal_records = store.records;
  store.retry_errors = opt.retry_errors;
  store.retry_below = journal_records;

  Runner runner(opt, backend, store, journal);
  std::function<bool(const std::string&)> take;  // every case
  if (sharded) take = [&opt](const std::string& id) { return shard_of(id, opt.shard_count) == opt.shard_index; };
  if (merging) take = [](const std::string&) { return false; };  // the shards ran the grid
  runner.run_phase("grid", wins, &Win::grid, take);

  // Refinement needs every grid result of its window: a shard runs none; a
  // merge none for a window whose grid lacks cases (a shard missing).
  for (auto& w : wins) {
    w.refine = !sharded;
    for (const auto& c : w.grid.cases) {
      if (!w.refine) break;
      std::string e;
      w.refine = store.get(seeds::to_string(c), w.impl, &e, !w.fwd) != nullptr || !e.empty();
    }
  }

  // Dense grid around each window's worst grid point.
  for (auto& w : wins) {
    if (opt.dense_points == 0) break;
    if (!w.refine) continue;
    const Pick p = worst_of(w, store, {&w.grid});
    if (p.ratio < 0) continue;
    w.dense_center = p.c.T;
    // Only the steps that can land inside the window: |k| <= span / step (an
    // int loop to dense_points = INT_MAX never ended, and k * step overflowed
    // for a step near INT64_MAX, wrapping back into the window).
    const int64_t kmax = std::min<int64_t>(opt.dense_points, (w.route->t_hi - w.route->t_lo) / opt.dense_step);
    for (int64_t k = -kmax; k <= kmax; ++k) {
      if (k == 0) continue;
      const int64_t t = p.c.T + k * opt.dense_step;
      // A grid T already ran every case the dense grid would add there
      // (the worst case's family and seed, or the whole set): not a new
      // point (the report names those it skipped).
      if (t >= w.route->t_lo && t <= w.route->t_hi && !std::binary_search(w.tpts.begin(), w.tpts.end(), t))
        w.dense.t.push_back(t);
    }
    if (opt.dense_all_seeds) {
      w.dense.seeds = res.seeds;
      w.dense.cases = expand(*w.route, w.dense.t, seed_set);
    } else {  // the worst grid case's family and seed at every dense T
      const seeds::SeedSet ds = seeds::point_seed_set(p.c, p.c.seed, p.c.seed);  // its eps and kappa too
      w.dense.seeds = seeds::to_string(ds);
      w.dense.cases = expand(*w.route, w.dense.t, ds);
    }
  }
  runner.run_phase("dense", wins, &Win::dense);

  // Fresh seeds at each window's worst (T, family).
  if (opt.fresh_factor > 0) {
    for (auto& w : wins) {
      if (!w.refine) continue;
      const Pick p = worst_of(w, store, {&w.grid, &w.dense});
      if (p.ratio < 0) continue;
      const seeds::SeedSet fs = seeds::point_seed_set(p.c, seed_set.last + 1, seed_set.last + fresh_seeds);
      w.fresh_t = p.c.T;
      w.fresh_family = std::string(seeds::to_string(p.c.family));
      w.fresh.t = {p.c.T};
      w.fresh.seeds = seeds::to_string(fs);
      w.fresh.cases = expand(*w.route, w.fresh.t, fs);
    }
  }
  runner.run_phase("fresh", wins, &Win::fresh);

  // Each window's share of the other windows' cases (run above with its
  // variant, Runner::run_phase), in window, phase and case order.
  for (auto& w : wins) {
    std::set<std::string> own;
    for (const Phase* ph : {&w.grid, &w.dense, &w.fresh})
      for (const auto& c : ph->cases) own.insert(seeds::to_string(c));
    std::set<int64_t> ts;
    for (const auto& o : wins) {
      if (&o == &w) continue;
      for (const Phase* ph : {&o.grid, &o.dense, &o.fresh})
        for (const auto& c : ph->cases)
          if (w.covers(c) && own.insert(seeds::to_string(c)).second) {
            w.others.cases.push_back(c);
            ts.insert(c.T);
          }
    }
    w.others.t.assign(ts.begin(), ts.end());
  }

  for (const auto& w : wins) {
    WindowResult wr;
    wr.route = *w.route;
    if (w.route->variant->external) {
      const ExternalImpl* x = find_external(*w.route->variant);
      wr.impl = w.impl + " (external, " + (x ? x->origin : std::string("?")) + ": its own step)";
      wr.fwd = w.impl;
    } else if (!w.fwd) {
      wr.impl = w.impl;
      wr.fwd = std::string(kernels::default_fwd().name);
    } else {
      seeds::CaseId c;
      c.H = w.route->H;
      c.w = w.route->w;
      c.form = w.route->form;
      wr.fwd = std::string(w.route->variant->name);
      wr.impl = w.impl.empty() ? "any backward run (forward " + wr.fwd + ")"
                               : w.impl + " (its own runs: forward " + wr.fwd + ", then " + carrier_for(c) +
                                     " for dx, dw, not gated)";
    }
    wr.control = w.route->variant->control;
    summarize(w, store, wr, sharded || merging, sharded);
    res.windows.push_back(std::move(wr));
  }
  res.cases_run_now = runner.run_now();
  res.cases_retried = runner.retried();
  res.pipeline = runner.pipeline();
  // Records this plan used (an uninterrupted run uses all it made); records
  // 0..journal_records-1 came from journals.
  res.cases_total = static_cast<int64_t>(store.used.size());
  res.cases_resumed = static_cast<int64_t>(
      std::distance(store.used.begin(), store.used.lower_bound(journal_records)));
  if (!journal.seals().empty()) {
    res.journal_head = journal.seals().back();
    res.journal_lines = static_cast<int64_t>(journal.seals().size());
  }
  res.date = utc_now();
  return res;
}

namespace {

// The family count of the cancel point at kappa level k that ran cases, or
// nullptr (not run, or no case of it).
const WindowResult::FamilyCount* cancel_level_run(const std::vector<WindowResult::FamilyCount>& families, double k) {
  const std::string label = seeds::to_string(seeds::FamilyPoint{seeds::Family::cancel, seeds::kDefaultEps, k});
  const auto it = std::find_if(families.begin(), families.end(),
                               [&](const WindowResult::FamilyCount& f) { return f.family == label; });
  return it == families.end() || it->cases == 0 ? nullptr : &*it;
}

}  // namespace

double kappa_headroom(const std::vector<WindowResult::FamilyCount>& families) {
  double head = -1;
  for (double k : seeds::kKappaLevels) {
    const WindowResult::FamilyCount* f = cancel_level_run(families, k);
    if (f == nullptr) continue;
    if (f->failed > 0) return head >= 0 ? head : k == seeds::kKappaLevels[0] ? 0 : -1;  // -1: nothing below ran
    head = k;
  }
  return head;
}

double kappa_failed_below(const WindowResult& w) {
  if (w.kappa_headroom >= 0) return 0;
  for (double k : seeds::kKappaLevels)
    if (const WindowResult::FamilyCount* f = cancel_level_run(w.families, k)) return f->failed > 0 ? k : 0;
  return 0;
}

}  // namespace normgate::validators
