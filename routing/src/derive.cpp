// routing/src/derive.cpp: derivation specs, timings, and the window
// derivation (derive.h).
#include "normgate/routing/derive.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "normgate/kernels/plan.h"
#include "normgate/seeds/case_id.h"
#include "toml_guard.h"

namespace normgate::kernels {

namespace {

constexpr std::string_view kTopKeys[] = {"arch", "description", "gpu", "T", "candidates", "bench", "fallback", "group"};
constexpr std::string_view kCandKeys[] = {"fwd", "bwd_det", "bwd_nondet"};
constexpr std::string_view kBenchKeys[] = {"rounds", "reps", "crossover_steps"};
constexpr std::string_view kGroupKeys[] = {"op", "modes", "H", "w", "form"};
constexpr std::string_view kTimingsFormat = "normgate-timings/1";

struct Ctx {
  const std::string& path;
  [[noreturn]] void fail(const toml::node* n, const std::string& what) const {
    const int line = n ? static_cast<int>(n->source().begin.line) : 1;
    throw RouteTableError(path + ":" + std::to_string(line) + ": " + what);
  }
  void keys(const toml::table& t, std::span<const std::string_view> known, const std::string& where) const {
    for (auto&& [k, v] : t) {
      if (std::find(known.begin(), known.end(), k.str()) != known.end()) continue;
      std::string list;
      for (auto x : known) list += (list.empty() ? "" : ", ") + std::string(x);
      throw RouteTableError(path + ":" + std::to_string(k.source().begin.line) + ": unknown key '" +
                            std::string(k.str()) + "' in " + where + " (known: " + list + ")");
    }
  }
};

// A string or an array of strings, as a list.
std::vector<std::pair<std::string, const toml::node*>> strings(const Ctx& ctx, const toml::node& n,
                                                               const std::string& what) {
  std::vector<std::pair<std::string, const toml::node*>> out;
  if (n.is_string()) {
    out.emplace_back(*n.value<std::string>(), &n);
  } else if (const toml::array* a = n.as_array()) {
    for (const toml::node& e : *a) {
      if (!e.is_string()) ctx.fail(&e, what + " must be strings");
      out.emplace_back(*e.value<std::string>(), &e);
    }
  } else {
    ctx.fail(&n, what + " must be a string or an array of strings");
  }
  if (out.empty()) ctx.fail(&n, what + " is empty");
  return out;
}

std::vector<std::pair<int64_t, const toml::node*>> integers(const Ctx& ctx, const toml::node& n,
                                                            const std::string& what) {
  std::vector<std::pair<int64_t, const toml::node*>> out;
  if (n.is_integer()) {
    out.emplace_back(*n.value<int64_t>(), &n);
  } else if (const toml::array* a = n.as_array()) {
    for (const toml::node& e : *a) {
      if (!e.is_integer()) ctx.fail(&e, what + " must be integers");
      out.emplace_back(*e.value<int64_t>(), &e);
    }
  } else {
    ctx.fail(&n, what + " must be an integer or an array of integers");
  }
  if (out.empty()) ctx.fail(&n, what + " is empty");
  return out;
}

Op op_of(const Ctx& ctx, const std::string& s, const toml::node* n) {
  if (s == "fwd") return Op::fwd;
  if (s == "bwd") return Op::bwd;
  ctx.fail(n, "bad op '" + s + "' (expected fwd or bwd)");
}

Mode mode_of(const Ctx& ctx, const std::string& s, const toml::node* n) {
  if (s == "det") return Mode::det;
  if (s == "nondet") return Mode::nondet;
  ctx.fail(n, "bad mode '" + s + "' (expected det or nondet)");
}

int int_in(const Ctx& ctx, const toml::table& t, std::string_view key, int def, int lo, int hi) {
  const toml::node* n = t.get(key);
  if (!n) return def;
  if (!n->is_integer()) ctx.fail(n, "bench." + std::string(key) + " must be an integer");
  const int64_t v = *n->value<int64_t>();
  if (v < lo || v > hi)
    ctx.fail(n, "bench." + std::string(key) + " = " + std::to_string(v) + " out of range " + std::to_string(lo) +
                    ".." + std::to_string(hi));
  return static_cast<int>(v);
}

std::string op_name(Op op) { return std::string(to_string(op)); }

}  // namespace

std::string DeriveGroup::key() const {
  std::string s(to_string(op));
  if (op == Op::bwd) s += " " + std::string(to_string(mode));
  return s + " H=" + std::to_string(H) + " w=" + std::string(to_string(w)) + " form=" + std::string(to_string(form));
}

std::vector<const Variant*> DeriveSpec::candidates(const DeriveGroup& g) const {
  const auto& list = g.op == Op::fwd ? fwd : (g.mode == Mode::det ? bwd_det : bwd_nondet);
  std::vector<const Variant*> out;
  for (const Variant* v : list)
    if (v->supports_h(g.H) && v->supports(g.w) && v->supports(g.form)) out.push_back(v);
  return out;
}

DeriveSpec parse_derive_spec(std::string_view text, const std::string& path) {
  const Ctx ctx{path};
  toml::table root;
  if (const auto bad = detail::toml_unclassifiable(text))
    throw RouteTableError(path + ":" + std::to_string(bad->first) + ": " + bad->second);
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw RouteTableError(path + ":" + std::to_string(e.source().begin.line) + ": TOML syntax error: " +
                          std::string(e.description()));
  }
  if (const auto bad = detail::toml_control_string(root))
    throw RouteTableError(path + ":" + std::to_string(bad->first) + ": " + bad->second);
  ctx.keys(root, kTopKeys, "the spec");
  DeriveSpec s;
  s.path = path;
  const toml::node* arch = root.get("arch");
  if (!arch) ctx.fail(nullptr, "missing top-level key 'arch' (expected arch = \"sm90a\")");
  if (!arch->is_string() || arch->value<std::string>() != "sm90a")
    ctx.fail(arch, "arch must be \"sm90a\" (the only arch the registry builds)");
  s.arch = "sm90a";
  if (const toml::node* d = root.get("description")) {
    if (!d->is_string()) ctx.fail(d, "description must be a string");
    s.description = *d->value<std::string>();
  }
  if (const toml::node* g = root.get("gpu")) {
    if (!g->is_string() || gpu_slug(*g->value<std::string>()).empty())
      ctx.fail(g, "gpu must be a CUDA device name as the timings file's \"gpu\" holds it, e.g. \"NVIDIA H200\"");
    s.gpu = *g->value<std::string>();
  }
  const toml::node* tg = root.get("T");
  if (!tg) ctx.fail(nullptr, "missing key 'T' (the T grid, e.g. T = [1, 512, 4096, 65536, 131072])");
  for (auto [t, n] : integers(ctx, *tg, "T")) {
    if (t < 1 || t > seeds::kMaxT)  // the derived table's windows must stay gateable (routing.h)
      ctx.fail(n, "T grid value " + std::to_string(t) + " out of range 1.." + std::to_string(seeds::kMaxT));
    if (!s.t_grid.empty() && t <= s.t_grid.back())
      ctx.fail(n, "T grid must be strictly ascending (" + std::to_string(t) + " after " +
                      std::to_string(s.t_grid.back()) + ")");
    s.t_grid.push_back(t);
  }
  if (s.t_grid.front() != 1) ctx.fail(tg, "T grid must start at 1 (the first window starts there)");

