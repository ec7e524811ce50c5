// gate/src/mutation.cpp: the mutation score (normgate/gate/mutation.h).
#include "normgate/gate/mutation.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "normgate/harness/pipeline.h"
#include "normgate/kernels/registry.h"

namespace normgate::validators {

namespace {

// The shortest text that reads back as v (as case ids print numbers).
std::string shortest(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::string("?");
}

bool applies(const kernels::Variant& v, const seeds::CaseId& c) {
  return v.supports_h(c.H) && v.supports(c.w) && v.supports(c.form);
}

}  // namespace

std::vector<MutationShape> default_mutation_shapes() {
  return {{1000, 600, WDtype::bf16, Form::plain},
          {1000, 600, WDtype::fp32, Form::res},
          {256, 150, WDtype::bf16, Form::heads4}};
}

std::string point_label(const seeds::FamilyPoint& p) { return seeds::to_string(p); }

std::string format_headroom(double kappa) {
  if (kappa < 0) return "none";
  if (kappa == 0) {
    std::string s = "<";
    s += shortest(seeds::kKappaLevels[0]);
    return s;
  }
  return shortest(kappa);
}

bool MutationResult::pass() const { return survivors().empty() && real_failures().empty(); }

std::vector<std::string> MutationResult::survivors() const {
  std::vector<std::string> out;
  for (const auto& r : rows)
    if (r.control && !r.killed()) out.push_back(r.variant);
  return out;
}

std::vector<std::string> MutationResult::real_failures() const {
  std::vector<std::string> out;
  for (const auto& r : rows)
    if (!r.control && !r.expect_fail && r.cells.find_first_of("X?") != std::string::npos) out.push_back(r.variant);
  return out;
}

MutationResult run_mutation(const MutationOptions& opt) {
  const seeds::SeedSet ss = seeds::parse_seed_set(opt.seeds);
  if (opt.shapes.empty()) throw std::invalid_argument("mutation: no shape to run");
  for (const auto& n : opt.expect_fail) {
    const kernels::Variant& v = kernels::variant(n);  // throws naming an unknown name
    if (v.control) throw std::invalid_argument("mutation: --expect-fail " + n + " is a negative control (controls are expected to fail anyway)");
  }
  MutationResult res;
  res.seeds = seeds::to_string(ss);
  const std::vector<seeds::FamilyPoint> points = ss.points();
  for (const auto& p : points) res.points.push_back(point_label(p));

  // Cases: every shape x point x seed (append_cases validates each).
  std::vector<seeds::CaseId> cases;
  for (const auto& sh : opt.shapes) seeds::append_cases(ss, sh.H, sh.T, sh.w, sh.form, cases);
  res.cases = static_cast<int64_t>(cases.size());

  // Variants: the controls (registry order), then the real backward
  // variants, then the forward variants other than the default (built-in only).
  std::vector<const kernels::Variant*> vars;
  for (const auto& v : kernels::variants())
    if (!v.external && v.op == kernels::Op::bwd && v.control) vars.push_back(&v);
  for (const auto& v : kernels::variants())
    if (!v.external && v.op == kernels::Op::bwd && !v.control) vars.push_back(&v);
  for (const auto& v : kernels::variants())
    if (!v.external && v.op == kernels::Op::fwd && &v != &kernels::default_fwd()) vars.push_back(&v);

  for (const auto* v : vars) {
    MutationRow r;
    r.variant = std::string(v->name);
    r.control = v->control;
    r.source_of_class = std::string(v->source_of_class);
    r.expect_fail = std::find(opt.expect_fail.begin(), opt.expect_fail.end(), r.variant) != opt.expect_fail.end();
    r.cells.assign(points.size(), '-');
    res.rows.push_back(std::move(r));
  }
  // Per variant and kappa level: any cancel case at it, any failing.
  const size_t nk = std::size(seeds::kKappaLevels);
  std::vector<std::vector<int>> kappa_state(vars.size(), std::vector<int>(nk, -1));  // -1 none, 0 pass, 1 fail

  auto point_of = [&points](const seeds::CaseId& c) {
    for (size_t i = 0; i < points.size(); ++i)
      if (points[i].family == c.family && points[i].eps == c.eps && points[i].kappa == c.kappa) return i;
    throw std::logic_error("mutation: a case outside the seed set's points");
  };

  for (const auto& c : cases) {
    CheckRequest req;
    req.id = c;
    req.backend = Backend::cpu;
    req.threads = opt.threads;
    req.impls.clear();
    std::vector<size_t> rows_of;
    for (size_t i = 0; i < vars.size(); ++i) {
      if (!applies(*vars[i], c)) continue;
      if (vars[i]->op == kernels::Op::fwd) {
        try {
          (void)fwd_carrier(c);
        } catch (const std::invalid_argument&) {
          continue;
        }
      }
      req.impls.emplace_back(vars[i]->name);
      rows_of.push_back(i);
    }
    if (req.impls.empty()) continue;
    const CheckReport rep = run_check(req);
    const size_t pt = point_of(c);
    for (size_t k = 0; k < rows_of.size(); ++k) {
      MutationRow& row = res.rows[rows_of[k]];
      const Verdict v = rep.impls[k].result.verdict();
      ++row.cases;
      char& cell = row.cells[pt];
      if (v == Verdict::fail) {
        ++row.failed;
        if (row.first_failure.empty()) row.first_failure = seeds::to_string(c);
        cell = 'X';
      } else if (v == Verdict::inconclusive) {
        if (cell != 'X') cell = '?';
      } else if (cell == '-') {
        cell = '.';
      }
      if (c.family == seeds::Family::cancel)
        for (size_t l = 0; l < nk; ++l)
          if (c.kappa == seeds::kKappaLevels[l]) {
            int& st = kappa_state[rows_of[k]][l];
            st = std::max(st, v == Verdict::pass ? 0 : 1);
          }
    }
  }
  for (size_t i = 0; i < vars.size(); ++i) {
    double head = -1;
    for (size_t l = 0; l < nk; ++l) {
      const int st = kappa_state[i][l];
      if (st < 0) continue;
      if (st > 0) {
        if (head < 0) head = l == 0 ? 0 : -1;  // failing at a level with none below run: not measured
        break;
      }
      head = seeds::kKappaLevels[l];
    }
    res.rows[i].kappa_headroom = head;
  }
  return res;
}

std::string format_mutation(const MutationResult& r) {
  std::ostringstream o;
  o << "mutation score: seeds " << r.seeds << ", " << r.cases << " cases, CPU models\n";
  o << "columns (family points):\n";
  for (size_t i = 0; i < r.points.size(); ++i) o << "  " << char('a' + i) << "  " << r.points[i] << "\n";
  size_t w = 8;
  for (const auto& row : r.rows) w = std::max(w, row.variant.size());
  o << "\n" << std::string(w, ' ') << "  ";
  for (size_t i = 0; i < r.points.size(); ++i) o << char('a' + i);
  o << "  cases  failed  kappa headroom  class (public source)\n";
  bool real_header = false;
  for (const auto& row : r.rows) {
    if (!row.control && !real_header) {
      o << "real variants:\n";
      real_header = true;
    }
    char head[32];
    std::snprintf(head, sizeof head, "%-14s", format_headroom(row.kappa_headroom).c_str());
    char counts[40];
    std::snprintf(counts, sizeof counts, "%5lld  %6lld", static_cast<long long>(row.cases),
                  static_cast<long long>(row.failed));
    o << row.variant << std::string(w - row.variant.size(), ' ') << "  " << row.cells << "  " << counts << "  " << head
      << "  "
      << (row.control ? (row.killed() ? "killed" : "SURVIVES") : (row.expect_fail ? "real, expected to fail" : "real"))
      << (row.source_of_class.empty() ? "" : " (" + row.source_of_class + ")") << "\n";
  }
  o << "\nX: a case of the point fails the variant (a kill); ?: inconclusive; .: every case passes; -: no case applies\n";
  o << "kappa headroom: the highest cancel kappa (of 1e2, 1e4, 1e6, 1e8) at which it and every level below pass\n";
  const auto sv = r.survivors();
  const auto rf = r.real_failures();
  int64_t killed = 0, controls = 0;
  for (const auto& row : r.rows)
    if (row.control) {
      ++controls;
      killed += row.killed();
    }
  o << "verdict  " << (r.pass() ? "PASS" : "FAIL") << ": " << killed << " of " << controls << " controls killed";
  if (!sv.empty()) {
    o << " (survivors:";
    for (const auto& s : sv) o << " " << s;
    o << ")";
  }
  // A real variant no case applies to (its H range or forms outside the
  // shapes) was not tested: "no real variant fails" does not speak for it.
  std::vector<std::string> not_run;
  for (const auto& row : r.rows)
    if (!row.control && row.cases == 0) not_run.push_back(row.variant);
  if (rf.empty()) {
    o << "; no real variant fails";
  } else {
    o << "; real variants failing:";
    for (const auto& s : rf) o << " " << s;
  }
  if (!not_run.empty()) {
    o << "; not run (no case of these shapes applies):";
    for (const auto& s : not_run) o << " " << s;
  }
  o << "\n";
  return o.str();
}

nlohmann::json to_json(const MutationResult& r) {
  nlohmann::json j;
  j["format"] = kMutationFormat;
  j["seeds"] = r.seeds;
  j["cases"] = r.cases;
  j["points"] = r.points;
  j["pass"] = r.pass();
  j["survivors"] = r.survivors();
  j["real_failures"] = r.real_failures();
  j["rows"] = nlohmann::json::array();
  for (const auto& row : r.rows) {
    nlohmann::json x;
    x["variant"] = row.variant;
    x["control"] = row.control;
    x["expect_fail"] = row.expect_fail;
    x["source_of_class"] = row.source_of_class;
    x["cells"] = row.cells;
    x["killed_by"] = nlohmann::json::array();
    for (size_t i = 0; i < row.cells.size(); ++i)
      if (row.cells[i] == 'X') x["killed_by"].push_back(r.points[i]);
    x["cases"] = row.cases;
    x["failed"] = row.failed;
    x["first_failure"] = row.first_failure;
    if (row.kappa_headroom < 0)
      x["kappa_headroom"] = nullptr;
    else
      x["kappa_headroom"] = row.kappa_headroom;
    j["rows"].push_back(std::move(x));
  }
  return j;
}

}  // namespace normgate::validators
