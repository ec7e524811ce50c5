// tests/gate/gate_test.cpp: the gate engine (gate.h) and its journal (journal.h).
// Small tables (tests/data/routes/, H = 64 and 256, T <= 700) keep every gate
// here under a few seconds on the CPU models.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "normgate/kernels/registry.h"
#include "normgate/routing/routing.h"
#include "normgate/harness/runner.h"
#include "normgate/gate/gate.h"
#include "normgate/gate/journal.h"
#include "normgate/seeds/generate.h"
#include "normgate/seeds/seed_set.h"
#include "util/approval_fixture.h"
#include "gate/gate_test_util.h"

namespace {

using namespace normgate;
using namespace normgate::validators;
using test::small_opts;
using test::strip_date;

std::string temp_dir(const std::string& name) { return test::fresh_dir("test_gate", name); }

const std::string kCtl = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/ctl_override.toml";

TEST(GateTPoints, EdgesPowersOfTwoAndSpread) {
  const auto a = window_t_points(1, 65536, 8);
  const std::set<int64_t> sa(a.begin(), a.end());
  EXPECT_EQ(sa.size(), a.size());
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  for (int64_t t : {1, 3, 5, 7, 9, 15, 17, 32767, 32769, 65535, 65536}) EXPECT_TRUE(sa.count(t)) << t;
  EXPECT_FALSE(sa.count(65537));  // outside the window
  // More mandatory points than the target: exactly the mandatory ones.
  // 1, 65536; 3 (p=2); 5 (p=4; 3 is taken); p-1, p+1 for p = 8..32768; 65535 (p=65536)
  EXPECT_EQ(a.size(), 2u + 1 + 1 + 2 * 13 + 1);

  const auto b = window_t_points(65537, 131072, 8);
  EXPECT_EQ(b.size(), 8u);
  EXPECT_EQ(b.front(), 65537);
  EXPECT_EQ(b.back(), 131072);
  EXPECT_TRUE(std::count(b.begin(), b.end(), 131071));
  EXPECT_EQ(b, window_t_points(65537, 131072, 8));  // a function of the window alone

  EXPECT_EQ(window_t_points(5, 7, 8), (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(window_t_points(10, 10, 8), (std::vector<int64_t>{10}));
  EXPECT_EQ(window_t_points(100, 120, 2), (std::vector<int64_t>{100, 120}));
  EXPECT_THROW(window_t_points(0, 10, 8), std::invalid_argument);
  EXPECT_THROW(window_t_points(10, 9, 8), std::invalid_argument);
  EXPECT_THROW(window_t_points(1, 10, 1), std::invalid_argument);
}

TEST(GateFilter, SelectsWindows) {
  const auto t = kernels::load_route_table(test::kSmallTable);
  auto count = [&](const std::string& f) {
    const auto flt = parse_window_filter(f);
    int n = 0;
    for (const auto& r : t.routes) n += flt.matches(r);
    return n;
  };
  EXPECT_EQ(count(""), 6);
  EXPECT_EQ(count("op=fwd"), 1);
  EXPECT_EQ(count("op=bwd,mode=det"), 3);
  EXPECT_EQ(count("mode=det|nondet"), 5);  // fwd windows have no mode
  EXPECT_EQ(count("H=256"), 1);
  EXPECT_EQ(count("H=64,T=100"), 3);       // fwd 1..700, det 1..100, nondet 1..100
  EXPECT_EQ(count("H=64,T=100..101,op=bwd"), 4);
  EXPECT_EQ(count("variant=bwd_nondet_atomic"), 2);
  EXPECT_EQ(count("w=fp32"), 1);
  for (const char* bad : {"H", "colour=red", "H=", "H=x", "T=5..2", "op=up", "w=fp16", "variant=nope", "op=bwd,",
                          "H=64|", "op=bwd|", "H=64,,op=bwd", "H=64||128"}) {
    try {
      (void)parse_window_filter(bad);
      ADD_FAILURE() << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  // Numbers too long for a 64-bit count are out of range, not malformed;
  // leading zeros do not count.
  EXPECT_EQ(count("H=000000000000000000064"), count("H=64"));
  EXPECT_EQ(count("H=64"), 5);
  for (const char* big : {"T=1..99999999999999999999", "H=1234567890123456789"}) {
    try {
      (void)parse_window_filter(big);
      ADD_FAILURE() << big;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("is out of range (at most 18 digits)"), std::string::npos) << e.what();
    }
  }
}

TEST(GateJournal, RecordsRoundTripBitForBit) {
  CaseRecord r;
  r.case_id = "H=64,T=3,w=bf16,form=plain,family=cancel,seed=0";
  r.impls = {"bwd_det_chunked"};
  ImplRecord x;
  x.impl = "bwd_det_chunked";
  x.ran_on = "cpu model (no GPU used)";
  x.out[0] = {0.1 + 0.2, 17, 0, 1.0 / 3.0, true};
  x.out[1] = {0.25, 2, 0, 0.125, true};
  x.out[2] = {2.5e-3, 100, 0, 1e-3, true};
  x.out[3] = {std::numeric_limits<double>::infinity(), 5, 2, 1e-300, false};
  x.dw_vs_fp32_worst = std::numeric_limits<double>::quiet_NaN();
  x.dw_vs_fp32_median = 0.7;
  r.results.push_back(x);
  const std::string line = journal_line(to_json(r));
  const CaseRecord b = case_record_from_json(parse_journal_line(line));
  ASSERT_EQ(b.results.size(), 1u);
  EXPECT_EQ(b.results[0].out, x.out);
  EXPECT_TRUE(std::isnan(b.results[0].dw_vs_fp32_worst));
  EXPECT_EQ(b.results[0].dw_vs_fp32_median, 0.7);
  EXPECT_THROW(case_record_from_json(nlohmann::json::parse(R"({"case": "x"})")), std::invalid_argument);
  // The line is the record's JSON with its digest appended: the SHA-256 of
  // the bytes before it (and the closing brace).
  const std::string body = to_json(r).dump();
  EXPECT_EQ(line, body.substr(0, body.size() - 1) + ",\"sha256\":\"" + seeds::sha256_hex(body.data(), body.size()) +
                      "\"}");
}

TEST(GateJournal, TornTailDroppedMismatchRefused) {
  const std::string dir = temp_dir("journal");
  const std::string path = dir + "/j.jsonl";
  const nlohmann::json campaign = {{"seeds", "3x1"}, {"table_sha256", "abc"}};
  CaseRecord r;
  r.case_id = "H=64,T=1,w=bf16,form=plain,family=normal,seed=0";
  r.error = "CUDA error: out of memory";
  r.impls = {"bwd_det_chunked"};
  {
    Journal j = Journal::open(path, campaign);
    EXPECT_TRUE(j.resumed().empty());
    // A second writer is refused while the first holds the journal.
    EXPECT_THROW((void)Journal::open(path, campaign), std::invalid_argument);
    j.append(r);
    r.case_id = "H=64,T=2,w=bf16,form=plain,family=normal,seed=0";
    j.append(r);
  }
  {  // a record torn by a crash in the middle of its write
    std::ofstream f(path, std::ios::app);
    f << R"({"case":"H=64,T=3,w=bf16,form=plain,family=normal,seed=0","impls":[)";
  }
  const auto size_before = std::filesystem::file_size(path);
  {
    Journal j = Journal::open(path, campaign);
    ASSERT_EQ(j.resumed().size(), 2u);
    EXPECT_EQ(j.resumed()[1].case_id, "H=64,T=2,w=bf16,form=plain,family=normal,seed=0");
    EXPECT_EQ(j.resumed()[0].error, "CUDA error: out of memory");
    EXPECT_EQ(j.resumed_lines(), (std::vector<int64_t>{2, 3}));
    EXPECT_GT(j.dropped_bytes(), 0);
    EXPECT_EQ(std::filesystem::file_size(path), size_before - static_cast<uintmax_t>(j.dropped_bytes()));
    r.case_id = "H=64,T=3,w=bf16,form=plain,family=normal,seed=0";
    j.append(r);
  }
  EXPECT_EQ(Journal::open(path, campaign).resumed().size(), 3u);
  // Another campaign: refused, naming the field.
  try {
    (void)Journal::open(path, {{"seeds", "3x2"}, {"table_sha256", "abc"}});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("seeds: journal \"3x1\", this run \"3x2\""), std::string::npos) << e.what();
  }
  // A corrupt complete line is an error with its line number.
  {
    std::ofstream f(path, std::ios::app);
    f << "garbage\n";
  }
  try {
    (void)Journal::open(path, campaign);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("line 5"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// Dense steps that land on grid T: the report names them (the grid ran
// their cases; the dense grid does not again), the cell counts only new T.
TEST(Gate, ReportNamesTheGridTTheDenseGridSkipped) {
  GateOptions o = normgate::test::grid_only_opts();
  o.windows = "H=256";
  o.seeds = "3x1";
  o.t_per_window = 4;
  o.dense_points = 4;
  o.dense_step = 1;
  const GateResult r = run_gate(o);
  ASSERT_EQ(r.windows.size(), 1u);
  const WindowResult& w = r.windows[0];
  std::vector<int64_t> skipped;
  for (int64_t t = w.dense_center - 4; t <= w.dense_center + 4; ++t)
    if (t != w.dense_center && std::count(w.t_points.begin(), w.t_points.end(), t)) skipped.push_back(t);
  // The worst grid T of this window lies two rows from another grid T (both
  // sides of a power of two): otherwise this test checks nothing.
  ASSERT_EQ(skipped.size(), 1u) << "center " << w.dense_center;
  for (const int64_t t : w.dense.t) EXPECT_EQ(std::count(w.t_points.begin(), w.t_points.end(), t), 0) << t;
  EXPECT_EQ(w.dense.t.size(), 7u);
  EXPECT_EQ(w.dense.cases, 7);
  const std::string cell = std::to_string(w.dense.t.front()) + ".." + std::to_string(w.dense.t.back()) +
                           " step 1 around " + std::to_string(w.dense_center) + " (7 T; T=" +
                           std::to_string(skipped[0]) + " is a grid T)";
  EXPECT_NE(format_gate_markdown(r).find(cell), std::string::npos) << cell << "\n" << format_gate_markdown(r);
}

TEST(Gate, SmallTablePassesOnCpuModels) {
  GateOptions o = small_opts();
  std::vector<std::string> phases;
  o.progress = [&](const GateProgress& p) {
    EXPECT_LE(p.done, p.total);
    if (phases.empty() || phases.back() != p.phase) phases.push_back(p.phase);
  };
  const GateResult r = run_gate(o);
  EXPECT_TRUE(r.pass());
  EXPECT_EQ(r.backend, "cpu-model");
  EXPECT_NE(r.backend_detail.find("CPU model"), std::string::npos);
  EXPECT_EQ(phases, (std::vector<std::string>{"grid", "dense", "fresh"}));
  ASSERT_EQ(r.windows.size(), 6u);
  for (const auto& w : r.windows) {
    EXPECT_TRUE(w.pass) << w.route.describe();
    EXPECT_GT(w.cases, 0);
    EXPECT_EQ(w.errors, 0);
    EXPECT_FALSE(w.worst_case.empty());
    EXPECT_LE(w.worst, 1.0);
    // Refinement: dense grid around a grid T, fresh seeds after the set's last seed.
    EXPECT_TRUE(std::count(w.t_points.begin(), w.t_points.end(), w.dense_center)) << w.route.describe();
    EXPECT_EQ(w.fresh.seeds, w.fresh_family + ":1..2");
    for (int64_t t : w.dense.t) {
      EXPECT_EQ((t - w.dense_center) % 64, 0);
      EXPECT_GE(t, w.route.t_lo);
      EXPECT_LE(t, w.route.t_hi);
    }
    // The report names the side the dense T lie on: "around" only when
    // they lie on both (a window's edge cuts one side off).
    if (w.dense.t.size() > 1) {
      const bool above = w.dense.t.front() > w.dense_center, below = w.dense.t.back() < w.dense_center;
      const std::string cell = std::to_string(w.dense.t.front()) + ".." + std::to_string(w.dense.t.back()) +
                               " step 64 " + (above ? "above " : below ? "below " : "around ") +
                               std::to_string(w.dense_center) + " (";
      EXPECT_NE(format_gate_markdown(r).find(cell), std::string::npos) << cell;
    }
    // --dense-seeds worst (the default): one case per dense T, one family and one seed.
    EXPECT_EQ(w.dense.cases, static_cast<int64_t>(w.dense.t.size())) << w.route.describe();
    if (!w.dense.t.empty()) {
      EXPECT_EQ(seeds::parse_seed_set(w.dense.seeds).families.size(), 1u) << w.dense.seeds;
    }
    int64_t fam_cases = 0;
    for (const auto& f : w.families) fam_cases += f.cases;
    EXPECT_EQ(fam_cases, w.cases);
  }
  // det and nondet windows with the same bounds ran the same cases (one oracle
  // sweep each); their forward outputs agree exactly.
  const WindowResult& det = r.windows[1];
  const WindowResult& nondet = r.windows[3];
  EXPECT_EQ(det.route.window().substr(4), nondet.route.window().substr(7));
  EXPECT_EQ(det.out[0].max_ratio, nondet.out[0].max_ratio);
  EXPECT_EQ(det.out[2].max_ratio, nondet.out[2].max_ratio);
  // Every case of the campaign ran once.
  EXPECT_EQ(r.cases_run_now, r.cases_total);
  const std::string md = format_gate_markdown(r);
  EXPECT_NE(md.find("**PASS**"), std::string::npos);
  EXPECT_NE(md.find("| bwd det H=64 w=bf16 form=plain T=1..100 | bwd_det_chunked |"), std::string::npos) << md;
  EXPECT_NE(md.find("cpu-model"), std::string::npos);
  const auto j = gate_to_json(r);
  EXPECT_TRUE(j["pass"].get<bool>());
  EXPECT_EQ(j["windows"].size(), 6u);
}

// A window's verdict covers every case the gate ran inside it, whichever
// window listed the case: each case runs every backward variant whose window
// covers it, and each window counts those results (e.g. the forward window
// [1, 700]'s grid and fresh seeds are backward cases of the det and nondet
// windows they fall into). Checked against the journal itself: per backward
// window, the cases inside it, each with a result of its variant, and the
// largest dw err/tol among them.
TEST(Gate, WindowsCountTheCasesOfOtherWindowsInsideThem) {
  const std::string dir = temp_dir("others");
  GateOptions o = small_opts();
  o.journal_path = dir + "/j.jsonl";
  const GateResult r = run_gate(o);
  ASSERT_EQ(r.windows.size(), 6u);
  std::map<std::string, std::map<std::string, double>> dw;  // case -> impl -> dw err/tol
  std::ifstream in(o.journal_path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    for (const auto& x : j["results"]) dw[j["case"].get<std::string>()][x["impl"].get<std::string>()] = x["dw"][0];
  }
  int64_t others = 0;
  for (const auto& w : r.windows) {
    others += w.others.cases;
    if (w.route.op != kernels::Op::bwd) continue;
    int64_t inside = 0;
    double worst = -1;
    for (const auto& [id, impls] : dw) {
      const seeds::CaseId c = seeds::parse_case(id);
      if (c.H != w.route.H || c.w != w.route.w || c.T < w.route.t_lo || c.T > w.route.t_hi) continue;
      ++inside;
      const auto it = impls.find(w.impl);
      ASSERT_NE(it, impls.end()) << id << " ran without " << w.impl << ", inside " << w.route.describe();
      worst = std::max(worst, it->second);
    }
    EXPECT_EQ(w.cases, inside) << w.route.describe();
    EXPECT_EQ(w.out[3].max_ratio, worst) << w.route.describe();
  }
  EXPECT_GT(others, 0);  // the fwd window [1, 700] shares cases with four bwd windows
  const WindowResult& fwd = r.windows[0];
  ASSERT_EQ(fwd.route.op, kernels::Op::fwd);
  EXPECT_GT(fwd.others.cases, 0);  // the bwd windows' T points that its grid lacks
  const std::string md = format_gate_markdown(r);
  EXPECT_NE(md.find("other windows' cases"), std::string::npos);
  EXPECT_EQ(gate_to_json(r)["windows"][0]["others"]["cases"].get<int64_t>(), fwd.others.cases);
  std::filesystem::remove_all(dir);
}

// --plan: the same windows, T points and grid cases the gate runs, counted
// before anything runs; the refinement bound holds what the gate then did.
TEST(Gate, PlanCountsWhatTheGateRuns) {
  GateOptions o = small_opts();
  o.dense_points = 0;
  o.fresh_factor = 0;
  const GateResult r = run_gate(o);
  const GatePlan p = plan_gate(o);
  ASSERT_EQ(p.windows.size(), r.windows.size());
  EXPECT_EQ(p.grid_cases_distinct, r.cases_total);  // det/nondet/fwd windows share cases
  EXPECT_LT(p.grid_cases_distinct, [&] {
    int64_t sum = 0;
    for (const auto& w : p.windows) sum += w.grid_cases;
    return sum;
  }());
  for (size_t i = 0; i < p.windows.size(); ++i) {
    const PlanWindow& w = p.windows[i];
    EXPECT_EQ(w.t, r.windows[i].t_points) << w.window;
    // Its own grid, and the other windows' grid cases inside it (no refinement here).
    EXPECT_EQ(w.grid_cases + r.windows[i].others.cases, r.windows[i].cases) << w.window;
    double elements = 0;  // 3 families x 1 seed, plain rows of H columns
    for (int64_t t : w.t) elements += 3.0 * static_cast<double>(t) * static_cast<double>(r.windows[i].route.H);
    EXPECT_EQ(w.grid_elements, elements) << w.window;
    EXPECT_NE(w.window.find(r.windows[i].route.describe()), std::string::npos);
  }

  // Counted, not built: the largest seed set accepted (65536 a family; as
  // cases ~250 B each, the whole table's plan needed >100 GB) scales every
  // window's cases and elements by exactly 65536, and the shared ones too.
  GateOptions big = o;
  big.seeds = "3x65536";
  const GatePlan pb = plan_gate(big);
  ASSERT_EQ(pb.windows.size(), p.windows.size());
  EXPECT_EQ(pb.grid_cases_distinct, p.grid_cases_distinct * 65536);
  EXPECT_EQ(pb.grid_elements_distinct, p.grid_elements_distinct * 65536);
  EXPECT_EQ(pb.grid_elements_distinct_bwd, p.grid_elements_distinct_bwd * 65536);
  for (size_t i = 0; i < pb.windows.size(); ++i) {
    EXPECT_EQ(pb.windows[i].grid_cases, p.windows[i].grid_cases * 65536) << pb.windows[i].window;
    EXPECT_EQ(pb.windows[i].grid_elements, p.windows[i].grid_elements * 65536) << pb.windows[i].window;
  }
  // Every family point counts (the sweep set: epsnear at each eps, cancel at
  // each kappa): against what the gate runs.
  GateOptions sweep = o;
  sweep.seeds = "sweep=0..0";
  const GatePlan ps = plan_gate(sweep);
  EXPECT_GT(ps.grid_cases_distinct, p.grid_cases_distinct / 3 * 5);
  EXPECT_EQ(ps.grid_cases_distinct, run_gate(sweep).cases_total);

  for (bool all : {false, true}) {
    GateOptions refine = small_opts();  // dense 2 points each side, fresh 2x
    refine.dense_all_seeds = all;
    const GateResult rr = run_gate(refine);
    const GatePlan rp = plan_gate(refine);
    ASSERT_EQ(rp.windows.size(), rr.windows.size());
    for (size_t i = 0; i < rp.windows.size(); ++i) {
      const WindowResult& w = rr.windows[i];
      const int64_t ran = w.dense.cases + w.fresh.cases;
      EXPECT_GT(ran, 0) << rp.windows[i].window;
      EXPECT_LE(ran, rp.windows[i].refine_cases_max) << rp.windows[i].window;
      // all: every (family, seed) of the 3x1 set at each dense T; worst: one.
      EXPECT_EQ(w.dense.cases, static_cast<int64_t>(w.dense.t.size()) * (all ? 3 : 1)) << rp.windows[i].window;
    }
    EXPECT_EQ(gate_to_json(rr)["dense_seeds"], all ? "all" : "worst");
    EXPECT_NE(format_gate_markdown(rr).find(all ? "every family and seed of the set" : "the worst case's family and seed"),
              std::string::npos);
  }

  // The backward share: cases a backward window of the plan covers run in
  // full, whichever window listed them (the gate's rule). H = 64 up to T =
  // 100: the forward window T = 1..700 and the two backward windows T =
  // 1..100; the forward window's T points above 100 are forward-only.
  GateOptions om = small_opts(), of = small_opts();  // with refinement
  om.windows = "H=64,T=1..100";
  of.windows = "op=fwd";
  const GatePlan pm = plan_gate(om), pf = plan_gate(of);
  ASSERT_EQ(pm.windows.size(), 3u);
  std::set<int64_t> ts;
  for (const auto& w : pm.windows) ts.insert(w.t.begin(), w.t.end());
  double all = 0, bwd = 0;  // 3 families x 1 seed, rows of 64 columns
  for (int64_t t : ts) {
    all += 3.0 * static_cast<double>(t) * 64;
    if (t <= 100) bwd += 3.0 * static_cast<double>(t) * 64;
  }
  ASSERT_GT(*ts.rbegin(), 100);
  EXPECT_EQ(pm.grid_elements_distinct, all);
  EXPECT_EQ(pm.grid_elements_distinct_bwd, bwd);
  EXPECT_LT(bwd, all);
  // The forward window's refinement overlaps the backward windows: priced as backward.
  EXPECT_EQ(pm.refine_elements_max_bwd, pm.refine_elements_max);
  // Without a backward window nothing runs in full.
  ASSERT_FALSE(pf.windows.empty());
  EXPECT_EQ(pf.grid_elements_distinct_bwd, 0);
  EXPECT_GT(pf.refine_elements_max, 0);
  EXPECT_EQ(pf.refine_elements_max_bwd, 0);

  const std::string md = format_gate_plan(p, 1e6, 1e6);
  EXPECT_NE(md.find("Nothing was run"), std::string::npos);
  EXPECT_NE(md.find("Distinct grid cases (windows that share a case run it once): " +
                    std::to_string(p.grid_cases_distinct)),
            std::string::npos)
      << md;
  // Element counts as plain numbers, never scaled by a unit in the header.
  ASSERT_FALSE(p.windows.empty());
  {
    char want[64];
    std::snprintf(want, sizeof want, " | %zu | %lld | %.3g | ", p.windows[0].t.size(),
                  static_cast<long long>(p.windows[0].grid_cases), p.windows[0].grid_elements);
    EXPECT_NE(md.find(want), std::string::npos) << want << "\n" << md;
    EXPECT_EQ(md.find("(1e9"), std::string::npos) << md;
  }
  EXPECT_THROW(format_gate_plan(p, 0.0, 1e6), std::invalid_argument);
  EXPECT_THROW(format_gate_plan(p, 1e6, -1.0), std::invalid_argument);
  // Two rates: forward-only elements at the first, backward ones at the second.
  GatePlan q;
  q.table_path = "t.toml";
  q.grid_cases_distinct = 7;
  q.grid_elements_distinct = 3e9;  // 2e9 forward-only at 1e9/s (2 s) + 1e9 backward at 2.5e8/s (4 s)
  q.grid_elements_distinct_bwd = 1e9;
  q.refine_elements_max = 9e9;  // 1.5e9 forward-only (1.5 s) + 7.5e9 backward (30 s)
  q.refine_elements_max_bwd = 7.5e9;
  const std::string mq = format_gate_plan(q, 1e9, 2.5e8);
  EXPECT_NE(mq.find("3e+09 elements (1e+09 in cases a backward window runs): 6 s at 1e+09 elements/s forward-only and "
                    "2.5e+08 backward"),
            std::string::npos)
      << mq;
  EXPECT_NE(mq.find("9e+09 elements, 31.5 s"), std::string::npos) << mq;
  // The caveat on the default rates only where they are the defaults.
  EXPECT_NE(mq.find("a default rate is one measured on a 16-core H200 host"), std::string::npos) << mq;
  const std::string given = format_gate_plan(q, 1e9, 2.5e8, false, false);
  EXPECT_EQ(given.find("default rate"), std::string::npos) << given;
  EXPECT_EQ(given.find("far lower"), std::string::npos) << given;
  EXPECT_NE(given.find("2.5e+08 backward, end to end.\n"), std::string::npos) << given;
  // One rate given: the caveat stays while the other, default, prices elements.
  EXPECT_NE(format_gate_plan(q, 1e9, 2.5e8, false, true).find("default rate"), std::string::npos);
  GatePlan fwd_only = q;
  fwd_only.grid_elements_distinct_bwd = fwd_only.refine_elements_max_bwd = 0;
  EXPECT_EQ(format_gate_plan(fwd_only, 1e9, 2.5e8, false, true).find("default rate"), std::string::npos);
  EXPECT_NE(format_gate_plan(fwd_only, 1e9, 2.5e8, true, false).find("default rate"), std::string::npos);
  // Units follow the printed value: just under a boundary rounds up into the next unit.
  EXPECT_EQ(format_plan_duration(59.94), "59.9 s");
  EXPECT_EQ(format_plan_duration(59.99), "1 min");
  EXPECT_EQ(format_plan_duration(60), "1 min");
  EXPECT_EQ(format_plan_duration(3594), "59.9 min");
  EXPECT_EQ(format_plan_duration(3599.9), "1 h");
  EXPECT_EQ(format_plan_duration(5400), "1.5 h");
  EXPECT_EQ(format_plan_duration(0.5), "0.5 s");
  q.refine_elements_max_bwd = 0;
  q.refine_elements_max = 5.999e10;  // 59.99 s forward-only at 1e9/s
  EXPECT_NE(format_gate_plan(q, 1e9, 2.5e8).find("6e+10 elements, 1 min"), std::string::npos);
  q.refine_elements_max = 9e9;
  q.refine_elements_max_bwd = 7.5e9;
  try {
    (void)format_gate_plan(q, 1e9, std::numeric_limits<double>::infinity());
    ADD_FAILURE() << "an infinite backward rate was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("the backward rate"), std::string::npos) << e.what();
  }
  GateOptions bad = small_opts();
  bad.windows = "H=77";
  EXPECT_THROW(plan_gate(bad), std::invalid_argument);
  // No room after the set's last seed for the fresh ones: both refuse, the
  // gate before it runs a single case.
  GateOptions full = small_opts();
  full.seeds = "normal:18446744073709551614..18446744073709551615";
  int64_t ran = 0;
  full.after_case = [&](int64_t) { ++ran; };
  EXPECT_THROW(plan_gate(full), std::invalid_argument);
  EXPECT_THROW(run_gate(full), std::invalid_argument);
  EXPECT_EQ(ran, 0);
  full.fresh_factor = 0;  // no fresh seeds wanted: fine
  EXPECT_NO_THROW(plan_gate(full));
}

// The negative control, routed by explicit override, fails the gate on the
// cancellation family (and only there).
TEST(Gate, ControlRoutedByOverrideFailsOnCancel) {
  EXPECT_THROW((void)run_gate(small_opts(kCtl)), kernels::RouteTableError);
  GateOptions o = small_opts(kCtl);
  o.allow_controls = true;
  const GateResult r = run_gate(o);
  EXPECT_FALSE(r.pass());
  ASSERT_EQ(r.windows.size(), 1u);
  const WindowResult& w = r.windows[0];
  EXPECT_TRUE(w.control);
  EXPECT_FALSE(w.pass);
  EXPECT_GT(w.out[3].max_ratio, 1.0);
  EXPECT_NE(w.out[3].worst_case.find("family=cancel"), std::string::npos) << w.out[3].worst_case;
  for (const auto& f : w.families) {
    if (f.family == "cancel") {
      EXPECT_GT(f.failed, 0);
    } else {
      EXPECT_EQ(f.failed, 0) << f.family;
    }
  }
  const std::string md = format_gate_markdown(r);
  EXPECT_NE(md.find("**FAIL**"), std::string::npos);
  EXPECT_NE(md.find("NEGATIVE CONTROL"), std::string::npos);
  // A failing control is never approved.
  kernels::Approvals a;
  const auto t = kernels::load_route_table(kCtl, {.allow_controls = true});
  (void)update_approvals(a, r, t.routes);
  EXPECT_TRUE(a.records.empty());
}

// A case that throws (a GPU fault, out of memory) fails the windows that need
// it; the run continues and the rest is reported.
TEST(Gate, CaseErrorsFailTheirWindowAndTheRunGoesOn) {
  const std::string dir = temp_dir("errors");
  GateOptions o = small_opts();
  o.windows = "H=256";
  o.journal_path = dir + "/j.jsonl";
  int thrown = 0;
  o.before_case = [&](const seeds::CaseId& c, const std::vector<std::string>&) {
    if (c.T == 3 && c.family == seeds::Family::llm && c.seed == 0) {
      ++thrown;
      throw std::runtime_error("CUDA error: cudaMalloc: out of memory (injected)");
    }
  };
  const GateResult r = run_gate(o);
  EXPECT_EQ(thrown, 1);
  ASSERT_EQ(r.windows.size(), 1u);
  EXPECT_FALSE(r.windows[0].pass);
  EXPECT_EQ(r.windows[0].errors, 1);
  EXPECT_GT(r.windows[0].cases, 10);  // the others ran
  ASSERT_EQ(r.windows[0].error_samples.size(), 1u);
  EXPECT_NE(r.windows[0].error_samples[0].find("out of memory (injected)"), std::string::npos);
  const std::string md = format_gate_markdown(r);
  EXPECT_NE(md.find("1 cases could not run (the window does not pass; with none over budget and no finding it is "
                    "ERROR"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("out of memory (injected)"), std::string::npos) << md;
  // The error is journalled: a resume does not retry it and reports the same.
  o.before_case = nullptr;
  const GateResult again = run_gate(o);
  EXPECT_EQ(again.cases_run_now, 0);
  EXPECT_EQ(strip_date(format_gate_markdown(again)), strip_date(format_gate_markdown(r)));
  std::filesystem::remove_all(dir);
}

// Crash after some cases (the after_case hook throws out of run_gate), then
// resume from the journal: nothing finished is redone and the report is the
// one an uninterrupted run gives, byte for byte but the date.
TEST(Gate, ResumeRedoesNothingAndGivesTheSameReport) {
  const std::string dir = temp_dir("resume");
  GateOptions o = small_opts();
  o.windows = "H=64,T=1..100";
  const GateResult full = run_gate(o);

  o.journal_path = dir + "/j.jsonl";
  o.after_case = [](int64_t n) {
    if (n == 7) throw std::runtime_error("simulated crash");
  };
  EXPECT_THROW((void)run_gate(o), std::runtime_error);
  o.after_case = nullptr;
  const GateResult resumed = run_gate(o);
  EXPECT_EQ(resumed.cases_resumed, 7);
  EXPECT_EQ(resumed.cases_run_now, full.cases_total - 7);
  EXPECT_EQ(resumed.cases_total, full.cases_total);
  EXPECT_EQ(strip_date(format_gate_markdown(resumed)), strip_date(format_gate_markdown(full)));
  EXPECT_EQ(strip_date(gate_to_json(resumed)).dump(), strip_date(gate_to_json(full)).dump());
  // A journal of another campaign is refused.
  o.seeds = "3x2";
  EXPECT_THROW((void)run_gate(o), std::invalid_argument);
  std::filesystem::remove_all(dir);
}

TEST(Gate, BaseGatesOnlyChangedWindows) {
  const std::string dir = temp_dir("base");
  std::ifstream in(test::kSmallTable);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  // Move the det/nondet split of H=64 from 100/101 to 120/121.
  for (const char* a : {"[  1, 100]", "[101, 700]"}) {
    const std::string to = std::string(a) == "[  1, 100]" ? "[  1, 120]" : "[121, 700]";
    for (size_t p = text.find(a); p != std::string::npos; p = text.find(a)) text.replace(p, std::strlen(a), to);
  }
  const std::string changed = dir + "/changed.toml";
  std::ofstream(changed) << text;
  // The base with approvals beside it: they prove its variants' sources are
  // this build's (routing.h; without them every window counts as changed).
  const std::string base = dir + "/base.toml";
  std::filesystem::copy_file(test::kSmallTable, base);
  kernels::Approvals ba;
  ba.path = kernels::approvals_path_for(base);
  for (const auto& rt : kernels::load_route_table(base).routes) ba.records.push_back(normgate::test::valid_approval(rt));
  kernels::save_approvals(ba);
  GateOptions o = small_opts(changed);
  o.base_path = base;
  o.dense_points = 0;
  o.fresh_factor = 0;
  const GateResult r = run_gate(o);
  EXPECT_EQ(r.windows.size(), 4u);   // the 4 moved windows
  EXPECT_EQ(r.skipped.size(), 2u);   // fwd H=64 and det H=256 unchanged
  EXPECT_EQ(r.removed.size(), 4u);   // the old windows
  EXPECT_TRUE(r.pass());
  EXPECT_NE(format_gate_markdown(r).find("## Skipped: unchanged against the base table"), std::string::npos);
  // Against itself nothing changed: nothing to gate, and that passes.
  o.table_path = base;
  const GateResult same = run_gate(o);
  EXPECT_TRUE(same.windows.empty());
  EXPECT_EQ(same.skipped.size(), 6u);
  EXPECT_TRUE(same.pass());
  // A filter that selects no route at all is an error with --base too, not
  // "nothing changed"; one that selects only unchanged windows is not.
  o.windows = "H=4096";
  try {
    (void)plan_gate(o);
    ADD_FAILURE() << "a filter selecting no route was accepted with --base";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("the filter 'H=4096' selects none of the 6 routes"), std::string::npos)
        << e.what();
    // What the table has instead, key by key (H in numeric order).
    EXPECT_NE(std::string(e.what()).find("(its windows have op=bwd|fwd, H=64|256, w=bf16|fp32, form=plain; "),
              std::string::npos)
        << e.what();
  }
  o.windows = "H=64,op=fwd";
  const GateResult one = run_gate(o);
  EXPECT_TRUE(one.windows.empty());
  EXPECT_EQ(one.skipped.size(), 1u);       // the one the filter selects, unchanged
  EXPECT_EQ(one.filtered_out.size(), 5u);  // the rest: left out by the filter, changed or not
  std::filesystem::remove_all(dir);
}

TEST(Gate, InputErrorsAreInvalidArgument) {
  auto fails = [](GateOptions o, const std::string& needle) {
    try {
      (void)run_gate(o);
      ADD_FAILURE() << "accepted; expected " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  GateOptions o = small_opts();
  o.seeds = "3x0";
  fails(o, "3x0");
  o = small_opts();
  o.t_per_window = 1;
  fails(o, "--t-per-window 1");
  o = small_opts();
  o.windows = "H=4096";
  fails(o, "selects none");
  o = small_opts("/nonexistent.toml");
  fails(o, "/nonexistent.toml");
  if (!kernels::gpu_available()) {
    o = small_opts();
    o.backend = Backend::gpu;
    fails(o, "no usable CUDA device");
  }
}

TEST(Gate, ApprovalsFromAPassingGate) {
  GateOptions o = small_opts();
  o.windows = "H=256";
  o.dense_points = 0;
  o.fresh_factor = 0;
  const GateResult r = run_gate(o);
  ASSERT_TRUE(r.pass());
  const auto t = kernels::load_route_table(test::kSmallTable);
  kernels::Approvals a;
  // A stale record of a window that is no longer in the table is removed.
  kernels::Approval gone;
  gone.H = 999;
  gone.t_lo = 1;
  gone.t_hi = 2;
  gone.variant = "bwd_det_chunked";
  gone.backend = "gpu";
  a.records.push_back(gone);
  const auto changes = update_approvals(a, r, t.routes);
  ASSERT_EQ(a.records.size(), 1u);
  EXPECT_EQ(changes.size(), 2u);
  const auto& rec = a.records[0];
  EXPECT_EQ(rec.backend, "cpu-model");
  EXPECT_EQ(rec.gpu, "cpu-model");
  EXPECT_EQ(rec.variant, "bwd_det_chunked");
  EXPECT_EQ(rec.source_sha256, kernels::variant("bwd_det_chunked").source_sha256);
  EXPECT_EQ(rec.seed_set, "3x1");
  EXPECT_EQ(rec.max_err_tol.size(), 4u);
  EXPECT_EQ(rec.cases, r.windows[0].cases);
  // The dispatcher accepts it only when told to accept cpu-model approvals.
  const kernels::CallKey k{kernels::Op::bwd, kernels::Mode::det, 256, WDtype::fp32, Form::plain, 200};
  EXPECT_THROW((void)kernels::Dispatcher(t, a).pick(k), kernels::UnapprovedRoute);
  EXPECT_EQ(kernels::Dispatcher(t, a, {.accept_cpu_model = true}).pick(k).variant->name, "bwd_det_chunked");
}

// approve() writes against the file as it is at the end (another gate's
// approval made meanwhile is kept) and refuses a table edited during the run.
TEST(Gate, ApproveKeepsConcurrentApprovalsAndRefusesAChangedTable) {
  const std::string dir = temp_dir("approve");
  const std::string table = dir + "/t.toml";
  std::filesystem::copy_file(test::kSmallTable, table);
  // approve() needs a policy beside the table; this one asks for no refinement.
  std::ofstream(dir + "/t.policy.toml") << "[minimum]\nseeds = \"3x1\"\nt_per_window = 4\ndense_points = 0\n"
                                           "fresh_factor = 0\nbackends = [\"cpu-model\"]\n";
  GateOptions o = small_opts(table);
  o.windows = "H=256";
  o.dense_points = 0;
  o.fresh_factor = 0;
  const GateResult r = run_gate(o);
  ASSERT_TRUE(r.pass());
  kernels::Approvals a = kernels::load_approvals(kernels::approvals_path_for(table));
  ASSERT_TRUE(a.records.empty());
  // Meanwhile another gate approved a window of the same table.
  GateOptions other = o;
  other.windows = "op=fwd";
  const GateResult r2 = run_gate(other);
  ASSERT_TRUE(r2.pass());
  kernels::Approvals b = kernels::load_approvals(a.path);
  (void)approve(b, r2, other);
  const size_t theirs = b.records.size();
  ASSERT_GT(theirs, 0u);
  // This gate's approve keeps them and adds its own.
  const auto changes = approve(a, r, o);
  EXPECT_EQ(changes.size(), 1u);
  const kernels::Approvals on_disk = kernels::load_approvals(a.path);
  EXPECT_EQ(on_disk.records.size(), theirs + 1);
  EXPECT_EQ(a.records.size(), theirs + 1);
  // A table edited after the run: refused, the file untouched.
  { std::ofstream(table, std::ios::app) << "\n# edited\n"; }
  kernels::Approvals c = kernels::load_approvals(a.path);
  EXPECT_THROW((void)approve(c, r, o), std::invalid_argument);
  EXPECT_EQ(kernels::load_approvals(a.path).records.size(), theirs + 1);
  std::filesystem::remove_all(dir);
}

// With a GPU the same gate runs the CUDA kernels; their outputs are bitwise
// the CPU models' (models.h) for y, rstd, dx and the deterministic dw, so the
// numbers agree exactly.
TEST(Gate, GpuBackendAgreesWithTheCpuModels) {
  if (!kernels::gpu_available()) GTEST_SKIP() << "no usable CUDA device";
  GateOptions o = small_opts();
  o.dense_points = 0;
  o.fresh_factor = 0;
  const GateResult cpu = run_gate(o);
  o.backend = Backend::gpu;
  const GateResult gpu = run_gate(o);
  EXPECT_EQ(gpu.backend, "gpu");
  EXPECT_FALSE(gpu.device.name.empty());
  EXPECT_TRUE(gpu.pass()) << format_gate_markdown(gpu);
  ASSERT_EQ(gpu.windows.size(), cpu.windows.size());
  for (size_t i = 0; i < gpu.windows.size(); ++i) {
    const auto& g = gpu.windows[i];
    const auto& c = cpu.windows[i];
    for (int k = 0; k < g.gated_outputs(); ++k) {
      if (k == 3 && g.route.mode == kernels::Mode::nondet) continue;  // atomics: last-bit differences
      EXPECT_EQ(g.out[k].max_ratio, c.out[k].max_ratio) << g.route.describe() << " output " << k;
    }
  }
}

}  // namespace

namespace {

// A journal line of `impl` with one output's record replaced: [ratio, index,
// over, forced, pass], its digest recomputed and the lines after it chained
// to it again (an edit the journal accepts: what the digests cannot stop
// without a key).
void rewrite_output(const std::string& journal, const std::string& impl, const char* output,
                    const nlohmann::json& rec) {
  std::ifstream in(journal);
  std::string line, out, prev;
  bool done = false;
  while (std::getline(in, line)) {
    if (!prev.empty()) {
      auto j = parse_journal_line(line);
      if (!done && line.find("\"" + impl + "\"") != std::string::npos &&
          line.find("\"results\"") != std::string::npos)
        for (auto& r : j["results"])
          if (r["impl"] == impl) {
            r[output] = rec;
            done = true;
          }
      j["prev"] = prev;
      line = journal_line(j);
    }
    prev = journal_line_seal(line);
    out += line + "\n";
  }
  ASSERT_TRUE(done) << "no journal line of " << impl;
  std::ofstream(journal, std::ios::trunc) << out;
}

}  // namespace

// A case whose comparison could not be certified (no element over budget,
// RatioStats::pass() false) makes its window INCONCLUSIVE, not PASS and not
// FAIL; an element over budget makes it FAIL. Driven through the journal: the
// resumed gate reads the edited records and runs nothing.
TEST(Gate, UncertifiedCaseMakesTheWindowInconclusive) {
  const std::string dir = temp_dir("inconclusive");
  GateOptions o = small_opts();
  o.windows = "op=bwd,mode=det,H=64,T=1..100";
  o.fresh_factor = 0;
  o.dense_points = 0;
  o.journal_path = dir + "/j.jsonl";
  const GateResult first = run_gate(o);
  ASSERT_EQ(first.windows.size(), 1u);
  ASSERT_TRUE(first.windows[0].pass);
  EXPECT_EQ(first.windows[0].verdict, Verdict::pass);

  rewrite_output(o.journal_path, "bwd_det_chunked", "dw", {0.5, 3, 0, 0.01, false});
  const GateResult inc = run_gate(o);
  EXPECT_EQ(inc.cases_run_now, 0);
  ASSERT_EQ(inc.windows.size(), 1u);
  EXPECT_FALSE(inc.windows[0].pass);
  EXPECT_EQ(inc.windows[0].verdict, Verdict::inconclusive);
  EXPECT_EQ(inc.windows[0].out[3].cases_inconclusive, 1);
  const std::string md = format_gate_markdown(inc);
  EXPECT_NE(md.find("**INCONCLUSIVE**"), std::string::npos);
  EXPECT_NE(md.find("1 INCONCLUSIVE"), std::string::npos);
  EXPECT_EQ(gate_to_json(inc)["windows"][0]["verdict"], "inconclusive");

  rewrite_output(o.journal_path, "bwd_det_chunked", "dx", {1.5, 7, 1, 0.01, false});
  const GateResult fail = run_gate(o);
  EXPECT_EQ(fail.windows[0].verdict, Verdict::fail);
  EXPECT_NE(format_gate_markdown(fail).find("**FAIL**"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// The oracle mode is part of the campaign: it is reported, and a journal of
// another oracle mode is refused.
TEST(Gate, OracleModeIsReportedAndPartOfTheCampaign) {
  const std::string dir = temp_dir("oracle");
  GateOptions o = small_opts();
  o.windows = "op=fwd,H=64,w=bf16";
  o.fresh_factor = 0;
  o.dense_points = 0;
  o.journal_path = dir + "/j.jsonl";
  o.oracle = oracle::OracleMode::fp64;
  const GateResult r = run_gate(o);
  EXPECT_EQ(r.oracle, "fp64");
  EXPECT_NE(format_gate_markdown(r).find("--oracle fp64"), std::string::npos);
  EXPECT_EQ(gate_to_json(r)["oracle"], "fp64");
  o.oracle = oracle::OracleMode::auto_;
  EXPECT_THROW((void)run_gate(o), std::invalid_argument);
  std::filesystem::remove_all(dir);
}

// One journal serves gates with different window filters (records are per
// case and implementation, whoever asked for them): gating H=64 then H=256
// into one journal, a gate of the whole table runs nothing and reports what
// an uninterrupted whole-table gate reports, case counts included.
TEST(Gate, OneJournalAcrossWindowFilters) {
  const std::string dir = temp_dir("filters");
  GateOptions o = small_opts();
  o.dense_points = 1;
  const GateResult whole = run_gate(o);

  o.journal_path = dir + "/j.jsonl";
  o.windows = "H=64";
  const GateResult a = run_gate(o);
  o.windows = "H=256";
  const GateResult b = run_gate(o);
  EXPECT_EQ(b.cases_resumed, 0);  // H=256 shares no case with H=64
  EXPECT_EQ(b.cases_run_now, b.cases_total);
  o.windows = "H=64";
  const GateResult a_again = run_gate(o);  // the H=256 records in the journal are not counted
  EXPECT_EQ(a_again.cases_run_now, 0);
  EXPECT_EQ(a_again.cases_total, a.cases_total);
  EXPECT_EQ(a_again.cases_resumed, a.cases_total);
  o.windows = "";
  const GateResult resumed = run_gate(o);
  EXPECT_EQ(resumed.cases_run_now, 0);
  EXPECT_EQ(resumed.cases_total, whole.cases_total);
  EXPECT_EQ(resumed.cases_total, a.cases_total + b.cases_total);
  EXPECT_EQ(strip_date(format_gate_markdown(resumed)), strip_date(format_gate_markdown(whole)));
  EXPECT_EQ(strip_date(gate_to_json(resumed)).dump(), strip_date(gate_to_json(whole)).dump());
  // The journal's header names the source hashes of what the table routes
  // (and the forward), not the whole registry: the negative controls, which
  // small.toml does not route, are absent, so adding a variant to the
  // registry leaves a running campaign's journal valid.
  std::ifstream jf(o.journal_path);
  std::string head;
  std::getline(jf, head);
  const auto hashes = nlohmann::json::parse(head)["campaign"]["variant_sha256"];
  std::vector<std::string> names;
  for (const auto& [k, v] : hashes.items()) names.push_back(k);
  EXPECT_EQ(names, (std::vector<std::string>{"bwd_det_chunked", "bwd_nondet_atomic", "fwd_rowwise"}));
  EXPECT_EQ(hashes["bwd_det_chunked"], std::string(kernels::variant("bwd_det_chunked").source_sha256));
  std::filesystem::remove_all(dir);
}

namespace {

// A forward window routed to fwd_multirow (not the default forward) is gated
// on its own runs: the gate no longer refuses it, every case of the window
// ran the implementation fwd_multirow (its forward, then the carrier
// backward), the reports name the forward each window ran, and since its
// model is fwd_rowwise's its y and rstd numbers equal those of the same
// window routed to fwd_rowwise. Tables written here: one per forward variant.
std::string forward_table(const std::string& dir, const std::string& fwd) {
  const std::string path = dir + "/" + fwd + ".toml";
  std::ofstream f(path);
  f << "arch = \"sm90a\"\ndescription = \"test table: a forward route to " << fwd << "\"\n\nroute = [\n"
    << "  { op = \"fwd\", H = 64, w = \"bf16\", form = \"plain\", T = [1, 300], variant = \"" << fwd << "\" },\n"
    << "  { op = \"fwd\", H = 256, w = \"fp32\", form = \"heads4\", T = [1, 40], variant = \"" << fwd << "\" },\n"
    << "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", T = [1, 300], variant = "
       "\"bwd_det_chunked\" },\n]\n";
  return path;
}

// (case id -> implementations with a result) of a journal file.
std::map<std::string, std::set<std::string>> journal_impls(const std::string& path) {
  std::map<std::string, std::set<std::string>> out;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    for (const auto& x : j["results"]) out[j["case"].get<std::string>()].insert(x["impl"].get<std::string>());
  }
  return out;
}

TEST(Gate, ForwardRouteRunsItsOwnVariant) {
  const std::string dir = temp_dir("fwdroute");
  GateOptions o = small_opts(forward_table(dir, "fwd_multirow"));
  o.dense_points = 1;
  o.journal_path = dir + "/multirow.jsonl";
  const GateResult r = run_gate(o);  // no longer refused
  EXPECT_TRUE(r.pass());
  ASSERT_EQ(r.windows.size(), 3u);
  for (int k : {0, 1}) {
    const WindowResult& w = r.windows[k];
    ASSERT_EQ(w.route.op, kernels::Op::fwd);
    EXPECT_EQ(w.fwd, "fwd_multirow");
    EXPECT_EQ(w.impl.rfind("fwd_multirow (its own runs: forward fwd_multirow, then bwd_det_chunked", 0), 0u) << w.impl;
    EXPECT_GT(w.cases, 0);
    EXPECT_EQ(w.errors, 0);
  }
  EXPECT_EQ(r.windows[2].fwd, "fwd_rowwise");  // a bwd window's forward step is the default
  EXPECT_EQ(r.windows[2].impl, "bwd_det_chunked");
  // Every case inside a fwd_multirow window has a result of fwd_multirow
  // (run for it, not read from the backward window's runs of the same case).
  const auto impls = journal_impls(o.journal_path);
  int64_t inside = 0, shared = 0;
  for (const auto& [id, names] : impls) {
    const seeds::CaseId c = seeds::parse_case(id);
    const bool in_fwd = (c.H == 64 && c.form == Form::plain) || (c.H == 256 && c.form == Form::heads4);
    if (!in_fwd) continue;
    ++inside;
    EXPECT_TRUE(names.count("fwd_multirow")) << id;
    shared += names.count("bwd_det_chunked");
  }
  EXPECT_EQ(inside, r.windows[0].cases + r.windows[1].cases);
  EXPECT_GT(shared, 0);  // the H=64 cases ran both: the bwd window's variant and fwd_multirow
  const auto j = gate_to_json(r);
  EXPECT_EQ(j["windows"][0]["fwd"], "fwd_multirow");
  EXPECT_EQ(j["windows"][0]["variant"], "fwd_multirow");
  EXPECT_EQ(j["windows"][2]["fwd"], "fwd_rowwise");
  const std::string md = format_gate_markdown(r);
  EXPECT_NE(md.find("| fwd H=64 w=bf16 form=plain T=1..300 | fwd_multirow |"), std::string::npos) << md;
  EXPECT_NE(md.find("Forward variants run here: fwd_multirow, fwd_rowwise"), std::string::npos) << md;
  // The journal's campaign names fwd_multirow's source hash.
  std::ifstream jf(o.journal_path);
  std::string head;
  std::getline(jf, head);
  EXPECT_EQ(nlohmann::json::parse(head)["campaign"]["variant_sha256"]["fwd_multirow"],
            std::string(kernels::variant("fwd_multirow").source_sha256));

  // The same windows routed to fwd_rowwise: the same y and rstd numbers (one
  // model), read from the backward runs instead.
  GateOptions d = small_opts(forward_table(dir, "fwd_rowwise"));
  d.dense_points = 1;
  const GateResult rr = run_gate(d);
  ASSERT_EQ(rr.windows.size(), 3u);
  for (int k : {0, 1}) {
    SCOPED_TRACE(r.windows[k].route.describe());
    EXPECT_EQ(rr.windows[k].fwd, "fwd_rowwise");
    EXPECT_EQ(rr.windows[k].impl, "any backward run (forward fwd_rowwise)");
    EXPECT_EQ(rr.windows[k].cases, r.windows[k].cases);
    for (int out : {0, 1}) {
      EXPECT_EQ(rr.windows[k].out[out].max_ratio, r.windows[k].out[out].max_ratio) << out;
      EXPECT_EQ(rr.windows[k].out[out].worst_case, r.windows[k].out[out].worst_case) << out;
    }
  }
  std::filesystem::remove_all(dir);
}

// A journal never hands one forward variant's runs to another's window:
// records are keyed by implementation. The backward windows' runs (forward
// fwd_rowwise) serve a fwd_rowwise window of the same cases from the journal
// (nothing re-run), but a fwd_multirow window over the same cases runs all
// of them again as fwd_multirow.
TEST(Gate, JournalKeepsForwardVariantsApart) {
  const std::string dir = temp_dir("fwdjournal");
  for (const std::string fwd : {"fwd_rowwise", "fwd_multirow"}) {
    SCOPED_TRACE(fwd);
    GateOptions o = small_opts(forward_table(dir, fwd));
    o.dense_points = 0;  // no refinement: the forward window's would follow its own worst point
    o.fresh_factor = 0;
    o.journal_path = dir + "/" + fwd + ".jsonl";
    o.windows = "op=bwd";
    const GateResult b = run_gate(o);
    EXPECT_EQ(b.cases_resumed, 0);
    // The H=64 fwd window's grid T are the bwd window's (same window, same options).
    o.windows = "op=fwd,H=64";
    const GateResult f = run_gate(o);
    ASSERT_EQ(f.windows.size(), 1u);
    EXPECT_TRUE(f.pass());
    if (fwd == "fwd_rowwise") {
      EXPECT_EQ(f.cases_run_now, 0);  // every case read from the backward runs
      EXPECT_EQ(f.cases_resumed, f.cases_total);
    } else {
      EXPECT_EQ(f.cases_resumed, 0);  // none of the fwd_rowwise runs stands in for fwd_multirow
      EXPECT_EQ(f.cases_run_now, f.cases_total);
      EXPECT_EQ(f.cases_total, f.windows[0].cases);
    }
    // Resumed again: nothing more runs, either way.
    const GateResult again = run_gate(o);
    EXPECT_EQ(again.cases_run_now, 0);
    EXPECT_EQ(strip_date(gate_to_json(again)).dump(), strip_date(gate_to_json(f)).dump());
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