  const toml::node* cn = root.get("candidates");
  if (!cn || !cn->is_table()) ctx.fail(cn, "missing table [candidates] (fwd, bwd_det, bwd_nondet: variant lists)");
  const toml::table& ct = *cn->as_table();
  ctx.keys(ct, kCandKeys, "[candidates]");
  auto cand = [&](std::string_view key, Op op, Mode mode, std::vector<const Variant*>& out) {
    const toml::node* n = ct.get(key);
    if (!n) return;
    for (auto [name, e] : strings(ctx, *n, "candidates." + std::string(key))) {
      const Variant* v = find_variant(name);
      if (!v) {
        try {
          variant(name);
        } catch (const std::invalid_argument& err) {
          ctx.fail(e, err.what());
        }
      }
      switch (serve_gap(*v, op, mode)) {
        case ServeGap::op:
          ctx.fail(e, "candidate " + name + " is a " + op_name(v->op) + " variant, listed under " + std::string(key));
        case ServeGap::control:
          ctx.fail(e, "candidate " + name + " is a NEGATIVE CONTROL: never routable");
        case ServeGap::nondet:
          ctx.fail(e, "candidate " + name + " is non-deterministic and cannot serve bwd_det");
        default:  // none (no shape was given, so never h, w or form)
          break;
      }
      if (std::find(out.begin(), out.end(), v) != out.end()) ctx.fail(e, "candidate " + name + " listed twice");
      out.push_back(v);
    }
  };
  cand("fwd", Op::fwd, Mode::det, s.fwd);
  cand("bwd_det", Op::bwd, Mode::det, s.bwd_det);
  cand("bwd_nondet", Op::bwd, Mode::nondet, s.bwd_nondet);

