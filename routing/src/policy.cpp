// routing/src/policy.cpp: the approval policy file and its checks (policy.h).
#include "normgate/routing/policy.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>

#include <toml++/toml.h>

#include "normgate/core/file_target.h"
#include "normgate/seeds/seed_set.h"
#include "toml_guard.h"

namespace normgate::kernels {

namespace {

constexpr std::string_view kTopKeys[] = {"description", "minimum", "target"};
constexpr std::string_view kLevelKeys[] = {"name",       "seeds",        "t_per_window", "dense_points",
                                           "dense_step", "dense_seeds",  "fresh_factor", "backends",
                                           "dw_not_worse_than_fp32"};

std::string join(std::span<const std::string_view> xs) {
  std::string s;
  for (auto x : xs) s += (s.empty() ? "" : ", ") + std::string(x);
  return s;
}

std::string join(const std::vector<std::string>& xs, const char* sep = ", ") {
  std::string s;
  for (const auto& x : xs) s += (s.empty() ? "" : sep) + x;
  return s;
}

int line_of(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

[[noreturn]] void fail(const std::string& path, int line, const std::string& what) {
  throw PolicyError(path + ":" + std::to_string(line) + ": " + what);
}

// An integer key of section `sec` (`where` "[minimum]"), in [lo, hi].
int64_t get_int(const std::string& path, const toml::table& t, const std::string& sec, std::string_view key,
                int64_t lo, int64_t hi, int sec_line) {
  const toml::node* n = t.get(key);
  if (!n) fail(path, sec_line, "[" + sec + "] misses key '" + std::string(key) + "'");
  if (!n->is_integer()) fail(path, line_of(*n), "[" + sec + "] key '" + std::string(key) + "' must be an integer");
  const int64_t v = *n->value<int64_t>();
  if (v < lo || v > hi)
    fail(path, line_of(*n), "[" + sec + "] key '" + std::string(key) + "' = " + std::to_string(v) +
                                " out of range " + std::to_string(lo) + ".." + std::to_string(hi));
  return v;
}

PolicyLevel parse_level(const std::string& path, const toml::node& node, const std::string& sec) {
  const toml::table* tp = node.as_table();
  if (!tp) fail(path, line_of(node), "'" + sec + "' must be a table ([" + sec + "] section)");
  const toml::table& t = *tp;
  PolicyLevel L;
  L.section = sec;
  L.path = path;
  L.line = line_of(t);
  for (auto&& [k, v] : t) {
    if (std::find(std::begin(kLevelKeys), std::end(kLevelKeys), k.str()) == std::end(kLevelKeys))
      fail(path, static_cast<int>(k.source().begin.line),
           "[" + sec + "] unknown key '" + std::string(k.str()) + "' (known: " + join(kLevelKeys) + ")");
    L.key_line[std::string(k.str())] = static_cast<int>(k.source().begin.line);
    (void)v;
  }
  if (const toml::node* n = t.get("name")) {
    if (!n->is_string()) fail(path, line_of(*n), "[" + sec + "] key 'name' must be a string");
    L.name = *n->value<std::string>();
  }
  const toml::node* sn = t.get("seeds");
  if (!sn) fail(path, L.line, "[" + sec + "] misses key 'seeds' (a seed-set spelling, e.g. \"3x16\")");
  if (!sn->is_string()) fail(path, line_of(*sn), "[" + sec + "] key 'seeds' must be a string, e.g. \"3x16\"");
  L.seeds = *sn->value<std::string>();
  try {
    const seeds::SeedSet ss = seeds::parse_seed_set(L.seeds);
    for (auto f : ss.families) L.families.emplace_back(seeds::to_string(f));
    L.seeds_per_family = ss.last - ss.first + 1;
  } catch (const std::invalid_argument& e) {
    fail(path, line_of(*sn), "[" + sec + "] key 'seeds': " + e.what());
  }
  L.t_per_window = static_cast<int>(get_int(path, t, sec, "t_per_window", 2, 1 << 20, L.line));
  L.dense_points = static_cast<int>(get_int(path, t, sec, "dense_points", 0, 1 << 20, L.line));
  if (L.dense_points > 0 || t.contains("dense_step"))
    L.dense_step = get_int(path, t, sec, "dense_step", 1, int64_t{1} << 40, L.line);
  if (const toml::node* n = t.get("dense_seeds")) {
    const auto v = n->value<std::string>();
    if (!n->is_string() || (*v != "worst" && *v != "all"))
      fail(path, line_of(*n), "[" + sec + "] key 'dense_seeds' must be \"worst\" or \"all\"");
    L.dense_all_seeds = *v == "all";
  }
  L.fresh_factor = static_cast<int>(get_int(path, t, sec, "fresh_factor", 0, 1 << 20, L.line));
  const toml::node* bn = t.get("backends");
  if (!bn) fail(path, L.line, "[" + sec + "] misses key 'backends' (e.g. [\"gpu\"])");
  const toml::array* ba = bn->as_array();
  if (!ba || ba->empty())
    fail(path, line_of(*bn), "[" + sec + "] key 'backends' must be a non-empty list, e.g. [\"gpu\"]");
  for (const toml::node& b : *ba) {
    const auto v = b.value<std::string>();
    if (!b.is_string() || (*v != kGpuBackend && *v != kCpuModelBackend))
      fail(path, line_of(*bn), "[" + sec + "] key 'backends' holds an unknown backend (known: \"gpu\", \"cpu-model\")");
    if (std::find(L.backends.begin(), L.backends.end(), *v) == L.backends.end()) L.backends.push_back(*v);
  }
  if (const toml::node* n = t.get("dw_not_worse_than_fp32")) {
    if (!n->is_boolean()) fail(path, line_of(*n), "[" + sec + "] key 'dw_not_worse_than_fp32' must be true or false");
    L.dw_not_worse_than_fp32 = *n->value<bool>();
  }
  return L;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace

std::string PolicyLevel::where(const std::string& key) const {
  const auto it = key_line.find(key);
  return path + ":" + std::to_string(it == key_line.end() ? line : it->second);
}

std::string PolicyLevel::label() const { return "the policy " + section; }

std::vector<std::string> PolicyLevel::shortfalls(const CampaignStrength& c) const {
  std::vector<std::string> out;
  const std::string lab = label();
  // Seeds: every family of the policy, at least as many seeds per family.
  try {
    const seeds::SeedSet ss = seeds::parse_seed_set(c.seed_set);
    std::vector<std::string> have;
    for (auto f : ss.families) have.emplace_back(seeds::to_string(f));
    std::vector<std::string> lack;
    for (const auto& f : families)
      if (std::find(have.begin(), have.end(), f) == have.end()) lack.push_back(f);
    const uint64_t n = ss.last - ss.first + 1;
    if (!lack.empty())
      out.push_back("seeds " + c.seed_set + " lack famil" + (lack.size() == 1 ? "y " : "ies ") + join(lack) +
                    " of " + lab + " " + seeds + " (" + where("seeds") + ")");
    if (n < seeds_per_family)
      out.push_back("seeds " + c.seed_set + " below " + lab + " " + seeds + " (" + where("seeds") + "): " +
                    std::to_string(n) + " seed" + (n == 1 ? "" : "s") + " per family, the policy needs " +
                    std::to_string(seeds_per_family));
  } catch (const std::invalid_argument&) {
    out.push_back("seeds '" + c.seed_set + "' are not a seed set; " + lab + " needs " + seeds + " (" +
                  where("seeds") + ")");
  }
  if (c.t_per_window < t_per_window)
    out.push_back("T points per window " + std::to_string(c.t_per_window) + " below " + lab + " " +
                  std::to_string(t_per_window) + " (--t-per-window; " + where("t_per_window") + ")");
  if (dense_points > 0) {
    const std::string need = std::to_string(dense_points) + " points each side, step <= " + std::to_string(dense_step);
    if (c.dense_points <= 0) {
      out.push_back("no dense refinement (" + lab + " needs " + need + "; " + where("dense_points") + ")");
    } else {
      if (c.dense_points < dense_points)
        out.push_back("dense refinement " + std::to_string(c.dense_points) + " points each side below " + lab + " " +
                      std::to_string(dense_points) + " (--dense-points; " + where("dense_points") + ")");
      if (c.dense_step > dense_step)
        out.push_back("dense step " + std::to_string(c.dense_step) + " above " + lab + "'s maximum " +
                      std::to_string(dense_step) + " (--dense-step; " + where("dense_step") + ")");
    }
  }
  if (dense_all_seeds && !c.dense_all_seeds)
    out.push_back("dense grid on the worst case's seed only; " + lab + " needs every seed (--dense-seeds all; " +
                  where("dense_seeds") + ")");
  if (fresh_factor > 0) {
    if (c.fresh_factor <= 0)
      out.push_back("no fresh seeds (" + lab + " needs --fresh-factor >= " + std::to_string(fresh_factor) + "; " +
                    where("fresh_factor") + ")");
    else if (c.fresh_factor < fresh_factor)
      out.push_back("fresh factor " + std::to_string(c.fresh_factor) + " below " + lab + " " +
                    std::to_string(fresh_factor) + " (--fresh-factor; " + where("fresh_factor") + ")");
  }
  if (std::find(backends.begin(), backends.end(), c.backend) == backends.end())
    out.push_back("backend " + (c.backend.empty() ? std::string("(none)") : c.backend) + " not accepted by " + lab +
                  " (accepts " + join(backends) + "; " + where("backends") + ")");
  return out;
}

std::string PolicyLevel::window_shortfall(Op op, WDtype w, double dw_vs_fp32_worst) const {
  if (!dw_not_worse_than_fp32 || op != Op::bwd || w != WDtype::fp32) return "";
  if (dw_vs_fp32_worst <= 1.0) return "";
  return "dw worse than FP32 eager (dw vs FP32 worst " +
         (std::isnan(dw_vs_fp32_worst) ? std::string("unknown: no FP32 baseline") : num(dw_vs_fp32_worst) + " > 1") +
         "); " + label() + " needs dw not worse than FP32 eager on FP32-weight backward windows (" +
         where("dw_not_worse_than_fp32") + ")";
}

std::vector<std::string> PolicyLevel::record_shortfalls(const Approval& a) const {
  if (!a.has_strength)
    return {"campaign strength not recorded (an approval written before approvals carried it); " + label() +
            " cannot be checked"};
  std::vector<std::string> out = shortfalls(strength_of(a));
  const std::string d = window_shortfall(a.op, a.w, a.dw_vs_fp32_worst);
  if (!d.empty()) out.push_back(d);
  return out;
}

std::vector<std::string> PolicyLevel::status_shortfalls(const ApprovalStatus& s) const {
  std::vector<std::string> out;
  const std::vector<const Approval*> recs =
      s.parts.empty() ? std::vector<const Approval*>{s.record} : s.parts;
  for (const Approval* x : recs) {
    if (x == nullptr) continue;
    for (auto& m : record_shortfalls(*x))
      if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(std::move(m));
  }
  return out;
}

std::string PolicyLevel::describe() const {
  std::string s = "seeds " + seeds + ", t-per-window " + std::to_string(t_per_window) + ", ";
  s += dense_points > 0 ? "dense " + std::to_string(dense_points) + " x " + std::to_string(dense_step) +
                              (dense_all_seeds ? " (all seeds)" : " (worst seed)")
                        : std::string("no dense grid");
  s += fresh_factor > 0 ? ", fresh x" + std::to_string(fresh_factor) : std::string(", no fresh seeds");
  s += ", backends " + join(backends);
  if (dw_not_worse_than_fp32) s += ", dw not worse than FP32 eager on FP32-weight windows";
  return s;
}

std::string approve_command_for(const std::string& table_path, const std::string& windows) noexcept {
  try {
    const std::string head = "normgate gate " + table_path + " --windows '" + windows + "'";
    const std::string path = policy_path_for(table_path);
    std::optional<ApprovalPolicy> p;
    try {
      p = load_policy(path);
    } catch (const std::exception&) {
      return head + " --approve, at the policy minimum of " + path;
    }
    if (!p) return head + " --approve, after writing its approval policy " + path + " (gate --approve needs one)";
    const PolicyLevel& L = p->minimum;
    std::string s = head + " --seeds " + L.seeds + " --t-per-window " + std::to_string(L.t_per_window);
    s += L.dense_points > 0 ? " --dense-points " + std::to_string(L.dense_points) + " --dense-step " +
                                  std::to_string(L.dense_step)
                            : std::string(" --dense-points 0");
    if (L.dense_all_seeds) s += " --dense-seeds all";
    s += " --fresh-factor " + std::to_string(L.fresh_factor);
    const bool gpu = std::find(L.backends.begin(), L.backends.end(), "gpu") != L.backends.end();
    if (!gpu) s += " --backend cpu";
    return s + " --approve (the policy minimum, " + path + ")";
  } catch (...) {
    return "normgate gate --approve at the table's policy minimum";
  }
}

std::string policy_path_for(const std::string& table_path) {
  return table_sibling_path(table_path, ".policy.toml");
}

std::string policy_path_for_approvals(const std::string& approvals_path) {
  const std::string table = table_path_for_approvals(approvals_path);  // "dir/stem.toml" or ""
  return table.empty() ? approvals_path + ".policy.toml"
                       : table.substr(0, table.size() - std::string_view(".toml").size()) + ".policy.toml";
}

ApprovalPolicy parse_policy(std::string_view text, const std::string& path) {
  toml::table root;
  if (const auto bad = detail::toml_unclassifiable(text))
    throw PolicyError(path + ":" + std::to_string(bad->first) + ": " + bad->second);
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw PolicyError(path + ":" + std::to_string(e.source().begin.line) + ": TOML syntax error: " +
                      std::string(e.description()));
  }
  if (const auto bad = detail::toml_control_string(root))
    throw PolicyError(path + ":" + std::to_string(bad->first) + ": " + bad->second);
  for (auto&& [k, v] : root) {
    (void)v;
    if (std::find(std::begin(kTopKeys), std::end(kTopKeys), k.str()) == std::end(kTopKeys))
      fail(path, static_cast<int>(k.source().begin.line),
           "unknown top-level key '" + std::string(k.str()) + "' (known: " + join(kTopKeys) + ")");
  }
  ApprovalPolicy p;
  p.path = path;
  if (const toml::node* d = root.get("description")) {
    if (!d->is_string()) fail(path, line_of(*d), "description must be a string");
    p.description = *d->value<std::string>();
  }
  const toml::node* m = root.get("minimum");
  if (!m) fail(path, 1, "missing section [minimum] (the campaign an approval needs)");
  p.minimum = parse_level(path, *m, "minimum");
  if (const toml::node* t = root.get("target")) p.target = parse_level(path, *t, "target");
  return p;
}

std::optional<ApprovalPolicy> load_policy(const std::string& path) {
  // A folder, a FIFO (an open would block) or a device (/dev/zero reads
  // without end) is refused; a missing file means no policy.
  if (const std::string why = core::regular_file_problem(path); !why.empty() && why != "no such file")
    throw PolicyError(path + ": cannot read approval policy: " + why);
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    if (!std::filesystem::exists(path)) return std::nullopt;
    throw PolicyError(path + ": cannot read approval policy: " + std::strerror(errno));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw PolicyError(path + ": read error");
  return parse_policy(ss.str(), path);
}

CampaignStrength strength_of(const Approval& a) {
  CampaignStrength c;
  c.seed_set = a.seed_set;
  c.t_per_window = a.t_per_window;
  c.dense_points = a.dense_points;
  c.dense_step = a.dense_step;
  c.dense_all_seeds = a.dense_all_seeds;
  c.fresh_factor = a.fresh_factor;
  c.backend = a.backend;
  return c;
}

std::string describe_strength(const Approval& a) {
  std::string s = "seeds " + a.seed_set + ", T points " + std::to_string(a.t_points.size());
  if (!a.has_strength) return s + ", backend " + a.backend + "; campaign strength not recorded";
  s += " (t-per-window " + std::to_string(a.t_per_window) + "), ";
  s += a.dense_points > 0 ? "dense " + std::to_string(a.dense_points) + " x " + std::to_string(a.dense_step) +
                                (a.dense_all_seeds ? " (all seeds)" : " (worst seed)")
                          : std::string("no dense grid");
  s += a.fresh_factor > 0 ? ", fresh x" + std::to_string(a.fresh_factor) +
                                (a.fresh_seeds.empty() ? std::string(" (none ran)") : " (" + a.fresh_seeds + ")")
                          : std::string(", no fresh seeds");
  s += ", oracle " + a.oracle + ", backend " + a.backend;
  if (a.op == Op::bwd) s += ", dw vs FP32 " + num(a.dw_vs_fp32_worst);
  return s;
}

}  // namespace normgate::kernels
