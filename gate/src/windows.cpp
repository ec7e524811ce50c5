// gate/src/windows.cpp: a gate's windows and T points: the T points of a
// window, the --windows filter, the --base selection, the input checks, and
// plan_gate (the campaign's size without running it).
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
#include <tuple>

#include <nlohmann/json.hpp>

#include "gate_internal.h"
#include "normgate/core/report_util.h"
#include "normgate/core/shell_quote.h"
#include "normgate/kernels/registry.h"

namespace normgate::validators {

namespace gate_detail {

std::string utc_now() { return detail::utc_now(); }

void check_options(const GateOptions& o) {
  if (o.table_path.empty()) throw std::invalid_argument("no route table given");
  if (o.t_per_window < 2)
    throw std::invalid_argument("--t-per-window " + std::to_string(o.t_per_window) +
                                " < 2 (every window runs at least its first and last T)");
  if (o.dense_points < 0) throw std::invalid_argument("--dense-points " + std::to_string(o.dense_points) + " < 0");
  if (o.dense_step < 1) throw std::invalid_argument("--dense-step " + std::to_string(o.dense_step) + " < 1");
  if (o.fresh_factor < 0) throw std::invalid_argument("--fresh-factor " + std::to_string(o.fresh_factor) + " < 0");
  // The upper bounds the CLI's options check, for every caller (ng_gate
  // took 2^31-1 and failed for memory after the grid had run).
  const std::string most = " > " + std::to_string(kMaxCampaignCount) + " (more than any campaign can run)";
  if (o.t_per_window > kMaxCampaignCount)
    throw std::invalid_argument("--t-per-window " + std::to_string(o.t_per_window) + most);
  if (o.dense_points > kMaxCampaignCount)
    throw std::invalid_argument("--dense-points " + std::to_string(o.dense_points) + most);
  if (o.fresh_factor > kMaxCampaignCount)
    throw std::invalid_argument("--fresh-factor " + std::to_string(o.fresh_factor) + most);
  if (o.dense_step > seeds::kMaxT)
    throw std::invalid_argument("--dense-step " + std::to_string(o.dense_step) + " > " + std::to_string(seeds::kMaxT) +
                                " (the largest T)");
  if (o.shard_count != 0 || o.shard_index != 0) {
    const std::string k = std::to_string(o.shard_index) + "/" + std::to_string(o.shard_count);
    (void)parse_shard(k);  // 1 <= K <= N
    if (o.journal_path.empty())
      throw std::invalid_argument("--shard " + k + " needs --journal: a shard's results are its journal, which "
                                  "--merge reads");
    if (!o.merge_paths.empty()) throw std::invalid_argument("--shard " + k + " and --merge exclude each other");
  }
}

std::string backend_name(Backend b) { return b == Backend::gpu ? std::string(kernels::kGpuBackend)
                                                                : std::string(kernels::kCpuModelBackend); }

std::vector<seeds::CaseId> expand(const Route& r, const std::vector<int64_t>& ts, const seeds::SeedSet& s) {
  std::vector<seeds::CaseId> out;
  for (int64_t t : ts) seeds::append_cases(s, r.H, t, r.w, r.form, out);
  return out;
}

GateInputs load_gate_inputs(const GateOptions& opt) {
  check_options(opt);
  GateInputs in{seeds::parse_seed_set(opt.seeds), parse_window_filter(opt.windows), kernels::LoadOptions{opt.allow_controls},
                {}};
  in.table = kernels::load_route_table(opt.table_path, in.lo);
  return in;
}


Selection select_windows(const GateOptions& opt, const kernels::RouteTable& table, const WindowFilter& filter,
                         const kernels::LoadOptions& lo) {
  Selection sel;
  size_t skipped_selected = 0;  // --base: windows the filter selects that are unchanged (skipped, not an error)
  if (!opt.base_path.empty()) {
    const kernels::RouteTable base = kernels::load_route_table(opt.base_path, lo);
    sel.base_sha256 = base.sha256;
    // A window whose bounds and variant are the base's is unchanged only
    // when an approval proves its variant's sources are the ones approved
    // then: a current record (any backend) in the base's approvals or the
    // table's own. Else the kernel may have changed: gated.
    const kernels::Approvals base_appr = kernels::load_approvals(kernels::approvals_path_for(opt.base_path));
    const kernels::Approvals own_appr = kernels::load_approvals(kernels::approvals_path_for(opt.table_path));
    // A form res record whose gate did not check h_new (made before it was
    // gated: Approval::h_new_gated) proves the sources but not h_new: the
    // window is gated again.
    auto source_unchanged = [&](const Route& r, std::string& why) {
      std::string stale, no_h_new;
      for (const kernels::Approvals* a : {&base_appr, &own_appr}) {
        const auto s = kernels::approval_status(r, *a, true);
        if (s.state == kernels::ApprovalState::current) {
          if (s.h_new_gated()) return true;
          if (no_h_new.empty()) no_h_new = a->path;
          continue;
        }
        if (s.state == kernels::ApprovalState::stale && stale.empty()) stale = s.detail;
      }
      why = !no_h_new.empty()
                ? "h_new not gated yet: the gate of its current approval in " + no_h_new + " did not check h_new"
            : !stale.empty() ? "sources changed: " + stale
                           : "no current approval in " + base_appr.path + " or " + own_appr.path +
                                 " proves the variant's sources unchanged (source " +
                                 std::string(r.variant->source_sha256.substr(0, 12)) + ")";
      return false;
    };
    // A route the filter leaves out is filtered out, changed or not; of
    // those it selects, the unchanged ones are skipped.
    for (const Route& r : table.routes) {
      if (!filter.matches(r) || (opt.select && !opt.select(r))) {
        sel.filtered_out.push_back(r.where() + " " + r.describe());
        continue;
      }
      const Route* old = base.find_window(r);
      std::string why;
      if (old && old->variant == r.variant && source_unchanged(r, why)) {
        sel.skipped.push_back(r.where() + " " + r.describe());
        ++skipped_selected;
      } else {
        sel.gated.push_back(&r);
        if (!why.empty()) sel.source_changed.push_back(r.where() + " " + r.describe() + ": " + why);
      }
    }
    for (const Route& r : base.routes)
      if (!table.find_window(r)) sel.removed.push_back(r.where() + " " + r.describe());
  } else {
    for (const Route& r : table.routes) {
      if (filter.matches(r) && (!opt.select || opt.select(r))) sel.gated.push_back(&r);
      else sel.filtered_out.push_back(r.where() + " " + r.describe());
    }
  }
  // The filter must select a route of the table, changed or not: with
  // --base too (a mistyped filter is an error, not "nothing changed").
  if (sel.gated.empty() && skipped_selected == 0) {
    // What the table's windows have, key by key, so a mistyped value shows.
    std::set<std::string> ops, hs, ws, forms;
    for (const Route& r : table.routes) {
      ops.insert(std::string(to_string(r.op)));
      hs.insert(std::to_string(r.H));
      ws.insert(std::string(to_string(r.w)));
      forms.insert(std::string(to_string(r.form)));
    }
    std::vector<std::string> hv(hs.begin(), hs.end());
    std::sort(hv.begin(), hv.end(), [](const std::string& a, const std::string& b) {
      return a.size() != b.size() ? a.size() < b.size() : a < b;
    });
    auto join = [](const auto& v) {
      std::string s;
      for (const auto& x : v) s += (s.empty() ? "" : "|") + x;
      return s;
    };
    throw std::invalid_argument("no window to gate: the filter '" + opt.windows + "' selects none of the " +
                                std::to_string(table.routes.size()) + " routes of " + opt.table_path +
                                " (its windows have op=" + join(ops) + ", H=" + join(hv) + ", w=" + join(ws) +
                                ", form=" + join(forms) + "; `normgate routes " +
                                core::shell_word(opt.table_path) + "` lists them)");
  }
  return sel;
}

double elements_of(const seeds::CaseId& c) { return static_cast<double>(c.rows()) * static_cast<double>(c.H); }

uint64_t fresh_seed_count(const seeds::SeedSet& set, int fresh_factor, const std::string& canonical) {
  const uint64_t count = set.last - set.first + 1;
  const uint64_t n = count * static_cast<uint64_t>(fresh_factor);
  if (fresh_factor > 0 &&
      (count > (uint64_t{1} << 40) || set.last > std::numeric_limits<uint64_t>::max() - n))
    throw std::invalid_argument("seed set " + canonical + " leaves no room for fresh seeds");
  return n;
}

}  // namespace gate_detail

using namespace gate_detail;

std::vector<seeds::CaseId> approval_cases(const kernels::Approval& a) {
  const std::string who = "approval of " + a.window() + " -> " + a.variant;
  if (!a.invalid.empty()) throw std::invalid_argument(who + " is INVALID: " + a.invalid);
  if (!a.has_strength)
    throw std::invalid_argument(who + " records no campaign strength (written before records carried it): its "
                                "cases cannot be listed");
  if (a.t_points.empty()) throw std::invalid_argument(who + " lists no T points");
  const seeds::SeedSet set = seeds::parse_seed_set(a.seed_set);
  std::vector<seeds::CaseId> out;
  for (int64_t t : a.t_points) {
    if (t < a.t_lo || t > a.t_hi)
      throw std::invalid_argument(who + ": T point " + std::to_string(t) + " outside the window");
    seeds::append_cases(set, a.H, t, a.w, a.form, out);
  }
  const seeds::CaseId worst = seeds::parse_case(a.worst_case);
  if (worst.H != a.H || worst.w != a.w || worst.form != a.form || worst.T < a.t_lo || worst.T > a.t_hi)
    throw std::invalid_argument(who + ": worst case " + a.worst_case + " is outside the window");
  if (a.dense_points > 0 && a.dense_step > 0) {
    const int64_t kmax = std::min<int64_t>(a.dense_points, (a.t_hi - a.t_lo) / a.dense_step);
    std::vector<int64_t> ts;
    for (int64_t k = -kmax; k <= kmax; ++k) {
      const int64_t t = worst.T + k * a.dense_step;
      if (k != 0 && t >= a.t_lo && t <= a.t_hi) ts.push_back(t);
    }
    const seeds::SeedSet ds = a.dense_all_seeds ? set : seeds::point_seed_set(worst, worst.seed, worst.seed);
    for (int64_t t : ts) seeds::append_cases(ds, a.H, t, a.w, a.form, out);
  }
  if (!a.fresh_seeds.empty()) seeds::append_cases(seeds::parse_seed_set(a.fresh_seeds), a.H, worst.T, a.w, a.form, out);
  return out;
}


// ---- public: T points, filters ---------------------------------------------------

std::string describe_backend(Backend resolved, const kernels::DeviceInfo& d) {
  if (resolved == Backend::gpu)
    return "GPU: every built-in kernel variant ran as CUDA code on " + d.name + " (cc " + d.cc + ", driver " + d.driver +
           ", CUDA runtime " + d.cuda_runtime + "); inputs generated on the GPU, oracle on the CPU";
  return std::string(d.present ? "CPU models by request (--backend cpu): a GPU is present but was not used"
                               : "CPU models: NO usable GPU in this process") +
         "; every built-in kernel variant ran as its CPU model (kernels/models/include/normgate/kernels/models.h: the variant's arithmetic step by step, "
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
  // getline drops a last empty field: "op=bwd," and "H=64|" would pass as
  // "op=bwd" and "H=64", so empty fields at the ends are refused here.
  if (s.back() == ',') throw bad(s, "empty term after the last ','");
  std::stringstream ss(s);
  std::string term;
  while (std::getline(ss, term, ',')) {
    if (!term.empty() && term.back() == '|') throw bad(term, "empty value after the last '|'");
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
      auto digits = [](const std::string& x) {
        return !x.empty() && std::all_of(x.begin(), x.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
      };
      // Digits that fit std::stoll: at most 18 once leading zeros go.
      auto fits = [](const std::string& x) { return x.size() - std::min(x.find_first_not_of('0'), x.size()) <= 18; };
      auto is_uint = [&](const std::string& x) { return digits(x) && fits(x); };
      if (t.key == "op" && v != "fwd" && v != "bwd") throw bad(term, "op '" + v + "' (expected fwd or bwd)");
      if (t.key == "mode" && v != "det" && v != "nondet") throw bad(term, "mode '" + v + "' (expected det or nondet)");
      try {
        if (t.key == "w") (void)parse_wdtype(v);
        if (t.key == "form") (void)parse_form(v);
        if (t.key == "variant") (void)kernels::variant(v);
      } catch (const std::invalid_argument& e) {
        throw bad(term, e.what());
      }
      if (t.key == "H" && digits(v) && !fits(v)) throw bad(term, "H '" + v + "' is out of range (at most 18 digits)");
      if (t.key == "H" && !is_uint(v)) throw bad(term, "H '" + v + "' is not a number");
      if (t.key == "H") {  // matched as text: "0064" as "64"
        t.values.push_back(std::to_string(std::stoll(v)));
        continue;
      }
      if (t.key == "T") {
        const auto dots = v.find("..");
        const std::string a = dots == std::string::npos ? v : v.substr(0, dots);
        const std::string b = dots == std::string::npos ? v : v.substr(dots + 2);
        if (digits(a) && digits(b) && (!fits(a) || !fits(b)))
          throw bad(term, "T '" + v + "' is out of range (at most 18 digits)");
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
  if (!shard.empty()) return false;  // a shard is never a verdict
  if (windows.empty()) return !skipped.empty();  // --base: nothing changed
  return std::all_of(windows.begin(), windows.end(), [](const WindowResult& w) { return w.pass; });
}

const char* GateResult::verdict() const {
  if (pass()) return "PASS";
  int failing = 0, incomplete = 0, errored = 0;
  for (const auto& w : windows) {
    failing += !w.pass;
    incomplete += w.incomplete;
    errored += w.errored();
  }
  if (incomplete > 0 && failing == incomplete) return "INCOMPLETE";
  if (errored > 0 && errored + incomplete == failing) return "ERROR";
  return "FAIL";
}

GatePlan plan_gate(const GateOptions& opt) {
  const GateInputs in = load_gate_inputs(opt);
  const seeds::SeedSet& seed_set = in.seed_set;
  Selection sel = select_windows(opt, in.table, in.filter, in.lo);
  GatePlan plan;
  plan.table_path = opt.table_path;
  plan.seeds = seeds::to_string(seed_set);
  plan.skipped = std::move(sel.skipped);
  plan.filtered_out = std::move(sel.filtered_out);
  // Cases are counted, not built: every (H, w, form, T) runs the whole seed
  // set, so a window's cases at one T are seed_set.size() of one size, and two
  // windows share exactly the cases of a shape and T they share. (Building
  // them took ~250 B a case: --seeds 5x65536 over the table ran out of memory.)
  const auto points = seed_set.points();
  const int64_t per_t = static_cast<int64_t>(seed_set.size());
  // One case of the shape at T per family point, validated as expand's are
  // (the same input errors as run_gate); returns expand's last case there
  // (the last point's last seed).
  auto shape_case = [&](const Route& r, int64_t T) {
    seeds::CaseId c;
    c.H = r.H;
    c.T = T;
    c.w = r.w;
    c.form = r.form;
    c.seed = seed_set.last;
    for (const auto& pt : points) {
      c.family = pt.family;
      c.eps = pt.eps;
      c.kappa = pt.kappa;
      seeds::validate_case(c);
    }
    return c;
  };
  std::map<std::tuple<int64_t, int, int, int64_t>, seeds::CaseId> distinct;  // (H, w, form, T), in that order
  // Whether a backward window of this gate shares a T of [lo, hi] at (H, w,
  // form): the gate runs a case in full (dx and dw too) when a backward
  // window covers it, whichever window listed it (run.cpp, Win::covers).
  auto bwd_over = [&](int64_t H, WDtype w, Form form, int64_t lo, int64_t hi) {
    for (const Route* b : sel.gated)
      if (b->op == Op::bwd && b->H == H && b->w == w && b->form == form && b->t_lo <= hi && lo <= b->t_hi) return true;
    return false;
  };
  const uint64_t fresh = fresh_seed_count(seed_set, opt.fresh_factor, plan.seeds);
  for (const Route* r : sel.gated) {
    PlanWindow w;
    w.window = r->where() + " " + r->describe();
    w.t = window_t_points(r->t_lo, r->t_hi, opt.t_per_window);
    for (int64_t t : w.t) {
      const seeds::CaseId c = shape_case(*r, t);
      w.grid_cases += per_t;
      w.grid_elements += static_cast<double>(per_t) * elements_of(c);
      distinct.emplace(std::make_tuple(c.H, static_cast<int>(c.w), static_cast<int>(c.form), c.T), c);
    }
    // Refinement bound: 2*dense_points T points with one case each (the worst
    // grid case's family and seed) or the whole seed set (dense_all_seeds), and
    // fresh_factor x per-family seeds of one family, every case at t_hi.
    const int64_t span = r->t_hi - r->t_lo;
    // (c - lo)/step + (hi - c)/step <= span/step points fit around any centre c.
    const int64_t dense_t = std::min<int64_t>(2LL * opt.dense_points, span / opt.dense_step);
    const int64_t dense_per_t = w.t.empty() ? 0 : opt.dense_all_seeds ? per_t : 1;
    w.refine_cases_max = dense_t * dense_per_t + static_cast<int64_t>(fresh);
    w.forward = r->op == Op::fwd;
    w.variant = r->variant;
    w.largest.T = 0;
    if (w.grid_cases > 0) {
      seeds::CaseId top = shape_case(*r, w.t.back());
      top.T = r->t_hi;
      w.refine_elements_max = static_cast<double>(w.refine_cases_max) * elements_of(top);
      w.largest = top;
    }
    plan.refine_cases_max += w.refine_cases_max;
    plan.refine_elements_max += w.refine_elements_max;
    // A forward window's refinement runs at backward cost wherever a backward
    // window overlaps it (its T follow results: priced at the slower rate).
    if (!w.forward || bwd_over(r->H, r->w, r->form, r->t_lo, r->t_hi))
      plan.refine_elements_max_bwd += w.refine_elements_max;
    plan.windows.push_back(std::move(w));
  }
  plan.grid_cases_distinct = static_cast<int64_t>(distinct.size()) * per_t;
  for (const auto& [key, c] : distinct) {  // in key order: the sums do not depend on the windows' order
    const double e = static_cast<double>(per_t) * elements_of(c);
    plan.grid_elements_distinct += e;
    if (bwd_over(c.H, c.w, c.form, c.T, c.T)) plan.grid_elements_distinct_bwd += e;
  }
  return plan;
}

std::string carrier_for(const seeds::CaseId& c) { return fwd_carrier(c); }

}  // namespace normgate::validators