  if (const toml::node* bn = root.get("bench")) {
    if (!bn->is_table()) ctx.fail(bn, "[bench] must be a table");
    const toml::table& bt = *bn->as_table();
    ctx.keys(bt, kBenchKeys, "[bench]");
    s.rounds = int_in(ctx, bt, "rounds", s.rounds, 2, 50);
    s.reps = int_in(ctx, bt, "reps", s.reps, 20, 10000);
    s.crossover_steps = int_in(ctx, bt, "crossover_steps", s.crossover_steps, 0, 12);
  }
  if (const toml::node* fb = root.get("fallback")) {
    if (!fb->is_table()) ctx.fail(fb, "[fallback] must be a table");
    for (auto&& [k, v] : *fb->as_table()) {
      if (!v.is_string()) ctx.fail(&v, "fallback." + std::string(k.str()) + " must be a variant name");
      const std::string key(k.str()), name = *v.value<std::string>();
      const Variant* var = find_variant(name);
      if (var == nullptr) ctx.fail(&v, "fallback." + key + ": unknown kernel variant '" + name + "'");
      // The table derive writes names it; refuse here what its loader would.
      if (const std::string why = fallback_problem(key, *var); !why.empty()) ctx.fail(&v, "fallback." + key + ": " + why);
      s.fallback.emplace_back(key, name);
    }
  }

  const toml::node* gn = root.get("group");
  if (!gn || !gn->is_array()) ctx.fail(gn, "missing [[group]] sections (op, modes, H, w, form)");
  std::set<std::string> seen;
  for (const toml::node& n : *gn->as_array()) {
    const toml::table* gt = n.as_table();
    if (!gt) ctx.fail(&n, "a group must be a table");
    ctx.keys(*gt, kGroupKeys, "a group");
    auto need = [&](std::string_view k) -> const toml::node& {
      const toml::node* x = gt->get(k);
      if (!x) ctx.fail(&n, "group misses key '" + std::string(k) + "'");
      return *x;
    };
    const toml::node& opn = need("op");
    if (!opn.is_string()) ctx.fail(&opn, "op must be a string");
    const Op op = op_of(ctx, *opn.value<std::string>(), &opn);
    std::vector<Mode> modes;
    if (op == Op::bwd) {
      for (auto [m, e] : strings(ctx, need("modes"), "modes")) modes.push_back(mode_of(ctx, m, e));
    } else {
      if (gt->contains("modes")) ctx.fail(gt->get("modes"), "a fwd group has no modes (both modes share the forward)");
      modes.push_back(Mode::det);
    }
    const toml::node& fn = need("form");
    if (!fn.is_string()) ctx.fail(&fn, "form must be a string");
    Form form{};
    try {
      form = parse_form(*fn.value<std::string>());
    } catch (const std::invalid_argument& e) {
      ctx.fail(&fn, e.what());
    }
    std::vector<WDtype> ws;
    for (auto [w, e] : strings(ctx, need("w"), "w")) {
      try {
        ws.push_back(parse_wdtype(w));
      } catch (const std::invalid_argument& err) {
        ctx.fail(e, err.what());
      }
    }
    for (auto [H, e] : integers(ctx, need("H"), "H")) {
      if (H < kMinH || H > kMaxH)
        ctx.fail(e, "H " + std::to_string(H) + " out of range " + std::to_string(kMinH) + ".." + std::to_string(kMaxH));
      if ((form == Form::heads24 || form == Form::heads4) && H != 256)
        ctx.fail(e, "form " + std::string(to_string(form)) + " normalizes heads of 256: H must be 256");
      for (Mode m : modes)
        for (WDtype w : ws) {
          DeriveGroup g{op, m, H, w, form};
          if (!seen.insert(g.key()).second) ctx.fail(e, "group " + g.key() + " listed twice");
          if (s.candidates(g).empty())
            ctx.fail(e, "group " + g.key() + " has no candidate that supports it (check [candidates])");
          s.groups.push_back(g);
        }
    }
  }
  return s;
}

