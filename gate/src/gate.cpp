// gate/src/gate.cpp: the accuracy gate over a route table (gate.h).
#include "normgate/gate/gate.h"

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

#include "normgate/core/report_util.h"

#include "normgate/kernels/registry.h"
#include "normgate/harness/runner.h"
#include "normgate/gate/journal.h"

namespace normgate::validators {

namespace {

using kernels::Op;
using kernels::Route;
using detail::Clock;
using detail::fmt;
using detail::num;
using detail::since;

constexpr const char* kOut[4] = {"y", "rstd", "dx", "dw"};
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();



std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// ---- results store: (case id, impl) -> record or error ----------------------

struct Store {
  std::map<std::string, std::map<std::string, ImplRecord>> ok;
  std::map<std::string, std::map<std::string, std::string>> err;
  int64_t records = 0;
  double worst = 0;  // largest err/tol of any output seen (progress only)
  // Record number holding (case, impl), and the records this campaign's plan
  // used (a journal may hold cases of other window filters: not counted).
  std::map<std::string, std::map<std::string, int64_t>> rec_of;
  std::set<int64_t> used;

  void add(const CaseRecord& r) {
    const int64_t id = records++;
    for (const auto& i : r.impls) rec_of[r.case_id].emplace(i, id);
    if (!r.error.empty()) {
      for (const auto& i : r.impls) err[r.case_id].emplace(i, r.error);
      return;
    }
    for (const auto& x : r.results) {
      ok[r.case_id].emplace(x.impl, x);
      for (const auto& o : x.out)
        if (!(o.ratio <= worst)) worst = o.ratio;
    }
  }
  void use(const std::string& c, const std::string& impl) {
    auto a = rec_of.find(c);
    if (a == rec_of.end()) return;
    if (auto b = a->second.find(impl); b != a->second.end()) used.insert(b->second);
  }
  // Mark the record get(c, "") reads (a forward window's case).
  void use_any(const std::string& c) {
    auto a = ok.find(c);
    if (a == ok.end()) return;
    for (const auto& v : kernels::variants())
      if (a->second.count(std::string(v.name))) {
        use(c, std::string(v.name));
        return;
      }
  }
  bool done(const std::string& c, const std::string& impl) const {
    auto a = ok.find(c);
    if (a != ok.end() && a->second.count(impl)) return true;
    auto b = err.find(c);
    return b != err.end() && b->second.count(impl);
  }
  bool any_ok(const std::string& c) const {
    auto a = ok.find(c);
    return a != ok.end() && !a->second.empty();
  }
  // The record for (case, impl); impl "" = any implementation (registry
  // order). Returns nullptr and sets *error when only an error is known.
  const ImplRecord* get(const std::string& c, const std::string& impl, std::string* error) const {
    auto a = ok.find(c);
    if (a != ok.end()) {
      if (impl.empty()) {
        for (const auto& v : kernels::variants())
          if (auto it = a->second.find(std::string(v.name)); it != a->second.end()) return &it->second;
      } else if (auto it = a->second.find(impl); it != a->second.end()) {
        return &it->second;
      }
    }
    auto b = err.find(c);
    if (b != err.end()) {
      if (impl.empty() && !b->second.empty()) {
        *error = b->second.begin()->second;
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
  std::string impl;  // bwd: the variant; fwd: "" (any backward run of the case)
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

  bool covers(const seeds::CaseId& c) const {
    return c.H == route->H && c.w == route->w && c.form == route->form && c.T >= route->t_lo && c.T <= route->t_hi;
  }
};

// The output the refinement follows: the one whose error comes from the
// variant's long reduction (dw: over T rows; rstd: over H columns). dx and y
// are per-element roundings whose worst case does not move with T.
std::vector<int> focus_outputs(const Win& w) { return w.fwd ? std::vector<int>{1} : std::vector<int>{3}; }
int gated_count(const Win& w) { return w.fwd ? 2 : 4; }

std::vector<seeds::CaseId> expand(const Route& r, const std::vector<int64_t>& ts, const seeds::SeedSet& s) {
  std::vector<seeds::CaseId> out;
  for (int64_t t : ts) seeds::append_cases(s, r.H, t, r.w, r.form, out);
  return out;
}

int registry_rank(const std::string& impl) {
  int k = 0;
  for (const auto& v : kernels::variants()) {
    if (v.name == impl) return k;
    ++k;
  }
  return k;
}

// Runs one phase: every case the windows' phase lists need, once, with every
// implementation it needs that is not in the store yet.
class Runner {
 public:
  Runner(const GateOptions& opt, Backend backend, Store& store, Journal& journal)
      : opt_(opt), backend_(backend), store_(store), journal_(journal), t0_(Clock::now()) {}

  void run_phase(const std::string& name, std::vector<Win>& wins, Phase Win::*phase) {
    struct Need {
      seeds::CaseId c;
      std::vector<std::string> impls;
      bool any = false;
      std::string window;
    };
    std::vector<Need> needs;
    std::map<std::string, size_t> index;
    for (auto& w : wins)
      for (const auto& c : (w.*phase).cases) {
        const std::string id = seeds::to_string(c);
        auto [it, fresh] = index.emplace(id, needs.size());
        if (fresh) needs.push_back({c, {}, false, w.route->window()});
        if (w.fwd) needs[it->second].any = true;
      }
    // Every backward window covering a case runs its variant on it, whichever
    // window listed the case (a window covers every case it lists): a result
    // a window did not ask for is still a result of its variant inside its
    // window (summarize() counts it), and one oracle serves them all. Without
    // any, a forward window's case is carried by carrier_for (when nothing
    // journalled has it yet).
    for (auto& n : needs)
      for (const auto& w : wins)
        if (!w.fwd && w.covers(n.c) && std::find(n.impls.begin(), n.impls.end(), w.impl) == n.impls.end())
          n.impls.push_back(w.impl);
    for (auto& n : needs)
      if (n.any && n.impls.empty() && !store_.any_ok(seeds::to_string(n.c))) n.impls.push_back(carrier_for(n.c));
    GateProgress p;
    p.phase = name;
    p.total = static_cast<int64_t>(needs.size());
    // What each need still lacks (journalled results are not redone).
    std::vector<std::vector<std::string>> missing(needs.size());
    std::vector<size_t> todo;  // needs with something to run, in order
    for (size_t i = 0; i < needs.size(); ++i) {
      const std::string id = seeds::to_string(needs[i].c);
      if (needs[i].any && needs[i].impls.empty()) store_.use_any(id);
      for (const auto& impl : needs[i].impls) {
        if (!store_.done(id, impl)) missing[i].push_back(impl);
        else store_.use(id, impl);
      }
      std::sort(missing[i].begin(), missing[i].end(),
                [](const std::string& a, const std::string& b) { return registry_rank(a) < registry_rank(b); });
      if (!missing[i].empty()) todo.push_back(i);
    }
    size_t reported = 0;  // needs[0..reported) are counted in the progress
    auto progress_to = [&](size_t end) {
      for (; reported < end; ++reported) {
        ++p.done;
        if (opt_.progress) {
          p.run_now = run_now_;
          p.seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
          p.seconds_per_case = run_now_ ? seconds_run_ / static_cast<double>(run_now_) : 0.0;
          p.window = needs[reported].window;
          p.worst = store_.worst;
          opt_.progress(p);
        }
      }
    };
    // The GPU half of case k+1 overlaps the oracle of case k (run_checks);
    // each result is journalled, in order, before the next one is taken.
    std::vector<Clock::time_point> started(todo.size());
    const PipelineStats st = run_checks(
        todo.size(),
        [&](size_t k) {
          const Need& n = needs[todo[k]];
          started[k] = Clock::now();
          if (opt_.before_case) opt_.before_case(n.c, missing[todo[k]]);
          return CheckRequest{n.c, missing[todo[k]], backend_, opt_.threads, opt_.oracle};
        },
        [&](size_t k, CheckReport* rep, std::exception_ptr err) {
          progress_to(todo[k]);
          const double secs = std::chrono::duration<double>(Clock::now() - started[k]).count();
          CaseRecord rec;
          if (rep) {
            rec = make_case_record(*rep, secs);
          } else {
            rec.case_id = seeds::to_string(needs[todo[k]].c);
            rec.impls = missing[todo[k]];
            try {
              std::rethrow_exception(err);
            } catch (const std::exception& e) {
              rec.error = e.what();
            } catch (...) {
            }
            if (rec.error.empty()) rec.error = "unknown error";
            rec.seconds = secs;
          }
          journal_.append(rec);  // on disk (fsynced) before the next case is taken
          store_.add(rec);
          for (const auto& impl : rec.impls) store_.use(rec.case_id, impl);
          ++run_now_;
          seconds_run_ += rec.seconds;
          if (opt_.after_case) opt_.after_case(run_now_);
          progress_to(todo[k] + 1);
        });
    pipeline_.cases += st.cases;
    pipeline_.overlapped = pipeline_.overlapped || st.overlapped;
    pipeline_.seconds_total += st.seconds_total;
    pipeline_.seconds_prepare += st.seconds_prepare;
    pipeline_.seconds_finish += st.seconds_finish;
    pipeline_.seconds_waiting_for_prepare += st.seconds_waiting_for_prepare;
    progress_to(needs.size());
  }

  const PipelineStats& pipeline() const { return pipeline_; }

  int64_t run_now() const { return run_now_; }

 private:
  const GateOptions& opt_;
  Backend backend_;
  Store& store_;
  Journal& journal_;
  Clock::time_point t0_;
  int64_t run_now_ = 0;
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
      const ImplRecord* r = s.get(seeds::to_string(c), w.impl, &e);
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

void summarize(const Win& w, const Store& s, WindowResult& wr) {
  wr.t_points = w.tpts;
  wr.dense_center = w.dense_center;
  wr.fresh_family = w.fresh_family;
  wr.fresh_t = w.fresh_t;
  std::set<std::string> seen;
  std::vector<double> medians;
  bool any_dw_vs = false;
  wr.dw_vs_fp32_worst = kNaN;
  wr.dw_vs_fp32_median = kNaN;
  wr.worst = 0;
  const int ng = gated_count(w);
  const int focus = focus_outputs(w).front();
  auto do_phase = [&](const Phase& ph, PhaseSummary& sum) {
    sum.worst_output = kOut[focus];
    sum.t = ph.t;
    sum.seeds = ph.seeds;
    sum.cases = static_cast<int64_t>(ph.cases.size());
    for (const auto& c : ph.cases) {
      const std::string id = seeds::to_string(c);
      std::string err;
      const ImplRecord* r = s.get(id, w.impl, &err);
      const bool first = seen.insert(id).second;
      if (!r) {
        if (first) {
          ++wr.errors;
          if (wr.error_samples.size() < 3)
            wr.error_samples.push_back(id + ": " + (err.empty() ? std::string("no result") : err));
        }
        continue;
      }
      for (int k = 0; k < ng; ++k) {
        const OutputRecord& o = r->out[k];
        const double ratio = std::isnan(o.ratio) ? std::numeric_limits<double>::infinity() : o.ratio;
        OutputAgg& a = wr.out[k];
        if (a.worst_case.empty() || ratio > a.max_ratio) {
          a.max_ratio = ratio;
          a.worst_case = id;
          a.worst_index = o.index;
          a.forced = o.forced;
        }
        if (first && (o.over > 0 || !o.pass)) ++a.cases_over;
        if (first && o.over == 0 && !o.pass) ++a.cases_inconclusive;
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
      if (first) {
        const std::string fam(seeds::to_string(c.family));
        auto it = std::find_if(wr.families.begin(), wr.families.end(),
                               [&](const WindowResult::FamilyCount& f) { return f.family == fam; });
        if (it == wr.families.end()) it = wr.families.insert(wr.families.end(), {fam, 0, 0});
        ++it->cases;
        bool failed = false;
        for (int k = 0; k < ng; ++k)
          failed = failed || r->out[k].over > 0 || !r->out[k].pass || !(r->out[k].ratio <= 1.0);
        it->failed += failed;
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
  wr.cases = static_cast<int64_t>(seen.size());
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
  wr.verdict = fails ? Verdict::fail : inconclusive ? Verdict::inconclusive : Verdict::pass;
  wr.pass = wr.verdict == Verdict::pass;
}

// ---- options ------------------------------------------------------------------

void check_options(const GateOptions& o) {
  if (o.table_path.empty()) throw std::invalid_argument("no route table given");
  if (o.t_per_window < 2)
    throw std::invalid_argument("--t-per-window " + std::to_string(o.t_per_window) +
                                " < 2 (every window runs at least its first and last T)");
  if (o.dense_points < 0) throw std::invalid_argument("--dense-points " + std::to_string(o.dense_points) + " < 0");
  if (o.dense_step < 1) throw std::invalid_argument("--dense-step " + std::to_string(o.dense_step) + " < 1");
  if (o.fresh_factor < 0) throw std::invalid_argument("--fresh-factor " + std::to_string(o.fresh_factor) + " < 0");
}

std::string backend_name(Backend b) { return b == Backend::gpu ? std::string(kernels::kGpuBackend)
                                                                : std::string(kernels::kCpuModelBackend); }

}  // namespace

// ---- public: T points, filters ---------------------------------------------------

std::string describe_backend(Backend resolved, const kernels::DeviceInfo& d) {
  if (resolved == Backend::gpu)
    return "GPU: every kernel variant ran as CUDA code on " + d.name + " (cc " + d.cc + ", driver " + d.driver +
           ", CUDA runtime " + d.cuda_runtime + "); inputs generated on the GPU, oracle on the CPU";
  return std::string(d.present ? "CPU models by request (--backend cpu): a GPU is present but was not used"
                               : "CPU models: NO usable GPU in this process") +
         "; every kernel variant ran as its CPU model (kernels/models.h: the variant's arithmetic step by step, "
         "bitwise predictions of the GPU code), NOT as CUDA code. Approvals from this run are marked cpu-model";
}

std::vector<int64_t> window_t_points(int64_t lo, int64_t hi, int target) {
  if (lo < 1 || lo > hi)
    throw std::invalid_argument("bad window T=" + std::to_string(lo) + ".." + std::to_string(hi));
  if (target < 2) throw std::invalid_argument("T points per window " + std::to_string(target) + " < 2");
  std::set<int64_t> s{lo, hi};
  for (int64_t p = 2; p <= hi && p > 0; p *= 2) {
    if (p < lo) continue;
    if (p - 1 >= lo) s.insert(p - 1);
    if (p + 1 <= hi) s.insert(p + 1);
    if (p > (int64_t{1} << 61)) break;
  }
  const int64_t room = hi - lo + 1;
  const int64_t want = std::min<int64_t>(target, room);
  const int64_t m = want - static_cast<int64_t>(s.size());
  for (int64_t k = 1; k <= m; ++k) {
    // lo + round((hi - lo) * k / (m + 1)) in exact integer arithmetic
    const __int128 num = static_cast<__int128>(hi - lo) * k * 2 + (m + 1);
    int64_t c = lo + static_cast<int64_t>(num / (2 * (m + 1)));
    if (s.count(c)) {
      int64_t found = -1;
      for (int64_t d = 1; d <= room && found < 0; ++d) {
        if (c + d <= hi && !s.count(c + d)) found = c + d;
        else if (c - d >= lo && !s.count(c - d)) found = c - d;
      }
      if (found < 0) break;
      c = found;
    }
    s.insert(c);
  }
  return {s.begin(), s.end()};
}

bool WindowFilter::matches(const Route& r) const {
  for (const auto& t : terms) {
    bool any = false;
    for (const auto& v : t.values) {
      if (t.key == "op") any = any || v == kernels::to_string(r.op);
      else if (t.key == "mode") any = any || (r.op == Op::bwd && v == kernels::to_string(r.mode));
      else if (t.key == "H") any = any || std::to_string(r.H) == v;
      else if (t.key == "w") any = any || v == to_string(r.w);
      else if (t.key == "form") any = any || v == to_string(r.form);
      else if (t.key == "variant") any = any || (r.variant && v == r.variant->name);
      else if (t.key == "T") {
        const auto dots = v.find("..");
        const int64_t a = std::stoll(dots == std::string::npos ? v : v.substr(0, dots));
        const int64_t b = dots == std::string::npos ? a : std::stoll(v.substr(dots + 2));
        any = any || (a <= r.t_hi && b >= r.t_lo);
      }
    }
    if (!any) return false;
  }
  return true;
}

WindowFilter parse_window_filter(std::string_view text) {
  WindowFilter f;
  if (text.empty()) return f;
  auto bad = [&](const std::string& term, const std::string& why) -> std::invalid_argument {
    return std::invalid_argument("--windows '" + std::string(text) + "': term '" + term + "': " + why +
                                 " (terms key=value[|value...], keys op, mode, H, w, form, variant, T; e.g. "
                                 "op=bwd,H=2048|4096,T=65537..131072)");
  };
  std::string s(text);
  std::stringstream ss(s);
  std::string term;
  while (std::getline(ss, term, ',')) {
    const auto eq = term.find('=');
    if (eq == std::string::npos) throw bad(term, "no '='");
    WindowFilter::Term t;
    t.key = term.substr(0, eq);
    static const std::set<std::string> keys = {"op", "mode", "H", "w", "form", "variant", "T"};
    if (!keys.count(t.key)) throw bad(term, "unknown key '" + t.key + "'");
    std::stringstream vs(term.substr(eq + 1));
    std::string v;
    while (std::getline(vs, v, '|')) {
      if (v.empty()) throw bad(term, "empty value");
      auto is_uint = [](const std::string& x) {
        return !x.empty() && x.size() <= 18 && std::all_of(x.begin(), x.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
      };
      if (t.key == "op" && v != "fwd" && v != "bwd") throw bad(term, "op '" + v + "' (expected fwd or bwd)");
      if (t.key == "mode" && v != "det" && v != "nondet") throw bad(term, "mode '" + v + "' (expected det or nondet)");
      try {
        if (t.key == "w") (void)parse_wdtype(v);
        if (t.key == "form") (void)parse_form(v);
        if (t.key == "variant") (void)kernels::variant(v);
      } catch (const std::invalid_argument& e) {
        throw bad(term, e.what());
      }
      if (t.key == "H" && !is_uint(v)) throw bad(term, "H '" + v + "' is not a number");
      if (t.key == "T") {
        const auto dots = v.find("..");
        const std::string a = dots == std::string::npos ? v : v.substr(0, dots);
        const std::string b = dots == std::string::npos ? v : v.substr(dots + 2);
        if (!is_uint(a) || !is_uint(b) || std::stoll(a) > std::stoll(b))
          throw bad(term, "T '" + v + "' (expected N or A..B with A <= B)");
      }
      t.values.push_back(v);
    }
    if (t.values.empty()) throw bad(term, "empty value");
    f.terms.push_back(std::move(t));
  }
  return f;
}

bool GateResult::pass() const {
  if (windows.empty()) return !skipped.empty();  // --base: nothing changed
  return std::all_of(windows.begin(), windows.end(), [](const WindowResult& w) { return w.pass; });
}

// ---- the gate ---------------------------------------------------------------------

namespace {

// What a gate's options name, parsed and loaded (throws the input errors).
struct GateInputs {
  seeds::SeedSet seed_set;
  WindowFilter filter;
  kernels::LoadOptions lo;
  kernels::RouteTable table;
};

GateInputs load_gate_inputs(const GateOptions& opt) {
  check_options(opt);
  GateInputs in{seeds::parse_seed_set(opt.seeds), parse_window_filter(opt.windows), kernels::LoadOptions{opt.allow_controls},
                {}};
  in.table = kernels::load_route_table(opt.table_path, in.lo);
  return in;
}

// The windows a gate covers: --base (changed windows only), then --windows.
struct Selection {
  std::vector<const Route*> gated;
  std::vector<std::string> skipped, removed, filtered_out;
  std::string base_sha256;
};

Selection select_windows(const GateOptions& opt, const kernels::RouteTable& table, const WindowFilter& filter,
                         const kernels::LoadOptions& lo) {
  Selection sel;
  if (!opt.base_path.empty()) {
    const kernels::RouteTable base = kernels::load_route_table(opt.base_path, lo);
    sel.base_sha256 = base.sha256;
    for (const Route& r : table.routes) {
      const Route* old = base.find_window(r);
      if (old && old->variant == r.variant) sel.skipped.push_back(r.where() + " " + r.describe());
      else if (filter.matches(r)) sel.gated.push_back(&r);
      else sel.filtered_out.push_back(r.where() + " " + r.describe());
    }
    for (const Route& r : base.routes)
      if (!table.find_window(r)) sel.removed.push_back(r.where() + " " + r.describe());
  } else {
    for (const Route& r : table.routes) {
      if (filter.matches(r)) sel.gated.push_back(&r);
      else sel.filtered_out.push_back(r.where() + " " + r.describe());
    }
  }
  if (sel.gated.empty() && (opt.base_path.empty() || !sel.filtered_out.empty()))
    throw std::invalid_argument("no window to gate: the filter '" + opt.windows + "' selects none of the " +
                                std::to_string(table.routes.size()) + " routes of " + opt.table_path);
  return sel;
}

double elements_of(const seeds::CaseId& c) { return static_cast<double>(c.rows()) * static_cast<double>(c.H); }

// Input errors of a window or of the seed set that run_gate and plan_gate
// both refuse (the same messages).
void check_gateable(const Route& r) {
  if (r.op == Op::fwd && r.variant != &kernels::default_fwd())
    throw std::invalid_argument(r.where() + ": forward variant " + std::string(r.variant->name) +
                                " cannot be gated: every pipeline run uses the forward " +
                                std::string(kernels::default_fwd().name));
}

// Fresh seeds follow the set's last seed: fresh_factor x its per-family count.
uint64_t fresh_seed_count(const seeds::SeedSet& set, int fresh_factor, const std::string& canonical) {
  const uint64_t count = set.last - set.first + 1;
  const uint64_t n = count * static_cast<uint64_t>(fresh_factor);
  if (fresh_factor > 0 &&
      (count > (uint64_t{1} << 40) || set.last > std::numeric_limits<uint64_t>::max() - n))
    throw std::invalid_argument("seed set " + canonical + " leaves no room for fresh seeds");
  return n;
}

}  // namespace

GatePlan plan_gate(const GateOptions& opt) {
  const GateInputs in = load_gate_inputs(opt);
  const seeds::SeedSet& seed_set = in.seed_set;
  Selection sel = select_windows(opt, in.table, in.filter, in.lo);
  GatePlan plan;
  plan.table_path = opt.table_path;
  plan.seeds = seeds::to_string(seed_set);
  plan.skipped = std::move(sel.skipped);
  plan.filtered_out = std::move(sel.filtered_out);
  std::set<std::string> distinct;
  const uint64_t fresh = fresh_seed_count(seed_set, opt.fresh_factor, plan.seeds);
  for (const Route* r : sel.gated) {
    check_gateable(*r);
    PlanWindow w;
    w.window = r->where() + " " + r->describe();
    w.t = window_t_points(r->t_lo, r->t_hi, opt.t_per_window);
    const std::vector<seeds::CaseId> cases = expand(*r, w.t, seed_set);
    w.grid_cases = static_cast<int64_t>(cases.size());
    for (const auto& c : cases) {
      w.grid_elements += elements_of(c);
      if (distinct.insert(seeds::to_string(c)).second) plan.grid_elements_distinct += elements_of(c);
    }
    // Refinement bound: 2*dense_points T points with one case each (the worst
    // grid case's family and seed) or the whole seed set (dense_all_seeds), and
    // fresh_factor x per-family seeds of one family, every case at t_hi.
    const int64_t span = r->t_hi - r->t_lo;
    // (c - lo)/step + (hi - c)/step <= span/step points fit around any centre c.
    const int64_t dense_t = std::min<int64_t>(2LL * opt.dense_points, span / opt.dense_step);
    const int64_t per_t =
        w.t.empty() ? 0 : opt.dense_all_seeds ? w.grid_cases / static_cast<int64_t>(w.t.size()) : 1;
    w.refine_cases_max = dense_t * per_t + static_cast<int64_t>(fresh);
    if (!cases.empty()) {
      seeds::CaseId top = cases.back();
      top.T = r->t_hi;
      w.refine_elements_max = static_cast<double>(w.refine_cases_max) * elements_of(top);
    }
    plan.refine_cases_max += w.refine_cases_max;
    plan.refine_elements_max += w.refine_elements_max;
    plan.windows.push_back(std::move(w));
  }
  plan.grid_cases_distinct = static_cast<int64_t>(distinct.size());
  return plan;
}

GateResult run_gate(const GateOptions& opt) {
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
  res.filtered_out = std::move(sel.filtered_out);

  // Backend.
  const Backend backend = resolve_backend(opt.backend);
  if (backend == Backend::gpu && !kernels::gpu_available())
    throw std::invalid_argument("backend gpu requested but no usable CUDA device is present");
  res.device = kernels::device_info();
  res.backend = backend_name(backend);
  res.backend_detail = describe_backend(backend, res.device);

  // Windows and their grids.
  std::vector<Win> wins;
  for (const Route* r : gated) {
    Win w;
    w.route = r;
    w.fwd = r->op == Op::fwd;
    w.impl = w.fwd ? std::string() : std::string(r->variant->name);
    check_gateable(*r);
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
  // routes, the forward every run uses, and the backward variants that carry
  // forward windows' cases. Not the rest of the registry, so a variant added
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
  Journal journal = opt.journal_path.empty() ? Journal() : Journal::open(opt.journal_path, campaign);
  Store store;
  for (const auto& rec : journal.resumed()) store.add(rec);
  const int64_t journal_records = static_cast<int64_t>(journal.resumed().size());
  res.journal_dropped_bytes = journal.dropped_bytes();

  Runner runner(opt, backend, store, journal);
  runner.run_phase("grid", wins, &Win::grid);

  // Dense grid around each window's worst grid point.
  for (auto& w : wins) {
    if (opt.dense_points == 0) break;
    const Pick p = worst_of(w, store, {&w.grid});
    if (p.ratio < 0) continue;
    w.dense_center = p.c.T;
    for (int k = -opt.dense_points; k <= opt.dense_points; ++k) {
      if (k == 0) continue;
      const int64_t t = p.c.T + k * opt.dense_step;
      if (t >= w.route->t_lo && t <= w.route->t_hi) w.dense.t.push_back(t);
    }
    if (opt.dense_all_seeds) {
      w.dense.seeds = res.seeds;
      w.dense.cases = expand(*w.route, w.dense.t, seed_set);
    } else {  // the worst grid case's family and seed at every dense T
      seeds::SeedSet ds;
      ds.families = {p.c.family};
      ds.first = ds.last = p.c.seed;
      w.dense.seeds = seeds::to_string(ds);
      w.dense.cases = expand(*w.route, w.dense.t, ds);
    }
  }
  runner.run_phase("dense", wins, &Win::dense);

  // Fresh seeds at each window's worst (T, family).
  if (opt.fresh_factor > 0) {
    for (auto& w : wins) {
      const Pick p = worst_of(w, store, {&w.grid, &w.dense});
      if (p.ratio < 0) continue;
      seeds::SeedSet fs;
      fs.families = {p.c.family};
      fs.first = seed_set.last + 1;
      fs.last = seed_set.last + fresh_seeds;
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
    wr.impl = w.fwd ? "any backward run (forward " + std::string(w.route->variant->name) + ")" : w.impl;
    wr.control = w.route->variant->control;
    summarize(w, store, wr);
    res.windows.push_back(std::move(wr));
  }
  res.cases_run_now = runner.run_now();
  res.pipeline = runner.pipeline();
  // Records this plan used (an uninterrupted run uses all it made); records
  // 0..journal_records-1 came from the journal.
  res.cases_total = static_cast<int64_t>(store.used.size());
  res.cases_resumed = static_cast<int64_t>(
      std::distance(store.used.begin(), store.used.lower_bound(journal_records)));
  res.date = utc_now();
  return res;
}

// ---- reports ------------------------------------------------------------------------

namespace {

std::string ratio_cell(double v) { return std::isinf(v) ? std::string("inf") : fmt("%.3g", v); }

std::string t_list(const std::vector<int64_t>& t) {
  std::string s;
  auto add = [&s](int64_t v) { s += (s.empty() ? "" : ", ") + std::to_string(v); };
  if (t.size() <= 12) {
    for (int64_t v : t) add(v);
    return s;
  }
  for (size_t i = 0; i < 6; ++i) add(t[i]);
  s += ", ... (" + std::to_string(t.size() - 10) + " more)";
  for (size_t i = t.size() - 4; i < t.size(); ++i) add(t[i]);
  return s;
}

std::string headroom(double worst) {
  if (!(worst > 0)) return "no error at all";
  if (std::isinf(worst)) return "infinitely over";
  if (worst <= 1) return fmt("%.3g", 1.0 / worst) + "x below the budget";
  return fmt("%.3g", worst) + "x OVER the budget";
}

std::string describe_seeds(const std::string& canonical) {
  try {
    const auto s = seeds::parse_seed_set(canonical);
    std::string fams;
    for (auto f : s.families) fams += (fams.empty() ? "" : ", ") + std::string(seeds::to_string(f));
    return canonical + " (" + fams + " x seeds " + std::to_string(s.first) + ".." + std::to_string(s.last) + ")";
  } catch (const std::exception&) {
    return canonical;
  }
}

}  // namespace

std::string format_gate_plan(const GatePlan& p, double elements_per_second) {
  if (!(elements_per_second > 0) || !std::isfinite(elements_per_second))
    throw std::invalid_argument("format_gate_plan: elements per second must be a positive number, got " +
                                fmt("%g", elements_per_second));
  auto hours = [&](double elements) {  // h above an hour, else min, else s
    const double secs = elements / elements_per_second;
    return secs >= 3600 ? fmt("%.3g h", secs / 3600) : secs >= 60 ? fmt("%.3g min", secs / 60) : fmt("%.3g s", secs);
  };
  auto giga = [](double elements) { return fmt("%.3g", elements / 1e9); };
  std::ostringstream o;
  o << "# Gate plan: " << p.table_path << "\n\n"
    << "Seed set " << p.seeds << "; " << p.windows.size() << " windows gated, " << p.skipped.size()
    << " unchanged against --base, " << p.filtered_out.size() << " left out by --windows. Nothing was run.\n\n"
    << "| window | T points | grid cases | grid elements (1e9) | refinement cases (at most) | refinement elements "
       "(1e9, at most) |\n"
    << "| --- | --- | --- | --- | --- | --- |\n";
  for (const auto& w : p.windows)
    o << "| " << w.window << " | " << w.t.size() << " | " << w.grid_cases << " | " << giga(w.grid_elements) << " | "
      << w.refine_cases_max << " | " << giga(w.refine_elements_max) << " |\n";
  o << "\nDistinct grid cases (windows that share a case run it once): " << p.grid_cases_distinct << ", "
    << fmt("%.3g", p.grid_elements_distinct) << " elements: " << hours(p.grid_elements_distinct)
    << " of oracle time at " << fmt("%.3g", elements_per_second) << " elements/s.\n"
    << "Refinement (dense grid + fresh seeds; their T follow each window's worst grid point): at most "
    << p.refine_cases_max << " cases, " << fmt("%.3g", p.refine_elements_max) << " elements, "
    << hours(p.refine_elements_max)
    << " (the bound puts every refinement case at its window's upper T and shares none between windows).\n";
  return o.str();
}

std::string format_gate_markdown(const GateResult& r) {
  std::ostringstream o;
  int failing = 0, inconclusive = 0;
  for (const auto& w : r.windows) {
    failing += !w.pass;
    inconclusive += w.verdict == Verdict::inconclusive;
  }
  o << "# normgate gate: " << r.table_path << "\n\n";
  o << "- verdict: **" << (r.pass() ? "PASS" : "FAIL") << "**: " << (r.windows.size() - failing) << " of "
    << r.windows.size() << " gated windows pass";
  if (inconclusive > 0)
    o << "; " << inconclusive << " INCONCLUSIVE (no element over budget, but some comparison is within the "
      << "oracle's error bound of the budget: not approved; re-check those cases with --oracle mpfr)";
  o << "\n";
  o << "- backend: **" << r.backend << "**. " << r.backend_detail << "\n";
  o << "- table: `" << r.table_path << "` (sha256 " << r.table_sha256.substr(0, 12) << ")";
  if (!r.base_path.empty())
    o << "; gated against base `" << r.base_path << "` (sha256 " << r.base_sha256.substr(0, 12)
      << "): only new or changed windows";
  o << "\n";
  if (!r.windows_filter.empty())
    o << "- window filter: `" << r.windows_filter << "` (" << r.filtered_out.size() << " windows left out)\n";
  if (r.allow_controls) o << "- **negative controls allowed by explicit override** (--allow-controls)\n";
  o << "- seeds: " << describe_seeds(r.seeds) << "; T points per window: " << r.t_per_window
    << " (first and last T, both sides of every power of two inside, the rest spread evenly)\n";
  o << "- refinement: ";
  if (r.dense_points > 0)
    o << "dense grid every " << r.dense_step << " rows, " << r.dense_points << " points each side of the worst T ("
      << (r.dense_all_seeds ? "every family and seed of the set" : "the worst case's family and seed") << ")";
  else
    o << "no dense grid";
  o << "; ";
  if (r.fresh_factor > 0)
    o << "fresh seeds: " << r.fresh_factor << "x the seed count at the worst (T, family)\n";
  else
    o << "no fresh seeds\n";
  o << "- oracle: " << (r.oracle == "auto"   ? "FP64 with rigorous per-element bounds, escalating to MPFR where FP64 "
                                               "cannot decide a comparison (--oracle auto)"
                        : r.oracle == "fp64" ? "FP64 with rigorous per-element bounds, no escalation (--oracle fp64): "
                                               "comparisons the bound cannot decide are INCONCLUSIVE"
                                             : "MPFR for every element (--oracle mpfr)")
    << "\n";
  o << "- budgets (err/tol, pass <= 1): y, dx atol = rtol = 1e-2; rstd rtol 1e-5; dw atol 1e-4 + rtol 1e-4 vs "
       "the FP64 oracle (rigorous per-element error bounds). bwd windows gate y, rstd, dx, dw (the step with its "
       "forward); fwd windows gate y, rstd. dw vs FP32 (FP32 eager on the same inputs; <= 1: not worse) is "
       "reported, not gated\n";
  // closest approach over all windows
  const WindowResult* top = nullptr;
  for (const auto& w : r.windows)
    if (!top || w.worst > top->worst) top = &w;
  if (top)
    o << "- closest to the budget: " << ratio_cell(top->worst) << " of it (" << top->worst_output << ", "
      << top->route.window() << ", case " << top->worst_case << "): " << headroom(top->worst) << "\n";
  o << "- cases: " << r.cases_total << " (each: inputs generated once, the oracle once, every implementation "
       "that needs the case)\n";
  o << "- normgate " << r.normgate_version << " (commit " << r.normgate_commit << ")\n";
  o << "- date: " << r.date << "\n\n";

  o << "## Windows\n\n"
    << "Max err/tol per output over every case of the window (grid, dense grid, fresh seeds).\n\n"
    << "| window | variant | y | rstd | dx | dw | dw vs FP32 worst / median | worst case (output) | cases | verdict |\n"
    << "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& w : r.windows) {
    const bool bwd = w.route.op == Op::bwd;
    o << "| " << w.route.window() << " | " << w.route.variant->name << (w.control ? " (CONTROL)" : "") << " | "
      << ratio_cell(w.out[0].max_ratio) << " | " << ratio_cell(w.out[1].max_ratio) << " | "
      << (bwd ? ratio_cell(w.out[2].max_ratio) : "-") << " | " << (bwd ? ratio_cell(w.out[3].max_ratio) : "-")
      << " | "
      << (bwd ? (std::isnan(w.dw_vs_fp32_worst) ? std::string("-") : ratio_cell(w.dw_vs_fp32_worst)) + " / " +
                    (std::isnan(w.dw_vs_fp32_median) ? std::string("-") : ratio_cell(w.dw_vs_fp32_median))
              : std::string("-"))
      << " | " << (w.worst_case.empty() ? "-" : w.worst_case + " (" + w.worst_output + ")") << " | " << w.cases
      << " | "
      << (w.pass ? "PASS" : w.verdict == Verdict::inconclusive ? "**INCONCLUSIVE**" : "**FAIL**") << " |\n";
  }

  o << "\n## Refinement and margin\n\n"
    << "The refinement follows the output of the variant's long reduction: dw (a sum over T rows) in bwd "
       "windows, rstd (a sum over H columns) in fwd windows. \"worst\" columns: that output's largest err/tol in "
       "each step (T of the case). \"other windows' cases\": cases the other gated windows ran inside this "
       "window (same H, w, form), run with this window's variant too and counted in its verdict. \"closest to "
       "1\": the largest err/tol of every gated output, all steps.\n\n"
    << "| window | grid T | grid worst | dense grid | dense worst | fresh seeds | fresh worst | other windows' cases "
       "| closest to 1 |\n"
    << "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& w : r.windows) {
    auto worst_cell = [](const PhaseSummary& p) {
      if (p.worst_case.empty()) return std::string("-");
      std::string t = "?";
      try {
        t = std::to_string(seeds::parse_case(p.worst_case).T);
      } catch (const std::exception&) {
      }
      return p.worst_output + " " + ratio_cell(p.worst) + " (T=" + t + ")";
    };
    std::string dense = "-";
    if (w.dense.t.size() == 1)
      dense = "T=" + std::to_string(w.dense.t.front()) + " (step " + std::to_string(r.dense_step) + " around " +
              std::to_string(w.dense_center) + ")";
    else if (!w.dense.t.empty())
      dense = std::to_string(w.dense.t.front()) + ".." + std::to_string(w.dense.t.back()) + " step " +
              std::to_string(r.dense_step) + " around " + std::to_string(w.dense_center) + " (" +
              std::to_string(w.dense.t.size()) + " T)";
    else if (w.dense_center)
      dense = "none inside the window around " + std::to_string(w.dense_center);
    std::string fresh = "-";
    if (!w.fresh.seeds.empty()) fresh = w.fresh.seeds + " at T=" + std::to_string(w.fresh_t);
    o << "| " << w.route.window() << " | " << t_list(w.t_points) << " | " << worst_cell(w.grid) << " | " << dense
      << " | " << worst_cell(w.dense) << " | " << fresh << " | " << worst_cell(w.fresh) << " | "
      << (w.others.cases == 0 ? std::string("-") : std::to_string(w.others.cases) + ": " + worst_cell(w.others))
      << " | " << (w.worst_case.empty() ? std::string("-") : w.worst_output + " " + ratio_cell(w.worst) + ": " + headroom(w.worst))
      << " |\n";
  }

  if (failing) {
    o << "\n## Failures\n\n";
    for (const auto& w : r.windows) {
      if (w.pass) continue;
      o << "- " << w.route.where() << " `" << w.route.describe() << "`"
        << (w.control ? " (a NEGATIVE CONTROL, routed by explicit override)" : "") << ":\n";
      for (int k = 0; k < w.gated_outputs(); ++k) {
        const auto& a = w.out[k];
        if (a.cases_over == 0 && a.max_ratio <= 1) continue;
        o << "  - " << kOut[k] << " does not pass (over budget, or not certified) in " << a.cases_over << " of "
          << w.cases
          << " cases; worst err/tol " << ratio_cell(a.max_ratio) << " at element " << a.worst_index << " of "
          << a.worst_case << " (an ideal kernel on the FP32 rstd would have " << ratio_cell(a.forced)
          << "); rerun it with: normgate check --case " << a.worst_case << " --variant "
          << (w.route.op == Op::bwd ? std::string(w.route.variant->name) : std::string("bwd_det_chunked")) << "\n";
      }
      o << "  - failing cases by family:";
      for (size_t i = 0; i < w.families.size(); ++i)
        o << (i ? ", " : " ") << w.families[i].family << " " << w.families[i].failed << " of " << w.families[i].cases;
      o << "\n";
      if (w.errors) {
        o << "  - " << w.errors << " cases threw (each fails the window):\n";
        for (const auto& e : w.error_samples) o << "    - " << e << "\n";
      }
      if (w.cases == 0) o << "  - no case ran\n";
    }
  }
  if (!r.skipped.empty()) {
    o << "\n## Skipped: unchanged against the base table\n\n";
    for (const auto& s : r.skipped) o << "- " << s << "\n";
  }
  if (!r.removed.empty()) {
    o << "\n## Windows of the base table that this table no longer has\n\n";
    for (const auto& s : r.removed) o << "- " << s << "\n";
  }
  return o.str();
}

nlohmann::json gate_to_json(const GateResult& r) {
  nlohmann::json j;
  j["table"] = r.table_path;
  j["table_sha256"] = r.table_sha256;
  j["base"] = r.base_path;
  j["base_sha256"] = r.base_sha256;
  j["pass"] = r.pass();
  j["backend"] = r.backend;
  j["backend_detail"] = r.backend_detail;
  j["device"] = {{"present", r.device.present},
                 {"name", r.device.name},
                 {"cc", r.device.cc},
                 {"driver", r.device.driver},
                 {"cuda_runtime", r.device.cuda_runtime}};
  j["seeds"] = r.seeds;
  j["oracle"] = r.oracle;
  j["t_per_window"] = r.t_per_window;
  j["dense_points"] = r.dense_points;
  j["dense_step"] = r.dense_step;
  j["dense_seeds"] = r.dense_all_seeds ? "all" : "worst";
  j["fresh_factor"] = r.fresh_factor;
  j["windows_filter"] = r.windows_filter;
  j["allow_controls"] = r.allow_controls;
  j["cases"] = r.cases_total;
  j["normgate_version"] = r.normgate_version;
  j["normgate_commit"] = r.normgate_commit;
  j["date"] = r.date;
  j["skipped"] = r.skipped;
  j["removed"] = r.removed;
  j["filtered_out"] = r.filtered_out;
  j["windows"] = nlohmann::json::array();
  for (const auto& w : r.windows) {
    nlohmann::json x;
    x["route"] = w.route.where();
    x["window"] = w.route.window();
    x["op"] = kernels::to_string(w.route.op);
    if (w.route.op == Op::bwd) x["mode"] = kernels::to_string(w.route.mode);
    x["H"] = w.route.H;
    x["w"] = to_string(w.route.w);
    x["form"] = to_string(w.route.form);
    x["T"] = {w.route.t_lo, w.route.t_hi};
    x["variant"] = w.route.variant->name;
    x["source_sha256"] = w.route.variant->source_sha256;
    x["control"] = w.control;
    x["impl"] = w.impl;
    x["t_points"] = w.t_points;
    x["cases"] = w.cases;
    x["errors"] = w.errors;
    x["error_samples"] = w.error_samples;
    for (int k = 0; k < w.gated_outputs(); ++k) {
      const auto& a = w.out[k];
      x["outputs"][kOut[k]] = {{"max_err_tol", num(a.max_ratio)},
                               {"worst_case", a.worst_case},
                               {"worst_index", a.worst_index},
                               {"forced", num(a.forced)},
                               {"cases_over", a.cases_over}};
    }
    if (w.route.op == Op::bwd)
      x["dw_vs_fp32"] = {{"worst", num(w.dw_vs_fp32_worst)},
                         {"worst_case", w.dw_vs_fp32_worst_case},
                         {"median", num(w.dw_vs_fp32_median)}};
    x["worst"] = {{"err_tol", num(w.worst)}, {"output", w.worst_output}, {"case", w.worst_case}};
    auto phase = [](const PhaseSummary& p) {
      return nlohmann::json{{"t", p.t},
                            {"seeds", p.seeds},
                            {"cases", p.cases},
                            {"worst", num(p.worst)},
                            {"worst_output", p.worst_output},
                            {"worst_case", p.worst_case}};
    };
    x["grid"] = phase(w.grid);
    x["dense"] = phase(w.dense);
    x["dense"]["center"] = w.dense_center;
    x["fresh"] = phase(w.fresh);
    x["fresh"]["family"] = w.fresh_family;
    x["others"] = phase(w.others);
    x["families"] = nlohmann::json::array();
    for (const auto& f : w.families)
      x["families"].push_back({{"family", f.family}, {"cases", f.cases}, {"failed", f.failed}});
    x["pass"] = w.pass;
    x["verdict"] = std::string(to_string(w.verdict));
    j["windows"].push_back(std::move(x));
  }
  return j;
}

std::vector<std::string> update_approvals(kernels::Approvals& a, const GateResult& r,
                                          const std::vector<kernels::Route>& table_routes) {
  std::vector<std::string> changes;
  auto in_table = [&](const kernels::Approval& x) {
    return std::any_of(table_routes.begin(), table_routes.end(), [&](const Route& rt) { return x.same_window(rt); });
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
      if (x.same_window(w.route) && x.backend == r.backend) {
        had = true;
        continue;
      }
      rest.push_back(std::move(x));
    }
    a.records = std::move(rest);
    if (!w.pass || w.control) {
      if (had) changes.push_back("revoked " + r.backend + " approval of " + w.route.window() + " (the gate failed)");
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
      if (x.same_window(table_routes[i])) return std::make_pair(i, x.backend == kernels::kGpuBackend ? 0 : 1);
    return std::make_pair(table_routes.size(), 2);
  };
  std::stable_sort(a.records.begin(), a.records.end(),
                   [&](const kernels::Approval& p, const kernels::Approval& q) { return rank(p) < rank(q); });
  return changes;
}

std::string carrier_for(const seeds::CaseId& c) {
  for (const auto& v : kernels::variants())
    if (v.op == Op::bwd && !v.control && v.supports_h(c.H) && v.supports(c.w) && v.supports(c.form))
      return std::string(v.name);
  throw std::invalid_argument("no backward variant supports case " + seeds::to_string(c));
}

}  // namespace normgate::validators