DeriveSpec load_derive_spec(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw RouteTableError(path + ": cannot read derivation spec: " + std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_derive_spec(ss.str(), path);
}

// ---- timings ------------------------------------------------------------------

const BenchPoint* Timings::find(const BenchKey& k) const {
  auto it = points.find(k);
  return it == points.end() ? nullptr : &it->second;
}

std::string timings_to_json_text(const Timings& t) {
  nlohmann::ordered_json j;
  j["format"] = kTimingsFormat;
  j["gpu"] = t.gpu;
  j["driver"] = t.driver;
  j["cuda"] = t.cuda;
  j["date"] = t.date;
  j["normgate_commit"] = t.normgate_commit;
  j["rounds"] = t.rounds;
  j["reps"] = t.reps;
  nlohmann::ordered_json pts = nlohmann::ordered_json::array();
  for (const auto& [k, p] : t.points) {
    nlohmann::ordered_json e;
    e["op"] = to_string(k.op);
    e["H"] = k.H;
    e["w"] = to_string(k.w);
    e["form"] = to_string(k.form);
    e["T"] = k.T;
    e["aa_variant"] = p.aa_variant;
    e["aa_floor"] = p.aa_floor;
    if (!p.aa_rounds_us.empty()) e["aa_rounds_us"] = p.aa_rounds_us;
    e["median_us"] = p.median_us;
    e["rounds_us"] = p.rounds_us;
    pts.push_back(e);
  }
  j["points"] = pts;
  return j.dump(1) + "\n";
}

Timings parse_timings(std::string_view text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw RouteTableError(path + ": not valid JSON: " + e.what());
  }
  Timings t;
  try {
    if (j.at("format") != kTimingsFormat)
      throw RouteTableError(path + ": format is not \"" + std::string(kTimingsFormat) + "\"");
    t.gpu = j.at("gpu").get<std::string>();
    t.driver = j.at("driver").get<std::string>();
    t.cuda = j.at("cuda").get<std::string>();
    t.date = j.at("date").get<std::string>();
    t.normgate_commit = j.at("normgate_commit").get<std::string>();
    t.rounds = j.at("rounds").get<int>();
    t.reps = j.at("reps").get<int>();
    size_t i = 0;
    for (const auto& e : j.at("points")) {
      BenchPoint p;
      const std::string where = path + ": points[" + std::to_string(i++) + "]";
      const std::string op = e.at("op").get<std::string>();
      if (op != "fwd" && op != "bwd") throw RouteTableError(where + ": bad op '" + op + "'");
      p.key.op = op == "fwd" ? Op::fwd : Op::bwd;
      p.key.H = e.at("H").get<int64_t>();
      p.key.w = parse_wdtype(e.at("w").get<std::string>());
      p.key.form = parse_form(e.at("form").get<std::string>());
      p.key.T = e.at("T").get<int64_t>();
      if (p.key.T < 1 || p.key.H < kMinH || p.key.H > kMaxH) throw RouteTableError(where + ": T or H out of range");
      p.aa_variant = e.at("aa_variant").get<std::string>();
      p.aa_floor = e.at("aa_floor").get<double>();
      if (!(p.aa_floor >= 0)) throw RouteTableError(where + ": aa_floor must be >= 0");
      p.median_us = e.at("median_us").get<std::map<std::string, double>>();
      p.rounds_us = e.at("rounds_us").get<std::map<std::string, std::vector<double>>>();
      for (const auto& [v, us] : p.median_us) {
        if (!(us > 0) || !std::isfinite(us)) throw RouteTableError(where + ": median_us of " + v + " must be > 0");
        auto r = p.rounds_us.find(v);
        if (r == p.rounds_us.end() || r->second.empty())
          throw RouteTableError(where + ": " + v + " has a median_us but no rounds_us");
        for (double x : r->second)
          if (!(x > 0) || !std::isfinite(x))
            throw RouteTableError(where + ": rounds_us of " + v + " must be > 0 (got " + std::to_string(x) + ")");
      }
      for (const auto& [v, xs] : p.rounds_us)
        if (!p.median_us.count(v)) throw RouteTableError(where + ": " + v + " has rounds_us but no median_us");
      if (e.contains("aa_rounds_us")) {
        p.aa_rounds_us = e.at("aa_rounds_us").get<std::vector<double>>();
        for (double x : p.aa_rounds_us)
          if (!(x > 0) || !std::isfinite(x))
            throw RouteTableError(where + ": aa_rounds_us must be > 0 (got " + std::to_string(x) + ")");
        if (!p.rounds_us.count(p.aa_variant))
          throw RouteTableError(where + ": aa_rounds_us given, but aa_variant '" + p.aa_variant +
                                "' has no rounds_us");
        for (const auto& [v, xs] : p.rounds_us)
          if (xs.size() != p.aa_rounds_us.size())
            throw RouteTableError(where + ": aa_rounds_us needs one value per round: " +
                                  std::to_string(p.aa_rounds_us.size()) + " values, but " + v + " has " +
                                  std::to_string(xs.size()) + " rounds");
      }
      if (t.points.count(p.key))
        throw RouteTableError(where + ": a second point of " + std::string(to_string(p.key.op)) + " H=" +
                              std::to_string(p.key.H) + " w=" + std::string(to_string(p.key.w)) + " form=" +
                              std::string(to_string(p.key.form)) + " T=" + std::to_string(p.key.T));
      t.points[p.key] = std::move(p);
    }
  } catch (const RouteTableError&) {
    throw;  // already names the path
  } catch (const nlohmann::json::exception& e) {
    throw RouteTableError(path + ": " + e.what());
  } catch (const std::invalid_argument& e) {
    throw RouteTableError(path + ": " + e.what());
  }
  return t;
}

Timings load_timings(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw RouteTableError(path + ": cannot read timings: " + std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_timings(ss.str(), path);
}

// ---- derivation ---------------------------------------------------------------

namespace {

BenchKey key_of(const DeriveGroup& g, int64_t T) { return BenchKey{g.op, g.H, g.w, g.form, T}; }

bool excluded(const std::vector<Exclusion>& excl, const std::string& group, const Variant* v, int64_t T) {
  for (const Exclusion& e : excl)
    if (e.group == group && e.variant == v->name && T >= e.t_lo && T <= e.t_hi) return true;
  return false;
}

std::string us(double x) {
  char b[64];
  std::snprintf(b, sizeof b, "%.2f", x);
  return b;
}

}  // namespace

std::vector<int64_t> timed_points(const DeriveGroup& g, const Timings& timings) {
  std::vector<int64_t> out;
  for (auto it = timings.points.lower_bound(BenchKey{g.op, g.H, g.w, g.form, 0}); it != timings.points.end(); ++it) {
    const BenchKey& k = it->first;
    if (k.op != g.op || k.H != g.H || k.w != g.w || k.form != g.form) break;
    out.push_back(k.T);
  }
  return out;
}

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// The per-round A/A gaps, or empty when p lacks what the paired rule needs.
std::vector<double> aa_gaps(const BenchPoint& p) {
  if (!paired_rounds(p)) return {};
  const auto a = p.rounds_us.find(p.aa_variant);
  std::vector<double> g;
  for (size_t r = 0; r < p.aa_rounds_us.size(); ++r) {
    const double x = a->second[r], y = p.aa_rounds_us[r];
    g.push_back(std::fabs(x - y) / std::min(x, y));
  }
  return g;
}

}  // namespace

bool paired_rounds(const BenchPoint& p) {
  if (p.aa_rounds_us.empty() || !p.rounds_us.count(p.aa_variant)) return false;
  for (const auto& [v, xs] : p.rounds_us)
    if (xs.size() != p.aa_rounds_us.size()) return false;
  return true;
}

double tie_floor(const BenchPoint& p) {
  const auto g = aa_gaps(p);
  return g.empty() ? p.aa_floor : median_of(g);
}

bool ties_with(const BenchPoint& p, const std::string& v, const std::string& fastest) {
  const auto g = aa_gaps(p);
  if (!g.empty()) {
    const auto& tv = p.rounds_us.at(v);
    const auto& tf = p.rounds_us.at(fastest);
    std::vector<double> ratio;
    for (size_t r = 0; r < g.size(); ++r) ratio.push_back(tv[r] / tf[r]);
    return median_of(ratio) <= 1.0 + median_of(g);
  }
  return p.median_us.at(v) <= p.median_us.at(fastest) * (1.0 + p.aa_floor);
}

bool measurably_slower(const BenchPoint& p, const std::string& v, const std::string& u) {
  return p.median_us.at(v) > p.median_us.at(u) && !ties_with(p, v, u);
}

bool slower_than_none(const BenchPoint& p, const std::string& v, const std::vector<std::string>& live) {
  for (const auto& u : live)
    if (u != v && measurably_slower(p, v, u)) return false;
  return true;
}

const Variant* winner_at(const DeriveSpec& spec, const DeriveGroup& g, const BenchPoint& p,
                         const std::vector<Exclusion>& excl, std::string* reason) {
  const std::string gk = g.key();
  const Variant* fastest = nullptr;
  double best = 0;
  std::vector<const Variant*> live;
  for (const Variant* v : spec.candidates(g)) {
    if (excluded(excl, gk, v, p.key.T)) continue;
    auto it = p.median_us.find(std::string(v->name));
    if (it == p.median_us.end()) continue;
    live.push_back(v);
    if (!fastest || it->second < best) {
      fastest = v;
      best = it->second;
    }
  }
  if (!fastest) return nullptr;
  // The first candidate measurably slower than no live candidate. Against
  // every candidate, not only the fastest by median: the paired rule is not
  // transitive, and a candidate tying with the fastest could still be
  // measurably slower than a third one (which might be the det route of the
  // same shape: D1's promise that nondet is never routed slower than det).
  std::vector<std::string> names;
  for (const Variant* v : live) names.emplace_back(v->name);
  for (const Variant* v : live) {
    const std::string vn(v->name);
    if (!slower_than_none(p, vn, names)) continue;
    const double t = p.median_us.at(vn);
    if (reason) {
      if (v == fastest) {
        *reason = "fastest (" + us(t) + " us)";
      } else {
        char b[200];
        std::snprintf(b, sizeof b, "%.2f us, within the A/A floor %.2f%% of %s (%.2f us)%s; more accurate", t,
                      100.0 * tie_floor(p), std::string(fastest->name).c_str(), best,
                      paired_rounds(p) ? " round by round" : "");
        *reason = b;
      }
    }
    return v;
  }
  return fastest;  // unreachable: the fastest by median is measurably slower than none
}

std::vector<DerivedWindow> derive_group(const DeriveSpec& spec, const DeriveGroup& g, const Timings& timings,
                                        const std::vector<Exclusion>& excl) {
  const int64_t t_end = spec.t_grid.back();
  for (int64_t T : spec.t_grid) {
    const BenchPoint* p = timings.find(key_of(g, T));
    if (!p)
      throw std::invalid_argument("derive: no timing of " + g.key() + " at T=" + std::to_string(T) +
                                  " (the grid point must be benchmarked)");
    for (const Variant* v : spec.candidates(g))
      if (!p->median_us.count(std::string(v->name)))
        throw std::invalid_argument("derive: candidate " + std::string(v->name) + " of " + g.key() +
                                    " has no timing at T=" + std::to_string(T) +
                                    " (timings of another spec? time every candidate)");
  }
  std::vector<int64_t> pts;
  for (int64_t T : timed_points(g, timings))
    if (T <= t_end) pts.push_back(T);
  std::vector<DerivedWindow> out;
  for (int64_t T : pts) {
    std::string why;
    const Variant* v = winner_at(spec, g, *timings.find(key_of(g, T)), excl, &why);
    const bool none = v == nullptr;
    if (none) {
      // Every candidate excluded here: keep the fastest one, flagged.
      const BenchPoint& p = *timings.find(key_of(g, T));
      for (const Variant* c : spec.candidates(g)) {
        auto it = p.median_us.find(std::string(c->name));
        if (it != p.median_us.end() && (!v || it->second < p.median_us.at(std::string(v->name)))) v = c;
      }
      why = "no candidate left (all excluded): fastest kept, UNAPPROVED";
    }
    if (!v) throw std::invalid_argument("derive: no candidate timed for " + g.key() + " at T=" + std::to_string(T));
    if (!out.empty() && out.back().variant == v && out.back().no_candidate == none) {
      out.back().t_hi = T;
    } else {
      if (!out.empty()) out.back().t_hi = T - 1;  // previous window ends at the last point it holds
      DerivedWindow w;
      w.group = g;
      w.t_lo = out.empty() ? 1 : T;
      w.t_hi = T;
      w.variant = v;
      w.no_candidate = none;
      out.push_back(w);
    }
    out.back().points.push_back(T);
    out.back().reasons.push_back(why);
  }
  // The split sits at the last point the earlier winner holds: window k ends
  // at its own last timed point; window k+1 starts right after it.
  for (size_t i = 0; i + 1 < out.size(); ++i) {
    out[i].t_hi = out[i].points.back();
    out[i + 1].t_lo = out[i].t_hi + 1;
  }
  out.back().t_hi = t_end;
  return out;
}

std::vector<BenchKey> crossover_points(const DeriveSpec& spec, const Timings& timings,
                                       const std::vector<Exclusion>& excl) {
  std::set<BenchKey> out;
  for (const DeriveGroup& g : spec.groups) {
    if (!std::all_of(spec.t_grid.begin(), spec.t_grid.end(),
                     [&](int64_t T) { return timings.find(key_of(g, T)) != nullptr; }))
      continue;  // not (fully) timed yet
    const auto ws = derive_group(spec, g, timings, excl);
    for (size_t i = 0; i + 1 < ws.size(); ++i) {
      const int64_t a = ws[i].points.back(), b = ws[i + 1].points.front();
      if (b - a <= 1) continue;
      int64_t m = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(a) * static_cast<double>(b))));
      m = std::clamp<int64_t>(m, a + 1, b - 1);
      out.insert(key_of(g, m));
    }
  }
  return {out.begin(), out.end()};
}

std::string route_table_text(const DeriveSpec& spec, const std::vector<DerivedWindow>& windows,
                             const std::string& header) {
  std::string s;
  std::istringstream hs(header);
  for (std::string line; std::getline(hs, line);) s += line.empty() ? "#\n" : "# " + line + "\n";
  s += "arch = \"" + spec.arch + "\"\n";
  if (!spec.description.empty()) {
    nlohmann::json d = spec.description;  // a JSON string is a valid TOML basic string
    s += "description = " + d.dump() + "\n";
  }
  if (!spec.fallback.empty()) {
    s += "fallback = {";
    for (size_t i = 0; i < spec.fallback.size(); ++i)
      s += std::string(i ? "," : "") + " " + spec.fallback[i].first + " = \"" + spec.fallback[i].second + "\"";
    s += " }\n";
  }
  s += "\nroute = [\n";
  std::string last_section;
  for (const DerivedWindow& w : windows) {
    const DeriveGroup& g = w.group;
    // A comment line where (op, mode, form) changes: "# bwd det, form plain".
    const std::string section = std::string(to_string(g.op)) +
                                (g.op == Op::bwd ? " " + std::string(to_string(g.mode)) : std::string()) +
                                ", form " + std::string(to_string(g.form));
    if (section != last_section) s += "  # " + section + "\n";
    last_section = section;
    char b[320];
    if (g.op == Op::fwd)
      std::snprintf(b, sizeof b, "  { op = \"fwd\", H = %lld, w = \"%s\", form = \"%s\", T = [%lld, %lld], variant = \"%s\" },\n",
                    static_cast<long long>(g.H), std::string(to_string(g.w)).c_str(),
                    std::string(to_string(g.form)).c_str(), static_cast<long long>(w.t_lo),
                    static_cast<long long>(w.t_hi), std::string(w.variant->name).c_str());
    else
      std::snprintf(b, sizeof b,
                    "  { op = \"bwd\", mode = \"%s\", H = %lld, w = \"%s\", form = \"%s\", T = [%lld, %lld], variant = \"%s\" },\n",
                    std::string(to_string(g.mode)).c_str(), static_cast<long long>(g.H),
                    std::string(to_string(g.w)).c_str(), std::string(to_string(g.form)).c_str(),
                    static_cast<long long>(w.t_lo), static_cast<long long>(w.t_hi),
                    std::string(w.variant->name).c_str());
    s += b;
  }
  s += "]\n";
  return s;
}

}  // namespace normgate::kernels
